-- Fenced running -> dead. ?1 id, ?2 token, ?3 reason, ?4 now, ?5 history, ?6 fingerprint.
UPDATE jobs
SET status = 'dead', dead_reason = ?3, fingerprint = ?6, finished_at = ?4, errors = ?5,
    lease_token = NULL, lease_expires_at = NULL
WHERE id = ?1 AND lease_token = ?2 AND status = 'running'
