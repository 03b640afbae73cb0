-- Every known queue's numbers at ?1 (now). ?2 queue (NULL: all), ?3 worker alive
-- cutoff (last_seen_at at or after it counts), ?4 start of the interval of the
-- completion and failure counts (exclusive; the interval ends at ?1, inclusive).
SELECT
    q.name AS queue,
    q.paused AS paused,
    COALESCE(SUM(j.status = 'ready' AND j.run_at <= ?1), 0) AS ready,
    COALESCE(SUM(j.status = 'ready' AND j.run_at > ?1 AND j.attempts = 0), 0) AS scheduled,
    COALESCE(SUM(j.status = 'ready' AND j.run_at > ?1 AND j.attempts > 0), 0) AS retrying,
    COALESCE(SUM(j.status = 'running'), 0) AS running,
    COALESCE(SUM(j.status = 'completed'), 0) AS completed,
    COALESCE(SUM(j.status = 'dead'), 0) AS dead,
    COALESCE(SUM(j.status = 'dead' AND j.finished_at > ?1 - 3600000), 0) AS dead_last_hour,
    COALESCE(SUM(j.status = 'cancelled'), 0) AS cancelled,
    MIN(CASE WHEN j.status = 'ready' AND j.run_at <= ?1 THEN j.run_at END) AS oldest_due_run_at,
    MAX(CASE WHEN j.status = 'completed' THEN j.finished_at END) AS last_completed_at,
    COALESCE(SUM(j.status = 'completed' AND j.finished_at > ?4 AND j.finished_at <= ?1), 0)
        AS completed_last_interval,
    (SELECT COALESCE(SUM(f.failures), 0) FROM attempt_failures f
     WHERE f.queue = q.name AND f.at > ?4 AND f.at <= ?1) AS failed_last_interval,
    (SELECT COUNT(*) FROM workers w
     WHERE w.last_seen_at >= ?3
       AND EXISTS (SELECT 1 FROM json_each(w.queues) WHERE json_each.value = q.name)
    ) AS workers_alive
FROM queues q
LEFT JOIN jobs j ON j.queue = q.name
WHERE ?2 IS NULL OR q.name = ?2
GROUP BY q.name, q.paused
ORDER BY q.name
