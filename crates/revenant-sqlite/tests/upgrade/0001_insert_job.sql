-- A job as revenant wrote it under the first schema (migrations/0001_init.sql): only
-- the columns that migration created.
INSERT INTO jobs (id, queue, kind, payload, status, priority, attempts, max_attempts,
                  run_at, created_at, attempted_at, finished_at, lease_token,
                  lease_expires_at, worker, group_key, unique_key, correlation_id,
                  dead_reason, errors, redrives)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
