-- job_fail of a batch that carries kept failures (KeptFailure): the function
-- `job_fail_v3` (migration 0016 holds it and says what each parameter is; migration
-- 0014, why a function). A batch without any calls `job_fail_v1` (job_fail.sql).
-- Returns one row of three arrays, as job_complete.sql does: the ids and the lease tokens of the jobs that
-- still held their lease, and the queues to wake (a retry due now, or a group's next
-- job).
SELECT array_agg(f.id) AS id, array_agg(f.lease_token) AS lease_token,
       array_agg(f.queue) FILTER (WHERE f.wake) AS wake
FROM {schema}.job_fail_v3(
    $1::timestamptz, $2::int8[], $3::int8[], $4::text[], $5::text[], $6::text[],
    $7::int8[], $8::text[], $9::int4, $10::text[], $11::bool[], $12::jsonb[], $13::int4[]
) f
