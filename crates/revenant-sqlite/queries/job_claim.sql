-- ready or expired running -> running: the attempt is counted here, at claim.
-- ?1 id, ?2 lease token, ?3 lease_expires_at, ?4 now, ?5 worker, ?6 history.
UPDATE jobs
SET status = 'running', attempts = attempts + 1, lease_token = ?2, lease_expires_at = ?3,
    attempted_at = ?4, worker = ?5, errors = ?6
WHERE id = ?1
RETURNING *
