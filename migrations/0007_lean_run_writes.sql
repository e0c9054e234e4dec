-- Fewer writes per run (issue 5, measured with scripts/bench).
--
-- Foreign keys on the tables every run writes: each inserted row ran a
-- referential check, a query that also takes a KEY SHARE lock on the parent
-- row. A run wrote six of them (its job and project, three events, one
-- attempt), and the locks on one hot job row from many concurrent triggers
-- turn into multixacts. Nothing deletes projects, jobs or runs (jobs are
-- soft-deleted), and every writer checks the parent in the same request (a
-- trigger loads its job; events and attempts are written by the statement
-- that updates their run), so the checks bought nothing. The slower tables
-- written over the SDK keep theirs.
ALTER TABLE job_runs DROP CONSTRAINT IF EXISTS job_runs_project_id_fkey;
ALTER TABLE job_runs DROP CONSTRAINT IF EXISTS job_runs_job_id_fkey;
ALTER TABLE job_run_events DROP CONSTRAINT IF EXISTS job_run_events_run_id_fkey;
ALTER TABLE job_run_attempts DROP CONSTRAINT IF EXISTS job_run_attempts_run_id_fkey;

-- Events are only ever read per run in id order: one index on (run_id, id)
-- serves that and identifies a row, so the separate primary key on id (a
-- second index entry per event, three events per run) goes.
ALTER TABLE job_run_events DROP CONSTRAINT job_run_events_pkey;
DROP INDEX job_run_events_run_idx;
ALTER TABLE job_run_events ADD CONSTRAINT job_run_events_pkey PRIMARY KEY (run_id, id);
