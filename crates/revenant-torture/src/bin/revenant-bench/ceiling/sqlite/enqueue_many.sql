-- A batch of jobs in one statement. ?1 queue, ?2 kind, ?3 JSON array of payloads,
-- ?4 max_attempts, ?5 now (ms).
INSERT INTO jobs (queue, kind, payload, status, priority, attempts, max_attempts, run_at,
                  created_at, errors, redrives)
SELECT ?1, ?2, p.value, 'ready', 0, 0, ?4, ?5, ?5, '[]', 0
FROM json_each(?3) AS p
