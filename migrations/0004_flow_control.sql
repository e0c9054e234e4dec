-- Flow control and the run lifecycle: payload dedup, run dependencies, cron
-- ticks, run expiry.

-- sha256 of the run's payload as canonical jsonb text (keys sorted, one
-- spacing), set only for jobs with a dedup_window_secs: two triggers of the
-- same job with equal payloads have equal hashes however their JSON was
-- written. Triggers take an advisory lock on (job, hash) before looking for
-- a match, so concurrent equal triggers create one run.
ALTER TABLE job_runs ADD COLUMN payload_hash bytea;
CREATE INDEX job_runs_dedup_idx ON job_runs (job_id, payload_hash, created_at DESC)
    WHERE payload_hash IS NOT NULL;

-- The cron tick a run was made for. Unique per job, so any number of
-- schedulers racing on one tick insert one run.
ALTER TABLE job_runs ADD COLUMN cron_tick timestamptz;
CREATE UNIQUE INDEX job_runs_cron_tick_key ON job_runs (job_id, cron_tick)
    WHERE cron_tick IS NOT NULL;

-- A pending run that waits for the runs it depends on. It has no queue entry
-- until the scheduler's dependency resolver releases it (or fails it with
-- error_class dependency_failed).
ALTER TABLE job_runs ADD COLUMN awaiting_dependencies boolean NOT NULL DEFAULT false;
CREATE INDEX job_runs_awaiting_dependencies_idx ON job_runs (id)
    WHERE status = 'pending' AND awaiting_dependencies;

-- The expirer sweeps runs that have not started by expires_at.
CREATE INDEX job_runs_expiry_idx ON job_runs (expires_at)
    WHERE status IN ('pending', 'queued') AND started_at IS NULL AND expires_at IS NOT NULL;

-- depends_on of a run: every listed run (same project) must complete first.
-- A new run can only name runs that already exist, so there are no cycles.
CREATE TABLE job_run_dependencies (
    run_id            text NOT NULL REFERENCES job_runs (id) ON DELETE CASCADE,
    depends_on_run_id text NOT NULL REFERENCES job_runs (id) ON DELETE CASCADE,
    position          integer NOT NULL,
    PRIMARY KEY (run_id, depends_on_run_id)
);
CREATE INDEX job_run_dependencies_target_idx ON job_run_dependencies (depends_on_run_id);

-- Ticks before this moment never fire: set when the job is created, and
-- again whenever its schedule changes or it becomes active (enabled,
-- resumed, undeleted), so a job does not fire the ticks it was not meant to
-- run for. The cron loop fires at most the latest tick after
-- max(cron_since, last fired tick).
ALTER TABLE jobs ADD COLUMN cron_since timestamptz NOT NULL DEFAULT now();
CREATE INDEX jobs_cron_idx ON jobs (id)
    WHERE deleted_at IS NULL AND enabled AND NOT paused AND spec ? 'cron';

CREATE OR REPLACE FUNCTION sy_jobs_cron_since() RETURNS trigger AS $$
BEGIN
    IF (NEW.spec->>'cron') IS DISTINCT FROM (OLD.spec->>'cron')
       OR (NEW.spec->>'timezone') IS DISTINCT FROM (OLD.spec->>'timezone')
       OR (NEW.enabled AND NOT OLD.enabled)
       OR (OLD.paused AND NOT NEW.paused)
       OR (OLD.deleted_at IS NOT NULL AND NEW.deleted_at IS NULL) THEN
        NEW.cron_since := now();
    END IF;
    RETURN NEW;
END;
$$ LANGUAGE plpgsql;
CREATE TRIGGER jobs_cron_since BEFORE UPDATE ON jobs
    FOR EACH ROW EXECUTE FUNCTION sy_jobs_cron_since();
