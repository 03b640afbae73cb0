-- Running -> ready for jobs a dependency sends back to wait, the attempt given back (as
-- with a snooze). ?1 JSON array of [id, run_at, reason]; ?2 the dependency. Their
-- leases were checked in this transaction.
UPDATE jobs
SET status = 'ready', run_at = gate.run_at, attempts = MAX(attempts - 1, 0),
    lease_token = NULL, lease_expires_at = NULL, dependency = ?2,
    dependency_wait = gate.reason
FROM (SELECT value ->> 0 AS id, value ->> 1 AS run_at, value ->> 2 AS reason
      FROM json_each(?1)) AS gate
WHERE jobs.id = gate.id AND +jobs.status = 'running'
RETURNING jobs.queue
