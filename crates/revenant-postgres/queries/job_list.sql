-- job_list: jobs matching the filter ($1..$10), newest id first, with an id below
-- $11 (NULL: from the newest), at most $12.
SELECT {job_columns}
FROM {schema}.jobs j
WHERE ($11::int8 IS NULL OR j.id < $11::int8)
  AND {job_filter}
ORDER BY j.id DESC
LIMIT $12
