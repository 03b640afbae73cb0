-- revenant's SQLite schema. Timestamps are INTEGER milliseconds since the Unix epoch,
-- taken from the owning process's clock (or pinned by the caller).

-- Queues exist once something names them: an enqueue inserts the row if it is missing,
-- a pause of an unknown queue creates it paused.
CREATE TABLE queues (
    name        TEXT    PRIMARY KEY NOT NULL,
    paused      INTEGER NOT NULL DEFAULT 0 CHECK (paused IN (0, 1)),
    created_at  INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL
) STRICT;

-- AUTOINCREMENT so an id is never reused after a prune or purge: an id in an old log
-- line or a stale worker's hands always means the same job.
CREATE TABLE jobs (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    queue            TEXT    NOT NULL,
    kind             TEXT    NOT NULL,
    payload          TEXT    NOT NULL,             -- JSON
    status           TEXT    NOT NULL
                     CHECK (status IN ('ready', 'running', 'completed', 'dead', 'cancelled')),
    priority         INTEGER NOT NULL DEFAULT 0,
    attempts         INTEGER NOT NULL DEFAULT 0,
    max_attempts     INTEGER NOT NULL,
    run_at           INTEGER NOT NULL,
    created_at       INTEGER NOT NULL,
    attempted_at     INTEGER,
    finished_at      INTEGER,
    lease_token      INTEGER,                      -- set only while running
    lease_expires_at INTEGER,                      -- set only while running
    worker           TEXT,
    group_key        TEXT,
    unique_key       TEXT,
    correlation_id   TEXT,
    dead_reason      TEXT,                         -- set only while dead
    errors           TEXT    NOT NULL DEFAULT '[]', -- JSON array of ErrorEntry, oldest first, bounded
    redrives         INTEGER NOT NULL DEFAULT 0
) STRICT;

-- The claim: due ready jobs of a queue by priority, run_at, id; expired running jobs.
CREATE INDEX jobs_claim ON jobs (queue, status, priority DESC, run_at, id);
-- Expired leases (claim's dead sweep and job_sweep).
CREATE INDEX jobs_lease ON jobs (lease_expires_at) WHERE status = 'running';
-- The group check: is another job of this group running, or an earlier one ready?
CREATE INDEX jobs_group ON jobs (group_key, id)
    WHERE group_key IS NOT NULL AND status IN ('ready', 'running');
-- Dead-letter listing and pruning of finished jobs.
CREATE INDEX jobs_finished ON jobs (status, finished_at);
-- Listing by correlation id follows one piece of work across systems.
CREATE INDEX jobs_correlation ON jobs (correlation_id) WHERE correlation_id IS NOT NULL;
-- A unique key is held for the job's whole life, until the job is pruned or purged.
CREATE UNIQUE INDEX jobs_unique_key ON jobs (unique_key) WHERE unique_key IS NOT NULL;

-- The worker registry.
CREATE TABLE workers (
    worker       TEXT    PRIMARY KEY NOT NULL,
    host         TEXT    NOT NULL,
    pid          INTEGER NOT NULL,
    queues       TEXT    NOT NULL,                 -- JSON array of queue names
    started_at   INTEGER NOT NULL,
    last_seen_at INTEGER NOT NULL
) STRICT;
