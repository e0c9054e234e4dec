-- Projects, job groups, jobs (with immutable versions) and job runs.
--
-- Ids are text: a short type prefix plus a UUIDv7 in hex, so that ordering by
-- id is ordering by creation time and keyset pagination needs no extra index.

CREATE TABLE projects (
    id                    text        PRIMARY KEY,
    name                  text        NOT NULL,
    default_region        text        NOT NULL DEFAULT 'local',
    plan_tier             text        NOT NULL DEFAULT 'free',
    max_key_lifetime_days integer     NOT NULL DEFAULT 365
        CONSTRAINT projects_max_key_lifetime_positive CHECK (max_key_lifetime_days > 0),
    created_by            text,
    created_at            timestamptz NOT NULL DEFAULT now(),
    updated_at            timestamptz NOT NULL DEFAULT now()
);
CREATE TRIGGER projects_updated_at BEFORE UPDATE ON projects
    FOR EACH ROW EXECUTE FUNCTION sy_set_updated_at();

CREATE TABLE job_groups (
    id          text        PRIMARY KEY,
    project_id  text        NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    name        text        NOT NULL,
    slug        text        NOT NULL,
    description text,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT job_groups_project_slug_key UNIQUE (project_id, slug)
);
CREATE TRIGGER job_groups_updated_at BEFORE UPDATE ON job_groups
    FOR EACH ROW EXECUTE FUNCTION sy_set_updated_at();

-- The current definition of each job. Every change writes a new row to
-- job_versions too; runs pinned to a version dispatch with that snapshot.
CREATE TABLE jobs (
    id                      text        PRIMARY KEY,
    project_id              text        NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    group_id                text        REFERENCES job_groups (id) ON DELETE SET NULL,
    name                    text        NOT NULL,
    slug                    text        NOT NULL,
    enabled                 boolean     NOT NULL DEFAULT true,
    -- Set by a group's pause-all; not part of the definition, so pausing
    -- makes no new version and resume-all leaves disabled jobs disabled.
    paused                  boolean     NOT NULL DEFAULT false,
    -- Everything else of the definition (endpoint, limits, retry policy...)
    -- lives in one document, identical to the version snapshot, so adding a
    -- field to a job never needs a migration of two tables.
    spec                    jsonb       NOT NULL,
    version                 integer     NOT NULL DEFAULT 1,
    version_id              text        NOT NULL,
    created_by              text,
    updated_by              text,
    created_at              timestamptz NOT NULL DEFAULT now(),
    updated_at              timestamptz NOT NULL DEFAULT now(),
    deleted_at              timestamptz
);
CREATE UNIQUE INDEX jobs_project_slug_key ON jobs (project_id, slug) WHERE deleted_at IS NULL;
CREATE INDEX jobs_project_id_idx ON jobs (project_id, id) WHERE deleted_at IS NULL;
CREATE INDEX jobs_group_id_idx ON jobs (group_id, id) WHERE deleted_at IS NULL;
CREATE TRIGGER jobs_updated_at BEFORE UPDATE ON jobs
    FOR EACH ROW EXECUTE FUNCTION sy_set_updated_at();

CREATE TABLE job_versions (
    id          text        PRIMARY KEY,
    job_id      text        NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    version     integer     NOT NULL,
    name        text        NOT NULL,
    slug        text        NOT NULL,
    enabled     boolean     NOT NULL,
    group_id    text,
    spec        jsonb       NOT NULL,
    created_by  text,
    created_at  timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT job_versions_job_version_key UNIQUE (job_id, version)
);

CREATE TABLE job_runs (
    id                       text        PRIMARY KEY,
    project_id               text        NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    job_id                   text        NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    job_version              integer     NOT NULL,
    job_version_id           text        NOT NULL,
    status                   text        NOT NULL
        CONSTRAINT job_runs_status_check CHECK (status IN (
            'pending', 'queued', 'running', 'retrying',
            'completed', 'failed', 'timed_out', 'cancelled', 'expired')),
    attempt                  integer     NOT NULL DEFAULT 0,
    priority                 integer     NOT NULL DEFAULT 0,
    triggered_by             text        NOT NULL,
    created_by               text,
    payload                  jsonb,
    result                   jsonb,
    error                    text,
    error_class              text,
    idempotency_key          text,
    concurrency_key          text,
    batch_id                 text,
    parent_run_id            text,
    continuation_of          text,
    workflow_step_run_id     text,
    lineage_depth            integer     NOT NULL DEFAULT 0,
    machine_id               text,
    debug_mode               boolean     NOT NULL DEFAULT false,
    execution_mode           text        NOT NULL DEFAULT 'sync',
    retry_backoff            text,
    max_attempts_override    integer,
    retry_initial_delay_secs integer,
    retry_max_delay_secs     integer,
    timeout_secs_override    integer,
    metadata                 jsonb       NOT NULL DEFAULT '{}',
    tags                     jsonb       NOT NULL DEFAULT '{}',
    scheduled_at             timestamptz,
    expires_at               timestamptz,
    started_at               timestamptz,
    finished_at              timestamptz,
    heartbeat_at             timestamptz,
    next_retry_at            timestamptz,
    execution_trace          jsonb,
    -- Fencing token of the dispatch that holds the run: bumped when a worker
    -- takes it, checked when the worker records the outcome, so a worker whose
    -- lease expired cannot overwrite the run after it was handed to another.
    dispatch_token           bigint      NOT NULL DEFAULT 0,
    created_at               timestamptz NOT NULL DEFAULT now(),
    updated_at               timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX job_runs_project_idx ON job_runs (project_id, id DESC);
CREATE INDEX job_runs_job_idx ON job_runs (job_id, id DESC);
CREATE INDEX job_runs_project_status_idx ON job_runs (project_id, status, id DESC);
-- The reconciler sweeps every run that should be somewhere in Redis.
CREATE INDEX job_runs_active_idx ON job_runs (id)
    WHERE status IN ('pending', 'queued', 'running', 'retrying');
CREATE UNIQUE INDEX job_runs_idempotency_key ON job_runs (job_id, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
CREATE INDEX job_runs_payload_idx ON job_runs USING gin (payload jsonb_path_ops);

-- One row per dispatch attempt, with what the target answered and how long
-- each phase took.
CREATE TABLE job_run_attempts (
    run_id       text        NOT NULL REFERENCES job_runs (id) ON DELETE CASCADE,
    attempt      integer     NOT NULL,
    outcome      text        NOT NULL,
    status_code  integer,
    error        text,
    endpoint_url text,
    started_at   timestamptz NOT NULL,
    finished_at  timestamptz NOT NULL,
    trace        jsonb,
    PRIMARY KEY (run_id, attempt, started_at)
);

-- The transition history of a run.
CREATE TABLE job_run_events (
    id          bigserial   PRIMARY KEY,
    run_id      text        NOT NULL REFERENCES job_runs (id) ON DELETE CASCADE,
    from_status text,
    to_status   text        NOT NULL,
    attempt     integer     NOT NULL,
    reason      text,
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX job_run_events_run_idx ON job_run_events (run_id, id);
