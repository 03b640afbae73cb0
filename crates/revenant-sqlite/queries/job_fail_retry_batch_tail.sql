FROM (SELECT value ->> 0 AS id, value ->> 1 AS run_at, value -> 2 AS entries,
             value ->> 3 AS attempts
      FROM json_each(?1)) AS failed
WHERE jobs.id = failed.id AND +jobs.status = 'running'
