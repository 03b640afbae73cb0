-- Pause (?2 = 1) or resume (?2 = 0) a queue, creating it if unknown. ?3 now.
INSERT INTO queues (name, paused, created_at, updated_at)
VALUES (?1, ?2, ?3, ?3)
ON CONFLICT (name) DO UPDATE SET paused = excluded.paused, updated_at = excluded.updated_at
