-- Notifications: webhook subscriptions, and one outbox of deliveries that
-- every notification goes through (a job run's terminal webhook, a
-- subscription's event, later an event trigger's notification).
--
-- A delivery is written by the statement (or transaction) that makes the
-- state change it reports, so a committed change always has its delivery,
-- and a sender loop (any number of processes) claims due deliveries for a
-- while (claimed_until), sends them and records the outcome. A process that
-- dies mid-send leaves a claim that lapses: the delivery is sent again
-- under the same id (the X-Svc-Delivery-Id header), never lost.

-- An id made in SQL that sorts like the service's own (`<prefix>_` and 32
-- hex digits, the first twelve the creation time in ms, as in a UUIDv7),
-- for rows the statements that end runs insert.
CREATE FUNCTION sy_time_id(prefix text) RETURNS text LANGUAGE sql VOLATILE AS $$
    SELECT prefix || '_' || lpad(to_hex((extract(epoch FROM clock_timestamp()) * 1000)::bigint), 12, '0') || '7'
        || substr(md5(random()::text || clock_timestamp()::text), 1, 19)
$$;

CREATE TABLE webhook_subscriptions (
    id          text        PRIMARY KEY,
    project_id  text        NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    url         text        NOT NULL,
    event_types text[]      NOT NULL,
    active      boolean     NOT NULL DEFAULT true,
    -- The signing key. The api takes it and never returns it.
    secret      text        NOT NULL,
    description text,
    created_by  text,
    updated_by  text,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX webhook_subscriptions_project_idx ON webhook_subscriptions (project_id, id DESC);
-- What the statements that end runs probe, once per ended run.
CREATE INDEX webhook_subscriptions_active_idx ON webhook_subscriptions (project_id) WHERE active;
CREATE TRIGGER webhook_subscriptions_updated_at BEFORE UPDATE ON webhook_subscriptions
    FOR EACH ROW EXECUTE FUNCTION sy_set_updated_at();

CREATE TABLE webhook_deliveries (
    id               text        PRIMARY KEY,
    project_id       text        NOT NULL,
    kind             text        NOT NULL
        CONSTRAINT webhook_deliveries_kind_check CHECK (kind IN ('job_run', 'subscription', 'event_trigger')),
    url              text        NOT NULL,
    event_type       text        NOT NULL,
    payload          jsonb       NOT NULL,
    -- pending: not tried yet, or due again after a retry request;
    -- failed: the last attempt failed and attempts remain (next_retry_at);
    -- delivered; dead: no attempt remains (a 4xx, or all used).
    status           text        NOT NULL DEFAULT 'pending'
        CONSTRAINT webhook_deliveries_status_check CHECK (status IN ('pending', 'delivered', 'failed', 'dead')),
    attempts         integer     NOT NULL DEFAULT 0,
    max_attempts     integer     NOT NULL,
    next_retry_at    timestamptz NOT NULL DEFAULT now(),
    last_status_code integer,
    last_error       text,
    subscription_id  text,
    job_id           text,
    run_id           text,
    workflow_run_id  text,
    event_trigger_id text,
    -- A sender holds the delivery until then; past it, another may take it.
    claimed_until    timestamptz,
    delivered_at     timestamptz,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX webhook_deliveries_due_idx ON webhook_deliveries (next_retry_at) WHERE status IN ('pending', 'failed');
CREATE INDEX webhook_deliveries_project_idx ON webhook_deliveries (project_id, id DESC);
CREATE TRIGGER webhook_deliveries_updated_at BEFORE UPDATE ON webhook_deliveries
    FOR EACH ROW EXECUTE FUNCTION sy_set_updated_at();

-- New deliveries wake the senders at commit (Postgres folds the same
-- notification sent many times in one transaction into one). Per row, so
-- that the statements that end runs, which carry an insert of deliveries
-- that is empty for most runs, pay nothing when it is.
CREATE FUNCTION sy_webhook_deliveries_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('switchyard_deliveries', '');
    RETURN NULL;
END $$;
CREATE TRIGGER webhook_deliveries_notify AFTER INSERT ON webhook_deliveries
    FOR EACH ROW EXECUTE FUNCTION sy_webhook_deliveries_notify();

-- The deliveries of runs that just ended, written by the statement that
-- ends them (store::runs::finish_many, the cancels, expiry, dependency
-- failures): the job's terminal webhook when it has a webhook_url, and
-- one delivery per active subscription of the project that names the
-- event (`run.<status>` or `*`). `urls` holds each run's webhook_url, ''
-- for none, or NULL to read it from the run's job. Returns how many.
CREATE FUNCTION sy_run_ended_deliveries(
    ids text[], job_ids text[], project_ids text[], statuses text[], attempts integer[], results jsonb[],
    errors text[], urls text[]
) RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    n integer := 0;
    m integer;
    ts text := to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"');
BEGIN
    IF ids IS NULL OR cardinality(ids) = 0 THEN
        RETURN 0;
    END IF;
    INSERT INTO webhook_deliveries (id, project_id, kind, url, event_type, payload, max_attempts, job_id, run_id)
    SELECT sy_time_id('whd'), e.project_id, 'job_run', coalesce(e.url, j.spec->>'webhook_url'), 'run.' || e.status,
           jsonb_build_object('run_id', e.id, 'job_id', e.job_id, 'project_id', e.project_id, 'status', e.status,
               'attempt', e.attempt, 'result', e.result, 'error', e.error, 'timestamp', ts),
           3, e.job_id, e.id
      FROM unnest(ids, job_ids, project_ids, statuses, attempts, results, errors, urls)
             AS e(id, job_id, project_id, status, attempt, result, error, url)
      LEFT JOIN jobs j ON e.url IS NULL AND j.id = e.job_id
     WHERE coalesce(e.url, j.spec->>'webhook_url', '') <> '';
    GET DIAGNOSTICS m = ROW_COUNT;
    n := n + m;
    INSERT INTO webhook_deliveries (id, project_id, kind, url, event_type, payload, max_attempts, subscription_id,
        job_id, run_id)
    SELECT sy_time_id('whd'), e.project_id, 'subscription', s.url, 'run.' || e.status,
           jsonb_build_object('event_type', 'run.' || e.status, 'occurred_at', ts, 'project_id', e.project_id,
               'data', jsonb_build_object('run_id', e.id, 'job_id', e.job_id, 'status', e.status,
                   'attempt', e.attempt, 'result', e.result, 'error', e.error)),
           5, s.id, e.job_id, e.id
      FROM unnest(ids, job_ids, project_ids, statuses, attempts, results, errors)
             AS e(id, job_id, project_id, status, attempt, result, error)
      JOIN webhook_subscriptions s ON s.project_id = e.project_id AND s.active
     WHERE s.event_types && ARRAY['run.' || e.status, '*'];
    GET DIAGNOSTICS m = ROW_COUNT;
    RETURN n + m;
END $$;
