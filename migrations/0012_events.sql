-- Inbound events and the sources that turn them into runs.
--
-- A client dispatches an event (a key and a payload) to its project; every
-- enabled source of the project whose event_key matches the event's key
-- triggers its job or workflow with the payload. The event row records
-- what arrived and what it triggered.
--
-- An event is written before its triggers and marked complete
-- (completed_at) after them. Each trigger carries an idempotency key made
-- of the event's and the source's ids, so finishing an event again (a
-- dispatch repeating its idempotency_key, after a crash between the insert
-- and the triggers) returns the runs it made instead of making new ones.

CREATE TABLE event_sources (
    id          text        PRIMARY KEY,
    project_id  text        NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    name        text        NOT NULL,
    description text,
    -- An exact key, or a prefix pattern: one trailing `*` matches every
    -- key that starts with what precedes it (`order.*`; `*` alone matches
    -- every key). The api checks the shape.
    event_key   text        NOT NULL,
    target_type text        NOT NULL
        CONSTRAINT event_sources_target_type_check CHECK (target_type IN ('job', 'workflow')),
    -- A job or workflow of the project, checked when the source is saved;
    -- no foreign key, so deleting the target leaves the source, whose
    -- triggers then record an error.
    target_id   text        NOT NULL,
    enabled     boolean     NOT NULL DEFAULT true,
    created_by  text,
    updated_by  text,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX event_sources_project_idx ON event_sources (project_id, id DESC);
-- A dispatch reads the project's enabled sources (and matches their keys).
CREATE INDEX event_sources_enabled_idx ON event_sources (project_id, event_key) WHERE enabled;
CREATE TRIGGER event_sources_updated_at BEFORE UPDATE ON event_sources
    FOR EACH ROW EXECUTE FUNCTION sy_set_updated_at();

CREATE TABLE events (
    id              text        PRIMARY KEY,
    project_id      text        NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    event_key       text        NOT NULL,
    payload         jsonb,
    idempotency_key text,
    -- One entry per matching source: {source_id, kind, id, status, error}.
    triggered_runs  jsonb       NOT NULL DEFAULT '[]'::jsonb
        CONSTRAINT events_triggered_runs_is_array CHECK (jsonb_typeof(triggered_runs) = 'array'),
    -- wait_for_event steps the event resumed (none yet: see README, "Events").
    resumed_steps   integer     NOT NULL DEFAULT 0,
    -- NULL until every matching source was handled.
    completed_at    timestamptz,
    created_by      text,
    created_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX events_project_idx ON events (project_id, id DESC);
CREATE INDEX events_project_key_idx ON events (project_id, event_key, id DESC);
CREATE UNIQUE INDEX events_idempotency_key ON events (project_id, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
