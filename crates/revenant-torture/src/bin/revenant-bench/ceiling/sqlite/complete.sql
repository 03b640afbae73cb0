-- Fenced running -> completed for every [id, lease token] pair of the JSON array ?1.
-- ?2 now (ms). One statement, one transaction.
UPDATE jobs
SET status = 'completed', finished_at = ?2, lease_token = NULL, lease_expires_at = NULL
WHERE status = 'running'
  AND (id, lease_token) IN (
      SELECT json_extract(p.value, '$[0]'), json_extract(p.value, '$[1]')
      FROM json_each(?1) AS p
  )
