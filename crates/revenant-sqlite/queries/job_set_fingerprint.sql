-- The backfill: ?1 id, ?2 fingerprint.
UPDATE jobs SET fingerprint = ?2 WHERE id = ?1 AND status = 'dead' AND fingerprint IS NULL
