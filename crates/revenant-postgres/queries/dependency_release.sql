-- Releases parked jobs when their breaker closes: $1 ids, $2 their new run_at, $3 what
-- they wait for now (rate_limit: a turn at run_at; NULL: nothing).
UPDATE {schema}.jobs j
SET run_at = r.run_at, dependency_wait = $3
FROM unnest($1::int8[], $2::timestamptz[]) AS r(id, run_at)
WHERE j.id = r.id AND j.status = 'ready' AND j.dependency_wait = 'breaker'
RETURNING j.queue
