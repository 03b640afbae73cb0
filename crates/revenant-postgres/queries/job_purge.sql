-- job_purge: delete dead jobs matching the filter ($1..$11), oldest (lowest id) first,
-- at most $12 (NULL: all).
DELETE FROM {schema}.jobs
WHERE id IN (
    SELECT j.id
    FROM {schema}.jobs j
    WHERE j.status = 'dead'
      AND {job_filter}
    ORDER BY j.id
    LIMIT $12
    FOR UPDATE OF j SKIP LOCKED
)
