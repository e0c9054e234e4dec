-- Workflow runs: one row per run of a workflow, one row per step of it,
-- an outbox of runs that something happened to, and the decisions the
-- engine made (what GET /v1/workflow-runs/{id}/explain shows).
--
-- The engine is event-driven. Whatever may let a run move on (a step's job
-- run ending, a trigger, a resume, a step retried, a child run ending)
-- writes a row to workflow_outbox in the transaction that made it happen,
-- and the insert notifies the channel `switchyard_workflows` (delivered at
-- commit). A scheduler that hears it, or finds the row later, advances the
-- run under the run's row lock and deletes the rows it consumed in the same
-- transaction: an event is never lost (its row stays until a committed
-- advance saw it) and never doubles a step (one row per step and run,
-- started under the lock).

-- Ticks of a workflow's cron before this moment never fire: set at
-- creation and whenever the schedule changes or the workflow is enabled
-- again, as for jobs (migration 0004).
ALTER TABLE workflows ADD COLUMN cron_since timestamptz NOT NULL DEFAULT now();
CREATE INDEX workflows_cron_idx ON workflows (id) WHERE deleted_at IS NULL AND enabled AND cron IS NOT NULL;

CREATE FUNCTION sy_workflows_cron_since() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.cron IS DISTINCT FROM OLD.cron
       OR NEW.cron_timezone IS DISTINCT FROM OLD.cron_timezone
       OR (NEW.enabled AND NOT OLD.enabled) THEN
        NEW.cron_since := now();
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER workflows_cron_since BEFORE UPDATE ON workflows
    FOR EACH ROW EXECUTE FUNCTION sy_workflows_cron_since();

