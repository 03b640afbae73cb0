-- job_claim_run: the same claim as job_claim.sql (the function `job_claim_v2`, same
-- parameters), read back as only what a worker needs to run each job, and as one row
-- of arrays, one a column, decoded by `claimed_from_arrays` in row.rs: no history, no
-- enqueue bookkeeping, nothing only a finished or dead job carries, and no queue (a
-- claim takes jobs of the one queue it names). One row, not one a job: the driver's
-- work on a row (its buffer, its columns' offsets, handing it over) was a third of
-- what reading a claim of hundreds cost the worker. The aggregates of one query level
-- read the rows in one order, so the arrays' elements line up; with no job claimed
-- each array is NULL. The function still returns whole rows; what is saved is sending
-- them and decoding them in the worker.
--
-- The last array says whether the claim took the job off an expired lease: the claim
-- wrote a `lease_expired` entry for the attempt before this one (compared as JSON, so
-- a history edited by hand cannot fail the claim).
SELECT array_agg(j.id) AS id, array_agg(j.kind) AS kind, array_agg(j.payload) AS payload,
       array_agg(j.priority) AS priority, array_agg(j.attempts) AS attempts,
       array_agg(j.max_attempts) AS max_attempts, array_agg(j.run_at) AS run_at,
       array_agg(j.attempted_at) AS attempted_at, array_agg(j.lease_token) AS lease_token,
       array_agg(j.lease_expires_at) AS lease_expires_at,
       array_agg(j.correlation_id) AS correlation_id, array_agg(j.dependency) AS dependency,
       array_agg(j.traceparent) AS traceparent, array_agg(j.tracestate) AS tracestate,
       array_agg(coalesce(j.errors -> -1 -> 'class' = '"lease_expired"'::jsonb
                          AND j.errors -> -1 -> 'attempt' = to_jsonb(j.attempts - 1),
                          false)) AS reclaimed
FROM {schema}.job_claim_v2(
    $1::timestamptz, $2::text, $3::int8, $4::text, $5::int8, $6::int4, $7::text, $8::boolean
) j
