SELECT worker, host, pid, queues, started_at, last_seen_at FROM workers ORDER BY worker
