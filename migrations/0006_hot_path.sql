-- Every status change of a run writes a new row version, and a new
-- version must be entered in every index of job_runs. The GIN index on
-- payload made each of those entries several times more expensive than the
-- rest together (a run's life writes three versions). `payload_contains`
-- filters keep working: they apply within the project or job index scan
-- every run listing starts from.
DROP INDEX IF EXISTS job_runs_payload_idx;
