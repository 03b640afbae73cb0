-- job_vacuum: the jobs table's live and dead rows as the server's statistics count
-- them, how many vacuum passes (manual and automatic) have finished on it, and whether
-- this role may vacuum it: PostgreSQL lets the table's owner, the database's owner and
-- superusers (whom pg_has_role always answers true) do it. PostgreSQL 17 also lets a
-- role granted MAINTAIN on the table; such a role is told it may not, and the
-- server's autovacuum keeps the table as before.
SELECT pg_stat_get_live_tuples(c.oid) AS live_rows,
       pg_stat_get_dead_tuples(c.oid) AS dead_rows,
       pg_stat_get_vacuum_count(c.oid) + pg_stat_get_autovacuum_count(c.oid) AS passes,
       pg_has_role(c.relowner, 'USAGE') OR pg_has_role(d.datdba, 'USAGE') AS permitted
FROM pg_class c, pg_database d
WHERE c.oid = '{schema}.jobs'::regclass
  AND d.datname = current_database()
