-- Delete completed and cancelled jobs finished before ?1 (now - retention), at most ?2.
-- Dead jobs are never pruned: they wait for an operator.
DELETE FROM jobs WHERE id IN (
    SELECT id FROM jobs
    WHERE status IN ('completed', 'cancelled') AND finished_at < ?1
    ORDER BY finished_at, id
    LIMIT ?2
)
