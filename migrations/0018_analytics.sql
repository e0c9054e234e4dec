-- Reporting (issue 16): the analytics, usage and queue-history reads.
--
-- Each report must answer within 200 ms for a project with a million runs
-- in its period (measured by the benchmark's phase (y)). Read from the runs
-- themselves, a 30-day report scans and sorts a million rows (percentiles
-- need every duration): about a second. So the scheduler's rollup loop
-- (store::analytics::roll_up) folds what ended, once a minute, into the
-- hourly rollups below, and a report reads the rollup's hours plus the
-- few runs that ended since the rollup's watermark.
--
-- The rollups keep every duration (one int4 per run that ran) rather than a
-- histogram, so the percentiles are exact (nearest rank) whichever way a
-- report is cut: a 30-day report reads ~15,000 rollup rows and 4 MB of
-- durations instead of a million runs. Counts are of endings: a run that
-- is restarted and ends again counts again, at its new end.

-- The rollup loop and the reports' tails find what ended after the
-- watermark by time. Partial: rows that have not ended have no entry, so
-- the hot path's inserts and non-terminal updates do not write it; a run
-- adds one entry when it ends.
CREATE INDEX job_runs_finished_idx ON job_runs (finished_at) WHERE finished_at IS NOT NULL;
CREATE INDEX workflow_runs_finished_idx ON workflow_runs (finished_at) WHERE finished_at IS NOT NULL;
-- Usage records are written over the SDK (not the trigger path); the
-- rollup reads them by creation time.
CREATE INDEX job_run_usage_created_idx ON job_run_usage (created_at);

-- How far the rollups go: everything that ended (or, for usage, was
-- recorded) before `upto` is in them, nothing after. One row; NULL until
-- the first pass, which starts at the oldest thing it finds.
CREATE TABLE analytics_watermark (
    id   boolean     PRIMARY KEY DEFAULT true CONSTRAINT analytics_watermark_one_row CHECK (id),
    upto timestamptz
);
INSERT INTO analytics_watermark (id, upto) VALUES (true, NULL);

-- Job runs that ended in an hour, per job version: counts by terminal
-- status, and the duration in ms (finished_at - started_at, the last
-- attempt) of each that ran. Kept a little longer than the longest period.
CREATE TABLE job_run_rollups (
    project_id     text        NOT NULL,
    hour           timestamptz NOT NULL,
    job_id         text        NOT NULL,
    job_version    integer     NOT NULL,
    job_version_id text        NOT NULL,
    completed      integer     NOT NULL DEFAULT 0,
    failed         integer     NOT NULL DEFAULT 0,
    timed_out      integer     NOT NULL DEFAULT 0,
    cancelled      integer     NOT NULL DEFAULT 0,
    expired        integer     NOT NULL DEFAULT 0,
    durations_ms   integer[]   NOT NULL DEFAULT '{}',
    PRIMARY KEY (project_id, hour, job_id, job_version)
);

-- Workflow runs that ended in an hour, per workflow, likewise.
CREATE TABLE workflow_run_rollups (
    project_id   text        NOT NULL,
    hour         timestamptz NOT NULL,
    workflow_id  text        NOT NULL,
    completed    integer     NOT NULL DEFAULT 0,
    failed       integer     NOT NULL DEFAULT 0,
    cancelled    integer     NOT NULL DEFAULT 0,
    timed_out    integer     NOT NULL DEFAULT 0,
    durations_ms integer[]   NOT NULL DEFAULT '{}',
    PRIMARY KEY (project_id, hour, workflow_id)
);

-- Usage records (SDK) of an hour, summed per job. Kept 13 months: a
-- month's bill outlives the runs' retention (usage rows go with their run).
CREATE TABLE usage_rollups (
    project_id    text        NOT NULL,
    hour          timestamptz NOT NULL,
    job_id        text        NOT NULL,
    records       bigint      NOT NULL DEFAULT 0,
    cost_microusd bigint      NOT NULL DEFAULT 0,
    tokens_in     bigint      NOT NULL DEFAULT 0,
    tokens_out    bigint      NOT NULL DEFAULT 0,
    cpu_ms        bigint      NOT NULL DEFAULT 0,
    PRIMARY KEY (project_id, hour, job_id)
);

-- Per job and minute: the unfinished runs by status as sampled by the
-- rollup pass in that minute, and the runs that ended in it (failed counts
-- failed and timed_out). The queue statistics' one-hour history; kept a
-- day. A job with neither in a minute has no row (zeros).
CREATE TABLE queue_history (
    project_id text        NOT NULL,
    minute     timestamptz NOT NULL,
    job_id     text        NOT NULL,
    pending    integer     NOT NULL DEFAULT 0,
    queued     integer     NOT NULL DEFAULT 0,
    running    integer     NOT NULL DEFAULT 0,
    retrying   integer     NOT NULL DEFAULT 0,
    finished   integer     NOT NULL DEFAULT 0,
    completed  integer     NOT NULL DEFAULT 0,
    failed     integer     NOT NULL DEFAULT 0,
    PRIMARY KEY (project_id, minute, job_id)
);
