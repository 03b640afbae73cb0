    -- JobFilter (every field NULL matches all): $1 ids, $2 queue, $3 kind, $4 statuses,
    -- $5 group_key, $6 correlation_id, $7 dead_reason, $8 error_contains (in the last
    -- error's message, case-sensitive; strpos so '%' and '_' mean themselves),
    -- $9 finished_after (inclusive), $10 finished_before (exclusive), $11 fingerprint
    -- (dead jobs only).
    ($1::int8[] IS NULL OR j.id = ANY($1::int8[]))
    AND ($2::text IS NULL OR j.queue = $2::text)
    AND ($3::text IS NULL OR j.kind = $3::text)
    AND ($4::text[] IS NULL OR j.status = ANY($4::text[]))
    AND ($5::text IS NULL OR j.group_key = $5::text)
    AND ($6::text IS NULL OR j.correlation_id = $6::text)
    AND ($7::text IS NULL OR (j.status = 'dead' AND j.dead_reason = $7::text))
    AND ($8::text IS NULL OR strpos(j.errors -> -1 ->> 'message', $8::text) > 0)
    AND ($9::timestamptz IS NULL OR j.finished_at >= $9::timestamptz)
    AND ($10::timestamptz IS NULL OR j.finished_at < $10::timestamptz)
    AND ($11::text IS NULL OR (j.status = 'dead' AND j.fingerprint = $11::text))
