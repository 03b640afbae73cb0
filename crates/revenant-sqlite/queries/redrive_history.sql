-- The redrive audit, newest first. ?1 limit.
SELECT id, at, updated_at, filter, spacing_ms, count, first_job_id, last_job_id, actor, note
FROM redrives
ORDER BY id DESC
LIMIT ?1
