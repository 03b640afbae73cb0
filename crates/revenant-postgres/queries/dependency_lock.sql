-- Locks one dependency's row for the rest of the transaction and reads its record,
-- with the transaction's clock. $1 key, $2 now (NULL: the database clock).
SELECT d.record, date_trunc('milliseconds', coalesce($2::timestamptz, now())) AS now
FROM {schema}.dependencies d
WHERE d.key = $1
FOR UPDATE
