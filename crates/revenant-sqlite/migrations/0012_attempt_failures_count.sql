-- attempt_failures: one row per batch of failures, not per failure (the PostgreSQL
-- migration of the same number says why). A batch of failed attempts (job_fail) logs
-- one row per queue and class with how many failed; queue_stats sums them. Rows written
-- before this migration, and those of writers that log one failure at a time (expired
-- leases), count 1 each.
ALTER TABLE attempt_failures ADD COLUMN failures INTEGER NOT NULL DEFAULT 1 CHECK (failures > 0);
