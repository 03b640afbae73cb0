-- queue_stats: every known queue's numbers (queue $2, NULL: all), by name. A worker
-- seen within the last $3 ms counts as alive. $1: now (NULL: the database clock).
-- Completions and failures are counted in (now - $4 ms, now].
--
-- The counts scan the queue's jobs (completed ones included); the runtime samples this
-- every few seconds, not per job. A failure-log row counts `failures` failed attempts
-- (a batch of job_fail writes one per queue and class).
WITH t AS (
    SELECT date_trunc('milliseconds', coalesce($1::timestamptz, now())) AS now
)
SELECT
    q.name AS queue,
    q.paused AS paused,
    count(*) FILTER (WHERE j.status = 'ready' AND j.run_at <= t.now) AS ready,
    count(*) FILTER (WHERE j.status = 'ready' AND j.run_at > t.now AND j.attempts = 0) AS scheduled,
    count(*) FILTER (WHERE j.status = 'ready' AND j.run_at > t.now AND j.attempts > 0) AS retrying,
    count(*) FILTER (WHERE j.status = 'running') AS running,
    count(*) FILTER (WHERE j.status = 'completed') AS completed,
    count(*) FILTER (WHERE j.status = 'dead') AS dead,
    count(*) FILTER (WHERE j.status = 'dead' AND j.finished_at > t.now - interval '1 hour') AS dead_last_hour,
    count(*) FILTER (WHERE j.status = 'cancelled') AS cancelled,
    coalesce(extract(epoch FROM t.now - min(j.run_at) FILTER (
        WHERE j.status = 'ready' AND j.run_at <= t.now))::float8, 0) AS oldest_due_age_secs,
    (SELECT count(*) FROM {schema}.workers w
     WHERE w.last_seen_at >= t.now - $3::float8 * interval '1 millisecond'
       AND q.name = ANY(w.queues)) AS workers_alive,
    max(j.finished_at) FILTER (WHERE j.status = 'completed') AS last_completed_at,
    count(*) FILTER (WHERE j.status = 'completed'
                       AND j.finished_at > t.now - $4::float8 * interval '1 millisecond'
                       AND j.finished_at <= t.now) AS completed_last_interval,
    (SELECT coalesce(sum(f.failures), 0) FROM {schema}.attempt_failures f
     WHERE f.queue = q.name
       AND f.at > t.now - $4::float8 * interval '1 millisecond'
       AND f.at <= t.now) AS failed_last_interval
FROM t
CROSS JOIN {schema}.queues q
LEFT JOIN {schema}.jobs j ON j.queue = q.name
WHERE $2::text IS NULL OR q.name = $2::text
GROUP BY q.name, q.paused, t.now
ORDER BY q.name
