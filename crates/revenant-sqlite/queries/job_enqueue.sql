-- A batch of jobs, inserted in the order of the JSON array ?1, one element a job:
-- [queue, kind, payload (its JSON text, as a string), priority, max_attempts,
--  run_at (ms), group_key, unique_key, correlation_id, traceparent, tracestate],
-- absent keys null. ?2 is now (ms).
--
-- One parameter whatever the batch's size, walked by json_each like the other batched
-- statements: with ten parameters a job, one multi-row statement per 256 jobs, sqlx
-- copied and bound each value and SQLite's thread took seven statements and seven
-- checks per thousand jobs. json_each yields the elements in array order and the
-- insert takes them in the order it reads them, so the ids follow the array (the
-- store checks there is no gap; tests/bulk_enqueue.rs checks the order).
--
-- The subquery reads each element once: it cannot be flattened into the insert (it
-- has a LIMIT and an OFFSET), so SQLite runs it as a coroutine and each `->>` reads
-- the same text, parsed once (SQLite keeps recent parses). Flattened, every `->>`
-- had json_each render the element anew and parsed it again: 11 times a job, slower
-- than the bound parameters.
INSERT INTO jobs (queue, kind, payload, status, priority, attempts, max_attempts, run_at,
                  created_at, group_key, unique_key, correlation_id, errors, redrives,
                  traceparent, tracestate)
SELECT j.v ->> 0, j.v ->> 1, j.v ->> 2, 'ready', j.v ->> 3, 0,
       j.v ->> 4, j.v ->> 5, ?2, j.v ->> 6, j.v ->> 7, j.v ->> 8,
       '[]', 0, j.v ->> 9, j.v ->> 10
FROM (SELECT value AS v FROM json_each(?1) LIMIT -1 OFFSET 0) AS j
