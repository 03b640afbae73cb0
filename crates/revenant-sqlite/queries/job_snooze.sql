-- Fenced running -> ready at ?3 with the attempt given back (snooze and release).
-- ?1 id, ?2 lease token.
UPDATE jobs
SET status = 'ready', run_at = ?3, attempts = MAX(attempts - 1, 0),
    lease_token = NULL, lease_expires_at = NULL
WHERE id = ?1 AND lease_token = ?2 AND status = 'running'
RETURNING queue
