-- The jobs holding any of the unique keys of the JSON array ?1, whatever their state
-- (a key is held until its job is pruned or purged).
SELECT id, unique_key FROM jobs
WHERE unique_key IN (SELECT value FROM json_each(?1))
