-- Batching (`store::trigger_batches`): the triggers of a job with `batch`
-- wait in the open batch of their key, one row per trigger in arrival
-- order, until the batch is full or its time is up; then one run is made
-- of them and the batch names it. At most one batch per (job, key) is open
-- (the unique index), and a trigger joins it by an upsert that locks its
-- row, so no trigger is lost or taken into two batches. Postgres alone
-- holds them: losing Redis loses no batch.
CREATE TABLE trigger_batches (
    id          text        PRIMARY KEY,
    project_id  text        NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    job_id      text        NOT NULL,
    batch_key   text        NOT NULL,
    size        integer     NOT NULL,
    max_size    integer     NOT NULL,
    opened_at   timestamptz NOT NULL DEFAULT now(),
    closes_at   timestamptz NOT NULL,
    closed_at   timestamptz,
    -- The run made of the batch; NULL once closed only when its job was
    -- deleted meanwhile.
    run_id      text
);
CREATE UNIQUE INDEX trigger_batches_open_key ON trigger_batches (job_id, batch_key) WHERE closed_at IS NULL;
CREATE INDEX trigger_batches_due_idx ON trigger_batches (closes_at) WHERE closed_at IS NULL;
-- Retention deletes a project's closed batches from the old end of this.
CREATE INDEX trigger_batches_project_idx ON trigger_batches (project_id, id);

CREATE TABLE trigger_batch_items (
    batch_id    text        NOT NULL REFERENCES trigger_batches (id) ON DELETE CASCADE,
    position    integer     NOT NULL,
    trigger_id  text        NOT NULL UNIQUE,
    payload     jsonb,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (batch_id, position)
);
