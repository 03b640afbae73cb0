-- Protecting a struggling dependency: per-key circuit breakers, shared rate limits and
-- retry budgets (revenant_core::dependency).

-- The dependency a worker found for the job (the service it calls), recorded when a
-- worker protecting dependencies first claims it, and why the job waits on it while
-- it is ready: parked by an open breaker, holding a rate-limit turn at its run_at, or
-- a retry over the budget.
ALTER TABLE {schema}.jobs ADD COLUMN dependency text;
ALTER TABLE {schema}.jobs ADD COLUMN dependency_wait text
    CHECK (dependency_wait IN ('breaker', 'rate_limit', 'retry_budget'));
-- Releasing a key's parked jobs, counting the jobs waiting per key.
CREATE INDEX jobs_dependency_wait_idx ON {schema}.jobs (dependency, dependency_wait)
    WHERE status = 'ready' AND dependency_wait IS NOT NULL;

-- One row per dependency key, locked (SELECT ... FOR UPDATE) by every call that
-- changes it, so the workers of every process take turns on one breaker: one probe at
-- a time, one rate-limit schedule, one budget. The state machine's record is JSON:
-- every backend runs the same Rust transitions on it inside its transaction, so the
-- columns SQL needs are only the key; `state` is a copy of the breaker's state for
-- people reading the table by hand.
CREATE TABLE {schema}.dependencies (
    key        text        PRIMARY KEY,
    state      text        NOT NULL CHECK (state IN ('closed', 'open', 'half_open')),
    record     jsonb       NOT NULL,
    updated_at timestamptz NOT NULL
);
