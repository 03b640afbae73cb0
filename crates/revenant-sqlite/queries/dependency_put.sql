-- Writes one dependency's record. ?1 key, ?2 breaker state, ?3 record (JSON), ?4 now.
INSERT INTO dependencies (key, state, record, updated_at) VALUES (?1, ?2, ?3, ?4)
ON CONFLICT (key) DO UPDATE
SET state = excluded.state, record = excluded.record, updated_at = excluded.updated_at
