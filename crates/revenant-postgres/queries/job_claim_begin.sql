-- job_claim_begin: the transaction a claim runs in, on its prepared statement's generic
-- plan and with JIT compilation off (`job_claim` in store.rs says why). Both settings
-- end with the transaction.
BEGIN;
SET LOCAL plan_cache_mode = force_generic_plan;
SET LOCAL jit = off;
