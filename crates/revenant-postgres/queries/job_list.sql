-- job_list: jobs matching the filter ($1..$11), newest id first, with an id below
-- $12 (NULL: from the newest), at most $13.
SELECT {job_columns}
FROM {schema}.jobs j
WHERE ($12::int8 IS NULL OR j.id < $12::int8)
  AND {job_filter}
ORDER BY j.id DESC
LIMIT $13
