-- The batch writes of a worker's results, as functions: job_complete_v1, job_fail_v1
-- and job_release_v1. `queries/job_complete.sql`, `queries/job_fail.sql` and
-- `queries/job_release.sql` call them; the statements, and why each is written as it
-- is, are here.
--
-- Functions for their `SET` clauses, as the claim (migrations 8 and 13):
-- `plan_cache_mode = force_generic_plan`, `jit = off` and `enable_seqscan = off`. A
-- connection keeps a statement's generic plan until the table's statistics change (an
-- ANALYZE or a VACUUM of it). Made while the table was new (a page or two), the plan of
-- these statements found the batch's jobs by reading the whole table and hashing it,
-- as that then cost less than a probe of the primary key per job, and it kept doing so
-- as the table grew: in W3 on a new table (1,000 jobs a second for twelve seconds),
-- a completion read 383 pages at five seconds and 651 at ten (`auto_explain`), and its
-- statement time went from 0.39 ms to 1.3 ms. Every job of a batch is one probe of the
-- primary key; the setting takes the table scan out of the planner's choices, and
-- holds only while the function runs. (As a setting of every connection it would
-- reach the listings too, whose filters may want the table scan.)
--
-- Each batch is fenced by its (id, lease token) pairs, and the lease token alone
-- fences: a row holds one only while running (the CHECK in 0001_jobs.sql), so
-- `j.status = 'running'` would add nothing but a plan. With it, the partial index
-- jobs_running_idx matched, and the generic plan (statistics taken when few jobs ran,
-- as after a bulk enqueue) walked every running job for each element of the batch: a
-- nested loop of running x batch. Without it, each element is one primary-key probe
-- (the test the_batch_writes_find_their_jobs_by_primary_key).
--
-- `#variable_conflict use_column`: the functions' result columns (id, lease_token,
-- queue) are also PL/pgSQL variables, and the statements mean the table's columns.
--
-- Versioned by name as the claim is: a changed statement is a new function
-- (`job_complete_v2`) in a new migration, and a worker of the previous release keeps
-- calling the one it knows.

-- job_complete: running -> completed for every (id, lease token) in $2/$3 that still
-- holds its lease. Returns the ids that did. $1: now (NULL: the database clock).
CREATE FUNCTION {schema}.job_complete_v1(now_at timestamptz, ids int8[], tokens int8[])
RETURNS TABLE (id bigint, lease_token bigint, queue text, grouped boolean)
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
SET jit = off
SET enable_seqscan = off
AS $write$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH t AS (
        SELECT date_trunc('milliseconds', coalesce($1::timestamptz, now())) AS now
    )
    UPDATE {schema}.jobs j
    SET status = 'completed',
        finished_at = t.now,
        lease_token = NULL,
        lease_expires_at = NULL
    FROM unnest($2::int8[], $3::int8[]) AS i(id, lease_token), t
    WHERE j.id = i.id AND j.lease_token = i.lease_token
    RETURNING j.id, i.lease_token, j.queue, j.group_key IS NOT NULL AS grouped;
END
$write$;

