-- Every dependency, or the one ?1 names, by key.
SELECT key, record FROM dependencies WHERE ?1 IS NULL OR key = ?1 ORDER BY key
