-- worker_heartbeat: insert or refresh worker $2. A changed host or pid is a new
-- incarnation: started_at restarts. $1: now (NULL: the database clock).
INSERT INTO {schema}.workers AS w (worker, host, pid, queues, started_at, last_seen_at)
VALUES ($2, $3, $4, $5, date_trunc('milliseconds', coalesce($1::timestamptz, now())),
        date_trunc('milliseconds', coalesce($1::timestamptz, now())))
ON CONFLICT (worker) DO UPDATE SET
    started_at = CASE WHEN w.host <> excluded.host OR w.pid <> excluded.pid
                      THEN excluded.started_at ELSE w.started_at END,
    host = excluded.host,
    pid = excluded.pid,
    queues = excluded.queues,
    last_seen_at = excluded.last_seen_at
