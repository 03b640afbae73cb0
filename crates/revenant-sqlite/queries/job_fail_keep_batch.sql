-- Fenced running -> running for a batch of kept retries (FailAction::Keep) whose
-- leases were checked in this transaction: the failure recorded, the next attempt
-- counted and due at its attempted_at, the lease left as it is. ?1 JSON array of
-- [id, attempted_at, entry] triples (entry: the ErrorEntry as a JSON object), ?2 how
-- many history entries a job keeps.
-- The history and `+status` as in job_fail_retry_batch.sql: the entry appended, the
-- batch driving the plan with one primary-key lookup per id.
UPDATE jobs
SET attempts = attempts + 1, attempted_at = kept.attempted_at,
    errors = CASE
        WHEN json_array_length(jobs.errors) < ?2
            THEN json_insert(jobs.errors, '$[#]', json(kept.entry))
        ELSE (SELECT json_group_array(json(value) ORDER BY key)
              FROM json_each(json_insert(jobs.errors, '$[#]', json(kept.entry)))
              WHERE key > json_array_length(jobs.errors) - ?2)
    END
FROM (SELECT value ->> 0 AS id, value ->> 1 AS attempted_at, value -> 2 AS entry
      FROM json_each(?1)) AS kept
WHERE jobs.id = kept.id AND +jobs.status = 'running'
