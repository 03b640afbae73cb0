-- job_fail: the statement is the function `job_fail_v1` (migration 0014 holds it, says
-- what each parameter is, and why a function). Returns (id, lease_token, queue, wake)
-- for each job that still held its lease.
SELECT id, lease_token, queue, wake
FROM {schema}.job_fail_v1(
    $1::timestamptz, $2::int8[], $3::int8[], $4::text[], $5::text[], $6::text[],
    $7::int8[], $8::text[], $9::int4, $10::text[], $11::bool[]
)
