-- Fenced running -> dead for a batch whose leases were checked in this transaction.
-- ?1 JSON array of [id, reason, fingerprint, entries, attempts] arrays (as
-- job_fail_retry_batch.sql), ?2 how many history entries a job keeps, ?3 now. Three
-- files, as job_fail_retry_batch.sql, and `+status` as there. One statement for the
-- batch: a death was one statement per job, a round trip to SQLite's thread each, and
-- a storm of poison jobs spent the writer's time on them (by hand, 20,000 jobs failing
-- five times each: 3.08 to 3.11 s before, 2.24 to 2.33 s with this).
UPDATE jobs
SET status = 'dead', dead_reason = failed.reason, attempts = failed.attempts,
    fingerprint = failed.fingerprint,
    finished_at = ?3, lease_token = NULL, lease_expires_at = NULL,
    errors =
