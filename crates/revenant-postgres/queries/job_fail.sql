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
-- The lease token alone fences: a row holds one only while running (the CHECK in
-- 0001_jobs.sql), so `j.status = 'running'` would add nothing but a plan. With it, the
-- partial index jobs_running_idx matched, and the generic plan (statistics taken when
-- few jobs ran, as after a bulk enqueue) walked every running job for each element of
-- the batch: a nested loop of running x batch. Without it, each element is one
-- primary-key probe (the test the_batch_writes_find_their_jobs_by_primary_key).
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
SELECT f.id, f.lease_token, f.queue, f.wake FROM failed f
