-- What a run reports about itself over the SDK (logs, checkpoints, outputs,
-- key-value state, usage, tool calls), bulk trigger batches, environments
-- and job secrets.
--
-- Record ids are text like every other id (`<prefix>_<uuidv7>`), so ordering
-- by id is ordering by arrival and lists page by id.

ALTER TABLE job_runs
    -- small, medium or large: the machine preset asked for by a restart.
    ADD COLUMN resource_class    text
        CONSTRAINT job_runs_resource_class_check CHECK (resource_class IN ('small', 'medium', 'large')),
    -- Last progress reported over the SDK, 0 to 1, with its message.
    ADD COLUMN progress          double precision
        CONSTRAINT job_runs_progress_check CHECK (progress >= 0 AND progress <= 1),
    ADD COLUMN progress_message  text,
    -- When the target took an async run (HTTP 202). From then on the run is
    -- kept alive by SDK heartbeats, not by a worker's lease: the reconciler
    -- leaves it alone and the scheduler's heartbeat sweep times it out.
    -- Every claim clears it.
    ADD COLUMN async_accepted_at timestamptz;

-- Batch status counts, child cancellation, the replays of a run.
CREATE INDEX job_runs_batch_idx ON job_runs (batch_id) WHERE batch_id IS NOT NULL;
CREATE INDEX job_runs_parent_idx ON job_runs (parent_run_id) WHERE parent_run_id IS NOT NULL;
CREATE INDEX job_runs_continuation_idx ON job_runs (continuation_of) WHERE continuation_of IS NOT NULL;
-- The heartbeat sweep reads only async runs that are running.
CREATE INDEX job_runs_async_running_idx ON job_runs (heartbeat_at)
    WHERE status = 'running' AND async_accepted_at IS NOT NULL;

-- One row per bulk trigger request; its runs carry the id in batch_id.
CREATE TABLE run_batches (
    id          text        PRIMARY KEY,
    project_id  text        NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    job_id      text        NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    -- Items in the request, and what became of them.
    total       integer     NOT NULL,
    created     integer     NOT NULL DEFAULT 0,
    duplicates  integer     NOT NULL DEFAULT 0,
    errors      integer     NOT NULL DEFAULT 0,
    created_by  text,
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX run_batches_project_idx ON run_batches (project_id, id DESC);

CREATE TABLE job_run_logs (
    id         text        PRIMARY KEY,
    run_id     text        NOT NULL REFERENCES job_runs (id) ON DELETE CASCADE,
    attempt    integer     NOT NULL,
    level      text        NOT NULL
        CONSTRAINT job_run_logs_level_check CHECK (level IN ('debug', 'info', 'warn', 'error')),
    message    text        NOT NULL,
    fields     jsonb       NOT NULL DEFAULT '{}',
    -- When the target says the line was written; created_at is when it arrived.
    logged_at  timestamptz NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX job_run_logs_run_idx ON job_run_logs (run_id, id);

-- The latest checkpoint of a run is handed to its next attempt.
CREATE TABLE job_run_checkpoints (
    id         text        PRIMARY KEY,
    run_id     text        NOT NULL REFERENCES job_runs (id) ON DELETE CASCADE,
    attempt    integer     NOT NULL,
    label      text,
    data       jsonb       NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX job_run_checkpoints_run_idx ON job_run_checkpoints (run_id, id DESC);

CREATE TABLE job_run_outputs (
    id         text        PRIMARY KEY,
    run_id     text        NOT NULL REFERENCES job_runs (id) ON DELETE CASCADE,
    attempt    integer     NOT NULL,
    name       text        NOT NULL,
    data       jsonb,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX job_run_outputs_run_idx ON job_run_outputs (run_id, id DESC);

CREATE TABLE job_run_state (
    run_id     text        NOT NULL REFERENCES job_runs (id) ON DELETE CASCADE,
    key        text        NOT NULL,
    value      jsonb       NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (run_id, key)
);

CREATE TABLE job_run_usage (
    id            text        PRIMARY KEY,
    run_id        text        NOT NULL REFERENCES job_runs (id) ON DELETE CASCADE,
    attempt       integer     NOT NULL,
    -- Micro-dollars, like the cost gate fields of workflows.
    cost_microusd bigint      NOT NULL DEFAULT 0 CONSTRAINT job_run_usage_cost_check CHECK (cost_microusd >= 0),
    tokens_in     bigint      NOT NULL DEFAULT 0 CONSTRAINT job_run_usage_tokens_in_check CHECK (tokens_in >= 0),
    tokens_out    bigint      NOT NULL DEFAULT 0 CONSTRAINT job_run_usage_tokens_out_check CHECK (tokens_out >= 0),
    model         text,
    cpu_ms        bigint      NOT NULL DEFAULT 0 CONSTRAINT job_run_usage_cpu_check CHECK (cpu_ms >= 0),
    created_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX job_run_usage_run_idx ON job_run_usage (run_id, id DESC);

CREATE TABLE job_run_tool_calls (
    id          text        PRIMARY KEY,
    run_id      text        NOT NULL REFERENCES job_runs (id) ON DELETE CASCADE,
    attempt     integer     NOT NULL,
    name        text        NOT NULL,
    input       jsonb,
    output      jsonb,
    duration_ms bigint      CONSTRAINT job_run_tool_calls_duration_check CHECK (duration_ms >= 0),
    status      text,
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX job_run_tool_calls_run_idx ON job_run_tool_calls (run_id, id DESC);

-- Deployment environments of a project (production, staging...). A job may
-- name one; an environment that jobs name cannot be deleted.
CREATE TABLE environments (
    id          text        PRIMARY KEY,
    project_id  text        NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    name        text        NOT NULL,
    description text,
    created_by  text,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT environments_project_name_key UNIQUE (project_id, name)
);
CREATE INDEX environments_project_idx ON environments (project_id, id DESC);
CREATE TRIGGER environments_updated_at BEFORE UPDATE ON environments
    FOR EACH ROW EXECUTE FUNCTION sy_set_updated_at();

-- Job secrets, encrypted with XChaCha20-Poly1305 under a key derived from
-- SECRETS_KEY; the job id and name are the associated data, so a ciphertext
-- moved to another row does not decrypt. Plaintext never reaches Postgres.
CREATE TABLE job_secrets (
    job_id     text        NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    name       text        NOT NULL,
    nonce      bytea       NOT NULL,
    ciphertext bytea       NOT NULL,
    created_by text,
    updated_by text,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (job_id, name)
);
CREATE TRIGGER job_secrets_updated_at BEFORE UPDATE ON job_secrets
    FOR EACH ROW EXECUTE FUNCTION sy_set_updated_at();
