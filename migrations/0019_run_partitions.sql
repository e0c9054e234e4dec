-- Runs, their attempts and their transition events are partitioned by
-- week of creation (a range of run id: ids begin with their creation
-- time, see shared/src/ids.rs), so that a system that has kept months of
-- history writes and reads its new runs as a new system does.
--
-- Why: every status change of a run is a new row version, entered in
-- every index of job_runs. With ten million old runs in one table each of
-- those entries descended trees one or two levels deeper, and the
-- benchmark's trigger→terminal p99 at 500 runs/s rose by a third (README,
-- "Retention"). A week's partition holds only that week's runs.
--
-- Retention (store::retention) still deletes in batches, per project
-- (projects keep their own retention_days), and then detaches and drops a
-- week's partitions once every project's runs in them are gone
-- (`sy_drop_empty_run_partitions`). The scheduler's pruner makes the
-- coming weeks' partitions ahead (`sy_ensure_run_partitions`); a DEFAULT
-- partition takes any run no week's partition covers (a scheduler down
-- for weeks, a run id from the distant past), and making a week's
-- partition later moves such rows into it.
--
-- A unique index of a partitioned table must contain the partition key,
-- so the idempotency key and the cron tick, unique per job across all
-- runs, are claimed in job_run_keys, in the statement that inserts the
-- run (store::runs::insert_in).

-- What refers to the tables by identity goes first; it is made again below.
ALTER TABLE job_run_dependencies DROP CONSTRAINT job_run_dependencies_run_id_fkey,
                                 DROP CONSTRAINT job_run_dependencies_depends_on_run_id_fkey;
ALTER TABLE job_run_logs DROP CONSTRAINT job_run_logs_run_id_fkey;
ALTER TABLE job_run_checkpoints DROP CONSTRAINT job_run_checkpoints_run_id_fkey;
ALTER TABLE job_run_outputs DROP CONSTRAINT job_run_outputs_run_id_fkey;
ALTER TABLE job_run_state DROP CONSTRAINT job_run_state_run_id_fkey;
ALTER TABLE job_run_usage DROP CONSTRAINT job_run_usage_run_id_fkey;
ALTER TABLE job_run_tool_calls DROP CONSTRAINT job_run_tool_calls_run_id_fkey;
DROP VIEW job_run_transitions;
DROP TRIGGER job_runs_step_ended ON job_runs;

-- The tables as they were become the partition of everything before the
-- first week (or go, when empty); their index names are freed.
DO $$
DECLARE
    t text;
    i text;
BEGIN
    FOREACH t IN ARRAY ARRAY['job_runs', 'job_run_attempts', 'job_run_events'] LOOP
        EXECUTE format('ALTER TABLE %I RENAME TO %I', t, t || '_before');
        FOR i IN SELECT indexname FROM pg_indexes WHERE schemaname = current_schema() AND tablename = t || '_before'
        LOOP
            EXECUTE format('ALTER INDEX %I RENAME TO %I', i, i || '_before');
        END LOOP;
    END LOOP;
END $$;

CREATE TABLE job_runs (LIKE job_runs_before INCLUDING DEFAULTS INCLUDING CONSTRAINTS) PARTITION BY RANGE (id);
ALTER TABLE job_runs ADD CONSTRAINT job_runs_pkey PRIMARY KEY (id);
CREATE INDEX job_runs_project_idx ON job_runs (project_id, id DESC);
CREATE INDEX job_runs_job_idx ON job_runs (job_id, id DESC);
CREATE INDEX job_runs_project_status_idx ON job_runs (project_id, status, id DESC);
CREATE INDEX job_runs_active_idx ON job_runs (id) WHERE status IN ('pending', 'queued', 'running', 'retrying');
CREATE INDEX job_runs_async_running_idx ON job_runs (heartbeat_at)
    WHERE status = 'running' AND async_accepted_at IS NOT NULL;
CREATE INDEX job_runs_awaiting_dependencies_idx ON job_runs (id) WHERE status = 'pending' AND awaiting_dependencies;
CREATE INDEX job_runs_batch_idx ON job_runs (batch_id) WHERE batch_id IS NOT NULL;
CREATE INDEX job_runs_continuation_idx ON job_runs (continuation_of) WHERE continuation_of IS NOT NULL;
CREATE INDEX job_runs_dedup_idx ON job_runs (job_id, payload_hash, created_at DESC) WHERE payload_hash IS NOT NULL;
CREATE INDEX job_runs_expiry_idx ON job_runs (expires_at)
    WHERE status IN ('pending', 'queued') AND started_at IS NULL AND expires_at IS NOT NULL;
