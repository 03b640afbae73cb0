-- The jobs a claim just wrote (job_claim_ready.sql), ?1 its JSON array of [id, lease
-- token] pairs, as one value, as job_claimed.sql reads them, but only what a worker
-- needs to run each job (`ClaimedColumns` in row.rs): no history, no enqueue
-- bookkeeping, nothing only a finished or dead job carries. These are ready jobs, so
-- none was claimed off an expired lease; `reclaimed` says whether the job's last
-- attempt was lost to one (a `lease_expired` entry for the attempt before this one),
-- read only from a history that is JSON, so a history edited by hand cannot fail it.
SELECT json_group_array(json_object(
    'id', id, 'queue', queue, 'kind', kind, 'payload', payload,
    'priority', priority, 'attempts', attempts, 'max_attempts', max_attempts,
    'run_at', run_at, 'attempted_at', attempted_at, 'lease_token', lease_token,
    'lease_expires_at', lease_expires_at, 'correlation_id', correlation_id,
    'dependency', dependency, 'traceparent', traceparent, 'tracestate', tracestate,
    'reclaimed', CASE
        WHEN NOT json_valid(errors) THEN json('false')
        WHEN json_extract(errors, '$[#-1].class') = 'lease_expired'
            AND json_extract(errors, '$[#-1].attempt') = attempts - 1 THEN json('true')
        ELSE json('false')
    END
))
FROM jobs
WHERE id IN (SELECT value ->> 0 FROM json_each(?1))
