-- The trace context a run descends from (W3C traceparent: the trigger
-- request's span, the caller's own traceparent, or its workflow step's
-- span). NULL: the run began its own trace, whose id is derived from the
-- run's id (shared/src/traces.rs). Adding a nullable column writes no row.
ALTER TABLE job_runs ADD COLUMN traceparent text;
ALTER TABLE workflow_runs ADD COLUMN traceparent text;
