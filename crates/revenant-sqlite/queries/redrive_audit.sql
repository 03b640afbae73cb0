-- Record a redrive, or add a later chunk to the record with the same audit key.
-- ?1 audit_key (NULL: always a new record), ?2 now, ?3 filter JSON, ?4 spacing_ms,
-- ?5 count, ?6 first id, ?7 last id, ?8 actor, ?9 note.
INSERT INTO redrives (audit_key, at, updated_at, filter, spacing_ms, count, first_job_id,
                      last_job_id, actor, note)
VALUES (?1, ?2, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)
ON CONFLICT (audit_key) DO UPDATE
SET count = count + excluded.count, last_job_id = excluded.last_job_id,
    updated_at = excluded.updated_at
