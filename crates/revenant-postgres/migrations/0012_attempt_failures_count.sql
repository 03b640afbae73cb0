-- attempt_failures: one row per batch of failures, not per failure.
--
-- A batch of failed attempts (job_fail) logged a row for each: a heap insert and an
-- entry in both of the table's indexes, about 3 µs of a failure's 19 µs of statement
-- time (50,000 failures in batches of 500, by hand: 15.3 µs a failure without the
-- insert against 18.9 with it) and three WAL records per failure. A failure storm
-- (a provider answering 503 for half an hour) is when this table grows fastest and
-- when the database has the least to spare. Now a batch writes one row per queue and
-- class with how many failed: what queue_stats counts is the same, its sum instead of
-- its rows.
--
-- Rows written before this migration, and the rows of the writers that still log one
-- failure at a time (expired leases, rare), count 1 each (the default). During a
-- rolling deploy a reader of the previous release counts a batch's row as one failure:
-- its failure rate reads low until it is replaced. Nothing decides from it but the
-- numbers shown (queue_stats, the alerts that read them).
ALTER TABLE {schema}.attempt_failures
    ADD COLUMN failures integer NOT NULL DEFAULT 1 CHECK (failures > 0);