CREATE INDEX job_runs_finished_idx ON job_runs (finished_at) WHERE finished_at IS NOT NULL;
CREATE INDEX job_runs_parent_idx ON job_runs (parent_run_id) WHERE parent_run_id IS NOT NULL;
CREATE INDEX job_runs_workflow_step_idx ON job_runs (workflow_step_run_id) WHERE workflow_step_run_id IS NOT NULL;
CREATE TRIGGER job_runs_step_ended AFTER UPDATE OF status ON job_runs
    FOR EACH ROW
    WHEN (NEW.workflow_step_run_id IS NOT NULL AND NEW.status IS DISTINCT FROM OLD.status
          AND NEW.status IN ('completed', 'failed', 'timed_out', 'cancelled', 'expired'))
    EXECUTE FUNCTION sy_step_job_run_ended();

CREATE TABLE job_run_attempts (LIKE job_run_attempts_before INCLUDING DEFAULTS INCLUDING CONSTRAINTS)
    PARTITION BY RANGE (run_id);
ALTER TABLE job_run_attempts ADD CONSTRAINT job_run_attempts_pkey PRIMARY KEY (run_id, attempt, started_at);
CREATE INDEX job_run_attempts_txid_idx ON job_run_attempts (txid);

CREATE TABLE job_run_events (LIKE job_run_events_before INCLUDING DEFAULTS INCLUDING CONSTRAINTS)
    PARTITION BY RANGE (run_id);
ALTER TABLE job_run_events ADD CONSTRAINT job_run_events_pkey PRIMARY KEY (run_id, id);
ALTER SEQUENCE job_run_events_id_seq OWNED BY job_run_events.id;

-- The claimed idempotency keys and cron ticks (see the top). A run's row
-- here goes with the run (store::retention).
CREATE TABLE job_run_keys (
    run_id          text        PRIMARY KEY,
    job_id          text        NOT NULL,
    idempotency_key text,
    cron_tick       timestamptz,
    CONSTRAINT job_run_keys_some_key CHECK (idempotency_key IS NOT NULL OR cron_tick IS NOT NULL)
);
CREATE UNIQUE INDEX job_run_keys_idempotency_key ON job_run_keys (job_id, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
CREATE UNIQUE INDEX job_run_keys_cron_tick ON job_run_keys (job_id, cron_tick) WHERE cron_tick IS NOT NULL;
INSERT INTO job_run_keys (run_id, job_id, idempotency_key, cron_tick)
SELECT id, job_id, idempotency_key, cron_tick FROM job_runs_before
 WHERE idempotency_key IS NOT NULL OR cron_tick IS NOT NULL;

-- The first run id of the week that holds `t` (weeks start on Monday, UTC).
CREATE FUNCTION sy_run_week_bound(t timestamptz) RETURNS text LANGUAGE sql IMMUTABLE AS $$
    SELECT 'run_' || lpad(to_hex((extract(epoch FROM date_trunc('week', t AT TIME ZONE 'UTC')) * 1000)::bigint), 12, '0')
$$;

-- Makes the three tables' partitions for every week from the one holding
-- `from_t` through the one holding `to_t`, each table's partition named
-- <table>_w<Monday as YYYYMMDD>, moving into it what the DEFAULT partition
-- holds of that week. A week already covered by another partition (the
-- rows from before partitioning) is left as it is. Returns how many
-- partitions it made. One caller at a time (an advisory lock): several
-- schedulers may call it.
CREATE FUNCTION sy_ensure_run_partitions(from_t timestamptz, to_t timestamptz) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    w timestamp;
    t text;
    k text;
    part text;
    lo text;
    hi text;
    n integer := 0;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('sy_ensure_run_partitions'));
    FOR w IN SELECT generate_series(date_trunc('week', from_t AT TIME ZONE 'UTC'),
                                    date_trunc('week', to_t AT TIME ZONE 'UTC'), interval '1 week')
    LOOP
        lo := sy_run_week_bound(w AT TIME ZONE 'UTC');
        hi := sy_run_week_bound((w + interval '1 week') AT TIME ZONE 'UTC');
        FOREACH t IN ARRAY ARRAY['job_runs', 'job_run_attempts', 'job_run_events'] LOOP
            part := t || '_w' || to_char(w, 'YYYYMMDD');
            CONTINUE WHEN to_regclass(part) IS NOT NULL;
            k := CASE t WHEN 'job_runs' THEN 'id' ELSE 'run_id' END;
            BEGIN
                EXECUTE format('CREATE TABLE %I (LIKE %I INCLUDING DEFAULTS INCLUDING CONSTRAINTS)', part, t);
                EXECUTE format('WITH m AS (DELETE FROM %I WHERE %I >= %L AND %I < %L RETURNING *) INSERT INTO %I SELECT * FROM m',
                               t || '_default', k, lo, k, hi, part);
                EXECUTE format('ALTER TABLE %I ATTACH PARTITION %I FOR VALUES FROM (%L) TO (%L)', t, part, lo, hi);
                n := n + 1;
            EXCEPTION WHEN invalid_object_definition THEN
                -- "would overlap partition": the week is already covered.
                NULL;
            END;
        END LOOP;
    END LOOP;
    RETURN n;
