//! The backend's SQL, loaded from `queries/<op>.sql` at compile time.
//!
//! Statements that take a [`revenant_core::store::JobFilter`] are three files
//! concatenated: the head of the statement, the shared `job_filter.sql` predicate
//! (parameters ?1 to ?11, bound by the store's `bind_filter`) and the statement's tail.
//! The batch writes of failed attempts are three files in the same way: the head, the
//! shared `history_append.sql` (a job's history with the failure's entry appended) and
//! the tail. Batched statements take one JSON array parameter and walk it with
//! `json_each`.

pub(crate) const QUEUE_ENSURE: &str = include_str!("../queries/queue_ensure.sql");
pub(crate) const QUEUE_SET_PAUSED: &str = include_str!("../queries/queue_set_paused.sql");
pub(crate) const QUEUE_PAUSED: &str = include_str!("../queries/queue_paused.sql");
pub(crate) const QUEUE_STATS: &str = include_str!("../queries/queue_stats.sql");
pub(crate) const QUEUE_HISTORY: &str = include_str!("../queries/queue_history.sql");
pub(crate) const JOB_ENQUEUE: &str = include_str!("../queries/job_enqueue.sql");
pub(crate) const JOB_COUNT_ID_RANGE: &str = include_str!("../queries/job_count_id_range.sql");
pub(crate) const JOB_UNIQUE_FIND_MANY: &str = include_str!("../queries/job_unique_find_many.sql");
pub(crate) const JOB_EXPIRED_EXHAUSTED: &str = include_str!("../queries/job_expired_exhausted.sql");
pub(crate) const JOB_KILL_EXPIRED: &str = include_str!("../queries/job_kill_expired.sql");
pub(crate) const JOB_CLAIM_CANDIDATES: &str = include_str!("../queries/job_claim_candidates.sql");
pub(crate) const JOB_CLAIM_PRIORITY: &str = include_str!("../queries/job_claim_priority.sql");
pub(crate) const JOB_CLAIM: &str = include_str!("../queries/job_claim.sql");
pub(crate) const JOB_HEARTBEAT: &str = include_str!("../queries/job_heartbeat.sql");
pub(crate) const JOB_FAIL_DEAD_BATCH: &str = concat!(
    include_str!("../queries/job_fail_dead_batch.sql"),
    include_str!("../queries/history_append.sql"),
    include_str!("../queries/job_fail_dead_batch_tail.sql"),
);
pub(crate) const JOB_SNOOZE: &str = include_str!("../queries/job_snooze.sql");
pub(crate) const JOB_CANCEL_GET: &str = include_str!("../queries/job_cancel_get.sql");
pub(crate) const JOB_CANCEL: &str = include_str!("../queries/job_cancel.sql");
pub(crate) const JOB_GET: &str = include_str!("../queries/job_get.sql");
pub(crate) const JOB_LIST: &str = concat!(
    include_str!("../queries/job_list.sql"),
    include_str!("../queries/job_filter.sql"),
    include_str!("../queries/job_list_tail.sql"),
);
pub(crate) const JOB_REDRIVE_SELECT: &str = concat!(
    include_str!("../queries/job_redrive_select.sql"),
    include_str!("../queries/job_filter.sql"),
    include_str!("../queries/job_redrive_select_tail.sql"),
);
pub(crate) const JOB_REDRIVE: &str = include_str!("../queries/job_redrive.sql");
pub(crate) const JOB_PURGE: &str = concat!(
    include_str!("../queries/job_purge.sql"),
    include_str!("../queries/job_filter.sql"),
    include_str!("../queries/job_purge_tail.sql"),
);
pub(crate) const JOB_PRUNE: &str = include_str!("../queries/job_prune.sql");
pub(crate) const ATTEMPT_FAILURE_LOG: &str = include_str!("../queries/attempt_failure_log.sql");
pub(crate) const ATTEMPT_FAILURE_LOG_BATCH: &str =
    include_str!("../queries/attempt_failure_log_batch.sql");
