-- The jobs' indexes by state, so that a job's claim and its completion each write two
-- index entries instead of five.
--
-- 0001 indexed every row in `jobs_claim (queue, status, priority DESC, run_at, id)` and
-- `jobs_finished (status, finished_at)`, finished jobs included. Both name `status`, so
-- every change of state rewrote the job's entry in both, and the partial `jobs_lease`
-- gained or lost one: a job's life was twelve b-tree writes (two at its insert, five at
-- its claim, five at its completion), the largest part of the one writer's work in a
-- drain after the rows themselves. Now each index holds the rows of the states that
-- read it, and the one that holds every row names a column that never changes:
--
-- - `jobs_ready`: the claim's walk (queue, then priority, run_at, id), ready jobs only.
-- - `jobs_queue`: the queue's jobs, for the views over all of them (queue_stats,
--   queue_history). `queue` never changes, so no update writes it.
-- - `jobs_finished`: completed and cancelled jobs by finish time (prune).
-- - `jobs_dead`: dead jobs by queue and finish time (the dead-letter views, redrive,
--   purge, queue_history's dead).
-- - `jobs_lease` (0001, unchanged): running jobs by lease expiry.
--
-- A job's life is now six: `jobs_queue` and `jobs_ready` at its insert, out of
-- `jobs_ready` and into `jobs_lease` at its claim, out of `jobs_lease` and into
-- `jobs_finished` at its completion. By hand, a drain of 100,000 jobs wrote 96 MB
-- instead of 151 to 153, and drained 19% to 32% faster (docs/benchmarks.md,
-- "Performance work").
--
-- SQLite plans a statement without statistics here (nothing runs ANALYZE), and with a
-- `queue = ?` it may walk `jobs_queue`, every job of the queue, where a partial index
-- of the state it asks for finds the few it wants; and an `ORDER BY id` may walk the
-- whole table in id order rather than sort what an index finds. The statements that
-- would (the claim's expired half, the expired-lease sweep, redrive and purge) say
-- `+queue` or `+id` to keep those plans out, and a test pins every plan that reads
-- jobs by state to an index (`every_read_by_state_goes_by_an_index`).
--
-- Upgrading builds the four indexes over the existing rows, once, in this migration's
-- transaction. A worker of the previous release on this schema still runs: its
-- claim's expired half and its sweep walk the queue's jobs instead, slower on a big
-- table until it is replaced.
DROP INDEX jobs_claim;
DROP INDEX jobs_finished;
CREATE INDEX jobs_ready ON jobs (queue, priority DESC, run_at, id) WHERE status = 'ready';
CREATE INDEX jobs_queue ON jobs (queue);
CREATE INDEX jobs_finished ON jobs (finished_at) WHERE status IN ('completed', 'cancelled');
CREATE INDEX jobs_dead ON jobs (queue, finished_at) WHERE status = 'dead';