-- job_fail: record one failed attempt per element of $2..$8 and move each job that
-- still holds its lease to ready at now + delay (retry) or to dead with the
-- fingerprint $10 (NULL for a retry), or, where $11 is true, keep it running under its
-- lease for its next attempt, counted now and due at now + delay (FailAction::Keep; a
-- job with no attempts left is retried instead). Returns the ids that held their
-- lease, and logs them in attempt_failures (queue_stats' failure count): one row per
-- queue and class with how many failed (migration 12 says why). $1: now (NULL: the
-- database clock). $9: how many history entries a job keeps.
-- A kept job's update leaves every indexed column as it was (status, run_at, the
-- lease's expiry, the fingerprint), so PostgreSQL writes it as a heap-only update
-- beside the old version, with no index entries. (The SET expressions read the row as
-- it was; RETURNING reads it as written, so there a kept job is one still running.)
CREATE FUNCTION {schema}.job_fail_v1(
    now_at timestamptz,
    ids int8[],
    tokens int8[],
    classes text[],
    messages text[],
    workers text[],
    delays_ms int8[],
    dead_reasons text[],
    history_limit integer,
    fingerprints text[],
    keeps boolean[]
)
RETURNS TABLE (id bigint, lease_token bigint, queue text, wake boolean)
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
SET jit = off
SET enable_seqscan = off
AS $write$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH t AS (
        SELECT date_trunc('milliseconds', coalesce($1::timestamptz, now())) AS now
    ),
    failed AS (
        UPDATE {schema}.jobs j
        -- kept: i.keep AND j.attempts < j.max_attempts (written out where it is used).
        SET status = CASE WHEN i.keep AND j.attempts < j.max_attempts THEN 'running'
                          WHEN i.dead_reason IS NULL THEN 'ready'
                          ELSE 'dead' END,
            run_at = CASE WHEN i.keep AND j.attempts < j.max_attempts THEN j.run_at
                          WHEN i.dead_reason IS NULL
                          THEN t.now + i.delay_ms::float8 * interval '1 millisecond'
                          ELSE j.run_at END,
            dead_reason = i.dead_reason,
            fingerprint = CASE WHEN i.keep AND j.attempts < j.max_attempts THEN j.fingerprint
                               ELSE i.fingerprint END,
            finished_at = CASE WHEN i.dead_reason IS NULL THEN NULL ELSE t.now END,
            lease_token = CASE WHEN i.keep AND j.attempts < j.max_attempts
                               THEN j.lease_token END,
            lease_expires_at = CASE WHEN i.keep AND j.attempts < j.max_attempts
                                    THEN j.lease_expires_at END,
            attempts = CASE WHEN i.keep AND j.attempts < j.max_attempts
                            THEN j.attempts + 1 ELSE j.attempts END,
            attempted_at = CASE WHEN i.keep AND j.attempts < j.max_attempts
                                THEN t.now + i.delay_ms::float8 * interval '1 millisecond'
                                ELSE j.attempted_at END,
            errors = {schema}.append_error(j.errors, jsonb_strip_nulls(jsonb_build_object(
                'attempt', j.attempts, 'at', t.now, 'class', i.class,
                'message', i.message, 'worker', coalesce(i.worker, j.worker))), $9)
        FROM unnest($2::int8[], $3::int8[], $4::text[], $5::text[], $6::text[], $7::int8[],
                    $8::text[], $10::text[], $11::bool[])
             AS i(id, lease_token, class, message, worker, delay_ms, dead_reason, fingerprint,
                  keep),
             t
        WHERE j.id = i.id AND j.lease_token = i.lease_token
        RETURNING j.id, i.lease_token, j.queue,
                  j.status <> 'running' AND ((j.run_at <= t.now AND j.status = 'ready')
                                             OR j.group_key IS NOT NULL) AS wake,
                  i.class, t.now AS at
    ),
    logged AS (
        INSERT INTO {schema}.attempt_failures (queue, class, at, failures)
        SELECT f.queue, f.class, f.at, count(*) FROM failed f GROUP BY f.queue, f.class, f.at
    )
    SELECT f.id, f.lease_token, f.queue, f.wake FROM failed f;
END
$write$;

-- job_release: running -> ready at now, giving the attempt back (graceful shutdown),
-- for every (id, lease token) in $2/$3 that still holds its lease. Returns those ids.
-- $1: now (NULL: the database clock).
CREATE FUNCTION {schema}.job_release_v1(now_at timestamptz, ids int8[], tokens int8[])
RETURNS TABLE (id bigint, lease_token bigint, queue text)
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
SET jit = off
SET enable_seqscan = off
AS $write$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH t AS (
        SELECT date_trunc('milliseconds', coalesce($1::timestamptz, now())) AS now
    )
    UPDATE {schema}.jobs j
    SET status = 'ready',
        run_at = t.now,
        attempts = greatest(j.attempts - 1, 0),
        lease_token = NULL,
        lease_expires_at = NULL
    FROM unnest($2::int8[], $3::int8[]) AS i(id, lease_token), t
    WHERE j.id = i.id AND j.lease_token = i.lease_token
    RETURNING j.id, i.lease_token, j.queue;
END
$write$;
