//! The behaviour suite every revenant store backend runs unchanged.
//!
//! Each case is an async function in [`cases`] that takes a fresh, empty store and
//! proves one behaviour of the [`Store`] contract with a pinned clock (no sleeps).
//! [`stage`] holds the base time and a factory that puts jobs in any state through
//! store operations only.
//!
//! A backend runs the suite from its `tests/conformance.rs`:
//!
//! ```text
//! use std::sync::Arc;
//! use revenant_core::Store;
//!
//! /// A fresh, isolated store per test (a temp file, a fresh schema, ...).
//! async fn fresh_store() -> Arc<dyn Store> {
//!     Arc::new(my_backend::MyStore::open_temporary().await.unwrap())
//! }
//!
//! revenant_conformance::conformance_suite!(my_backend, fresh_store());
//! ```
//!
//! The macro expands to `mod conformance { mod my_backend { ... } }` with one
//! `#[tokio::test(flavor = "multi_thread", worker_threads = 2)]` per case, so a failure
//! names the backend and the behaviour:
//! `conformance::sqlite::late_ack_after_reclaim_is_rejected`. The factory is any
//! expression that evaluates to a future of `Arc<dyn Store>`, evaluated once per test
//! inside the test module (items of the calling file are in scope). The calling crate
//! needs no tokio dependency of its own for the macro.
//!
//! Capabilities: a case that needs one a backend does not declare prints a line saying
//! it was not exercised (`capabilities_not_declared_are_reported`); it never passes in
//! silence.

pub mod cases;
pub mod migrations;
pub mod stage;
pub mod upgrade;

pub use revenant_core::Store;

#[doc(hidden)]
pub use tokio as __tokio;

