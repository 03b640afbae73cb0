-- job_enqueue, second step: who holds these unique keys. A separate statement so that,
-- under READ COMMITTED, it sees a holder committed by a concurrent enqueue after the
-- insert's snapshot was taken.
SELECT j.unique_key, j.id
FROM {schema}.jobs j
WHERE j.unique_key = ANY($1::text[])
