-- Running jobs whose lease expired (at or before ?1) with no attempt left, in queue ?2
-- (NULL: every queue).
SELECT id, queue, attempts, worker, lease_expires_at, errors FROM jobs
WHERE status = 'running' AND lease_expires_at <= ?1 AND attempts >= max_attempts
  AND (?2 IS NULL OR queue = ?2)
-- `+id`: by jobs_lease and a sort of the few it finds, not a walk of the whole table
-- in id order (migration 15).
ORDER BY +id
