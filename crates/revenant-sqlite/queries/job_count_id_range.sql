-- How many jobs have an id in ?1..=?2: job_enqueue's check that the rows one insert
-- statement wrote have consecutive ids (it reads them from last_insert_rowid).
SELECT count(*) FROM jobs WHERE id BETWEEN ?1 AND ?2
