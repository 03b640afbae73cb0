-- Failed attempts for queue_stats' failure count, a batch at once. ?1 JSON array of
-- [queue, class] pairs, ?2 at.
INSERT INTO attempt_failures (queue, class, at)
SELECT value ->> 0, value ->> 1, ?2 FROM json_each(?1)
