-- ?12 before_id, ?13 limit. Newest id first.
SELECT * FROM jobs
WHERE (?12 IS NULL OR id < ?12) AND
