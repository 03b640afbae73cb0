-- Claimable jobs of queue ?1 at time ?2, at most ?3: ready and due at the highest
-- priority below ?5 that has a ready job (due or not), or running with an expired lease
-- (at most ?4 of those: 1, or 0 while the claiming process runs one it reclaimed, or
-- after the first call of a claim).
--
-- One priority per call: the claim index is jobs_ready (queue, priority DESC, run_at, id),
-- and with no bound on priority a `run_at <= ?2` condition only filters the entries it
-- walks, so a claim asking for more jobs than are due walked every job scheduled for
-- later. With the priority fixed, `run_at <= ?2` bounds the walk. The store calls this
-- again, one priority lower, while it has fewer ready jobs than it asked for (see
-- `job_claim` in store.rs); in a backlog the first call fills the claim. A grouped job is a candidate only when no other job of its group is
-- running and no earlier (lower id) job of its group is ready, so only a group's head
-- can be claimed and a group runs one job at a time, in enqueue order.
--
-- Two halves, each walking an index in claim order and stopping at the limit, instead
-- of one OR that would sort every due job of the queue on each claim.
--
-- At most one expired lease per claim: the jobs a crashed process held expire
-- together, and reclaimed in one batch they would share a process again, so a job that
-- crashes its worker (a poison) would take the same neighbours down with it on every
-- attempt until they too ran out of attempts. One per claim spreads them over claims
-- and processes.
--
-- Within a priority, an expired lease goes before ready jobs: its attempt had started
-- and was lost, and behind a backlog of ready jobs due earlier it would wait as long as
-- the backlog lasts (RELIABILITY.md: reclaimed within lease + sweep + 2 s; the long
-- kill -9 chaos test found reclaims waiting 95 s).
--
-- The candidates come back as one value, a JSON array of
-- [id, status, attempts, worker, lease_expires_at, errors, priority, run_at] arrays
-- (errors only for an expired lease, whose reclaim writes its history): one hand-over
-- from SQLite's thread for the batch instead of one per row, which a profile of the
-- drain showed as a fifth of its time in context switches.
SELECT json_group_array(json_array(id, status, attempts, worker, lease_expires_at,
                                   CASE WHEN status = 'running' THEN errors END,
                                   priority, run_at))
FROM (
    SELECT id, status, attempts, worker, lease_expires_at, errors, priority, run_at FROM (
        SELECT * FROM (
            SELECT j.id, j.status, j.attempts, j.worker, j.lease_expires_at, j.errors,
                   j.priority, j.run_at
            FROM jobs j
            WHERE j.queue = ?1 AND j.status = 'ready' AND j.run_at <= ?2
              AND j.priority = (SELECT p.priority FROM jobs p
                                WHERE p.queue = ?1 AND p.status = 'ready' AND p.priority < ?5
                                ORDER BY p.priority DESC
                                LIMIT 1)
              AND (j.group_key IS NULL OR NOT EXISTS (
                    SELECT 1 FROM jobs g
                    WHERE g.group_key = j.group_key
                      AND g.status IN ('ready', 'running')  -- the partial index jobs_group
                      AND g.id <> j.id
                      AND (g.status = 'running' OR g.id < j.id)))
            ORDER BY j.priority DESC, j.run_at, j.id
            LIMIT ?3
        )
        UNION ALL
        SELECT * FROM (
            SELECT j.id, j.status, j.attempts, j.worker, j.lease_expires_at, j.errors,
                   j.priority, j.run_at
            FROM jobs j
            -- `+j.queue`: the expired leases by jobs_lease, not every job of the queue
            -- by jobs_queue (migration 15).
            WHERE +j.queue = ?1 AND j.status = 'running' AND j.lease_expires_at <= ?2
              AND (j.group_key IS NULL OR NOT EXISTS (
                    SELECT 1 FROM jobs g
                    WHERE g.group_key = j.group_key
                      AND g.status IN ('ready', 'running')
                      AND g.id <> j.id
                      AND (g.status = 'running' OR g.id < j.id)))
            ORDER BY j.priority DESC, j.run_at, j.id
            LIMIT ?4
        )
    )
    ORDER BY priority DESC, status = 'running' DESC, run_at, id
    LIMIT ?3
)
