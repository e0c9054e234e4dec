-- An approval step's approvers as they were when it started waiting. The
-- run's version can move while the step waits (version_policy latest), and
-- whoever may edit the workflow must not be able to make themselves an
-- approver of a decision already pending. NULL for steps that are not
-- approvals, and for those that started waiting before this column existed
-- (their version's approvers apply, as before).
ALTER TABLE workflow_step_runs ADD COLUMN approvers jsonb;
