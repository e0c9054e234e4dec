-- Workflows: versioned DAGs of steps. A workflow's row holds its settings
-- (changed in place); its steps live in workflow_versions, one immutable
-- document per version, so a run can keep the exact DAG it started on.

CREATE TABLE workflows (
    id                   text        PRIMARY KEY,
    project_id           text        NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    name                 text        NOT NULL,
    slug                 text        NOT NULL,
    description          text,
    enabled              boolean     NOT NULL DEFAULT true,
    tags                 jsonb       NOT NULL DEFAULT '{}'::jsonb,
    cron                 text,
    cron_timezone        text,
    -- NULL: no cap. The api checks the upper bounds; the database only
    -- refuses values no caller could mean.
    max_concurrent_runs  integer
        CONSTRAINT workflows_max_concurrent_runs_check CHECK (max_concurrent_runs >= 0),
    max_parallel_steps   integer
        CONSTRAINT workflows_max_parallel_steps_check CHECK (max_parallel_steps >= 0),
    skip_if_running      boolean     NOT NULL DEFAULT false,
    timeout_secs         integer
        CONSTRAINT workflows_timeout_secs_check CHECK (timeout_secs > 0),
    version_policy       text        NOT NULL DEFAULT 'pin'
        CONSTRAINT workflows_version_policy_check CHECK (version_policy IN ('pin', 'latest')),
    backwards_compatible boolean     NOT NULL DEFAULT true,
    -- The current version: only a change of the steps makes a new one,
    -- so the settings above are not part of a version.
    version              integer     NOT NULL DEFAULT 1
        CONSTRAINT workflows_version_check CHECK (version >= 1),
    version_id           text        NOT NULL,
    created_by           text,
    updated_by           text,
    created_at           timestamptz NOT NULL DEFAULT now(),
    updated_at           timestamptz NOT NULL DEFAULT now(),
    deleted_at           timestamptz
);
-- A deleted workflow frees its slug.
CREATE UNIQUE INDEX workflows_project_slug_key ON workflows (project_id, slug) WHERE deleted_at IS NULL;
CREATE INDEX workflows_project_id_idx ON workflows (project_id, id) WHERE deleted_at IS NULL;
CREATE TRIGGER workflows_updated_at BEFORE UPDATE ON workflows
    FOR EACH ROW EXECUTE FUNCTION sy_set_updated_at();

CREATE TABLE workflow_versions (
    id          text        PRIMARY KEY,
    workflow_id text        NOT NULL REFERENCES workflows (id) ON DELETE CASCADE,
    version     integer     NOT NULL,
    -- The whole DAG as one JSON array of steps (each with its own id):
    -- a version is read and written whole, never one step at a time.
    steps       jsonb       NOT NULL
        CONSTRAINT workflow_versions_steps_is_array CHECK (jsonb_typeof(steps) = 'array'),
    created_by  text,
    created_at  timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT workflow_versions_workflow_version_key UNIQUE (workflow_id, version)
);

-- One DAG governance policy per project; no row means no limits beyond
-- the service's own.
CREATE TABLE workflow_policies (
    project_id text        PRIMARY KEY REFERENCES projects (id) ON DELETE CASCADE,
    policy     jsonb       NOT NULL
        CONSTRAINT workflow_policies_policy_is_object CHECK (jsonb_typeof(policy) = 'object'),
    updated_by text,
    updated_at timestamptz NOT NULL DEFAULT now()
);