/// Emits one `#[tokio::test]` per conformance case for a backend. See the crate docs.
///
/// `conformance_suite!(sqlite, fresh_store())` where `fresh_store` is an
/// `async fn() -> Arc<dyn Store>` in the calling file.
#[macro_export]
macro_rules! conformance_suite {
    ($backend:ident, $factory:expr $(,)?) => {
        $crate::__conformance_cases!(
            $backend,
            $factory,
            [
                cancel::cancel_by_id_cancels_a_ready_job,
                cancel::cancel_by_id_cancels_a_running_job_and_its_lease_is_lost,
                cancel::cancel_by_lease_cancels_the_running_attempt,
                cancel::cancel_by_a_stale_lease_reports_lease_lost,
                cancel::cancel_of_a_terminal_job_reports_not_cancellable,
                cancel::cancel_of_an_unknown_job_reports_not_found,
                claim::claim_counts_the_attempt_at_claim,
                claim::claim_returns_every_field_of_every_job_as_stored,
                claim::claim_gives_a_fresh_lease_token_each_attempt,
                claim::claim_skips_jobs_with_a_live_lease,
                claim::claim_reclaims_an_expired_lease_and_records_lease_expired,
                claim::claim_takes_one_expired_lease_at_most_and_none_without_reclaim,
                claim::claim_takes_at_most_limit_jobs,
                claim::claim_with_limit_zero_claims_nothing,
                claim::claim_orders_by_priority_then_run_at_then_id,
                claim::claim_orders_reclaims_and_ready_jobs_together,
                claim::claim_skips_jobs_not_yet_due,
                claim::claim_takes_due_jobs_of_every_priority_past_scheduled_ones,
                claim::claim_takes_only_jobs_of_its_queue,
                claim::claim_refuses_bad_input,
                claim::concurrent_claimers_never_get_the_same_job,
                claim::concurrent_reclaimers_take_each_expired_job_once,
                claim::claim_makes_an_expired_job_with_no_attempts_left_dead,
                claim::a_job_that_kills_its_worker_ends_dead_with_lease_expired,
                claim::sweep_makes_expired_jobs_with_no_attempts_left_dead,
                claim::claim_run_returns_what_a_worker_runs_each_job_with,
                dead::redrive_resets_attempts_and_keeps_the_history,
                dead::a_redriven_job_gets_a_fresh_attempt_budget,
                dead::redrive_honours_filter_and_limit,
                dead::redrive_by_dead_reason_takes_only_that_reason,
                dead::redrive_spreads_run_at_by_spacing,
                dead::redrive_leaves_a_job_that_is_no_longer_dead_alone,
                dead::purge_deletes_only_dead_jobs_matching_the_filter,
                dead::purge_honours_limit,
                dead::death_sets_a_fingerprint_and_redrive_clears_it,
                dead::job_filter_by_fingerprint_matches_one_error_across_its_variants,
                dead::dead_fingerprints_group_dead_jobs_by_error,
                dead::dead_fingerprints_group_one_host_across_paths,
                dead::redrive_writes_an_audit_record_readable_in_history,
                dead::redrive_chunks_share_one_audit_record_and_keep_the_pace,
                dead::redrive_refuses_a_spacing_that_would_leave_an_unreadable_run_at,
                dependency::acquire_lets_jobs_run_and_records_their_dependency,
                dependency::an_open_breaker_parks_jobs_without_spending_their_attempt,
                dependency::after_the_cooldown_exactly_one_probe_goes_among_concurrent_acquirers,
                dependency::a_probe_success_closes_the_breaker_and_releases_parked_jobs,
                dependency::only_the_current_probe_moves_the_breaker,
                dependency::an_operator_holds_a_breaker_open_and_closes_it,
                dependency::sweep_makes_one_parked_job_due_when_the_breaker_wants_a_probe,
                dependency::the_rate_limit_paces_jobs_and_books_turns_for_the_rest,
                dependency::released_jobs_are_paced_by_the_rate_limit_in_claim_order,
                dependency::the_retry_budget_holds_retries_to_a_share_of_first_attempts,
                dependency::acquire_with_a_lost_lease_changes_nothing,
                dependency::dependency_list_shows_every_dependency_by_key,
                dependency::a_job_at_its_bulkhead_limit_spends_no_attempt_and_holds_no_lease,
                dependency::the_shared_bulkhead_limit_holds_across_workers,
                dependency::slow_calls_open_the_breaker,
                enqueue::enqueue_returns_one_id_per_job_in_input_order,
                enqueue::enqueue_stores_every_field,
                enqueue::enqueue_keeps_the_trace_context,
                enqueue::enqueue_runs_now_or_after_the_delay,
                enqueue::enqueue_without_max_attempts_takes_the_default,
                enqueue::timestamps_keep_millisecond_precision,
                enqueue::enqueue_refuses_bad_input_and_writes_nothing,
                enqueue::enqueue_batch_with_one_bad_job_writes_nothing,
                enqueue::unique_key_returns_the_first_jobs_id,
                enqueue::unique_key_repeated_in_one_batch_yields_one_job,
                enqueue::unique_key_under_concurrent_enqueues_yields_one_job,
                enqueue::unique_key_is_held_until_the_job_is_purged,
                enqueue::enqueue_into_a_paused_queue_is_accepted,
                enqueue::enqueue_refuses_a_run_at_out_of_range,
                fail::fail_retry_sets_run_at_and_keeps_the_attempt_spent,
                fail::fail_keep_leaves_the_job_running_and_counts_its_next_attempt,
                fail::fail_dead_sets_reason_last_error_and_finished_at,
                fail::transient_failures_until_exhaustion_end_dead_with_attempts_exhausted,
                fail::permanent_failure_ends_dead_at_once,
                fail::decode_errors_and_unknown_kinds_end_dead_with_their_reason,
                fail::fail_reports_each_failure_on_its_own,
                fail::error_history_keeps_the_newest_entries,
                fail::every_way_a_failure_is_written_keeps_its_entry_verbatim,
                fail::long_error_messages_are_truncated,
                kept::kept_failures_are_written_with_the_completion,
                kept::kept_failures_come_before_the_failure_that_carries_them,
                kept::kept_failures_of_a_lost_lease_are_not_written,
                kept::kept_failures_past_the_history_limit_keep_the_newest,
                kept::kept_failures_of_jobs_not_in_the_batch_are_refused,
                kept::kept_failures_not_numbered_from_the_stored_attempts_are_not_written,
                group::group_jobs_run_one_at_a_time_in_enqueue_order,
                group::a_retrying_group_head_blocks_its_group,
                group::a_dead_group_head_unblocks_its_group,
                group::other_groups_never_wait_on_a_blocked_group,
                group::group_order_wins_over_priority,
                group::an_expired_group_head_is_reclaimed_before_its_group,
                lease::heartbeat_extends_the_lease,
                lease::stale_heartbeat_reports_lease_lost,
                lease::heartbeat_of_a_finished_or_unknown_lease_reports_lease_lost,
                lease::complete_marks_the_job_completed,
                lease::late_ack_after_reclaim_is_rejected,
                lease::late_fail_after_reclaim_is_rejected,
                lease::complete_reports_each_lease_on_its_own,
                lease::a_second_ack_reports_lease_lost,
                lease::a_lease_repeated_in_one_batch_applies_once,
                lease::an_expired_lease_not_yet_reclaimed_still_accepts_its_holder,
                policy::policy_set_stores_a_policy_that_policy_list_returns,
                policy::policy_set_overwrites_the_scopes_policy,
                policy::policy_delete_removes_only_its_scope_and_says_whether_it_did,
                policy::policy_list_orders_default_then_queues_then_kinds_by_name,
                policy::policy_set_refuses_an_invalid_scope_name_and_names_the_field,
                policy::policy_set_refuses_an_unworkable_policy,
                schedule::schedule_set_keeps_the_tick_of_an_unchanged_spec,
                schedule::schedule_fire_enqueues_each_tick_once,
                schedule::concurrent_fires_of_one_tick_enqueue_one_job,
                schedule::pause_resume_skip_and_run_by_hand,
                schedule::schedule_delete_removes_only_the_schedule,
                schedule::schedule_input_is_refused_by_name,
                prune::prune_deletes_old_finished_jobs_and_keeps_the_rest,
                prune::prune_honours_limit,
                prune::vacuum_refuses_a_bad_fraction_and_changes_no_job,
                queue::queue_pause_stops_claims_and_resume_restarts_them,
                queue::pausing_an_unknown_queue_creates_it_paused,
                queue::queue_stats_count_every_state,
                queue::queue_stats_list_queues_by_name_and_filter_by_queue,
                queue::queue_stats_count_live_workers_per_queue,
                queue::queue_stats_count_completions_and_failures_in_the_interval,
                queue::a_batch_of_failures_counts_each_failure,
                queue::queue_history_rebuilds_depth_and_dead_from_job_times,
                read::job_get_returns_the_whole_history,
                read::job_get_of_an_unknown_id_is_none,
                read::job_list_filters_by_queue_kind_status_group_and_correlation_id,
                read::job_list_filters_dead_jobs_by_reason_error_text_and_finished_range,
                read::job_list_pages_newest_first_by_before_id,
                read::job_list_refuses_a_malformed_queue_name,
                snooze::snooze_gives_the_attempt_back,
                snooze::snooze_on_the_last_attempt_keeps_the_job_alive,
                snooze::release_gives_the_attempt_back_and_the_job_runs_again_at_once,
                snooze::stale_snooze_and_release_report_lease_lost,
                wake::wait_for_jobs_wakes_on_enqueue,
                wake::wait_for_jobs_returns_after_its_timeout,
                wake::store_clock_tells_the_real_time,
                wake::capabilities_not_declared_are_reported,
                worker::worker_heartbeat_registers_and_refreshes_a_worker,
                worker::worker_list_is_ordered_by_worker,
                worker::worker_remove_drops_one_worker,
                worker::worker_remove_stale_drops_only_workers_not_seen_recently,
            ]
        );
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __conformance_cases {
    ($backend:ident, $factory:expr, [$($module:ident :: $case:ident),* $(,)?]) => {
        mod conformance {
            mod $backend {
                #[allow(unused_imports)]
                use super::super::*;
                $(
                    #[$crate::__tokio::test(
                        flavor = "multi_thread",
                        worker_threads = 2,
                        crate = "revenant_conformance::__tokio"
                    )]
                    async fn $case() {
                        let store: ::std::sync::Arc<dyn $crate::Store> = ($factory).await;
                        $crate::cases::$module::$case(store).await;
                    }
                )*
            }
        }
    };
}

