-- worker_list: the registry, by worker id.
SELECT w.worker, w.host, w.pid, w.queues, w.started_at, w.last_seen_at
FROM {schema}.workers w
ORDER BY w.worker
