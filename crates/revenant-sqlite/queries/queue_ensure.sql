-- Make the queue known (unpaused) if it is not. ?1 name, ?2 now.
INSERT INTO queues (name, paused, created_at, updated_at)
VALUES (?1, 0, ?2, ?2)
ON CONFLICT (name) DO NOTHING
