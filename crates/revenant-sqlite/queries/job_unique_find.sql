-- The job holding a unique key, whatever its state (the key is held until the job is
-- pruned or purged).
SELECT id FROM jobs WHERE unique_key = ?1
