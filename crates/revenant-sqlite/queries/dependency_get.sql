-- One dependency's record (JSON), read inside the write transaction that changes it.
SELECT record FROM dependencies WHERE key = ?1
