-- The jobs a claim just wrote (job_claim_ready.sql), ?1 its JSON array of [id, lease
-- token] pairs, as one value: a JSON array of objects keyed by column name (`JobColumns`
-- in row.rs). One hand-over from SQLite's thread for the batch instead of one per row.
-- Text columns stay text (payload and errors as JSON strings): a payload that is not
-- JSON is then a `Corrupt` error naming its job, not a failed statement.
SELECT json_group_array(json_object(
    'id', id, 'queue', queue, 'kind', kind, 'payload', payload, 'status', status,
    'priority', priority, 'attempts', attempts, 'max_attempts', max_attempts,
    'run_at', run_at, 'created_at', created_at, 'attempted_at', attempted_at,
    'finished_at', finished_at, 'lease_token', lease_token,
    'lease_expires_at', lease_expires_at, 'worker', worker, 'group_key', group_key,
    'unique_key', unique_key, 'correlation_id', correlation_id,
    'dead_reason', dead_reason, 'errors', errors, 'redrives', redrives,
    'fingerprint', fingerprint, 'dependency', dependency,
    'dependency_wait', dependency_wait, 'traceparent', traceparent,
    'tracestate', tracestate
))
FROM jobs
WHERE id IN (SELECT value ->> 0 FROM json_each(?1))
