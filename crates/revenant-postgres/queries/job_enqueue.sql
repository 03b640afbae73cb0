-- job_enqueue: insert a batch of jobs in one statement. Arrays $2..$13 hold one element
-- per job (no two with the same unique key: the store folds those first). $1: now
-- (NULL: the database clock).
--
-- Ids are drawn from the sequence in input order before inserting, so the caller can
-- tell which input row became which job, and a group's jobs get ids in enqueue order.
-- A row whose unique key is taken is skipped (ON CONFLICT DO NOTHING); the store then
-- looks up the holder in a second statement, which sees rows committed meanwhile.
-- One row per input job comes back, in input order, with `due` telling whether it can
-- run now (only then does a worker need waking).
WITH t AS (
    SELECT date_trunc('milliseconds', coalesce($1::timestamptz, now())) AS now
),
input AS (
    SELECT i.*, nextval(pg_get_serial_sequence('{schema}.jobs', 'id')) AS id
    FROM unnest($2::text[], $3::text[], $4::text[], $5::int4[], $6::timestamptz[],
                $7::int8[], $8::int4[], $9::text[], $10::text[], $11::text[],
                $12::text[], $13::text[])
         WITH ORDINALITY AS i(queue, kind, payload, priority, run_at, delay_ms,
                              max_attempts, group_key, unique_key, correlation_id,
                              traceparent, tracestate, ord)
    ORDER BY i.ord
),
known AS (
    INSERT INTO {schema}.queues (name, paused, created_at, updated_at)
    SELECT DISTINCT i.queue, false, t.now, t.now FROM input i, t
    ON CONFLICT (name) DO NOTHING
),
inserted AS (
    INSERT INTO {schema}.jobs AS j (id, queue, kind, payload, status, priority, max_attempts,
                                    run_at, created_at, group_key, unique_key, correlation_id,
                                    traceparent, tracestate)
    SELECT i.id, i.queue, i.kind, i.payload::jsonb, 'ready', i.priority, i.max_attempts,
           coalesce(date_trunc('milliseconds', i.run_at),
                    t.now + coalesce(i.delay_ms, 0)::float8 * interval '1 millisecond'),
           t.now, i.group_key, i.unique_key, i.correlation_id, i.traceparent, i.tracestate
    FROM input i, t
    ORDER BY i.ord
    ON CONFLICT (unique_key) WHERE unique_key IS NOT NULL DO NOTHING
    RETURNING j.id, j.queue, j.run_at
)
SELECT i.ord, i.id, ins.id IS NOT NULL AS inserted,
       coalesce(ins.run_at <= t.now, false) AS due, i.queue
FROM input i
CROSS JOIN t
LEFT JOIN inserted ins ON ins.id = i.id
ORDER BY i.ord
