-- job_claim_v1: the claim, as a function, so that it is one round trip with its plan
-- settings scoped to it. `queries/job_claim.sql` calls it.
--
-- - One round trip: inline, the claim ran in its own transaction (`BEGIN` with the
--   settings below, the statement, `COMMIT`): three round trips for the serial step of
--   a drain (one claim in flight per fetcher). A function call is one statement, and
--   its own transaction when run outside one.
-- - `plan_cache_mode = force_generic_plan`: left to choose, PostgreSQL planned the
--   claim anew at every call (its generic cost, with the LIMIT unknown, never beat a
--   custom plan's), and planning took longer than running it: about 2 ms a claim. The
--   generic plan walks the same indexes (a plan test pins it). A setting on every
--   connection instead would put every statement on generic plans, wrong for the
--   filtered listings (`$2 IS NULL OR queue = $2` can use no index on a generic
--   plan); the function's `SET` holds only while it runs. PL/pgSQL keeps the plan of
--   its statement for the session, as a prepared statement.
-- - `jit = off`: the generic plan's estimates are the table's, not the due jobs'.
--   Beside 1,000,000 jobs scheduled for later they passed `jit_optimize_above_cost`,
--   and every claim compiled about a hundred functions with LLVM: a second a claim to
--   run a statement that takes 1 ms. A claim touches a few hundred rows by index;
--   compiling never pays.
--
-- Versioned by name: a change to the claim is a new function (`job_claim_v2`) in a new
-- migration, so a worker of the previous release keeps calling the function it knows
-- during a rolling deploy (migrations only add). It returns the jobs' rows (`SETOF
-- jobs`), and the caller selects the columns it reads by name: a column added to the
-- table later is returned too, and a reader of the previous release does not ask for it.
--
-- The parameters are positional, as the statement names them ($1 .. $8):
-- job_claim: lease up to $3 claimable jobs of queue $2 to worker $4 for $5 ms.
-- $1: now (NULL: the database clock). $6: how many history entries a job keeps. $7: the
-- lease_expired fingerprint. $8: take an expired lease (at most one) as well. Every expired lease (made dead or reclaimed) is logged in
-- attempt_failures.
--
-- Ready jobs and expired leases are picked separately, each with FOR UPDATE SKIP
-- LOCKED so concurrent claimers never wait on each other, then merged in claim order
-- (priority desc, run_at, id). An expired lease with no attempt left is made dead
-- (lease_expired) in the same statement instead of being claimed.
-- The clock is clock_timestamp(), read as the statement runs (after its snapshot), not
-- now(), the transaction's start: a job claimed because the job ahead of it in its
-- group had just ended is then never stamped `attempted_at` before that end.
--
-- Due ready jobs are found one priority at a time (`priorities`, then `ready`). The
-- claim index is (queue, priority DESC, run_at, id): with no bound on priority, a
-- `run_at <= now` condition only filters the entries it walks, and a claim asking for
-- more jobs than are due walked every job scheduled for later (73 ms a claim with a
-- million scheduled jobs and a hundred due). With the priority fixed, `run_at <= now`
-- bounds the walk, and the priorities themselves come one index probe each. Each
-- probe returns the first live entry of its priority, and the walk of that priority
-- starts there: the entries before it are row versions this statement cannot see
-- (jobs claimed since the last vacuum), thousands of them in a busy queue, and are
-- stepped over once, not twice.
CREATE FUNCTION {schema}.job_claim_v1(
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
AS $claim$
BEGIN
    RETURN QUERY
    WITH RECURSIVE t AS (
        SELECT date_trunc('milliseconds', coalesce($1::timestamptz, clock_timestamp())) AS now
    ),
    open AS (
        SELECT NOT EXISTS (
            SELECT 1 FROM {schema}.queues q WHERE q.name = $2 AND q.paused
        ) AS open
    ),
    exhausted AS (
        SELECT j.id
        FROM {schema}.jobs j
        WHERE j.status = 'running'
          AND j.lease_expires_at <= (SELECT now FROM t)
          AND j.queue = $2
          AND j.attempts >= j.max_attempts
          AND (SELECT open FROM open)
        FOR UPDATE OF j SKIP LOCKED
    ),
    buried AS (
        UPDATE {schema}.jobs j
        SET status = 'dead',
            dead_reason = 'lease_expired',
            fingerprint = $7::text,
            finished_at = t.now,
            lease_token = NULL,
            lease_expires_at = NULL,
            errors = {schema}.append_error(j.errors, jsonb_strip_nulls(jsonb_build_object(
                'attempt', j.attempts, 'at', t.now, 'class', 'lease_expired',
                'message', format('lease held by worker %s expired at %s and no attempt is left; the worker died or stalled',
                                 coalesce(j.worker, 'unknown'),
                                 to_char(j.lease_expires_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')),
                'worker', j.worker)), $6)
        FROM exhausted x, t
        WHERE j.id = x.id
        RETURNING j.id
    ),
    buried_logged AS (
        INSERT INTO {schema}.attempt_failures (queue, class, at)
        SELECT $2, 'lease_expired', t.now FROM buried b, t
    ),
    -- The queue's priorities that have a ready job (due or not), highest first, each with
    -- its first ready job in claim order: one index probe each (a loose index scan).
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
    -- Due ready jobs in claim order: the priorities are taken highest first, and the lower
    -- ones are not looked at once $3 jobs are found.
    ready AS (
        SELECT r.id, r.priority, r.run_at
        FROM priorities p
        CROSS JOIN LATERAL (
            SELECT j.id, j.priority, j.run_at
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
    ),
    expired AS (
        SELECT j.id, j.priority, j.run_at
        FROM {schema}.jobs j
        WHERE j.status = 'running'
          AND j.lease_expires_at <= (SELECT now FROM t)
          AND j.queue = $2
          AND j.attempts < j.max_attempts
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
        ORDER BY j.priority DESC, j.run_at, j.id
        -- At most one expired lease per claim: the jobs a crashed process held expire
        -- together, and reclaimed in one batch they would share a process again, so a job
        -- that crashes its worker would take the same neighbours down with it on every
        -- attempt. One per claim spreads them over claims and processes; none while the
        -- claiming process runs one it reclaimed ($8 false).
        LIMIT CASE WHEN $8::boolean THEN 1 ELSE 0 END
        FOR UPDATE OF j SKIP LOCKED
    ),
    -- Within a priority, an expired lease goes before ready jobs: its attempt had started
    -- and was lost, and behind a backlog of ready jobs due earlier it would wait as long as
    -- the backlog lasts (RELIABILITY.md: reclaimed within lease + sweep + 2 s; the long
    -- kill -9 chaos test found reclaims waiting 95 s).
    chosen AS (
        SELECT c.id
        FROM (SELECT *, false AS reclaim FROM ready
              UNION ALL SELECT *, true AS reclaim FROM expired) c
        ORDER BY c.priority DESC, c.reclaim DESC, c.run_at, c.id
        LIMIT $3
    ),
    reclaims_logged AS (
        INSERT INTO {schema}.attempt_failures (queue, class, at)
        SELECT $2, 'lease_expired', t.now FROM chosen c JOIN expired e ON e.id = c.id, t
    )
    UPDATE {schema}.jobs j
    SET status = 'running',
        attempts = j.attempts + 1,
        -- 1 ..= 2^53 - 1: exact in a JSON number in any language.
        lease_token = (floor(random() * 9007199254740991) + 1)::bigint,
        lease_expires_at = t.now + $5::float8 * interval '1 millisecond',
        attempted_at = t.now,
        worker = $4,
        errors = CASE
            WHEN j.status = 'running' THEN {schema}.append_error(j.errors, jsonb_strip_nulls(jsonb_build_object(
                'attempt', j.attempts, 'at', t.now, 'class', 'lease_expired',
                'message', format('lease held by worker %s expired at %s; the attempt was lost and the job was claimed again',
                                 coalesce(j.worker, 'unknown'),
                                 to_char(j.lease_expires_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')),
                'worker', j.worker)), $6)
            ELSE j.errors
        END
    FROM t
    -- By primary key, whatever the table's size: joined to `chosen` instead, the planner
    -- judged a sequential scan of the whole table and a hash of it cheaper than a
    -- hundred index probes on a table of 20,000 rows (3 to 8 ms a claim, against 0.3).
    WHERE j.id = ANY (ARRAY(SELECT c.id FROM chosen c))
    RETURNING j.*;
END
$claim$;
