    -- history_append.sql, the new history of a failed job: `failed.entry` (one
    -- ErrorEntry as a JSON object) at the end of `jobs.errors`, the newest ?2 entries
    -- kept (ErrorEntry::HISTORY_LIMIT). Nearly every history has room, and the entry
    -- is inserted at its end; a full one is rebuilt from its newest ?2 entries, in
    -- order (`key` is an entry's index), whatever its stored length. The statement
    -- appends, so its batch carries each entry once, not each job's whole history
    -- read out, parsed and sent back as a string. The head of each statement that
    -- uses it ends in `errors =`, and its tail names the batch `failed`.
    CASE
        WHEN json_array_length(jobs.errors) < ?2
            THEN json_insert(jobs.errors, '$[#]', json(failed.entry))
        ELSE (SELECT json_group_array(json(value) ORDER BY key)
              FROM json_each(json_insert(jobs.errors, '$[#]', json(failed.entry)))
              WHERE key > json_array_length(jobs.errors) - ?2)
    END
