-- Access control (SPEC §5): API keys, roles, members, resource and tag
-- policies, known actors and audit events.

-- An API key is stored only as the SHA-256 hash of the raw key; the raw
-- value is shown once, in the create (or rotate) response.
CREATE TABLE api_keys (
    id                 text        PRIMARY KEY,
    project_id         text        NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    name               text        NOT NULL,
    -- Lowercase hex SHA-256 of the whole raw key (`svc_...`).
    key_hash           text        NOT NULL,
    -- Empty: full access (SPEC §5.1, kept for backwards compatibility).
    scopes             text[]      NOT NULL DEFAULT '{}',
    created_by         text,
    created_at         timestamptz NOT NULL DEFAULT now(),
    -- Written at most once a minute per key and process, off the request path.
    last_used_at       timestamptz,
    expires_at         timestamptz,
    revoked_at         timestamptz,
    -- Set by rotation; the key stays valid until grace_expires_at.
    replaced_by_key_id text        REFERENCES api_keys (id) ON DELETE SET NULL,
    grace_expires_at   timestamptz,
    CONSTRAINT api_keys_key_hash_key UNIQUE (key_hash)
);
CREATE INDEX api_keys_project_idx ON api_keys (project_id, id DESC);

-- System roles have no project and fixed ids; custom roles belong to one
-- project and may inherit the permissions of one other role.
CREATE TABLE roles (
    id          text        PRIMARY KEY,
    project_id  text        REFERENCES projects (id) ON DELETE CASCADE,
    name        text        NOT NULL,
    description text,
    permissions text[]      NOT NULL DEFAULT '{}',
    inherits    text        REFERENCES roles (id) ON DELETE RESTRICT,
    system      boolean     NOT NULL DEFAULT false,
    created_by  text,
    updated_by  text,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT roles_system_has_no_project CHECK (system = (project_id IS NULL))
);
CREATE UNIQUE INDEX roles_project_name_key ON roles (project_id, lower(name)) WHERE project_id IS NOT NULL;
CREATE INDEX roles_inherits_idx ON roles (inherits) WHERE inherits IS NOT NULL;
CREATE TRIGGER roles_updated_at BEFORE UPDATE ON roles
    FOR EACH ROW EXECUTE FUNCTION sy_set_updated_at();

INSERT INTO roles (id, project_id, name, description, permissions, system) VALUES
    ('admin', NULL, 'admin', 'Full access.', '{*}', true),
    ('operator', NULL, 'operator', 'Runs the project day to day, including its members.',
        '{jobs:read,jobs:write,jobs:trigger,runs:read,runs:write,workflows:read,workflows:write,workflows:trigger,secrets:read,stats:read,rbac:manage}', true),
    ('viewer', NULL, 'viewer', 'Reads everything but secrets.',
        '{jobs:read,runs:read,workflows:read,stats:read}', true),
    ('triggerer', NULL, 'triggerer', 'Reads and triggers jobs and workflows.',
        '{jobs:read,jobs:trigger,runs:read,workflows:read,workflows:trigger}', true);

-- A member links an external user id (an OIDC subject) to one role in one
-- project. `id` only orders the listing.
CREATE TABLE members (
    id         text        PRIMARY KEY,
    project_id text        NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    user_id    text        NOT NULL,
    role_id    text        NOT NULL REFERENCES roles (id) ON DELETE RESTRICT,
    created_by text,
    updated_by text,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT members_project_user_key UNIQUE (project_id, user_id)
);
CREATE INDEX members_role_idx ON members (role_id);
CREATE TRIGGER members_updated_at BEFORE UPDATE ON members
    FOR EACH ROW EXECUTE FUNCTION sy_set_updated_at();

-- Narrows what a principal may do to chosen resources, after its scopes
-- allowed the operation: a matching deny refuses; when allow policies match
-- the principal and action, the resource must be selected by one of them.
CREATE TABLE resource_policies (
    id             text        PRIMARY KEY,
    project_id     text        NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    name           text        NOT NULL,
    description    text,
    effect         text        NOT NULL
        CONSTRAINT resource_policies_effect_check CHECK (effect IN ('allow', 'deny')),
    principal_type text        NOT NULL
        CONSTRAINT resource_policies_principal_type_check CHECK (principal_type IN ('role', 'member', 'api_key')),
    principal_id   text        NOT NULL,
    actions        text[]      NOT NULL,
    resource_type  text        NOT NULL
        CONSTRAINT resource_policies_resource_type_check CHECK (resource_type IN ('job', 'job_group', 'run')),
    -- Empty ids and empty selector: every resource of the type.
    resource_ids   text[]      NOT NULL DEFAULT '{}',
    tag_selector   jsonb       NOT NULL DEFAULT '{}',
    created_by     text,
    updated_by     text,
    created_at     timestamptz NOT NULL DEFAULT now(),
    updated_at     timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX resource_policies_project_idx ON resource_policies (project_id, id DESC);
CREATE TRIGGER resource_policies_updated_at BEFORE UPDATE ON resource_policies
    FOR EACH ROW EXECUTE FUNCTION sy_set_updated_at();

-- Rules on the tags of jobs (and later workflows) of a project.
CREATE TABLE tag_policies (
    id             text        PRIMARY KEY,
    project_id     text        NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    resource_type  text        NOT NULL
        CONSTRAINT tag_policies_resource_type_check CHECK (resource_type IN ('job', 'workflow')),
    description    text,
    required_keys  text[]      NOT NULL DEFAULT '{}',
    -- Tag key -> array of the values it may take.
    allowed_values jsonb       NOT NULL DEFAULT '{}',
    created_by     text,
    updated_by     text,
    created_at     timestamptz NOT NULL DEFAULT now(),
    updated_at     timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX tag_policies_project_idx ON tag_policies (project_id, resource_type, id DESC);
CREATE TRIGGER tag_policies_updated_at BEFORE UPDATE ON tag_policies
    FOR EACH ROW EXECUTE FUNCTION sy_set_updated_at();

-- Profiles of the people named by internal-secret headers and OIDC claims,
-- written off the request path.
CREATE TABLE known_actors (
    id           text        PRIMARY KEY,
    email        text,
    name         text,
    first_seen_at timestamptz NOT NULL DEFAULT now(),
    last_seen_at timestamptz NOT NULL DEFAULT now()
);

-- Who changed what. Run triggers are not here: they are recorded as run
-- events, and an audit row per trigger would double the hottest write.
CREATE TABLE audit_events (
    id            text        PRIMARY KEY,
    project_id    text        NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    actor_id      text,
    actor_type    text        NOT NULL,
    action        text        NOT NULL,
    resource_type text        NOT NULL,
    resource_id   text,
    request_id    text,
    details       jsonb       NOT NULL DEFAULT '{}',
    created_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX audit_events_project_idx ON audit_events (project_id, id);
CREATE INDEX audit_events_project_time_idx ON audit_events (project_id, created_at);
