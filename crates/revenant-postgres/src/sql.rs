//! The backend's SQL, loaded from `queries/<op>.sql` and rendered once per store.
//!
//! The files name tables as `{schema}.jobs`, so every statement is schema-qualified and
//! works on any connection, including a caller's own transaction (whose `search_path`
//! is theirs, not ours). Rendering replaces `{schema}` with the quoted schema name,
//! `{job_columns}` with the column list [`crate::row`] decodes, and `{job_filter}`
//! with the shared [`revenant_core::store::JobFilter`] predicate.

/// The columns of a job, in the order [`crate::row::job_from_row`] reads them, for a
/// `jobs` table aliased `j`.
const JOB_COLUMNS: &str = "j.id, j.queue, j.kind, j.payload, j.status, j.priority, j.attempts, \
    j.max_attempts, j.run_at, j.created_at, j.attempted_at, j.finished_at, j.lease_token, \
    j.lease_expires_at, j.worker, j.group_key, j.unique_key, j.correlation_id, \
    j.dead_reason, j.errors, j.redrives, j.fingerprint, j.dependency, j.dependency_wait, \
    j.traceparent, j.tracestate";

const JOB_FILTER: &str = include_str!("../queries/job_filter.sql");

/// Every statement the store runs, rendered for one schema.
#[derive(Debug)]
pub(crate) struct Queries {
    pub job_enqueue: String,
    pub job_enqueue_holders: String,
    pub job_notify: String,
    pub job_claim: String,
    pub job_claim_run: String,
    pub job_heartbeat: String,
    pub job_complete: String,
    pub job_complete_kept: String,
    pub job_fail: String,
    pub job_fail_kept: String,
    pub job_snooze: String,
    pub job_release: String,
    pub job_cancel: String,
    pub job_status: String,
    pub job_get: String,
    pub job_list: String,
    pub job_sweep: String,
    pub job_redrive: String,
    pub job_purge: String,
    pub job_prune: String,
    pub job_vacuum_state: String,
    pub job_vacuum: String,
    pub dead_fingerprints: String,
    pub redrive_history: String,
    pub dead_unfingerprinted: String,
    pub job_set_fingerprint: String,
    pub queue_set_paused: String,
    pub queue_stats: String,
    pub queue_history: String,
    pub worker_heartbeat: String,
    pub worker_list: String,
    pub worker_remove: String,
    pub worker_remove_stale: String,
    pub store_now: String,
    pub dependency_lock: String,
    pub dependency_insert: String,
    pub dependency_put: String,
    pub dependency_list: String,
    pub dependency_waiting: String,
    pub dependency_parked: String,
    pub dependency_release: String,
    pub dependency_sweep_release: String,
    pub job_gate_running: String,
    pub job_gate: String,
    pub policy_list: String,
    pub policy_set: String,
    pub policy_delete: String,
}

impl Queries {
    /// Renders every statement for `schema` (already validated; quoted here).
    pub(crate) fn new(schema: &str) -> Self {
        let quoted = quote_ident(schema);
        let render = |template: &str| render(template, &quoted);
        Queries {
            job_enqueue: render(include_str!("../queries/job_enqueue.sql")),
            job_enqueue_holders: render(include_str!("../queries/job_enqueue_holders.sql")),
            job_notify: render(include_str!("../queries/job_notify.sql")),
            job_claim: render(include_str!("../queries/job_claim.sql")),
            job_claim_run: render(include_str!("../queries/job_claim_run.sql")),
            job_heartbeat: render(include_str!("../queries/job_heartbeat.sql")),
            job_complete: render(include_str!("../queries/job_complete.sql")),
            job_complete_kept: render(include_str!("../queries/job_complete_kept.sql")),
            job_fail: render(include_str!("../queries/job_fail.sql")),
            job_fail_kept: render(include_str!("../queries/job_fail_kept.sql")),
            job_snooze: render(include_str!("../queries/job_snooze.sql")),
            job_release: render(include_str!("../queries/job_release.sql")),
            job_cancel: render(include_str!("../queries/job_cancel.sql")),
            job_status: render(include_str!("../queries/job_status.sql")),
            job_get: render(include_str!("../queries/job_get.sql")),
            job_list: render(include_str!("../queries/job_list.sql")),
            job_sweep: render(include_str!("../queries/job_sweep.sql")),
            job_redrive: render(include_str!("../queries/job_redrive.sql")),
            job_purge: render(include_str!("../queries/job_purge.sql")),
            job_prune: render(include_str!("../queries/job_prune.sql")),
            job_vacuum_state: render(include_str!("../queries/job_vacuum_state.sql")),
            job_vacuum: render(include_str!("../queries/job_vacuum.sql")),
            dead_fingerprints: render(include_str!("../queries/dead_fingerprints.sql")),
            redrive_history: render(include_str!("../queries/redrive_history.sql")),
            dead_unfingerprinted: render(include_str!("../queries/dead_unfingerprinted.sql")),
            job_set_fingerprint: render(include_str!("../queries/job_set_fingerprint.sql")),
            queue_set_paused: render(include_str!("../queries/queue_set_paused.sql")),
            queue_stats: render(include_str!("../queries/queue_stats.sql")),
            queue_history: render(include_str!("../queries/queue_history.sql")),
            worker_heartbeat: render(include_str!("../queries/worker_heartbeat.sql")),
            worker_list: render(include_str!("../queries/worker_list.sql")),
            worker_remove: render(include_str!("../queries/worker_remove.sql")),
            worker_remove_stale: render(include_str!("../queries/worker_remove_stale.sql")),
            store_now: render(include_str!("../queries/store_now.sql")),
            dependency_lock: render(include_str!("../queries/dependency_lock.sql")),
            dependency_insert: render(include_str!("../queries/dependency_insert.sql")),
            dependency_put: render(include_str!("../queries/dependency_put.sql")),
            dependency_list: render(include_str!("../queries/dependency_list.sql")),
            dependency_waiting: render(include_str!("../queries/dependency_waiting.sql")),
            dependency_parked: render(include_str!("../queries/dependency_parked.sql")),
            dependency_release: render(include_str!("../queries/dependency_release.sql")),
            dependency_sweep_release: render(include_str!(
                "../queries/dependency_sweep_release.sql"
            )),
            job_gate_running: render(include_str!("../queries/job_gate_running.sql")),
            job_gate: render(include_str!("../queries/job_gate.sql")),
            policy_list: render(include_str!("../queries/policy_list.sql")),
            policy_set: render(include_str!("../queries/policy_set.sql")),
            policy_delete: render(include_str!("../queries/policy_delete.sql")),
        }
    }
}

/// Fills a template's placeholders. `quoted_schema` is already an SQL identifier.
pub(crate) fn render(template: &str, quoted_schema: &str) -> String {
    template
        .replace("{job_filter}", JOB_FILTER.trim())
        .replace("{job_columns}", JOB_COLUMNS)
        .replace("{schema}", quoted_schema)
}

/// Quotes an identifier for SQL (`"name"`, with inner quotes doubled).
pub(crate) fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_placeholder_is_filled() {
        let queries = Queries::new("rv_test");
        let all = format!("{queries:?}");
        assert!(!all.contains("{schema}"));
        assert!(!all.contains("{job_columns}"));
        assert!(!all.contains("{job_filter}"));
        assert!(queries.job_claim.contains("\"rv_test\".job_claim_v2("));
    }
}
