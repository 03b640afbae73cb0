-- Jobs that may run (their leases checked in this transaction): record the dependency
-- ?2 and clear what they waited for. ?1 JSON array of ids.
UPDATE jobs SET dependency = ?2, dependency_wait = NULL
WHERE id IN (SELECT value FROM json_each(?1)) AND +status = 'running'
