-- Up to ?3 due ready jobs of queue ?1 in claim order, leased to worker ?2 until ?5,
-- the attempt counted. ?4 now (ms). One statement, one transaction (SQLite has one
-- writer, so there is nothing to skip).
UPDATE jobs
SET status = 'running', attempts = attempts + 1, lease_token = abs(random()) + 1,
    lease_expires_at = ?5, attempted_at = ?4, worker = ?2
WHERE id IN (
    SELECT id FROM jobs
    WHERE queue = ?1 AND status = 'ready' AND run_at <= ?4
    ORDER BY priority DESC, run_at, id
    LIMIT ?3
)
RETURNING id, lease_token
