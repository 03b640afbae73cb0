-- dependency_acquire's writes, one statement for the batch (the jobs are locked and
-- their leases checked by this transaction). $1 ids; $2 run_at per job (NULL: it runs,
-- else back to ready at that time with the attempt given back, as with a snooze); $3
-- the reason it waits (NULL when it runs); $4 the dependency.
UPDATE {schema}.jobs j
SET status = CASE WHEN g.run_at IS NULL THEN j.status ELSE 'ready' END,
    run_at = coalesce(g.run_at, j.run_at),
    attempts = CASE WHEN g.run_at IS NULL THEN j.attempts ELSE greatest(j.attempts - 1, 0) END,
    lease_token = CASE WHEN g.run_at IS NULL THEN j.lease_token END,
    lease_expires_at = CASE WHEN g.run_at IS NULL THEN j.lease_expires_at END,
    dependency = $4,
    dependency_wait = g.reason
FROM unnest($1::int8[], $2::timestamptz[], $3::text[]) AS g(id, run_at, reason)
WHERE j.id = g.id AND j.status = 'running'
RETURNING j.queue, g.run_at IS NOT NULL AS deferred
