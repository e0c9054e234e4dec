-- Every statement that changes a job run's status writes the live streams'
-- change log itself (`store::streams::log_runs_cte`: a CTE that joins its
-- rows with `stream_watches` once per statement), and `job_runs` has no
-- stream trigger any more. With nobody streaming, the triggers' function
-- call and watch probe per changed row were what the run path paid (about
-- 16 µs of Postgres time per run, 7 % of the benchmark's phase (a) rate),
-- and a trigger whose WHEN skipped the hot statements' rows still cost
-- 6 %. Workflow runs and step runs keep the row triggers of migration 0030
-- (they are not on a plain run's path). Every statement that changes a
-- run's status lives in `shared/src/store` (`writes_stay_here.rs` checks).
--
-- The NOTIFY moves to a trigger on the change log itself, so whoever
-- writes a change announces it the same way: payload `<project> <kind>
-- <id> <workflow_run_id or ->`.

DROP TRIGGER job_runs_stream_insert ON job_runs;
DROP TRIGGER job_runs_stream_update ON job_runs;
DROP FUNCTION sy_stream_run_change();

CREATE OR REPLACE FUNCTION sy_stream_change(project text, kind text, id text, status text, job text, workflow text,
                                            workflow_run text, step_ref text) RETURNS void LANGUAGE sql AS $$
    INSERT INTO stream_changes (project_id, kind, id, status, job_id, workflow_id, workflow_run_id, step_ref)
    VALUES (project, kind, id, status, job, workflow, workflow_run, step_ref)
$$;

CREATE FUNCTION sy_stream_announce() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('switchyard_changes',
                      NEW.project_id || ' ' || NEW.kind || ' ' || NEW.id || ' ' || coalesce(NEW.workflow_run_id, '-'));
    RETURN NULL;
END $$;

CREATE TRIGGER stream_changes_announce AFTER INSERT ON stream_changes
    FOR EACH ROW EXECUTE FUNCTION sy_stream_announce();