/// Every case, as `module::name`, in the order the macro emits them.
pub const CASES: &[&str] = &[
    "cancel::cancel_by_id_cancels_a_ready_job",
    "cancel::cancel_by_id_cancels_a_running_job_and_its_lease_is_lost",
    "cancel::cancel_by_lease_cancels_the_running_attempt",
    "cancel::cancel_by_a_stale_lease_reports_lease_lost",
    "cancel::cancel_of_a_terminal_job_reports_not_cancellable",
    "cancel::cancel_of_an_unknown_job_reports_not_found",
    "claim::claim_counts_the_attempt_at_claim",
    "claim::claim_returns_every_field_of_every_job_as_stored",
    "claim::claim_gives_a_fresh_lease_token_each_attempt",
    "claim::claim_skips_jobs_with_a_live_lease",
    "claim::claim_reclaims_an_expired_lease_and_records_lease_expired",
    "claim::claim_takes_one_expired_lease_at_most_and_none_without_reclaim",
    "claim::claim_takes_at_most_limit_jobs",
    "claim::claim_with_limit_zero_claims_nothing",
    "claim::claim_orders_by_priority_then_run_at_then_id",
    "claim::claim_orders_reclaims_and_ready_jobs_together",
    "claim::claim_skips_jobs_not_yet_due",
    "claim::claim_takes_due_jobs_of_every_priority_past_scheduled_ones",
    "claim::claim_takes_only_jobs_of_its_queue",
    "claim::claim_refuses_bad_input",
    "claim::concurrent_claimers_never_get_the_same_job",
    "claim::concurrent_reclaimers_take_each_expired_job_once",
    "claim::claim_makes_an_expired_job_with_no_attempts_left_dead",
    "claim::a_job_that_kills_its_worker_ends_dead_with_lease_expired",
    "claim::sweep_makes_expired_jobs_with_no_attempts_left_dead",
    "claim::claim_run_returns_what_a_worker_runs_each_job_with",
    "dead::redrive_resets_attempts_and_keeps_the_history",
    "dead::a_redriven_job_gets_a_fresh_attempt_budget",
    "dead::redrive_honours_filter_and_limit",
    "dead::redrive_by_dead_reason_takes_only_that_reason",
    "dead::redrive_spreads_run_at_by_spacing",
    "dead::redrive_leaves_a_job_that_is_no_longer_dead_alone",
    "dead::purge_deletes_only_dead_jobs_matching_the_filter",
    "dead::purge_honours_limit",
    "dead::death_sets_a_fingerprint_and_redrive_clears_it",
    "dead::job_filter_by_fingerprint_matches_one_error_across_its_variants",
    "dead::dead_fingerprints_group_dead_jobs_by_error",
    "dead::dead_fingerprints_group_one_host_across_paths",
    "dead::redrive_writes_an_audit_record_readable_in_history",
    "dead::redrive_chunks_share_one_audit_record_and_keep_the_pace",
    "dead::redrive_refuses_a_spacing_that_would_leave_an_unreadable_run_at",
    "dependency::acquire_lets_jobs_run_and_records_their_dependency",
    "dependency::an_open_breaker_parks_jobs_without_spending_their_attempt",
    "dependency::after_the_cooldown_exactly_one_probe_goes_among_concurrent_acquirers",
    "dependency::a_probe_success_closes_the_breaker_and_releases_parked_jobs",
    "dependency::only_the_current_probe_moves_the_breaker",
    "dependency::an_operator_holds_a_breaker_open_and_closes_it",
    "dependency::sweep_makes_one_parked_job_due_when_the_breaker_wants_a_probe",
    "dependency::the_rate_limit_paces_jobs_and_books_turns_for_the_rest",
    "dependency::released_jobs_are_paced_by_the_rate_limit_in_claim_order",
    "dependency::the_retry_budget_holds_retries_to_a_share_of_first_attempts",
    "dependency::acquire_with_a_lost_lease_changes_nothing",
    "dependency::dependency_list_shows_every_dependency_by_key",
    "dependency::a_job_at_its_bulkhead_limit_spends_no_attempt_and_holds_no_lease",
    "dependency::the_shared_bulkhead_limit_holds_across_workers",
    "dependency::slow_calls_open_the_breaker",
    "enqueue::enqueue_returns_one_id_per_job_in_input_order",
    "enqueue::enqueue_stores_every_field",
    "enqueue::enqueue_keeps_the_trace_context",
    "enqueue::enqueue_runs_now_or_after_the_delay",
    "enqueue::enqueue_without_max_attempts_takes_the_default",
    "enqueue::timestamps_keep_millisecond_precision",
    "enqueue::enqueue_refuses_bad_input_and_writes_nothing",
    "enqueue::enqueue_batch_with_one_bad_job_writes_nothing",
    "enqueue::unique_key_returns_the_first_jobs_id",
    "enqueue::unique_key_repeated_in_one_batch_yields_one_job",
    "enqueue::unique_key_under_concurrent_enqueues_yields_one_job",
    "enqueue::unique_key_is_held_until_the_job_is_purged",
    "enqueue::enqueue_into_a_paused_queue_is_accepted",
    "enqueue::enqueue_refuses_a_run_at_out_of_range",
    "fail::fail_retry_sets_run_at_and_keeps_the_attempt_spent",
    "fail::fail_keep_leaves_the_job_running_and_counts_its_next_attempt",
    "fail::fail_dead_sets_reason_last_error_and_finished_at",
    "fail::transient_failures_until_exhaustion_end_dead_with_attempts_exhausted",
    "fail::permanent_failure_ends_dead_at_once",
    "fail::decode_errors_and_unknown_kinds_end_dead_with_their_reason",
    "fail::fail_reports_each_failure_on_its_own",
    "fail::error_history_keeps_the_newest_entries",
    "fail::every_way_a_failure_is_written_keeps_its_entry_verbatim",
    "fail::long_error_messages_are_truncated",
    "kept::kept_failures_are_written_with_the_completion",
    "kept::kept_failures_come_before_the_failure_that_carries_them",
    "kept::kept_failures_of_a_lost_lease_are_not_written",
    "kept::kept_failures_past_the_history_limit_keep_the_newest",
    "kept::kept_failures_of_jobs_not_in_the_batch_are_refused",
    "kept::kept_failures_not_numbered_from_the_stored_attempts_are_not_written",
    "group::group_jobs_run_one_at_a_time_in_enqueue_order",
    "group::a_retrying_group_head_blocks_its_group",
    "group::a_dead_group_head_unblocks_its_group",
    "group::other_groups_never_wait_on_a_blocked_group",
    "group::group_order_wins_over_priority",
    "group::an_expired_group_head_is_reclaimed_before_its_group",
    "lease::heartbeat_extends_the_lease",
    "lease::stale_heartbeat_reports_lease_lost",
    "lease::heartbeat_of_a_finished_or_unknown_lease_reports_lease_lost",
    "lease::complete_marks_the_job_completed",
    "lease::late_ack_after_reclaim_is_rejected",
    "lease::late_fail_after_reclaim_is_rejected",
    "lease::complete_reports_each_lease_on_its_own",
    "lease::a_second_ack_reports_lease_lost",
    "lease::a_lease_repeated_in_one_batch_applies_once",
    "lease::an_expired_lease_not_yet_reclaimed_still_accepts_its_holder",
    "policy::policy_set_stores_a_policy_that_policy_list_returns",
    "policy::policy_set_overwrites_the_scopes_policy",
    "policy::policy_delete_removes_only_its_scope_and_says_whether_it_did",
    "policy::policy_list_orders_default_then_queues_then_kinds_by_name",
    "policy::policy_set_refuses_an_invalid_scope_name_and_names_the_field",
    "policy::policy_set_refuses_an_unworkable_policy",
    "schedule::schedule_set_keeps_the_tick_of_an_unchanged_spec",
    "schedule::schedule_fire_enqueues_each_tick_once",
    "schedule::concurrent_fires_of_one_tick_enqueue_one_job",
    "schedule::pause_resume_skip_and_run_by_hand",
    "schedule::schedule_delete_removes_only_the_schedule",
    "schedule::schedule_input_is_refused_by_name",
    "prune::prune_deletes_old_finished_jobs_and_keeps_the_rest",
    "prune::prune_honours_limit",
    "prune::vacuum_refuses_a_bad_fraction_and_changes_no_job",
    "queue::queue_pause_stops_claims_and_resume_restarts_them",
    "queue::pausing_an_unknown_queue_creates_it_paused",
    "queue::queue_stats_count_every_state",
    "queue::queue_stats_list_queues_by_name_and_filter_by_queue",
    "queue::queue_stats_count_live_workers_per_queue",
    "queue::queue_stats_count_completions_and_failures_in_the_interval",
    "queue::a_batch_of_failures_counts_each_failure",
    "queue::queue_history_rebuilds_depth_and_dead_from_job_times",
    "read::job_get_returns_the_whole_history",
    "read::job_get_of_an_unknown_id_is_none",
    "read::job_list_filters_by_queue_kind_status_group_and_correlation_id",
    "read::job_list_filters_dead_jobs_by_reason_error_text_and_finished_range",
    "read::job_list_pages_newest_first_by_before_id",
    "read::job_list_refuses_a_malformed_queue_name",
    "snooze::snooze_gives_the_attempt_back",
    "snooze::snooze_on_the_last_attempt_keeps_the_job_alive",
    "snooze::release_gives_the_attempt_back_and_the_job_runs_again_at_once",
    "snooze::stale_snooze_and_release_report_lease_lost",
    "wake::wait_for_jobs_wakes_on_enqueue",
    "wake::wait_for_jobs_returns_after_its_timeout",
    "wake::store_clock_tells_the_real_time",
    "wake::capabilities_not_declared_are_reported",
    "worker::worker_heartbeat_registers_and_refreshes_a_worker",
    "worker::worker_list_is_ordered_by_worker",
    "worker::worker_remove_drops_one_worker",
    "worker::worker_remove_stale_drops_only_workers_not_seen_recently",
];

