-- Insert or refresh a worker. A changed host or pid is a new incarnation: started_at
-- restarts. ?1 worker, ?2 host, ?3 pid, ?4 queues (JSON), ?5 now.
INSERT INTO workers (worker, host, pid, queues, started_at, last_seen_at)
VALUES (?1, ?2, ?3, ?4, ?5, ?5)
ON CONFLICT (worker) DO UPDATE SET
    started_at = CASE WHEN workers.host <> excluded.host OR workers.pid <> excluded.pid
                      THEN excluded.started_at ELSE workers.started_at END,
    host = excluded.host,
    pid = excluded.pid,
    queues = excluded.queues,
    last_seen_at = excluded.last_seen_at
