-- Cancel on event (`store::cancel_on`): an event counts the runs its key
-- cancelled, and the jobs with `cancel_on` rules are found by the key
-- through an index that holds only them, so an event pays nothing for
-- the project's other jobs.
ALTER TABLE events ADD COLUMN cancelled_runs integer NOT NULL DEFAULT 0;

CREATE INDEX jobs_cancel_on_idx ON jobs USING gin ((spec -> 'cancel_on') jsonb_path_ops)
    WHERE deleted_at IS NULL AND spec ? 'cancel_on';
