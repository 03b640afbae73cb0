-- Fenced running -> completed for a batch of jobs that carry kept failures
-- (KeptFailure in revenant-core): the entries appended and the attempts counted, as
-- job_complete_batch.sql otherwise. ?1 JSON array of [id, entries, attempts] arrays
-- (as job_fail_retry_batch.sql), ?2 how many history entries a job keeps, ?3 now.
-- Three files, as job_fail_retry_batch.sql, and `+status` as there.
UPDATE jobs
SET status = 'completed', finished_at = ?3, lease_token = NULL, lease_expires_at = NULL,
    attempts = failed.attempts,
    errors =
