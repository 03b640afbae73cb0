-- running (lease expired) -> dead with reason lease_expired. ?1 id, ?2 now, ?3 history,
-- ?4 fingerprint.
UPDATE jobs
SET status = 'dead', dead_reason = 'lease_expired', fingerprint = ?4, finished_at = ?2,
    lease_token = NULL, lease_expires_at = NULL, errors = ?3
WHERE id = ?1 AND status = 'running'
