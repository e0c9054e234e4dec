-- Steps that wait on the world, part two: cost gates, compensation (sagas),
-- stage notifications and events emitted by steps.

-- Compensation. When a step with on_failure `compensate` fails, the run
-- stays `running` and compensates: the completed steps that name a
-- compensation_job_id run it one at a time, in reverse completion order,
-- each as a job run tied to its step (its end writes the run's outbox row
-- through job_runs_step_ended, like a step's own job run). `compensation`
-- on the run is the saga's record: NULL until it starts, then
-- {status: running|completed|failed, failed_step, error, steps: [...]}.
ALTER TABLE workflow_step_runs ADD COLUMN compensation_job_run_id text;
ALTER TABLE workflow_runs
    ADD COLUMN compensation jsonb,
    -- Why a failed run failed, where a class says more than the message:
    -- `compensation_failed` when a compensation job failed for good.
    ADD COLUMN error_class  text;

-- A cost gate sums the SDK usage of every job run of its workflow run
-- (and of its child runs): the job runs of a step, found by the step.
CREATE INDEX job_runs_workflow_step_idx ON job_runs (workflow_step_run_id) WHERE workflow_step_run_id IS NOT NULL;

-- An event a step emitted when it completed (event_emit_key): set in the
-- transaction that dispatches it, so a step emits once per attempt.
ALTER TABLE workflow_step_runs ADD COLUMN emitted_event_id text;

-- Stage notifications. The step's stage_notifications setting is copied
-- onto its step run when the run is made, so the trigger below needs no
-- look-up of the version, and its WHEN clause keeps it off every step
-- that has none.
ALTER TABLE workflow_step_runs ADD COLUMN stage_notifications jsonb;

ALTER TABLE webhook_deliveries DROP CONSTRAINT webhook_deliveries_kind_check;
ALTER TABLE webhook_deliveries ADD CONSTRAINT webhook_deliveries_kind_check
    CHECK (kind IN ('job_run', 'subscription', 'event_trigger', 'step_stage'));
ALTER TABLE webhook_deliveries ADD COLUMN step_run_id text;

-- A step's stage change (started, waiting, completed, failed, and on
-- request skipped, cancelled, compensated) writes one delivery per URL and
-- one per named active subscription of the project, in the statement that
-- changes the step, whichever path changes it (the engine, a decision, an
-- event, a cancel).
CREATE FUNCTION sy_step_stage_deliveries() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    stage text := CASE NEW.status WHEN 'running' THEN 'started' WHEN 'timed_out' THEN 'failed' ELSE NEW.status END;
    cfg jsonb := NEW.stage_notifications;
    ts text := to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"');
    project text;
    workflow text;
    body jsonb;
BEGIN
    IF stage = 'pending'
       OR NOT (coalesce(cfg->'stages', '["started", "waiting", "completed", "failed"]'::jsonb) ? stage) THEN
        RETURN NULL;
    END IF;
    SELECT project_id, workflow_id INTO project, workflow FROM workflow_runs WHERE id = NEW.workflow_run_id;
    body := jsonb_build_object('event_type', 'workflow_step.' || stage, 'occurred_at', ts, 'project_id', project,
        'data', jsonb_build_object('workflow_run_id', NEW.workflow_run_id, 'workflow_id', workflow,
            'step_run_id', NEW.id, 'step_ref', NEW.step_ref, 'step_type', NEW.step_type, 'stage', stage,
            'status', NEW.status, 'attempt', NEW.attempt, 'output', NEW.output, 'error', NEW.error));
    INSERT INTO webhook_deliveries (id, project_id, kind, url, event_type, payload, max_attempts, workflow_run_id,
        step_run_id)
    SELECT sy_time_id('whd'), project, 'step_stage', u, 'workflow_step.' || stage, body, 5, NEW.workflow_run_id,
           NEW.id
      FROM jsonb_array_elements_text(coalesce(cfg->'urls', '[]'::jsonb)) u;
    INSERT INTO webhook_deliveries (id, project_id, kind, url, event_type, payload, max_attempts, subscription_id,
        workflow_run_id, step_run_id)
    SELECT sy_time_id('whd'), project, 'subscription', s.url, 'workflow_step.' || stage, body, 5, s.id,
           NEW.workflow_run_id, NEW.id
      FROM webhook_subscriptions s
     WHERE s.project_id = project AND s.active
       AND s.id IN (SELECT jsonb_array_elements_text(coalesce(cfg->'subscription_ids', '[]'::jsonb)));
    RETURN NULL;
END $$;
CREATE TRIGGER workflow_step_runs_stage AFTER UPDATE OF status ON workflow_step_runs
    FOR EACH ROW
    WHEN (NEW.stage_notifications IS NOT NULL AND NEW.status IS DISTINCT FROM OLD.status)
    EXECUTE FUNCTION sy_step_stage_deliveries();
