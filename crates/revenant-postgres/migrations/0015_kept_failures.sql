-- The batch writes of a worker's results, carrying the failed attempts of kept jobs
-- that the worker did not write when they failed (KeptFailure in revenant-core):
-- job_complete_v2 and job_fail_v2. `queries/job_complete.sql` and `queries/job_fail.sql`
-- call them; v1 (migration 14) stays for workers of the previous release. Everything
-- migration 14 says of v1 (the SET clauses, the fence by lease token alone,
-- `#variable_conflict`) holds here.
--
-- A kept failure used to be a write of its job's row of its own (FailAction::Keep); a
-- job that failed once and passed on its kept retry was two updates of the row, and a
-- drain where three jobs in ten fail ran at 0.66 to 0.80 of a clean one. Carried to
-- the job's next write, it is one. A batch element's kept failures come beside it, in
-- one more array: a JSON array of {class, message, worker, ago_ms} objects (`ago_ms`:
-- how many milliseconds before now it failed; an entry's time is now less that), or
-- NULL for none. A job holding its lease gets them in its history before the batch's
-- own entry, numbered from its stored attempts up, and counts one attempt for each, as
-- if each had been written as FailAction::Keep in turn; they are logged in
-- attempt_failures with the rest. A job that lost its lease gets none of them.
--
-- Beside each element, not in arrays of their own joined to the batch by id: so
-- joined, the generic plan (estimates of ten rows a side) rebuilt the kept failures'
-- entries for every element of the batch, a nested loop, and a completion of 250 jobs
-- carrying 100 took 150 to 440 ms (W2 on PostgreSQL, by hand, at 1,900 jobs/s).

-- The newest `keep` entries of `history || entries`: append_error (migration 10) for
-- an array of entries, with its fast path for a history with room.
CREATE FUNCTION {schema}.append_errors(history jsonb, entries jsonb, keep integer)
RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
AS $append$
BEGIN
    IF jsonb_array_length(history) + jsonb_array_length(entries) <= keep THEN
        RETURN history || entries;
    END IF;
    RETURN (
        SELECT coalesce(jsonb_agg(e ORDER BY n), '[]'::jsonb)
        FROM (
            SELECT e, n
            FROM jsonb_array_elements(history || entries) WITH ORDINALITY AS x(e, n)
            ORDER BY n DESC
            LIMIT keep
        ) newest
    );
END
$append$;

-- The history entries of a batch element's kept failures (`kept`, above) for a job
-- whose stored attempts are `first`: numbered `first`, `first + 1`, ... in order, each
-- at `now_at` less its age. PL/pgSQL, with a path of its own for one kept failure
-- (most jobs that fail fail once): a query over the array's elements is a plan run
-- for every row (see append_error in migration 10), and built that way the entries
-- cost as much as the writes of their own they replace (W2 on PostgreSQL by hand,
-- 50,000 jobs: no faster than before). STABLE, not IMMUTABLE: a timestamptz's text
-- follows the session's time zone (as every entry's does).
CREATE FUNCTION {schema}.kept_errors(kept jsonb, first integer, now_at timestamptz)
RETURNS jsonb
LANGUAGE plpgsql STABLE PARALLEL SAFE
AS $kept$
BEGIN
    IF jsonb_array_length(kept) = 1 THEN
        RETURN jsonb_build_array((kept -> 0) - 'ago_ms' || jsonb_build_object(
            'attempt', first,
            'at', now_at - ((kept -> 0) ->> 'ago_ms')::float8 * interval '1 millisecond'));
    END IF;
    RETURN (
        SELECT coalesce(jsonb_agg(e - 'ago_ms' || jsonb_build_object(
                   'attempt', first + n::int - 1,
                   'at', now_at - (e ->> 'ago_ms')::float8 * interval '1 millisecond')
                   ORDER BY n),
               '[]'::jsonb)
        FROM jsonb_array_elements(kept) WITH ORDINALITY AS x(e, n)
    );
END
$kept$;

-- job_complete: as job_complete_v1, with each element's kept failures ($4, above);
-- $5: how many history entries a job keeps.
CREATE FUNCTION {schema}.job_complete_v2(
    now_at timestamptz,
    ids int8[],
    tokens int8[],
    kept jsonb[],
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
                          ELSE {schema}.append_errors(
                              j.errors, {schema}.kept_errors(i.kept, j.attempts, t.now), $5)
                     END
        FROM unnest($2::int8[], $3::int8[], $4::jsonb[]) AS i(id, lease_token, kept), t
        WHERE j.id = i.id AND j.lease_token = i.lease_token
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

-- job_fail: as job_fail_v1 ($1..$11, migration 14), with each element's kept failures
-- ($12, above). A job's own entry is numbered after its kept ones, and whether it may
-- be kept again counts them.
CREATE FUNCTION {schema}.job_fail_v2(
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
    kept jsonb[]
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
                     ELSE {schema}.append_errors(
                         j.errors, {schema}.kept_errors(i.kept, j.attempts, t.now), $9)
                END,
                jsonb_strip_nulls(jsonb_build_object(
                    'attempt', j.attempts + i.n, 'at', t.now, 'class', i.class,
                    'message', i.message, 'worker', coalesce(i.worker, j.worker))),
                $9)
        FROM (SELECT i.*, coalesce(jsonb_array_length(i.kept), 0) AS n
              FROM unnest($2::int8[], $3::int8[], $4::text[], $5::text[], $6::text[],
                          $7::int8[], $8::text[], $10::text[], $11::bool[], $12::jsonb[])
                   AS i(id, lease_token, class, message, worker, delay_ms, dead_reason,
                        fingerprint, keep, kept)) AS i,
             t
        WHERE j.id = i.id AND j.lease_token = i.lease_token
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
