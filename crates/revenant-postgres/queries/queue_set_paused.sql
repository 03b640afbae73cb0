-- queue_pause / queue_resume: set queue $2's paused flag to $3, creating the queue if
-- it is unknown. $1: now (NULL: the database clock).
INSERT INTO {schema}.queues AS q (name, paused, created_at, updated_at)
VALUES ($2, $3, date_trunc('milliseconds', coalesce($1::timestamptz, now())),
        date_trunc('milliseconds', coalesce($1::timestamptz, now())))
ON CONFLICT (name) DO UPDATE SET paused = excluded.paused, updated_at = excluded.updated_at
