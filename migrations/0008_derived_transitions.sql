-- A run's transitions that its own rows already say are no longer stored
-- as events (issue 5: three event rows per run were a third of the tuples
-- a run wrote). The history reads them back through the view below:
--
-- * a run created `queued` (the trigger's hot path) has no creation event;
--   its `NULL -> queued` "triggered" transition is its row's created_at.
--   Runs created `pending` still store theirs.
-- * every attempt row is an attempt that ran: `queued -> running` at its
--   started_at (unless a writer stored that transition for the attempt:
--   the worker's mark for a long attempt, an SDK call, a 202), and
--   `running -> outcome` at its finished_at, with the attempt's error as
--   the reason. The outcome and its attempt row are written by one
--   statement, so the two can not disagree.
--
-- Everything else (retry due, cancel, expiry, dependencies, lease loss,
-- replay) is still an event row.

-- The stored `running -> outcome` events of finished attempts would now
-- show twice: they were written with their attempt row, at the same now().
DELETE FROM job_run_events e
USING job_run_attempts a
WHERE e.run_id = a.run_id AND e.attempt = a.attempt AND e.from_status = 'running'
  AND e.to_status = a.outcome AND e.created_at = a.finished_at;

CREATE VIEW job_run_transitions AS
    SELECT run_id, created_at AS at, attempt, from_status, to_status, reason, id AS seq, 0 AS sub
      FROM job_run_events
    UNION ALL
    SELECT r.id, r.created_at, 0, NULL, 'queued', 'triggered', 0, 0
      FROM job_runs r
     WHERE NOT EXISTS (SELECT 1 FROM job_run_events e WHERE e.run_id = r.id AND e.from_status IS NULL)
    UNION ALL
    SELECT a.run_id, a.started_at, a.attempt, 'queued', 'running', NULL, 0, 0
      FROM job_run_attempts a
     WHERE NOT EXISTS (SELECT 1 FROM job_run_events e
                        WHERE e.run_id = a.run_id AND e.attempt = a.attempt
                          AND e.from_status = 'queued' AND e.to_status = 'running')
    UNION ALL
    SELECT a.run_id, a.finished_at, a.attempt, 'running', a.outcome, a.error, 0, 1
      FROM job_run_attempts a;