pub(crate) const JOB_CLAIM_READY: &str = include_str!("../queries/job_claim_ready.sql");
pub(crate) const JOB_CLAIMED: &str = include_str!("../queries/job_claimed.sql");
pub(crate) const JOB_CLAIMED_RUN: &str = include_str!("../queries/job_claimed_run.sql");
pub(crate) const JOB_RUNNING_BY_IDS: &str = include_str!("../queries/job_running_by_ids.sql");
pub(crate) const JOB_COMPLETE_BATCH: &str = include_str!("../queries/job_complete_batch.sql");
pub(crate) const JOB_COMPLETE_KEPT_BATCH: &str = concat!(
    include_str!("../queries/job_complete_kept_batch.sql"),
    include_str!("../queries/history_append.sql"),
    include_str!("../queries/job_complete_kept_batch_tail.sql"),
);
pub(crate) const JOB_FAIL_RETRY_BATCH: &str = concat!(
    include_str!("../queries/job_fail_retry_batch.sql"),
    include_str!("../queries/history_append.sql"),
    include_str!("../queries/job_fail_retry_batch_tail.sql"),
);
pub(crate) const JOB_FAIL_KEEP_BATCH: &str = concat!(
    include_str!("../queries/job_fail_keep_batch.sql"),
    include_str!("../queries/history_append.sql"),
    include_str!("../queries/job_fail_keep_batch_tail.sql"),
);
pub(crate) const ATTEMPT_FAILURE_PRUNE: &str = include_str!("../queries/attempt_failure_prune.sql");
pub(crate) const REDRIVE_AUDIT: &str = include_str!("../queries/redrive_audit.sql");
pub(crate) const REDRIVE_HISTORY: &str = include_str!("../queries/redrive_history.sql");
pub(crate) const DEAD_FINGERPRINTS: &str = concat!(
    include_str!("../queries/dead_fingerprints.sql"),
    include_str!("../queries/job_filter.sql"),
    include_str!("../queries/dead_fingerprints_tail.sql"),
);
pub(crate) const DEAD_UNFINGERPRINTED: &str = include_str!("../queries/dead_unfingerprinted.sql");
pub(crate) const JOB_SET_FINGERPRINT: &str = include_str!("../queries/job_set_fingerprint.sql");
pub(crate) const WORKER_HEARTBEAT: &str = include_str!("../queries/worker_heartbeat.sql");
pub(crate) const WORKER_LIST: &str = include_str!("../queries/worker_list.sql");
pub(crate) const WORKER_REMOVE: &str = include_str!("../queries/worker_remove.sql");
pub(crate) const WORKER_REMOVE_STALE: &str = include_str!("../queries/worker_remove_stale.sql");
pub(crate) const DEPENDENCY_GET: &str = include_str!("../queries/dependency_get.sql");
pub(crate) const DEPENDENCY_PUT: &str = include_str!("../queries/dependency_put.sql");
pub(crate) const DEPENDENCY_LIST: &str = include_str!("../queries/dependency_list.sql");
pub(crate) const DEPENDENCY_WAITING: &str = include_str!("../queries/dependency_waiting.sql");
pub(crate) const DEPENDENCY_PARKED: &str = include_str!("../queries/dependency_parked.sql");
pub(crate) const DEPENDENCY_RELEASE: &str = include_str!("../queries/dependency_release.sql");
pub(crate) const DEPENDENCY_SWEEP_RELEASE: &str =
    include_str!("../queries/dependency_sweep_release.sql");
pub(crate) const JOB_GATE_RUNNING: &str = include_str!("../queries/job_gate_running.sql");
pub(crate) const JOB_GATE_RUN: &str = include_str!("../queries/job_gate_run.sql");
pub(crate) const JOB_GATE_DEFER: &str = include_str!("../queries/job_gate_defer.sql");
pub(crate) const POLICY_LIST: &str = include_str!("../queries/policy_list.sql");
pub(crate) const POLICY_SET: &str = include_str!("../queries/policy_set.sql");
pub(crate) const POLICY_DELETE: &str = include_str!("../queries/policy_delete.sql");
