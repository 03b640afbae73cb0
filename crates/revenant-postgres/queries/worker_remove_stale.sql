-- worker_remove: every worker not seen for $2 ms. $1: now (NULL: the database clock).
DELETE FROM {schema}.workers
WHERE last_seen_at < date_trunc('milliseconds', coalesce($1::timestamptz, now()))
                     - $2::float8 * interval '1 millisecond'
