-- Notification payloads are built in Rust now: typed in
-- shared/src/domain/notification.rs and written by shared/src/store/
-- deliveries.rs in the statement or transaction that makes the change, as
-- before (a delivery exists if and only if its change committed), so a
-- payload changes without a migration.
--
-- A run's end (migration 0011's sy_run_ended_deliveries): the worker's
-- outcome statement (store::runs::finish_many) writes the terminal webhook
-- and the subscription events of the runs it ends in CTEs of its own; the
-- other statements that end runs (cancels, expiry, dependency failures)
-- are followed by deliveries::runs_ended in their transaction.
--
-- A step's stage change (migration 0016's trigger): each statement that
-- changes a step's status returns the changed steps that have
-- stage_notifications, and deliveries::step_stages writes their
-- deliveries in the same transaction.
--
-- sy_time_id stays: the deliveries' ids are still made by it.

DROP TRIGGER workflow_step_runs_stage ON workflow_step_runs;
DROP FUNCTION sy_step_stage_deliveries();
DROP FUNCTION sy_run_ended_deliveries(text[], text[], text[], text[], integer[], jsonb[], text[], text[]);
