-- Fenced: ?1 id, ?2 lease token, ?3 new lease_expires_at.
UPDATE jobs SET lease_expires_at = ?3
WHERE id = ?1 AND lease_token = ?2 AND status = 'running'
