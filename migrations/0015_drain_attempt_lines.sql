-- Log drains also ship one line per finished attempt (the worker's own
-- record of it), in the same order as the SDK's lines: by the writing
-- transaction (see migration 0013). Rows written before this have no txid
-- and are not shipped.
ALTER TABLE job_run_attempts ADD COLUMN txid xid8;
ALTER TABLE job_run_attempts ALTER COLUMN txid SET DEFAULT pg_current_xact_id();
CREATE INDEX job_run_attempts_txid_idx ON job_run_attempts (txid);
