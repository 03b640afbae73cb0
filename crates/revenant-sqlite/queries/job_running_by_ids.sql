-- The running jobs among ids ?1 (a JSON array), with their lease tokens: the fence is
-- checked in Rust, against each result in the batch in order, inside the write
-- transaction that then applies them.
-- `+status` keeps SQLite off the index of the jobs in that state (jobs_lease,
-- jobs_ready; jobs_finished before migration 15), which it would otherwise walk whole,
-- probing the batch for each entry: the batch drives the plan, one primary-key lookup
-- per id (checked by a test of the query plans).
-- One value for the batch: a JSON array of
-- [id, lease_token, queue, group_key, attempts, max_attempts, worker] arrays (one
-- hand-over from SQLite's thread, not one per row; see job_claim_candidates.sql). Not
-- the history: a failure's entry is appended by the statement that writes it.
SELECT json_group_array(json_array(id, lease_token, queue, group_key, attempts,
                                   max_attempts, worker))
FROM jobs
WHERE id IN (SELECT value FROM json_each(?1)) AND +status = 'running'
