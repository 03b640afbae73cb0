-- Failed attempts for queue_stats' failure count, a batch at once: one row per queue
-- and class with how many failed (migration 12). ?1 JSON array of [queue, class, count]
-- triples, ?2 at.
INSERT INTO attempt_failures (queue, class, at, failures)
SELECT value ->> 0, value ->> 1, ?2, value ->> 2 FROM json_each(?1)
