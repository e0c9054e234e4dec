-- Cancel on event for workflows (`store::cancel_on`): a workflow's rules,
-- as a job's are in its spec. Found by the event's key through an index
-- holding only the workflows that have rules, so an event pays nothing for
-- the others.
ALTER TABLE workflows ADD COLUMN cancel_on jsonb NOT NULL DEFAULT '[]'::jsonb;

CREATE INDEX workflows_cancel_on_idx ON workflows USING gin (cancel_on jsonb_path_ops)
    WHERE deleted_at IS NULL AND cancel_on <> '[]'::jsonb;
