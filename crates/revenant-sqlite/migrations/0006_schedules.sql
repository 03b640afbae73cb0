-- Periodic jobs: the schedules every worker, the CLI and the HTTP server read.
--
-- One row per schedule. `spec` is the JSON of revenant_core::schedule::ScheduleSpec (a
-- row that no longer decodes is skipped, and logged, by schedule_list). `next_tick` is
-- the oldest tick not yet handled: a worker enqueues tick t only by moving next_tick
-- from t to the tick after (compare-and-set) in the transaction that inserts the job,
-- so each tick is enqueued once however many workers run. Times in Unix milliseconds.
CREATE TABLE schedules (
    name       TEXT    NOT NULL PRIMARY KEY,
    spec       TEXT    NOT NULL,                 -- JSON ScheduleSpec
    paused     INTEGER NOT NULL DEFAULT 0 CHECK (paused IN (0, 1)),
    next_tick  INTEGER NOT NULL,
    last_tick  INTEGER,
    last_job   INTEGER,
    updated_at INTEGER NOT NULL
) STRICT;
