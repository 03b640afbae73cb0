-- Dead-letter triage, redrive audit and the failure counts of queue_stats.

-- The fingerprint of the error a dead job died of (revenant_core::fingerprint), set when
-- it dies, cleared on redrive. Dead jobs written before this migration are filled in by
-- the store when it opens the database (SQL cannot compute the hash).
ALTER TABLE jobs ADD COLUMN fingerprint TEXT;
-- dead_fingerprints and filtering by fingerprint.
CREATE INDEX jobs_dead_fingerprint ON jobs (fingerprint, finished_at) WHERE status = 'dead';

-- One row per failed attempt (job_fail, and every expired lease), written in the same
-- transaction as the failure, so queue_stats counts failures in any window exactly.
-- Append-only: no row is ever updated, so writers never wait on each other here.
-- Pruned by job_prune with the finished jobs.
CREATE TABLE attempt_failures (
    queue TEXT    NOT NULL,
    class TEXT    NOT NULL,
    at    INTEGER NOT NULL
) STRICT;
CREATE INDEX attempt_failures_queue_at ON attempt_failures (queue, at);
CREATE INDEX attempt_failures_at ON attempt_failures (at);

-- The redrive audit: one row per redrive (the chunks of one large redrive share a
-- row through audit_key).
CREATE TABLE redrives (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    audit_key    TEXT    UNIQUE,
    at           INTEGER NOT NULL,
    updated_at   INTEGER NOT NULL,
    filter       TEXT    NOT NULL,                 -- JSON JobFilter
    spacing_ms   INTEGER NOT NULL,
    count        INTEGER NOT NULL,
    first_job_id INTEGER NOT NULL,
    last_job_id  INTEGER NOT NULL,
    actor        TEXT,
    note         TEXT
) STRICT;
