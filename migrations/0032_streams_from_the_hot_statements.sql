-- The statements on a run's hot path write the live streams' change log
-- themselves, and the row triggers of migration 0030 stay for every other
-- writer. With nobody streaming, the triggers' function call and watch
-- probe per changed row were what the run path paid (about 16 µs of
-- Postgres time per run, 7 % of the benchmark's phase (a) rate): now a run's
-- insert (`store::runs`, both insert statements) and every update that moves
-- its dispatch token (the worker's outcomes and `running` marks, an async
-- acceptance) join their rows with `stream_watches` once per statement, in
-- a CTE, and the update trigger's `WHEN` skips what they log.
--
-- The NOTIFY moves to a trigger on the change log itself, so whoever
-- writes a change announces it the same way: payload `<project> <kind>
-- <id> <workflow_run_id or ->`.

DROP TRIGGER job_runs_stream_insert ON job_runs;
DROP TRIGGER job_runs_stream_update ON job_runs;

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

-- Runs inserted are logged by their insert statement; updates that move
-- the dispatch token by theirs.
CREATE TRIGGER job_runs_stream_update AFTER UPDATE OF status ON job_runs
    FOR EACH ROW WHEN ((NEW.status IS DISTINCT FROM OLD.status OR NEW.attempt IS DISTINCT FROM OLD.attempt)
                       AND NEW.dispatch_token IS NOT DISTINCT FROM OLD.dispatch_token)
    EXECUTE FUNCTION sy_stream_run_change();
