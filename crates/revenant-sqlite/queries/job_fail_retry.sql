-- Fenced running -> ready at ?3; the attempt stays spent. ?1 id, ?2 token, ?4 history.
UPDATE jobs
SET status = 'ready', run_at = ?3, errors = ?4, lease_token = NULL, lease_expires_at = NULL
WHERE id = ?1 AND lease_token = ?2 AND status = 'running'
