-- The textbook claim on revenant's table and claim index: up to $3 due ready jobs of
-- queue $1, in claim order, skipping rows other claimers hold, leased to worker $2 for
-- 60 s, the attempt counted. One statement, one transaction.
UPDATE revenant.jobs j
SET status = 'running',
    attempts = j.attempts + 1,
    lease_token = (floor(random() * 9007199254740991) + 1)::bigint,
    lease_expires_at = date_trunc('milliseconds', now()) + interval '60 seconds',
    attempted_at = date_trunc('milliseconds', now()),
    worker = $2
WHERE j.id IN (
    SELECT c.id
    FROM revenant.jobs c
    WHERE c.status = 'ready' AND c.queue = $1 AND c.run_at <= now()
    ORDER BY c.priority DESC, c.run_at, c.id
    LIMIT $3
    FOR UPDATE SKIP LOCKED
)
RETURNING j.id, j.lease_token
