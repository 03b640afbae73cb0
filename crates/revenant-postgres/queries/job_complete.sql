-- job_complete: running -> completed for every (id, lease token) in $2/$3 that still
-- holds its lease. Returns the ids that did. $1: now (NULL: the database clock).
-- The lease token alone fences: a row holds one only while running (the CHECK in
-- 0001_jobs.sql), so `j.status = 'running'` would add nothing but a plan. With it, the
-- partial index jobs_running_idx matched, and the generic plan (statistics taken when
-- few jobs ran, as after a bulk enqueue) walked every running job for each element of
-- the batch: a nested loop of running x batch. Without it, each element is one
-- primary-key probe (the test the_batch_writes_find_their_jobs_by_primary_key).
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
RETURNING j.id, i.lease_token, j.queue, j.group_key IS NOT NULL AS grouped
