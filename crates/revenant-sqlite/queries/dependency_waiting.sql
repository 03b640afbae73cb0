-- Jobs ready and waiting on a dependency (every one, or the one ?1 names), by reason.
SELECT dependency, dependency_wait, count(*) AS n FROM jobs
WHERE status = 'ready' AND dependency_wait IS NOT NULL AND (?1 IS NULL OR dependency = ?1)
GROUP BY dependency, dependency_wait
