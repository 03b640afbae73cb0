-- Dead jobs matching the filter, oldest (lowest id) first. ?12 limit (-1: all).
SELECT id, queue FROM jobs
WHERE status = 'dead' AND
