-- job_vacuum: the jobs table's live and dead rows as the server's statistics count
-- them, how many vacuum passes (manual and automatic) have finished on it, and whether
-- this role may vacuum it: PostgreSQL lets the table's owner, the database's owner and
-- superusers (whom pg_has_role always answers true) do it, and from version 17 a role
-- that holds MAINTAIN on the table (granted, or through pg_maintain). The privilege is
-- asked for only on a server that knows it: an older one refuses the word `MAINTAIN`
-- when the call runs, and CASE runs a branch only when its condition holds (the call
-- takes a column, so it is not folded at plan time either).
SELECT pg_stat_get_live_tuples(c.oid) AS live_rows,
       pg_stat_get_dead_tuples(c.oid) AS dead_rows,
       pg_stat_get_vacuum_count(c.oid) + pg_stat_get_autovacuum_count(c.oid) AS passes,
       pg_has_role(c.relowner, 'USAGE') OR pg_has_role(d.datdba, 'USAGE')
           OR CASE WHEN current_setting('server_version_num')::int >= 170000
                   THEN has_table_privilege(c.oid, 'MAINTAIN')
                   ELSE false
              END AS permitted
FROM pg_class c, pg_database d
WHERE c.oid = '{schema}.jobs'::regclass
  AND d.datname = current_database()
