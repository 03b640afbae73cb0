INSERT INTO jobs (queue, kind, payload, status, priority, attempts, max_attempts, run_at,
                  created_at, group_key, unique_key, correlation_id, errors, redrives,
                  traceparent, tracestate)
VALUES (?1, ?2, ?3, 'ready', ?4, 0, ?5, ?6, ?7, ?8, ?9, ?10, '[]', 0, ?11, ?12)
