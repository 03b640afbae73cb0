-- Stores one scope's retry policy, replacing the one it had. ?1 scope, ?2 name ('' for
-- the default), ?3 policy (JSON), ?4 now.
INSERT INTO policies (scope, name, policy, updated_at) VALUES (?1, ?2, ?3, ?4)
ON CONFLICT (scope, name) DO UPDATE
SET policy = excluded.policy, updated_at = excluded.updated_at
