-- redrive_history: the redrive audit, newest first, at most $1.
SELECT id, at, updated_at, filter, spacing_ms, count, first_job_id, last_job_id, actor, note
FROM {schema}.redrives
ORDER BY id DESC
LIMIT $1