END $$;

-- Detaches and drops each week's partitions of the three tables that end
-- before `before_t` once all three are empty (retention deleted their
-- runs); the partition of the rows from before partitioning goes the same
-- way. Returns how many weeks it dropped.
CREATE FUNCTION sy_drop_empty_run_partitions(before_t timestamptz) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    p record;
    t text;
    n integer := 0;
    empty boolean;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('sy_ensure_run_partitions'));
    FOR p IN
        SELECT c.relname::text AS name, substring(c.relname::text FROM length('job_runs') + 1) AS suffix
          FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
         WHERE i.inhparent = 'job_runs'::regclass
           AND substring(pg_get_expr(c.relpartbound, c.oid) FROM 'TO \(''([^'']*)''\)') <= sy_run_week_bound(before_t)
    LOOP
        empty := true;
        FOREACH t IN ARRAY ARRAY['job_runs', 'job_run_attempts', 'job_run_events'] LOOP
            CONTINUE WHEN to_regclass(t || p.suffix) IS NULL;
            EXECUTE format('SELECT NOT EXISTS (SELECT 1 FROM %I)', t || p.suffix) INTO empty;
            EXIT WHEN NOT empty;
        END LOOP;
        CONTINUE WHEN NOT empty;
        FOREACH t IN ARRAY ARRAY['job_runs', 'job_run_attempts', 'job_run_events'] LOOP
            CONTINUE WHEN to_regclass(t || p.suffix) IS NULL;
            EXECUTE format('ALTER TABLE %I DETACH PARTITION %I', t, t || p.suffix);
            EXECUTE format('DROP TABLE %I', t || p.suffix);
        END LOOP;
        n := n + 1;
    END LOOP;
    RETURN n;
END $$;

-- The rows from before: kept as one partition up to the start of next
-- week, or dropped when there are none.
DO $$
DECLARE
    t text;
    hi text := sy_run_week_bound(now() + interval '1 week');
    keep boolean := EXISTS (SELECT 1 FROM job_runs_before);
BEGIN
    FOREACH t IN ARRAY ARRAY['job_runs', 'job_run_attempts', 'job_run_events'] LOOP
        IF keep THEN
            EXECUTE format('ALTER TABLE %I ATTACH PARTITION %I FOR VALUES FROM (MINVALUE) TO (%L)', t, t || '_before', hi);
        ELSE
            EXECUTE format('DROP TABLE %I', t || '_before');
        END IF;
    END LOOP;
END $$;
CREATE TABLE job_runs_default PARTITION OF job_runs DEFAULT;
CREATE TABLE job_run_attempts_default PARTITION OF job_run_attempts DEFAULT;
CREATE TABLE job_run_events_default PARTITION OF job_run_events DEFAULT;
SELECT sy_ensure_run_partitions(now(), now() + interval '2 weeks');

ALTER TABLE job_run_dependencies
    ADD CONSTRAINT job_run_dependencies_run_id_fkey FOREIGN KEY (run_id) REFERENCES job_runs (id) ON DELETE CASCADE,
    ADD CONSTRAINT job_run_dependencies_depends_on_run_id_fkey
        FOREIGN KEY (depends_on_run_id) REFERENCES job_runs (id) ON DELETE CASCADE;
ALTER TABLE job_run_logs ADD CONSTRAINT job_run_logs_run_id_fkey
    FOREIGN KEY (run_id) REFERENCES job_runs (id) ON DELETE CASCADE;
ALTER TABLE job_run_checkpoints ADD CONSTRAINT job_run_checkpoints_run_id_fkey
    FOREIGN KEY (run_id) REFERENCES job_runs (id) ON DELETE CASCADE;
ALTER TABLE job_run_outputs ADD CONSTRAINT job_run_outputs_run_id_fkey
    FOREIGN KEY (run_id) REFERENCES job_runs (id) ON DELETE CASCADE;
ALTER TABLE job_run_state ADD CONSTRAINT job_run_state_run_id_fkey
    FOREIGN KEY (run_id) REFERENCES job_runs (id) ON DELETE CASCADE;
ALTER TABLE job_run_usage ADD CONSTRAINT job_run_usage_run_id_fkey
    FOREIGN KEY (run_id) REFERENCES job_runs (id) ON DELETE CASCADE;
ALTER TABLE job_run_tool_calls ADD CONSTRAINT job_run_tool_calls_run_id_fkey
    FOREIGN KEY (run_id) REFERENCES job_runs (id) ON DELETE CASCADE;

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