CREATE TABLE workflow_runs (
    id                 text        PRIMARY KEY,
    project_id         text        NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    workflow_id        text        NOT NULL REFERENCES workflows (id) ON DELETE CASCADE,
    -- The version the run follows now: the one it started on under the
    -- `pin` policy, the newest it has seen at a step boundary under `latest`.
    version_id         text        NOT NULL REFERENCES workflow_versions (id),
    version            integer     NOT NULL,
    started_version_id text        NOT NULL REFERENCES workflow_versions (id),
    version_policy     text        NOT NULL
        CONSTRAINT workflow_runs_version_policy_check CHECK (version_policy IN ('pin', 'latest')),
    status             text        NOT NULL
        CONSTRAINT workflow_runs_status_check CHECK (status IN (
            'pending', 'running', 'paused', 'completed', 'failed', 'cancelled', 'timed_out')),
    payload            jsonb,
    output             jsonb,
    error              text,
    idempotency_key    text,
    tags               jsonb       NOT NULL DEFAULT '{}'::jsonb,
    triggered_by       text        NOT NULL,
    created_by         text,
    -- A sub-workflow's run: the parent step that started it.
    parent_step_run_id text,
    depth              integer     NOT NULL DEFAULT 0,
    cron_tick          timestamptz,
    -- started_at + the workflow's timeout_secs, when it has one.
    deadline_at        timestamptz,
    -- The earliest moment the engine must look at the run without being
    -- told: a sleeping step's end or the deadline. NULL: only events move it.
    wake_at            timestamptz,
    created_at         timestamptz NOT NULL DEFAULT now(),
    started_at         timestamptz,
    finished_at        timestamptz,
    updated_at         timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX workflow_runs_project_idx ON workflow_runs (project_id, id DESC);
CREATE INDEX workflow_runs_workflow_idx ON workflow_runs (workflow_id, id DESC);
CREATE INDEX workflow_runs_active_idx ON workflow_runs (workflow_id, status, id)
    WHERE status IN ('pending', 'running', 'paused');
CREATE INDEX workflow_runs_wake_idx ON workflow_runs (wake_at) WHERE wake_at IS NOT NULL;
CREATE UNIQUE INDEX workflow_runs_idempotency_key ON workflow_runs (workflow_id, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
CREATE UNIQUE INDEX workflow_runs_cron_tick ON workflow_runs (workflow_id, cron_tick)
    WHERE cron_tick IS NOT NULL;
CREATE TRIGGER workflow_runs_updated_at BEFORE UPDATE ON workflow_runs
    FOR EACH ROW EXECUTE FUNCTION sy_set_updated_at();

CREATE TABLE workflow_step_runs (
    id                    text        PRIMARY KEY,
    workflow_run_id       text        NOT NULL REFERENCES workflow_runs (id) ON DELETE CASCADE,
    step_ref              text        NOT NULL,
    step_id               text        NOT NULL,
    step_type             text        NOT NULL,
    status                text        NOT NULL
        CONSTRAINT workflow_step_runs_status_check CHECK (status IN (
            'pending', 'running', 'waiting', 'completed', 'failed', 'skipped', 'cancelled', 'timed_out',
            'compensated')),
    -- How many times the step was started (a step retry or replay starts it
    -- again; a job step's own retries are its job run's attempts).
    attempt               integer     NOT NULL DEFAULT 0,
    job_run_id            text,
    child_workflow_run_id text,
    output                jsonb,
    error                 text,
    -- A sleeping step's end.
    wake_at               timestamptz,
    -- Ended because its run ended (failed, cancelled, timed out), not on
    -- its own: a step retry that takes the run up again starts it again.
    ended_by_run          boolean     NOT NULL DEFAULT false,
    started_at            timestamptz,
    finished_at           timestamptz,
    created_at            timestamptz NOT NULL DEFAULT now(),
    updated_at            timestamptz NOT NULL DEFAULT now(),
    -- One row per step of a run: starting a step is an update of this row
    -- under the run's lock, so it cannot happen twice.
    CONSTRAINT workflow_step_runs_run_ref_key UNIQUE (workflow_run_id, step_ref)
);
CREATE INDEX workflow_step_runs_job_run_idx ON workflow_step_runs (job_run_id) WHERE job_run_id IS NOT NULL;
CREATE TRIGGER workflow_step_runs_updated_at BEFORE UPDATE ON workflow_step_runs
    FOR EACH ROW EXECUTE FUNCTION sy_set_updated_at();

CREATE TABLE workflow_outbox (
    id              bigserial   PRIMARY KEY,
    workflow_run_id text        NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX workflow_outbox_run_idx ON workflow_outbox (workflow_run_id);

CREATE FUNCTION sy_workflow_outbox_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('switchyard_workflows', NEW.workflow_run_id);
    RETURN NULL;
END $$;
CREATE TRIGGER workflow_outbox_notify AFTER INSERT ON workflow_outbox
    FOR EACH ROW EXECUTE FUNCTION sy_workflow_outbox_notify();

-- A step's job run ending is the commonest event, and it happens on many
-- paths (the worker's outcome, the SDK, a cancel, expiry, a job deleted).
-- This trigger writes the outbox row on all of them, in the statement that
-- ends the run; the WHEN clause keeps it off every other run's update.
CREATE FUNCTION sy_step_job_run_ended() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO workflow_outbox (workflow_run_id)
    SELECT workflow_run_id FROM workflow_step_runs WHERE id = NEW.workflow_step_run_id;
    RETURN NULL;
END $$;
CREATE TRIGGER job_runs_step_ended AFTER UPDATE OF status ON job_runs
    FOR EACH ROW
    WHEN (NEW.workflow_step_run_id IS NOT NULL AND NEW.status IS DISTINCT FROM OLD.status
          AND NEW.status IN ('completed', 'failed', 'timed_out', 'cancelled', 'expired'))
    EXECUTE FUNCTION sy_step_job_run_ended();

-- What the engine decided and why, as it decided it.
CREATE TABLE workflow_decisions (
    id              bigserial   PRIMARY KEY,
    workflow_run_id text        NOT NULL REFERENCES workflow_runs (id) ON DELETE CASCADE,
    step_ref        text,
    decision_type   text        NOT NULL,
    reason          text        NOT NULL,
    details         jsonb       NOT NULL DEFAULT '{}'::jsonb,
    created_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX workflow_decisions_run_idx ON workflow_decisions (workflow_run_id, id);

-- Resource policies may select workflows (by id or tags); an operation on
-- a workflow run is checked against its workflow.
ALTER TABLE resource_policies DROP CONSTRAINT resource_policies_resource_type_check;
ALTER TABLE resource_policies ADD CONSTRAINT resource_policies_resource_type_check
    CHECK (resource_type IN ('job', 'job_group', 'run', 'workflow'));
