-- A batch of jobs in one statement. $1 queue, $2 kind, $3 payloads, $4 max_attempts.
INSERT INTO revenant.jobs (queue, kind, payload, status, priority, max_attempts, run_at, created_at)
SELECT $1, $2, p::jsonb, 'ready', 0, $4, date_trunc('milliseconds', now()),
       date_trunc('milliseconds', now())
FROM unnest($3::text[]) AS p
