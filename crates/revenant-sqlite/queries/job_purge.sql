-- Delete dead jobs matching the filter, oldest first. ?12 limit (-1: all).
DELETE FROM jobs WHERE id IN (
    SELECT id FROM jobs
    WHERE status = 'dead' AND
