-- queue_history: per-bucket counts from which the store rebuilds one queue's depth and
-- dead count at each point (see QueueHistoryParams for the definition). ?1 queue,
-- ?2 the first point (ms), ?3 the step (ms), ?4 the last point, now (ms).
--
-- A job is in the depth over [start, stop): start = max(created_at, run_at); stop is
-- NULL (never) for a ready job, else the first of attempted_at and finished_at. The
-- bucket of a time x is the first point at or after it: max(0, ceil((x - ?2) / ?3)).
-- Then depth(point i) = starts in buckets <= i - stops in buckets <= i, and
-- dead(point i) = deaths in buckets <= i. Spans that ended by the first point, or are
-- empty, add nothing at any point and are left out.
WITH spans AS (
    SELECT MAX(created_at, run_at) AS start,
           CASE WHEN status = 'ready' THEN NULL
                ELSE COALESCE(MIN(attempted_at, finished_at), attempted_at, finished_at)
           END AS stop
    FROM jobs
    WHERE queue = ?1
),
live AS (
    SELECT start, stop FROM spans
    WHERE start <= ?4 AND (stop IS NULL OR (stop > start AND stop > ?2))
)
SELECT 'start' AS edge, MAX(0, (start - ?2 + ?3 - 1) / ?3) AS bucket, COUNT(*) AS n
FROM live
GROUP BY bucket
UNION ALL
SELECT 'stop' AS edge, (stop - ?2 + ?3 - 1) / ?3 AS bucket, COUNT(*) AS n
FROM live
WHERE stop <= ?4
GROUP BY bucket
UNION ALL
SELECT 'dead' AS edge, MAX(0, (finished_at - ?2 + ?3 - 1) / ?3) AS bucket, COUNT(*) AS n
FROM jobs
WHERE queue = ?1 AND status = 'dead' AND finished_at <= ?4
GROUP BY bucket
