-- Delete failure-log records older than ?1, at most ?2.
DELETE FROM attempt_failures WHERE rowid IN (
    SELECT rowid FROM attempt_failures WHERE at < ?1 ORDER BY at LIMIT ?2
)
