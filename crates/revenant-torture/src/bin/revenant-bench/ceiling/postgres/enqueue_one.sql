-- One job, its own transaction: the columns revenant's job_enqueue sets, nothing else.
-- $1 queue, $2 kind, $3 payload, $4 max_attempts.
INSERT INTO revenant.jobs (queue, kind, payload, status, priority, max_attempts, run_at, created_at)
VALUES ($1, $2, $3::jsonb, 'ready', 0, $4, date_trunc('milliseconds', now()),
        date_trunc('milliseconds', now()))
