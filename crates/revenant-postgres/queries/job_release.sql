-- job_release: the statement is the function `job_release_v1` (migration 0014 holds it,
-- says what each parameter is, and why a function). Returns (id, lease_token, queue)
-- for each job that still held its lease.
SELECT id, lease_token, queue
FROM {schema}.job_release_v1(
    $1::timestamptz, $2::int8[], $3::int8[]
)
