-- Retention: finished runs, workflow runs, deliveries and events older than
-- their project's retention_days are deleted by the scheduler's pruner, in
-- small batches (store::retention), with what hangs off them (attempts,
-- logs, records: ON DELETE CASCADE). Batched deletes rather than
-- partitioned tables: the tables keep their unique indexes across all
-- rows (idempotency keys, cron ticks), which partitions by time would
-- split, and a batch of a thousand rows holds its locks for milliseconds.
ALTER TABLE projects ADD COLUMN retention_days integer NOT NULL DEFAULT 30
    CONSTRAINT projects_retention_days_check CHECK (retention_days BETWEEN 1 AND 3650);
-- Runs are deleted from here on (migration 0007 could say nothing deleted
-- them): their attempts and transition events, which have no foreign key,
-- go in the statement that deletes the runs.
