-- Stores one scope's retry policy, replacing the one it had. $1 scope, $2 name ('' for
-- the default), $3 policy (JSON), $4 now (NULL: the database clock).
INSERT INTO {schema}.policies (scope, name, policy, updated_at)
VALUES ($1, $2, $3::text::jsonb, date_trunc('milliseconds', coalesce($4::timestamptz, now())))
ON CONFLICT (scope, name) DO UPDATE
SET policy = excluded.policy, updated_at = excluded.updated_at
