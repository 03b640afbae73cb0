-- Dead jobs matching the filter (?1..?11), grouped by fingerprint, largest group first.
-- ?12 limit. The example is each group's highest id; its last error is read from it.
SELECT g.fingerprint, g.count, g.first_seen, g.last_seen, g.kinds, g.queues, g.example_id,
       COALESCE(json_extract(e.errors, '$[#-1].message'), '') AS example_message
FROM (
    SELECT COALESCE(fingerprint, '') AS fingerprint,
           COUNT(*) AS count,
           MIN(finished_at) AS first_seen,
           MAX(finished_at) AS last_seen,
           json_group_array(DISTINCT kind) AS kinds,
           json_group_array(DISTINCT queue) AS queues,
           MAX(id) AS example_id
    FROM jobs
    WHERE status = 'dead' AND
