-- Log drains: a project's run log lines shipped to an HTTP receiver as
-- newline-delimited JSON by the scheduler's drain loop (README.md, "Log
-- drains"). The log table itself is the buffer: lines wait there and each
-- drain keeps a cursor of the last line it shipped.
--
-- Ordering by id alone cannot be a cursor: ids are made before the insert
-- commits, so a line with a smaller id can become visible after a larger
-- one was shipped, and would be skipped. Each line therefore records the
-- transaction that wrote it (`txid`), and a drain only reads lines whose
-- transaction is older than every transaction still running (the snapshot's
-- xmin): no line can appear behind such a position later. The cursor is
-- (txid, id). Lines written before this migration have no txid and are
-- never drained (a drain does not replay history anyway).
--
-- The default is set apart from ADD COLUMN so existing rows are not
-- rewritten (a volatile default would fill every old row).

ALTER TABLE job_run_logs ADD COLUMN txid xid8;
ALTER TABLE job_run_logs ALTER COLUMN txid SET DEFAULT pg_current_xact_id();
CREATE INDEX job_run_logs_txid_idx ON job_run_logs (txid, id);

CREATE TABLE log_drains (
    id               text        PRIMARY KEY,
    project_id       text        NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    name             text        NOT NULL,
    url              text        NOT NULL,
    -- HMAC key of X-Svc-Signature; write-only through the API.
    secret           text,
    -- Jobs whose lines are shipped; empty: every job of the project.
    job_ids          text[]      NOT NULL DEFAULT '{}',
    -- Lines below this level are not shipped.
    min_level        text        NOT NULL DEFAULT 'debug'
        CONSTRAINT log_drains_min_level_check CHECK (min_level IN ('debug', 'info', 'warn', 'error')),
    enabled          boolean     NOT NULL DEFAULT true,
    -- The last line shipped (or skipped): its transaction and id. A new
    -- drain starts at the end of the log (see above).
    cursor_txid      bigint      NOT NULL,
    cursor_line_id   text        NOT NULL DEFAULT '',
    -- Lines skipped because the backlog exceeded the loop's max_backlog.
    lines_dropped    bigint      NOT NULL DEFAULT 0,
    last_error       text,
    last_success_at  timestamptz,
    -- Consecutive failed sends; the back-off grows with it.
    failures         integer     NOT NULL DEFAULT 0,
    next_attempt_at  timestamptz NOT NULL DEFAULT now(),
    -- A scheduler working on the drain holds it until then (the fence of
    -- its writes).
    claimed_until    timestamptz,
    created_by       text,
    updated_by       text,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX log_drains_project_idx ON log_drains (project_id, id DESC);
-- The loop's claim: enabled drains by when they are due.
CREATE INDEX log_drains_due_idx ON log_drains (next_attempt_at) WHERE enabled;
