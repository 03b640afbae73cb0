-- job_complete: the statement is the function `job_complete_v1` (migration 0014 holds
-- it, says what each parameter is, and why a function). Returns (id, lease_token,
-- queue, grouped) for each job that still held its lease.
SELECT id, lease_token, queue, grouped
FROM {schema}.job_complete_v1(
    $1::timestamptz, $2::int8[], $3::int8[]
)
