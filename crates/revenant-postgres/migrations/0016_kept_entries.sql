-- The batch writes of a worker's results with kept failures as the worker built them:
-- job_complete_v3 and job_fail_v3. `queries/job_complete_kept.sql` and
-- `queries/job_fail_kept.sql` call them; v2 (migration 15) stays for workers of the
-- previous release, and v1 (migration 14) for batches without kept failures.
-- Everything migration 15 says of v2 holds here, but for what a kept failure is.
--
-- In v2 a batch element's kept failures came as {class, message, worker, ago_ms}
-- objects, and the statement built each one's history entry: numbered from the job's
-- stored attempts, at the clock less its age (kept_errors). That was most of what a
-- completion carrying them cost: in W2's failing drain of 5,000 jobs (30% of
-- attempts failing, by hand, statement log) the completions took 61 ms in all against
-- 37 ms in the clean drain's. Here they come as history entries, {attempt, at, class,
-- message, worker}, which the worker numbers and times (KeptFailure in revenant-core),
-- and the statement appends them as they are. By hand, 10 completions of 500 jobs
-- (5,000 in all, 1,950 of them carrying 2,400 kept failures), a few runs each: 43 to
-- 48 ms with v2, 36 to 43 ms with v3, and 28 to 41 ms for the same jobs carrying none
-- (v1). W2's failing drain of 50,000 jobs on PostgreSQL (5 pairs by hand, alternated):
-- 52,069 jobs/s with v2, 57,580 with v3 (medians).
--
-- So that a wrong number cannot slip into a history, each element carries the attempt
-- of its first kept failure beside it (`firsts`, NULL for an element without any), and
-- the element is applied only if the job's stored attempts are that number: as the
-- lease token fences a write to the attempt the store leased, this fences the kept
-- failures to the attempts it counted. An element that does not match is not applied,
-- and the worker reads it as a lost lease.

-- job_complete: as job_complete_v2, with each element's kept failures as history
-- entries ($4) and the attempt of its first one ($5); $6: how many history entries a
-- job keeps.
CREATE FUNCTION {schema}.job_complete_v3(
    now_at timestamptz,
    ids int8[],
    tokens int8[],
    kept jsonb[],
    firsts integer[],
    history_limit integer
)
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
    ),
    done AS (
        UPDATE {schema}.jobs j
        SET status = 'completed',
            finished_at = t.now,
            lease_token = NULL,
            lease_expires_at = NULL,
            attempts = j.attempts + coalesce(jsonb_array_length(i.kept), 0),
            errors = CASE WHEN i.kept IS NULL THEN j.errors
                          ELSE {schema}.append_errors(j.errors, i.kept, $6)
                     END
        FROM unnest($2::int8[], $3::int8[], $4::jsonb[], $5::int4[])
             AS i(id, lease_token, kept, first), t
        WHERE j.id = i.id AND j.lease_token = i.lease_token
          AND j.attempts = coalesce(i.first, j.attempts)
        RETURNING j.id, i.lease_token, j.queue, j.group_key IS NOT NULL AS grouped, i.kept,
                  t.now AS at
    ),
    logged AS (
        INSERT INTO {schema}.attempt_failures (queue, class, at, failures)
        SELECT d.queue, e ->> 'class', d.at, count(*)
        FROM done d, jsonb_array_elements(d.kept) AS e
        WHERE d.kept IS NOT NULL
        GROUP BY d.queue, e ->> 'class', d.at
    )
    SELECT d.id, d.lease_token, d.queue, d.grouped FROM done d;
END
$write$;

-- job_fail: as job_fail_v2, with each element's kept failures as history entries
-- ($12) and the attempt of its first one ($13).
CREATE FUNCTION {schema}.job_fail_v3(
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
    keeps boolean[],
    kept jsonb[],
    firsts integer[]
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
        -- kept: i.keep AND j.attempts + i.n < j.max_attempts (written out where it is
        -- used; i.n: how many kept failures the element carries).
        SET status = CASE WHEN i.keep AND j.attempts + i.n < j.max_attempts THEN 'running'
                          WHEN i.dead_reason IS NULL THEN 'ready'
                          ELSE 'dead' END,
            run_at = CASE WHEN i.keep AND j.attempts + i.n < j.max_attempts THEN j.run_at
                          WHEN i.dead_reason IS NULL
                          THEN t.now + i.delay_ms::float8 * interval '1 millisecond'
                          ELSE j.run_at END,
            dead_reason = i.dead_reason,
            fingerprint = CASE WHEN i.keep AND j.attempts + i.n < j.max_attempts
                               THEN j.fingerprint ELSE i.fingerprint END,
            finished_at = CASE WHEN i.dead_reason IS NULL THEN NULL ELSE t.now END,
            lease_token = CASE WHEN i.keep AND j.attempts + i.n < j.max_attempts
                               THEN j.lease_token END,
            lease_expires_at = CASE WHEN i.keep AND j.attempts + i.n < j.max_attempts
                                    THEN j.lease_expires_at END,
            attempts = CASE WHEN i.keep AND j.attempts + i.n < j.max_attempts
                            THEN j.attempts + i.n + 1 ELSE j.attempts + i.n END,
            attempted_at = CASE WHEN i.keep AND j.attempts + i.n < j.max_attempts
                                THEN t.now + i.delay_ms::float8 * interval '1 millisecond'
                                ELSE j.attempted_at END,
            errors = {schema}.append_error(
                CASE WHEN i.kept IS NULL THEN j.errors
                     ELSE {schema}.append_errors(j.errors, i.kept, $9)
                END,
                jsonb_strip_nulls(jsonb_build_object(
                    'attempt', j.attempts + i.n, 'at', t.now, 'class', i.class,
                    'message', i.message, 'worker', coalesce(i.worker, j.worker))),
                $9)
        FROM (SELECT i.*, coalesce(jsonb_array_length(i.kept), 0) AS n
              FROM unnest($2::int8[], $3::int8[], $4::text[], $5::text[], $6::text[],
                          $7::int8[], $8::text[], $10::text[], $11::bool[], $12::jsonb[],
                          $13::int4[])
                   AS i(id, lease_token, class, message, worker, delay_ms, dead_reason,
                        fingerprint, keep, kept, first)) AS i,
             t
        WHERE j.id = i.id AND j.lease_token = i.lease_token
          AND j.attempts = coalesce(i.first, j.attempts)
        RETURNING j.id, i.lease_token, j.queue,
                  j.status <> 'running' AND ((j.run_at <= t.now AND j.status = 'ready')
                                             OR j.group_key IS NOT NULL) AS wake,
                  i.class, i.kept, t.now AS at
    ),
    logged AS (
        INSERT INTO {schema}.attempt_failures (queue, class, at, failures)
        SELECT l.queue, l.class, l.at, count(*)
        FROM (SELECT f.queue, f.class, f.at FROM failed f
              UNION ALL
              SELECT f.queue, e ->> 'class', f.at
              FROM failed f, jsonb_array_elements(f.kept) AS e
              WHERE f.kept IS NOT NULL) AS l
        GROUP BY l.queue, l.class, l.at
    )
    SELECT f.id, f.lease_token, f.queue, f.wake FROM failed f;
END
$write$;
