    -- history_append.sql, the new history of a failed job: `failed.entries` (a JSON
    -- array of ErrorEntry objects: the job's kept failures, then its own) at the end of
    -- `jobs.errors`, the newest ?2 entries kept (ErrorEntry::HISTORY_LIMIT). A job with
    -- no history yet takes the entries as they came: most jobs that fail at all, whose
    -- first write carries their kept failures (through the JSON functions below, W2's
    -- failing drain of 50,000 jobs ran at 53,746 jobs/s, against 56,136 this way;
    -- medians of 5 pairs by hand). Nearly every other write appends one entry to a
    -- history that has room, and the entry is inserted at its end; otherwise the
    -- history is rebuilt from the newest ?2 of both, in order (`key` is an entry's
    -- index), whatever its stored length. The statement
    -- appends, so its batch carries each entry once, not each job's whole history read
    -- out, parsed and sent back as a string. The head of each statement that uses it
    -- ends in `errors =`, and its tail names the batch `failed`.
    CASE
        WHEN jobs.errors = '[]' AND json_array_length(failed.entries) <= ?2
            THEN failed.entries
        WHEN json_array_length(failed.entries) = 1 AND json_array_length(jobs.errors) < ?2
            THEN json_insert(jobs.errors, '$[#]', json(failed.entries -> 0))
        ELSE (SELECT json_group_array(json(value) ORDER BY k)
              FROM (SELECT key AS k, value FROM json_each(jobs.errors)
                    UNION ALL
                    SELECT json_array_length(jobs.errors) + key, value
                    FROM json_each(failed.entries))
              WHERE k >= json_array_length(jobs.errors) + json_array_length(failed.entries) - ?2)
    END
