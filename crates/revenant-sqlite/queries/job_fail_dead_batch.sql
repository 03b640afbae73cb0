-- Fenced running -> dead for a batch whose leases were checked in this transaction.
-- ?1 JSON array of [id, reason, fingerprint, entry] arrays (entry: the failure's
-- ErrorEntry as a JSON object), ?2 how many history entries a job keeps, ?3 now.
-- The history and `+status` as in job_fail_retry_batch.sql. One statement for the
-- batch: a death was one statement per job, a round trip to SQLite's thread each, and
-- a storm of poison jobs spent the writer's time on them (by hand, 20,000 jobs failing
-- five times each: 3.08 to 3.11 s before, 2.24 to 2.33 s with this).
UPDATE jobs
SET status = 'dead', dead_reason = dead.reason, fingerprint = dead.fingerprint,
    finished_at = ?3,
    errors = CASE
        WHEN json_array_length(jobs.errors) < ?2
            THEN json_insert(jobs.errors, '$[#]', json(dead.entry))
        ELSE (SELECT json_group_array(json(value) ORDER BY key)
              FROM json_each(json_insert(jobs.errors, '$[#]', json(dead.entry)))
              WHERE key > json_array_length(jobs.errors) - ?2)
    END,
    lease_token = NULL, lease_expires_at = NULL
FROM (SELECT value ->> 0 AS id, value ->> 1 AS reason, value ->> 2 AS fingerprint,
             value -> 3 AS entry
      FROM json_each(?1)) AS dead
WHERE jobs.id = dead.id AND +jobs.status = 'running'
