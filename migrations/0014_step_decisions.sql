-- A person's decision on a waiting step (approve, reject, skip): what, who,
-- when and why, kept on the step run beside its outcome.
ALTER TABLE workflow_step_runs
    ADD COLUMN decision         text
        CONSTRAINT workflow_step_runs_decision_check CHECK (decision IN ('approved', 'rejected', 'skipped')),
    ADD COLUMN decided_by       text,
    ADD COLUMN decision_comment text,
    ADD COLUMN decided_at       timestamptz;
