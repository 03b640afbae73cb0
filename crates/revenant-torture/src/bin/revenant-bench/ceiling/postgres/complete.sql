-- Fenced running -> completed for every (id, lease token) of $1/$2: revenant's own
-- job_complete statement. One statement, one transaction.
UPDATE revenant.jobs j
SET status = 'completed',
    finished_at = date_trunc('milliseconds', now()),
    lease_token = NULL,
    lease_expires_at = NULL
FROM unnest($1::int8[], $2::int8[]) AS i(id, lease_token)
WHERE j.id = i.id AND j.lease_token = i.lease_token
