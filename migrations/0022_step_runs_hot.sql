-- An engine pass writes a step's row when it starts the step and again
-- when the step ends. Neither write changes an indexed column once the
-- index on job_run_id is gone (nothing looks a step up by its job run:
-- the job run names its step, job_runs.workflow_step_run_id), so with room
-- on the page both are HOT updates, which write no index entry.
DROP INDEX workflow_step_runs_job_run_idx;
ALTER TABLE workflow_step_runs SET (fillfactor = 70);
