-- job_complete of a batch that carries kept failures (KeptFailure): the function
-- `job_complete_v3` (migration 0016 holds it and says what each parameter is;
-- migration 0014, why a function). A batch without any calls `job_complete_v1`
-- (job_complete.sql), whose statement has less to do. Returns one row of three arrays: the ids and the lease tokens of the jobs that still held their
-- lease, and the queues of those in a group (the next of a group may run now). One
-- row, not one a job: the driver's work on a row (its buffer, its columns' offsets) was about as
-- much as the rest of the call's for a batch of hundreds. With no job applied (or
-- none in a group) an array is NULL, which the store reads as empty.
SELECT array_agg(c.id) AS id, array_agg(c.lease_token) AS lease_token,
       array_agg(c.queue) FILTER (WHERE c.grouped) AS wake
FROM {schema}.job_complete_v3(
    $1::timestamptz, $2::int8[], $3::int8[], $4::jsonb[], $5::int4[], $6::int4
) c
