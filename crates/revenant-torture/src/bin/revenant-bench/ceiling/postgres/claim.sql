-- The textbook claim on revenant's table and claim index: up to $3 due ready jobs of
-- queue $1, in claim order, skipping rows other claimers hold, leased to worker $2 for
-- 60 s, the attempt counted. One statement, one transaction.
-- The chosen rows are written by primary key (`= ANY (ARRAY(...))`, as revenant's
-- job_claim.sql does): as `id IN (subquery)` the planner chose a sequential scan of the
-- whole table and a hash for a claim of 500 on 20,000 rows (7.8 ms a claim, the scan
-- 2.9 ms of it), so the batched ceiling measured a plan, not the limit.
UPDATE revenant.jobs j
SET status = 'running',
    attempts = j.attempts + 1,
    lease_token = (floor(random() * 9007199254740991) + 1)::bigint,
    lease_expires_at = date_trunc('milliseconds', now()) + interval '60 seconds',
    attempted_at = date_trunc('milliseconds', now()),
    worker = $2
WHERE j.id = ANY (ARRAY(
    SELECT c.id
    FROM revenant.jobs c
    WHERE c.status = 'ready' AND c.queue = $1 AND c.run_at <= now()
    ORDER BY c.priority DESC, c.run_at, c.id
    LIMIT $3
    FOR UPDATE SKIP LOCKED
))
RETURNING j.id, j.lease_token
