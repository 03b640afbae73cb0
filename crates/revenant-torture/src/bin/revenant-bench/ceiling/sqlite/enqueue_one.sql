-- One job, its own transaction: revenant's job_enqueue row. ?1 queue, ?2 kind,
-- ?3 payload, ?4 max_attempts, ?5 now (ms).
INSERT INTO jobs (queue, kind, payload, status, priority, attempts, max_attempts, run_at,
                  created_at, errors, redrives)
VALUES (?1, ?2, ?3, 'ready', 0, 0, ?4, ?5, ?5, '[]', 0)
