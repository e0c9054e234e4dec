-- Live streams (`GET /v1/runs/{id}/stream`, `/v1/workflow-runs/{id}/stream`,
-- `/v1/stream`): every status change of a job run, a workflow run or a step
-- run, whoever makes it (api, worker, scheduler, engine), is announced with
-- NOTIFY on the channel `switchyard_changes` and kept in `stream_changes`,
-- but only for a project some api process is streaming (`stream_watches`).
-- A project nobody watches pays one index probe per changed row.
--
-- Both tables are UNLOGGED: a watch is renewed every few seconds by the api
-- process that holds it, and the change log is a resume buffer (a stream
-- that reconnects reads what it missed from it), pruned after ten minutes.
-- After a Postgres crash both start empty, like a stream's connection.

CREATE UNLOGGED TABLE stream_watches (
    project_id text        PRIMARY KEY,
    -- Renewed while a stream of the project is open; past it, nobody watches.
    until      timestamptz NOT NULL
);

CREATE UNLOGGED TABLE stream_changes (
    seq             bigserial   PRIMARY KEY,
    -- The writing transaction: a reader takes only rows of transactions that
    -- ended before every transaction still running began, so no row it has
    -- passed can appear later (sequence order is not commit order).
    tx              xid8        NOT NULL DEFAULT pg_current_xact_id(),
    project_id      text        NOT NULL,
    -- run, workflow_run or step.
    kind            text        NOT NULL,
    id              text        NOT NULL,
    status          text        NOT NULL,
    job_id          text,
    workflow_id     text,
    workflow_run_id text,
    step_ref        text,
    at              timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX stream_changes_project_idx ON stream_changes (project_id, tx, seq);
CREATE INDEX stream_changes_at_idx ON stream_changes (at);

-- Records one change when its project is watched. The NOTIFY payload is
-- `<project> <kind> <id> <workflow_run_id or ->`, so a stream of one run
-- can tell its own changes from the rest without reading anything.
CREATE FUNCTION sy_stream_change(project text, kind text, id text, status text, job text, workflow text,
                                 workflow_run text, step_ref text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO stream_changes (project_id, kind, id, status, job_id, workflow_id, workflow_run_id, step_ref)
    VALUES (project, kind, id, status, job, workflow, workflow_run, step_ref);
    PERFORM pg_notify('switchyard_changes', project || ' ' || kind || ' ' || id || ' ' || coalesce(workflow_run, '-'));
END $$;

CREATE FUNCTION sy_stream_run_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM stream_watches w WHERE w.project_id = NEW.project_id AND w.until > now()) THEN
        PERFORM sy_stream_change(NEW.project_id, 'run', NEW.id, NEW.status, NEW.job_id, NULL, NULL, NULL);
    END IF;
    RETURN NULL;
END $$;

CREATE FUNCTION sy_stream_workflow_run_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM stream_watches w WHERE w.project_id = NEW.project_id AND w.until > now()) THEN
        PERFORM sy_stream_change(NEW.project_id, 'workflow_run', NEW.id, NEW.status, NULL, NEW.workflow_id,
                                 NEW.id, NULL);
    END IF;
    RETURN NULL;
END $$;

CREATE FUNCTION sy_stream_step_change() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    project text;
    workflow text;
BEGIN
    SELECT r.project_id, r.workflow_id INTO project, workflow
      FROM workflow_runs r JOIN stream_watches w ON w.project_id = r.project_id AND w.until > now()
     WHERE r.id = NEW.workflow_run_id;
    IF FOUND THEN
        PERFORM sy_stream_change(project, 'step', NEW.id, NEW.status, NULL, workflow, NEW.workflow_run_id,
                                 NEW.step_ref);
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER job_runs_stream_insert AFTER INSERT ON job_runs
    FOR EACH ROW EXECUTE FUNCTION sy_stream_run_change();
CREATE TRIGGER job_runs_stream_update AFTER UPDATE OF status ON job_runs
    FOR EACH ROW WHEN (NEW.status IS DISTINCT FROM OLD.status OR NEW.attempt IS DISTINCT FROM OLD.attempt)
    EXECUTE FUNCTION sy_stream_run_change();

CREATE TRIGGER workflow_runs_stream_insert AFTER INSERT ON workflow_runs
    FOR EACH ROW EXECUTE FUNCTION sy_stream_workflow_run_change();
CREATE TRIGGER workflow_runs_stream_update AFTER UPDATE OF status ON workflow_runs
    FOR EACH ROW WHEN (NEW.status IS DISTINCT FROM OLD.status)
    EXECUTE FUNCTION sy_stream_workflow_run_change();

CREATE TRIGGER workflow_step_runs_stream_update AFTER UPDATE OF status ON workflow_step_runs
    FOR EACH ROW WHEN (NEW.status IS DISTINCT FROM OLD.status OR NEW.attempt IS DISTINCT FROM OLD.attempt)
    EXECUTE FUNCTION sy_stream_step_change();
