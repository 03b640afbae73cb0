-- job_claim_v2: the claim of job_claim_v1 (migration 0008), with the common case on a
-- statement of its own. Same parameters, same rows returned; `queries/job_claim.sql`
-- and `queries/job_claim_run.sql` call it from this release on, and v1 stays for the
-- workers of the previous release during a rolling deploy (migrations only add).
--
-- v1 is one statement that, besides taking due ready jobs, buries the queue's expired
-- leases with no attempt left and reclaims one with attempts left: three writes and
-- two logs of the failure table in common table expressions. Nearly every claim finds
-- no expired lease, and paid for them all the same:
-- - the plan: a connection's first claim builds the statement's generic plan: 6.8 to
--   8.9 ms for v1's first claim of one job on a new connection, 5.1 to 5.8 for v2's
--   (`psql`, `\timing`, 20,000 ready jobs, 3 runs each). A pool that grows during a
--   drain opens connections while the claim is its serial step: in a statement log of
--   W2's failing drain, v1's first claim of one job on a new connection took 31 ms;
-- - each run: executor start-up and shut-down of every node, the three writes' targets
--   opened with their indexes. `pgbench`, 3,000 claims of one job in a row, 3 runs
--   each: 0.167 to 0.211 ms of statement time for v1, 0.137 to 0.158 for v2. A claim
--   of 500 is the same either way (5.1 to 6.2 ms, 5 runs each): its rows cost it.
--
-- So the call first looks for an expired lease of the queue (one probe of the running
-- index, which holds the running jobs of every queue, a worker's slots each). Any
-- found: the whole claim, v1, which decides as before (including a paused queue's,
-- which it leaves alone). None: the statement below, which is v1 without the expired
-- leases: the same priorities walk, the same group rule, the same writes of the
-- claimed rows. A lease that expires between the probe and the statement is taken by
-- the next claim, as one that expires just after a v1 claim is. The statement repeats
-- v1's walk of the ready jobs word for word: a migration is applied as written, so
-- v1 cannot be changed to share it, and a function called from both would plan the
-- walk apart from the write that locks its rows.
--
-- `enable_seqscan = off`, besides v1's settings: a connection builds the generic plan
-- at its first claim and keeps it until the table's statistics change (an ANALYZE or
-- a VACUUM of it, by the server's autovacuum or the worker's maintenance). Built on a
-- new table, which the statistics say holds a page or two, that plan reads the table
-- from end to end to find the claimed jobs by id, as it then costs less than the
-- primary key; as the table grew, every claim read it all: at 1,000 jobs a second on
-- a new table (W3), a claim of one job read 658 pages twelve seconds in
-- (`auto_explain`), and claims took from 0.55 ms to 1.8 ms of statement time over the
-- twelve seconds. Every step of the claim has an index made for it, so the setting
-- only takes the table scan out of the planner's choices. It holds while the function
-- runs, v1 included when v2 calls it.
CREATE FUNCTION {schema}.job_claim_v2(
    now_at timestamptz,
    queue_name text,
    max_jobs bigint,
    worker_name text,
    lease_ms bigint,
    history_limit integer,
    lease_expired_fingerprint text,
    take_expired boolean
) RETURNS SETOF {schema}.jobs
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
SET jit = off
SET enable_seqscan = off
AS $claim$
DECLARE
    -- A variable, so that the probe's condition is an index condition (the clock read
    -- in the condition itself would be a filter on every running job).
    probed_at timestamptz := date_trunc('milliseconds', coalesce($1, clock_timestamp()));
BEGIN
    IF EXISTS (
        SELECT 1
        FROM {schema}.jobs j
        WHERE j.status = 'running'
          AND j.lease_expires_at <= probed_at
          AND j.queue = $2
    ) THEN
        RETURN QUERY SELECT * FROM {schema}.job_claim_v1($1, $2, $3, $4, $5, $6, $7, $8);
        RETURN;
    END IF;
    RETURN QUERY
    WITH RECURSIVE t AS (
        SELECT date_trunc('milliseconds', coalesce($1::timestamptz, clock_timestamp())) AS now
    ),
    open AS (
        SELECT NOT EXISTS (
            SELECT 1 FROM {schema}.queues q WHERE q.name = $2 AND q.paused
        ) AS open
    ),
    -- As in v1: the queue's priorities that have a ready job, one index probe each.
    priorities(priority, run_at, id) AS (
        (SELECT j.priority, j.run_at, j.id FROM {schema}.jobs j
         WHERE j.status = 'ready' AND j.queue = $2
         ORDER BY j.priority DESC, j.run_at, j.id
         LIMIT 1)
        UNION ALL
        SELECT n.priority, n.run_at, n.id
        FROM priorities p
        CROSS JOIN LATERAL (
            SELECT j.priority, j.run_at, j.id FROM {schema}.jobs j
            WHERE j.status = 'ready' AND j.queue = $2 AND j.priority < p.priority
            ORDER BY j.priority DESC, j.run_at, j.id
            LIMIT 1
        ) n
    ),
    -- As in v1: due ready jobs in claim order, the lower priorities not looked at once
    -- $3 are found.
    ready AS (
        SELECT r.id
        FROM priorities p
        CROSS JOIN LATERAL (
            SELECT j.id
            FROM {schema}.jobs j
            WHERE j.status = 'ready'
              AND j.queue = $2
              AND j.priority = p.priority
              AND (j.run_at, j.id) >= (p.run_at, p.id)
              AND j.run_at <= (SELECT now FROM t)
              AND (SELECT open FROM open)
              AND (j.group_key IS NULL OR NOT EXISTS (
                  SELECT 1 FROM {schema}.jobs g
                  WHERE g.group_key = j.group_key
                    AND g.id <> j.id
                    AND g.status IN ('ready', 'running')
                    AND ((g.status = 'ready' AND g.id < j.id)
                         OR (g.status = 'running'
                             AND NOT (g.lease_expires_at <= (SELECT now FROM t)
                                      AND g.attempts >= g.max_attempts)))))
            ORDER BY j.run_at, j.id
            LIMIT $3
            FOR UPDATE OF j SKIP LOCKED
        ) r
        LIMIT $3
    )
    UPDATE {schema}.jobs j
    SET status = 'running',
        attempts = j.attempts + 1,
        -- 1 ..= 2^53 - 1: exact in a JSON number in any language.
        lease_token = (floor(random() * 9007199254740991) + 1)::bigint,
        lease_expires_at = t.now + $5::float8 * interval '1 millisecond',
        attempted_at = t.now,
        worker = $4
    FROM t
    -- By primary key, as in v1.
    WHERE j.id = ANY (ARRAY(SELECT r.id FROM ready r))
    RETURNING j.*;
END
$claim$;
