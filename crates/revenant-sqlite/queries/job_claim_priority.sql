-- The highest priority below ?2 that has a ready job (due or not) of queue ?1: where a
-- claim goes on when a priority had no due job (see job_claim_candidates.sql).
SELECT priority FROM jobs
WHERE queue = ?1 AND status = 'ready' AND priority < ?2
ORDER BY priority DESC
LIMIT 1
