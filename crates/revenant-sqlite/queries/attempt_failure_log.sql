-- One failed attempt for queue_stats' failure count. ?1 queue, ?2 class, ?3 at.
INSERT INTO attempt_failures (queue, class, at) VALUES (?1, ?2, ?3)
