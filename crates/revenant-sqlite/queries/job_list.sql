-- ?11 before_id, ?12 limit. Newest id first.
SELECT * FROM jobs
WHERE (?11 IS NULL OR id < ?11) AND
