-- Retry policies stored in the database: the one copy every worker process, the CLI
-- and the HTTP server read, so ten workers on five machines agree on each queue's and
-- kind's policy.

-- One row per scope: the default (name ''), a queue, or a kind. The policy is the JSON
-- of revenant_core::RetryPolicy; a row that no longer decodes is skipped (and logged)
-- by policy_list, never fatal.
CREATE TABLE {schema}.policies (
    scope      text        NOT NULL CHECK (scope IN ('default', 'queue', 'kind')),
    name       text        NOT NULL CHECK ((scope = 'default') = (name = '')),
    policy     jsonb       NOT NULL,
    updated_at timestamptz NOT NULL,
    PRIMARY KEY (scope, name)
);
