-- The running job under this lease, if it still is. ?1 id, ?2 lease token.
SELECT queue, group_key, attempts, worker, errors FROM jobs
WHERE id = ?1 AND lease_token = ?2 AND status = 'running'
