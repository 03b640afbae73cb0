-- job_claim: lease up to $3 claimable jobs of queue $2 to worker $4 for $5 ms, in one
-- statement: the claim is the function `job_claim_v2` (migrations 0008 and 0013 hold
-- it and say what each parameter is, and why a function). Returns the claimed jobs'
-- columns in the order the row decoder reads them (`{job_columns}`), whatever the
-- table's own order.
SELECT {job_columns}
FROM {schema}.job_claim_v2(
    $1::timestamptz, $2::text, $3::int8, $4::text, $5::int8, $6::int4, $7::text, $8::boolean
) j
