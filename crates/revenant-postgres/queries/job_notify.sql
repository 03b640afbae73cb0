-- Wakes the workers of queues $2 (one notification per queue; PostgreSQL folds
-- identical notifications of one transaction into one). $1: the channel.
SELECT count(pg_notify($1, q)) FROM unnest($2::text[]) AS q
