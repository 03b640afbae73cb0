-- Retry policies stored in the database: the one copy every worker, the CLI and the
-- HTTP server read, so they agree on each queue's and kind's policy.

-- One row per scope: the default (name ''), a queue, or a kind. The policy is the JSON
-- of revenant_core::RetryPolicy; a row that no longer decodes is skipped (and logged)
-- by policy_list, never fatal.
CREATE TABLE policies (
    scope      TEXT    NOT NULL CHECK (scope IN ('default', 'queue', 'kind')),
    name       TEXT    NOT NULL CHECK ((scope = 'default') = (name = '')),
    policy     TEXT    NOT NULL,                 -- JSON RetryPolicy
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (scope, name)
) STRICT;
