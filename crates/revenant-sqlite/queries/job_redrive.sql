-- dead -> ready: attempts reset, history kept, redrives counted. ?1 id, ?2 run_at.
UPDATE jobs
SET status = 'ready', attempts = 0, run_at = ?2, dead_reason = NULL, fingerprint = NULL, finished_at = NULL,
    lease_token = NULL, lease_expires_at = NULL, redrives = redrives + 1
WHERE id = ?1 AND status = 'dead'
