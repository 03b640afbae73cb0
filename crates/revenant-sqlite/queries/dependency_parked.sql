-- The jobs parked on dependency ?1 by its breaker, in claim order.
SELECT id FROM jobs
WHERE dependency = ?1 AND dependency_wait = 'breaker' AND status = 'ready'
ORDER BY priority DESC, run_at, id
