-- A worker that records the outcome of a workflow step's job run advances
-- the workflow run in the same transaction (`store::step_outcomes`). While
-- it writes the outcomes it sets `switchyard.inline_steps` (local to the
-- transaction), and the job-run trigger of migration 0010 writes no outbox
-- row: that transaction advances those runs itself, and writes the row for
-- any run another process holds. Every other path that ends a step's job
-- run (the SDK, a cancel, expiry) still writes it here.
CREATE OR REPLACE FUNCTION sy_step_job_run_ended() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF current_setting('switchyard.inline_steps', true) IS DISTINCT FROM 'on' THEN
        INSERT INTO workflow_outbox (workflow_run_id)
        SELECT workflow_run_id FROM workflow_step_runs WHERE id = NEW.workflow_step_run_id;
    END IF;
    RETURN NULL;
END $$;