#[cfg(test)]
mod tests {
    /// Every public case function is listed in [`super::CASES`] (and so in the macro,
    /// which is written from the same list): a case nobody runs is a defect.
    #[test]
    fn every_case_is_listed() {
        let sources = [
            ("cancel", include_str!("cases/cancel.rs")),
            ("claim", include_str!("cases/claim.rs")),
            ("dead", include_str!("cases/dead.rs")),
            ("dependency", include_str!("cases/dependency.rs")),
            ("enqueue", include_str!("cases/enqueue.rs")),
            ("fail", include_str!("cases/fail.rs")),
            ("kept", include_str!("cases/kept.rs")),
            ("group", include_str!("cases/group.rs")),
            ("lease", include_str!("cases/lease.rs")),
            ("policy", include_str!("cases/policy.rs")),
            ("schedule", include_str!("cases/schedule.rs")),
            ("prune", include_str!("cases/prune.rs")),
            ("queue", include_str!("cases/queue.rs")),
            ("read", include_str!("cases/read.rs")),
            ("snooze", include_str!("cases/snooze.rs")),
            ("wake", include_str!("cases/wake.rs")),
            ("worker", include_str!("cases/worker.rs")),
        ];
        let mut defined = Vec::new();
        for (module, source) in sources {
            for line in source.lines() {
                if let Some(rest) = line.strip_prefix("pub async fn ") {
                    let name: String = rest
                        .chars()
                        .take_while(|c| c.is_alphanumeric() || *c == '_')
                        .collect();
                    defined.push(format!("{module}::{name}"));
                }
            }
        }
        let listed: Vec<String> = super::CASES.iter().map(|c| c.to_string()).collect();
        assert_eq!(listed, defined);
    }

    /// The macro lists the same cases as [`super::CASES`].
    #[test]
    fn the_macro_lists_every_case() {
        let source = include_str!("lib.rs");
        let marker = concat!("$crate::", "__conformance_cases!(");
        let start = source.find(marker).expect("macro body");
        let start = source[start..].find('[').expect("start of list") + start + 1;
        let end = source[start..].find(']').expect("end of list") + start;
        let in_macro: Vec<String> = source[start..end]
            .lines()
            .map(|line| line.trim().trim_end_matches(',').to_string())
            .filter(|line| !line.is_empty())
            .collect();
        let listed: Vec<String> = super::CASES.iter().map(|c| c.to_string()).collect();
        assert_eq!(in_macro, listed);
    }
}
