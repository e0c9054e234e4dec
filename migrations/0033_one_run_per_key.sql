-- Singleton and debounce (`store::one_per_key`): the key a run of such a
-- job holds. A singleton's key is held while the run is unfinished, a
-- debounce's while the run waits `pending` in its window. The index of
-- each covers only the runs that hold one, so runs of other jobs write
-- nothing to it. Postgres cannot make them unique on a table partitioned
-- by id; the trigger takes a lock on (job, key) instead.
ALTER TABLE job_runs ADD COLUMN singleton_key text, ADD COLUMN debounce_key text;

CREATE INDEX job_runs_singleton_idx ON job_runs (job_id, singleton_key)
    WHERE singleton_key IS NOT NULL AND status IN ('pending', 'queued', 'running', 'retrying');
CREATE INDEX job_runs_debounce_idx ON job_runs (job_id, debounce_key)
    WHERE debounce_key IS NOT NULL AND status = 'pending';
