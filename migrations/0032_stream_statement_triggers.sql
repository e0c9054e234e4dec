-- The live streams' triggers (migration 0030) fire once per statement
-- instead of once per row. A trigger, a worker's outcomes and the engine's
-- passes are written many rows to a statement (group commits), and with no
-- stream open the per-row function call and watch probe were what the run
-- path paid (about 20 µs of Postgres time per run at the benchmark's rate):
-- now one probe per statement decides, and only a watched project's rows
-- are looked at. The triggers keep their names (the benchmark's
-- `--without-stream-triggers` drops them by name).
--
-- Transition tables cannot be combined with `UPDATE OF status`, so an
-- update trigger fires for every update and compares the old and new rows
-- itself, once somebody watches.

DROP TRIGGER job_runs_stream_insert ON job_runs;
DROP TRIGGER job_runs_stream_update ON job_runs;
DROP TRIGGER workflow_runs_stream_insert ON workflow_runs;
DROP TRIGGER workflow_runs_stream_update ON workflow_runs;
DROP TRIGGER workflow_step_runs_stream_update ON workflow_step_runs;
DROP FUNCTION sy_stream_run_change();
DROP FUNCTION sy_stream_workflow_run_change();
DROP FUNCTION sy_stream_step_change();
DROP FUNCTION sy_stream_change(text, text, text, text, text, text, text, text);

-- Whether any project is watched now: the one probe a statement pays when
-- nobody streams.
CREATE FUNCTION sy_streams_watched() RETURNS boolean LANGUAGE sql STABLE AS $$
    SELECT EXISTS (SELECT 1 FROM stream_watches WHERE until > now())
$$;

-- Each function below logs the watched project's changes and announces
-- each with NOTIFY: payload `<project> <kind> <id> <workflow_run_id or ->`,
-- so a stream of one run tells its own changes from the rest without
-- reading anything.

CREATE FUNCTION sy_stream_runs_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    c record;
BEGIN
    IF NOT sy_streams_watched() THEN
        RETURN NULL;
    END IF;
    FOR c IN WITH logged AS (
        INSERT INTO stream_changes (project_id, kind, id, status, job_id)
        SELECT n.project_id, 'run', n.id, n.status, n.job_id
          FROM new_rows n JOIN stream_watches w ON w.project_id = n.project_id AND w.until > now()
        RETURNING project_id, kind, id, workflow_run_id
    ) SELECT * FROM logged LOOP
        PERFORM pg_notify('switchyard_changes', c.project_id || ' ' || c.kind || ' ' || c.id || ' '
                                                || coalesce(c.workflow_run_id, '-'));
    END LOOP;
    RETURN NULL;
END $$;

CREATE FUNCTION sy_stream_runs_updated() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    c record;
BEGIN
    IF NOT sy_streams_watched() THEN
        RETURN NULL;
    END IF;
    FOR c IN WITH logged AS (
        INSERT INTO stream_changes (project_id, kind, id, status, job_id)
        SELECT n.project_id, 'run', n.id, n.status, n.job_id
          FROM new_rows n
          JOIN stream_watches w ON w.project_id = n.project_id AND w.until > now()
          JOIN old_rows o ON o.id = n.id
         WHERE n.status IS DISTINCT FROM o.status OR n.attempt IS DISTINCT FROM o.attempt
        RETURNING project_id, kind, id, workflow_run_id
    ) SELECT * FROM logged LOOP
        PERFORM pg_notify('switchyard_changes', c.project_id || ' ' || c.kind || ' ' || c.id || ' '
                                                || coalesce(c.workflow_run_id, '-'));
    END LOOP;
    RETURN NULL;
END $$;

CREATE FUNCTION sy_stream_workflow_runs_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    c record;
BEGIN
    IF NOT sy_streams_watched() THEN
        RETURN NULL;
    END IF;
    FOR c IN WITH logged AS (
        INSERT INTO stream_changes (project_id, kind, id, status, workflow_id, workflow_run_id)
        SELECT n.project_id, 'workflow_run', n.id, n.status, n.workflow_id, n.id
          FROM new_rows n JOIN stream_watches w ON w.project_id = n.project_id AND w.until > now()
        RETURNING project_id, kind, id, workflow_run_id
    ) SELECT * FROM logged LOOP
        PERFORM pg_notify('switchyard_changes', c.project_id || ' ' || c.kind || ' ' || c.id || ' '
                                                || coalesce(c.workflow_run_id, '-'));
    END LOOP;
    RETURN NULL;
END $$;

CREATE FUNCTION sy_stream_workflow_runs_updated() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    c record;
BEGIN
    IF NOT sy_streams_watched() THEN
        RETURN NULL;
    END IF;
    FOR c IN WITH logged AS (
        INSERT INTO stream_changes (project_id, kind, id, status, workflow_id, workflow_run_id)
        SELECT n.project_id, 'workflow_run', n.id, n.status, n.workflow_id, n.id
          FROM new_rows n
          JOIN stream_watches w ON w.project_id = n.project_id AND w.until > now()
          JOIN old_rows o ON o.id = n.id
         WHERE n.status IS DISTINCT FROM o.status
        RETURNING project_id, kind, id, workflow_run_id
    ) SELECT * FROM logged LOOP
        PERFORM pg_notify('switchyard_changes', c.project_id || ' ' || c.kind || ' ' || c.id || ' '
                                                || coalesce(c.workflow_run_id, '-'));
    END LOOP;
    RETURN NULL;
END $$;

CREATE FUNCTION sy_stream_steps_updated() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    c record;
BEGIN
    IF NOT sy_streams_watched() THEN
        RETURN NULL;
    END IF;
    FOR c IN WITH logged AS (
        INSERT INTO stream_changes (project_id, kind, id, status, workflow_id, workflow_run_id, step_ref)
        SELECT r.project_id, 'step', n.id, n.status, r.workflow_id, n.workflow_run_id, n.step_ref
          FROM new_rows n
          JOIN old_rows o ON o.id = n.id
          JOIN workflow_runs r ON r.id = n.workflow_run_id
          JOIN stream_watches w ON w.project_id = r.project_id AND w.until > now()
         WHERE n.status IS DISTINCT FROM o.status OR n.attempt IS DISTINCT FROM o.attempt
        RETURNING project_id, kind, id, workflow_run_id
    ) SELECT * FROM logged LOOP
        PERFORM pg_notify('switchyard_changes', c.project_id || ' ' || c.kind || ' ' || c.id || ' '
                                                || coalesce(c.workflow_run_id, '-'));
    END LOOP;
    RETURN NULL;
END $$;

CREATE TRIGGER job_runs_stream_insert AFTER INSERT ON job_runs
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION sy_stream_runs_inserted();
CREATE TRIGGER job_runs_stream_update AFTER UPDATE ON job_runs
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION sy_stream_runs_updated();

CREATE TRIGGER workflow_runs_stream_insert AFTER INSERT ON workflow_runs
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION sy_stream_workflow_runs_inserted();
CREATE TRIGGER workflow_runs_stream_update AFTER UPDATE ON workflow_runs
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION sy_stream_workflow_runs_updated();

CREATE TRIGGER workflow_step_runs_stream_update AFTER UPDATE ON workflow_step_runs
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION sy_stream_steps_updated();
