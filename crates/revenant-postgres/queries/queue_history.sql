-- queue_history: per-bucket counts from which the store rebuilds one queue's depth and
-- dead count at each point (see QueueHistoryParams for the definition). $1 queue,
-- $2 the first point, $3 the step, $4 the last point (now); times as milliseconds
-- since the epoch.
--
-- A job is in the depth over [start, stop): start = greatest(created_at, run_at); stop
-- is NULL (never) for a ready job, else the first of attempted_at and finished_at
-- (least() skips NULLs). The bucket of a time x is the first point at or after it:
-- greatest(0, ceil((x - $2) / $3)). Then depth(point i) = starts in buckets <= i -
-- stops in buckets <= i, and dead(point i) = deaths in buckets <= i. Spans that ended
-- by the first point, or are empty, add nothing at any point and are left out.
WITH spans AS (
    SELECT round(extract(epoch FROM greatest(j.created_at, j.run_at)) * 1000)::bigint AS start,
           CASE WHEN j.status = 'ready' THEN NULL
                ELSE round(extract(epoch FROM least(j.attempted_at, j.finished_at)) * 1000)::bigint
           END AS stop
    FROM {schema}.jobs j
    WHERE j.queue = $1
),
live AS (
    SELECT start, stop FROM spans
    WHERE start <= $4 AND (stop IS NULL OR (stop > start AND stop > $2))
)
SELECT 'start' AS edge, greatest(0, (start - $2 + $3 - 1) / $3) AS bucket, count(*) AS n
FROM live
GROUP BY 2
UNION ALL
SELECT 'stop', (stop - $2 + $3 - 1) / $3, count(*)
FROM live
WHERE stop <= $4
GROUP BY 2
UNION ALL
SELECT 'dead', greatest(0, (ms - $2 + $3 - 1) / $3), count(*)
FROM (
    SELECT round(extract(epoch FROM j.finished_at) * 1000)::bigint AS ms
    FROM {schema}.jobs j
    WHERE j.queue = $1 AND j.status = 'dead'
) deaths
WHERE ms <= $4
GROUP BY 2
