-- job_claim_run: the same claim as job_claim.sql (the function `job_claim_v2`, same
-- parameters), read back as only what a worker needs to run each job
-- (`{claimed_columns}`, decoded by `claimed_from_row` in row.rs): no history, no
-- enqueue bookkeeping, nothing only a finished or dead job carries. The function still
-- returns whole rows; what is saved is sending them and decoding them in the worker.
SELECT {claimed_columns}
FROM {schema}.job_claim_v2(
    $1::timestamptz, $2::text, $3::int8, $4::text, $5::int8, $6::int4, $7::text, $8::boolean
) j
