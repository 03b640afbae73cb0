-- The table `--complete move` moves completed jobs to: what a finished job keeps (its
-- payload, attempts, times, worker and history), insert-only, with the one index that
-- retention and "what finished lately" need.
CREATE TABLE IF NOT EXISTS revenant.jobs_done (
    id           bigint      PRIMARY KEY,
    queue        text        NOT NULL,
    kind         text        NOT NULL,
    payload      jsonb       NOT NULL,
    attempts     integer     NOT NULL,
    created_at   timestamptz NOT NULL,
    attempted_at timestamptz,
    finished_at  timestamptz NOT NULL,
    worker       text,
    errors       jsonb       NOT NULL
);
CREATE INDEX IF NOT EXISTS jobs_done_finished_idx ON revenant.jobs_done (finished_at);
