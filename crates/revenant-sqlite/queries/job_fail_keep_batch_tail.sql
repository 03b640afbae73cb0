-- `LIMIT -1 OFFSET 0`: the batch is not flattened into the update, so each element is
-- rendered once and its columns read from it, its entries included (job_enqueue.sql).
FROM (SELECT value ->> 0 AS id, value ->> 1 AS attempted_at, value -> 2 AS entries,
             value ->> 3 AS attempts
      FROM json_each(?1) LIMIT -1 OFFSET 0) AS failed
WHERE jobs.id = failed.id AND +jobs.status = 'running'
