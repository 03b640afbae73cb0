-- Workers not seen since ?1 (now - stale_after).
DELETE FROM workers WHERE last_seen_at < ?1
