-- Fenced running -> completed. ?1 id, ?2 lease token, ?3 now.
UPDATE jobs
SET status = 'completed', finished_at = ?3, lease_token = NULL, lease_expires_at = NULL
WHERE id = ?1 AND lease_token = ?2 AND status = 'running'
RETURNING queue, group_key
