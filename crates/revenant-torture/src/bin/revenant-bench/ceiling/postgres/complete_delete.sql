-- Fenced running -> gone for every (id, lease token) of $1/$2: the completion of a
-- queue that keeps no finished job (graphile-worker's shape). For measuring what
-- keeping the completed row costs (`--complete delete`), not revenant's.
DELETE FROM revenant.jobs j
USING unnest($1::int8[], $2::int8[]) AS i(id, lease_token)
WHERE j.id = i.id AND j.lease_token = i.lease_token
