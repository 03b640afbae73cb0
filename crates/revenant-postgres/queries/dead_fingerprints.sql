-- dead_fingerprints: dead jobs matching the filter ($1..$11) grouped by fingerprint,
-- largest group first, at most $12 groups. The example is each group's highest id.
SELECT g.fingerprint, g.count, g.first_seen, g.last_seen, g.kinds, g.queues, g.example_id,
       coalesce(e.errors -> -1 ->> 'message', '') AS example_message
FROM (
    SELECT coalesce(j.fingerprint, '') AS fingerprint,
           count(*) AS count,
           min(j.finished_at) AS first_seen,
           max(j.finished_at) AS last_seen,
           array_agg(DISTINCT j.kind ORDER BY j.kind) AS kinds,
           array_agg(DISTINCT j.queue ORDER BY j.queue) AS queues,
           max(j.id) AS example_id
    FROM {schema}.jobs j
    WHERE j.status = 'dead'
      AND {job_filter}
    GROUP BY coalesce(j.fingerprint, '')
) g
JOIN {schema}.jobs e ON e.id = g.example_id
ORDER BY g.count DESC, g.last_seen DESC, g.fingerprint
LIMIT $12
