-- job_redrive: dead jobs matching the filter ($1..$11), oldest (lowest id) first, at
-- most $12 (NULL: all) -> ready. Attempts reset to 0, history kept, redrives counted,
-- fingerprint cleared, and the i-th job (from 0) runs at start + i * $13 ms, where
-- start is $15 (NULL or past: now). A job that stopped being dead while we waited for
-- its lock is left alone (READ COMMITTED re-checks the WHERE). $14: now (NULL: the
-- database clock).
--
-- The audit record is written by the same statement: $16 audit_key (NULL: a new
-- record; else add to the record with that key), $17 the filter as JSON, $18 actor,
-- $19 note. Nothing is recorded when no job moved.
WITH t AS (
    SELECT date_trunc('milliseconds', coalesce($14::timestamptz, now())) AS now
),
s AS (
    SELECT greatest(t.now, coalesce($15::timestamptz, t.now)) AS start FROM t
),
picked AS (
    SELECT j.id
    FROM {schema}.jobs j
    WHERE j.status = 'dead'
      AND {job_filter}
    ORDER BY j.id
    LIMIT $12
    FOR UPDATE OF j
),
numbered AS (
    SELECT p.id, row_number() OVER (ORDER BY p.id) - 1 AS n FROM picked p
),
moved AS (
    UPDATE {schema}.jobs j
    SET status = 'ready',
        attempts = 0,
        run_at = s.start + (n.n * $13::float8) * interval '1 millisecond',
        dead_reason = NULL,
        fingerprint = NULL,
        finished_at = NULL,
        lease_token = NULL,
        lease_expires_at = NULL,
        redrives = j.redrives + 1
    FROM numbered n, t, s
    WHERE j.id = n.id AND j.status = 'dead'
    RETURNING j.id, j.queue, j.run_at <= t.now AS due
),
summary AS (
    SELECT count(*) AS moved, min(id) AS first_id, max(id) AS last_id FROM moved
),
audit AS (
    INSERT INTO {schema}.redrives AS r (audit_key, at, updated_at, filter, spacing_ms, count,
                                        first_job_id, last_job_id, actor, note)
    SELECT $16::text, t.now, t.now, $17::text::jsonb, $13::int8, m.moved, m.first_id,
           m.last_id, $18::text, $19::text
    FROM summary m, t
    WHERE m.moved > 0
    ON CONFLICT (audit_key) DO UPDATE
    SET count = r.count + excluded.count,
        last_job_id = excluded.last_job_id,
        updated_at = excluded.updated_at
)
SELECT id, queue, due FROM moved
