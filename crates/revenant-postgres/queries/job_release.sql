-- job_release: the statement is the function `job_release_v1` (migration 0014 holds it,
-- says what each parameter is, and why a function). Returns one row of three arrays,
-- as job_complete.sql does: the ids and the lease tokens of the jobs that still held
-- their lease, and their queues (every released job is ready again).
SELECT array_agg(r.id) AS id, array_agg(r.lease_token) AS lease_token,
       array_agg(r.queue) AS wake
FROM {schema}.job_release_v1(
    $1::timestamptz, $2::int8[], $3::int8[]
) r
