-- job_vacuum: one pass over the jobs table. SKIP_LOCKED: with another vacuum of the
-- table running (another worker's, or autovacuum's), skip it instead of waiting. A
-- manual VACUUM runs without the cost-based delay (`vacuum_cost_delay` is 0 unless the
-- server sets it), as migration 9 makes autovacuum run on this table.
VACUUM (SKIP_LOCKED) {schema}.jobs
