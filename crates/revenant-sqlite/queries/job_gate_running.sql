-- The running jobs among ids ?1 (a JSON array) for dependency_acquire: the fence is
-- checked in Rust against each request's lease token.
-- `+status`: the batch drives the plan, one primary-key lookup per id (see
-- job_running_by_ids.sql).
SELECT id, lease_token, attempts, dependency_wait FROM jobs
WHERE id IN (SELECT value FROM json_each(?1)) AND +status = 'running'
