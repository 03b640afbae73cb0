-- For a breaker that wants a probe: makes the first parked job of dependency ?1 (claim
-- order) due at ?2, unless one of them is due already.
UPDATE jobs SET run_at = ?2
WHERE id = (SELECT id FROM jobs
            WHERE dependency = ?1 AND dependency_wait = 'breaker' AND status = 'ready'
            ORDER BY priority DESC, run_at, id LIMIT 1)
  AND NOT EXISTS (SELECT 1 FROM jobs
                  WHERE dependency = ?1 AND dependency_wait = 'breaker'
                    AND status = 'ready' AND run_at <= ?2)
RETURNING queue
