-- Running jobs whose lease expired (at or before ?1) with no attempt left, in queue ?2
-- (NULL: every queue).
SELECT id, queue, attempts, worker, lease_expires_at, errors FROM jobs
WHERE status = 'running' AND lease_expires_at <= ?1 AND attempts >= max_attempts
  AND (?2 IS NULL OR queue = ?2)
ORDER BY id
