    -- JobFilter: ?1 ids (JSON array), ?2 queue, ?3 kind, ?4 statuses (JSON array),
    -- ?5 group_key, ?6 correlation_id, ?7 dead_reason, ?8 error_contains,
    -- ?9 finished_after (inclusive), ?10 finished_before (exclusive), ?11 fingerprint.
    -- NULL matches all.
    (?1 IS NULL OR id IN (SELECT value FROM json_each(?1)))
    AND (?2 IS NULL OR queue = ?2)
    AND (?3 IS NULL OR kind = ?3)
    AND (?4 IS NULL OR status IN (SELECT value FROM json_each(?4)))
    AND (?5 IS NULL OR group_key = ?5)
    AND (?6 IS NULL OR correlation_id = ?6)
    AND (?7 IS NULL OR (status = 'dead' AND dead_reason = ?7))
    -- instr, not LIKE: the match is case-sensitive and '%' or '_' in the text mean themselves.
    AND (?8 IS NULL OR instr(json_extract(errors, '$[#-1].message'), ?8) > 0)
    AND (?9 IS NULL OR finished_at >= ?9)
    AND (?10 IS NULL OR finished_at < ?10)
    AND (?11 IS NULL OR (status = 'dead' AND fingerprint = ?11))
