-- Protecting a struggling dependency: per-key circuit breakers, shared rate limits and
-- retry budgets (revenant_core::dependency).

-- The dependency a worker found for the job (the service it calls), recorded when a
-- worker protecting dependencies first claims it, and why the job waits on it while
-- it is ready: parked by an open breaker, holding a rate-limit turn at its run_at, or
-- a retry over the budget.
ALTER TABLE jobs ADD COLUMN dependency TEXT;
ALTER TABLE jobs ADD COLUMN dependency_wait TEXT
    CHECK (dependency_wait IN ('breaker', 'rate_limit', 'retry_budget'));
-- Releasing a key's parked jobs, counting the jobs waiting per key.
CREATE INDEX jobs_dependency_wait ON jobs (dependency, dependency_wait)
    WHERE status = 'ready' AND dependency_wait IS NOT NULL;

-- One row per dependency key. The state machine's record is JSON: every backend runs
-- the same Rust transitions on it inside the write transaction, so the columns SQL
-- needs are only the key; `state` is a copy of the breaker's state for people reading
-- the table by hand.
CREATE TABLE dependencies (
    key        TEXT    PRIMARY KEY NOT NULL,
    state      TEXT    NOT NULL CHECK (state IN ('closed', 'open', 'half_open')),
    record     TEXT    NOT NULL,              -- JSON DependencyRecord
    updated_at INTEGER NOT NULL
) STRICT;
