-- Every dependency, or the one $1 names, by key.
SELECT key, record FROM {schema}.dependencies
WHERE $1::text IS NULL OR key = $1
ORDER BY key
