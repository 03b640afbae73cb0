-- Periodic jobs: the schedules every worker, the CLI and the HTTP server read.
--
-- One row per schedule. `spec` is the JSON of revenant_core::schedule::ScheduleSpec (a
-- row that no longer decodes is skipped, and logged, by schedule_list). `next_tick` is
-- the oldest tick not yet handled: a worker enqueues tick t only by moving next_tick
-- from t to the tick after (compare-and-set) in the transaction that inserts the job,
-- so each tick is enqueued once however many workers run, with no leader.
CREATE TABLE {schema}.schedules (
    name       text        PRIMARY KEY,
    spec       jsonb       NOT NULL,
    paused     boolean     NOT NULL DEFAULT false,
    next_tick  timestamptz NOT NULL,
    last_tick  timestamptz,
    last_job   bigint,
    updated_at timestamptz NOT NULL
);
