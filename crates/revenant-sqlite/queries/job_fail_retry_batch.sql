-- Fenced running -> ready for a batch whose leases were checked in this transaction;
-- each attempt stays spent. ?1 JSON array of [id, run_at, entry] triples (entry: the
-- ErrorEntry as a JSON object), ?2 how many history entries a job keeps.
-- The history gets the entry at its end. Nearly every history has room; a full one is
-- rebuilt from its newest ?2 entries, in order (`key` is an entry's index). The
-- statement appends, so the batch carries each entry once as JSON, not each job's
-- whole history read out, parsed and sent back as a string; job_fail_keep_batch.sql
-- and job_fail_dead_batch.sql append the same way.
-- `+status` keeps SQLite off the index of the jobs in that state (jobs_lease,
-- jobs_ready; jobs_finished before migration 15), which it would otherwise walk whole,
-- probing the batch for each entry: the batch drives the plan, one primary-key lookup
-- per id (checked by a test of the query plans).
UPDATE jobs
SET status = 'ready', run_at = retry.run_at,
    errors = CASE
        WHEN json_array_length(jobs.errors) < ?2
            THEN json_insert(jobs.errors, '$[#]', json(retry.entry))
        ELSE (SELECT json_group_array(json(value) ORDER BY key)
              FROM json_each(json_insert(jobs.errors, '$[#]', json(retry.entry)))
              WHERE key > json_array_length(jobs.errors) - ?2)
    END,
    lease_token = NULL, lease_expires_at = NULL
FROM (SELECT value ->> 0 AS id, value ->> 1 AS run_at, value -> 2 AS entry
      FROM json_each(?1)) AS retry
WHERE jobs.id = retry.id AND +jobs.status = 'running'
