-- The backfill: $1 ids, $2 fingerprints.
UPDATE {schema}.jobs j
SET fingerprint = i.fingerprint
FROM unnest($1::int8[], $2::text[]) AS i(id, fingerprint)
WHERE j.id = i.id AND j.status = 'dead' AND j.fingerprint IS NULL
