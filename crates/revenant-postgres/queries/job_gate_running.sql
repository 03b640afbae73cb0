-- dependency_acquire: the running jobs among ids $1, locked for the transaction, with
-- their lease tokens (the fence is checked in Rust against each request's token).
SELECT id, lease_token, attempts, dependency_wait
FROM {schema}.jobs
WHERE id = ANY($1::int8[]) AND status = 'running'
FOR UPDATE
