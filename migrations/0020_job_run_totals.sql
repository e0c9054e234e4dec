-- Group statistics (SPEC §4.4, `GET /v1/job-groups/{id}/stats`): run
-- counts by status over every run of a group's jobs, within 200 ms for a
-- group with a million runs. Counting the runs themselves reads every one
-- of them (about a second at a million), and an index for it would be
-- one more index written by every trigger and every status change.
--
-- So the ended runs are counted here instead, per job and terminal
-- status, by the scheduler's rollup pass (store::analytics::roll_up): it
-- adds the runs that ended in the span it folds, off the hot path. Two
-- writers take runs back out, each holding the analytics watermark row
-- (`FOR SHARE`) so that a rollup pass is not folding at the same moment:
-- the pruner, for the runs it deletes that ended before the watermark,
-- and a restart, for the run it takes out of its terminal status. A read
-- adds, in one snapshot, the runs that ended since the watermark and the
-- unfinished runs (the partial index of unfinished runs serves those).
CREATE TABLE job_run_totals (
    job_id text   NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    status text   NOT NULL,
    n      bigint NOT NULL,
    PRIMARY KEY (job_id, status)
);

-- What the rollups already hold: the ended runs before the watermark.
INSERT INTO job_run_totals (job_id, status, n)
SELECT r.job_id, r.status, count(*)
  FROM job_runs r, analytics_watermark w
 WHERE r.finished_at < w.upto AND r.status IN ('completed', 'failed', 'timed_out', 'cancelled', 'expired')
 GROUP BY r.job_id, r.status;
