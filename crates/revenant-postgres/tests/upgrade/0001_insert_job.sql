-- A job as revenant wrote it under the first schema (migrations/0001_jobs.sql): only
-- the columns that migration created.
INSERT INTO {schema}.jobs (id, queue, kind, payload, status, priority, attempts,
                           max_attempts, run_at, created_at, attempted_at, finished_at,
                           lease_token, lease_expires_at, worker, group_key, unique_key,
                           correlation_id, dead_reason, errors, redrives)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18,
        $19, $20, $21)
