-- Releases parked jobs when their breaker closes. ?1 JSON array of [id, run_at]; ?2
-- what they wait for now (rate_limit: a turn at run_at; NULL: nothing).
UPDATE jobs SET run_at = rel.run_at, dependency_wait = ?2
FROM (SELECT value ->> 0 AS id, value ->> 1 AS run_at FROM json_each(?1)) AS rel
WHERE jobs.id = rel.id AND +jobs.status = 'ready'
RETURNING jobs.queue
