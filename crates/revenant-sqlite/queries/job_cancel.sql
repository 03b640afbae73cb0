-- ready or running -> cancelled. ?1 id, ?2 now, ?3 history, ?4 lease token (NULL for an
-- operator's cancel by id; given, the cancel is fenced on it).
UPDATE jobs
SET status = 'cancelled', finished_at = ?2, errors = ?3,
    lease_token = NULL, lease_expires_at = NULL
WHERE id = ?1
  AND CASE WHEN ?4 IS NULL THEN status IN ('ready', 'running')
           ELSE status = 'running' AND lease_token = ?4 END
