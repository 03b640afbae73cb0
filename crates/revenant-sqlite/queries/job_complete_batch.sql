-- Fenced running -> completed for a batch whose leases were checked in this
-- transaction. ?1 JSON array of ids, ?2 now.
-- `+status` keeps SQLite off the index of the jobs in that state (jobs_lease,
-- jobs_ready; jobs_finished before migration 15), which it would otherwise walk whole,
-- probing the batch for each entry: the batch drives the plan, one primary-key lookup
-- per id (checked by a test of the query plans).
UPDATE jobs
SET status = 'completed', finished_at = ?2, lease_token = NULL, lease_expires_at = NULL
WHERE id IN (SELECT value FROM json_each(?1)) AND +status = 'running'
