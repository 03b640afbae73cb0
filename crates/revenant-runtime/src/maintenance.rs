//! Maintenance: the work a worker does besides running jobs.
//!
//! - **Lease sweep** ([`Store::job_sweep`]): a running job whose lease expired with no
//!   attempt left is made dead with reason `lease_expired`. This is how a job that
//!   kills its worker stops killing workers. (Expired jobs with attempts left are
//!   reclaimed by the next claim.)
//! - **Prune** ([`Store::job_prune`]): completed and cancelled jobs past the retention
//!   are deleted, in bounded batches. Dead jobs are never pruned.
//! - **Vacuum** ([`Store::job_vacuum`]), on PostgreSQL: every 15 s, when enough dead
//!   rows have piled up in the jobs table, one pass over it, in its own task. The
//!   server's autovacuum visits a database once a minute by default; at thousands of
//!   jobs a second each of its passes has a minute of dead rows to clear, and pickups
//!   slow while it runs (docs/deploy.md, "Vacuum"). Short passes every few seconds keep
//!   those episodes small without a server setting. Never waits on another vacuum of
//!   the table; a role that may not vacuum it is told once in the log, and the
//!   server's autovacuum alone keeps it.
//! - **Worker registry** ([`Store::worker_heartbeat`]): the worker says it is alive,
//!   and workers not seen for a long time are dropped from the registry.
//! - **Stats sampling** ([`Store::queue_stats`]), when asked for: the per-queue gauges
//!   of [`crate::metrics`].
//! - **Dependencies**, when the worker protects them: on the sweep's interval,
//!   [`Store::dependency_sweep`] makes one parked job due for a breaker that wants a
//!   probe when no new job of its key arrives; with the stats sampling, the
//!   per-dependency gauges.
//! - **Alerts**, when given rules ([`crate::alert`]): evaluated on their own interval,
//!   in their own task so a slow webhook never delays the lease sweep; sent to the log
//!   and the webhook. A webhook that fails is logged and tried again at the next
//!   evaluation; it never ends the worker.
//!
//! Every worker runs maintenance; each step is idempotent, so several workers doing
//! it at once is harmless. A failing store is logged and tried again at the next tick.
//!
//! [`Store::job_sweep`]: revenant_core::store::Store::job_sweep
//! [`Store::job_prune`]: revenant_core::store::Store::job_prune
//! [`Store::job_vacuum`]: revenant_core::store::Store::job_vacuum
//! [`Store::worker_heartbeat`]: revenant_core::store::Store::worker_heartbeat
//! [`Store::queue_stats`]: revenant_core::store::Store::queue_stats
//! [`Store::dependency_sweep`]: revenant_core::store::Store::dependency_sweep

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::time::MissedTickBehavior;
use tokio_util::sync::CancellationToken;

use crate::alert::{self, AlertConfig, AlertState, Notifier};
use crate::metrics::{self, AttemptOutcome};
use crate::settle;
use crate::worker::Shared;
use revenant_core::error::InputError;
use revenant_core::job::{DeadReason, FailureClass};
use revenant_core::store::{
    DependencyListParams, DependencySweepParams, JobGetParams, JobPruneParams, JobSweepParams,
    JobVacuumParams, JobVacuumed, QueueStatsParams, WorkerHeartbeatParams, WorkerRemoveParams,
};

/// When and how maintenance runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MaintenanceConfig {
    /// How often expired leases with no attempt left are swept to `dead`. Default 5 s:
    /// a job that crashes its worker on its last attempt is dead within lease + 5 s.
    pub sweep_interval: Duration,
    /// How often finished jobs are pruned. Default 1 min.
    pub prune_interval: Duration,
    /// How long completed and cancelled jobs are kept. Default 24 h, long enough to
    /// answer "did yesterday evening's receipts go out?". Dead jobs are never pruned.
    pub retention: Duration,
    /// How often the worker records itself in the registry. Default 10 s; operators
    /// should count a worker alive if seen within a few intervals (30 s).
    pub registry_interval: Duration,
    /// How often the jobs table's dead rows are looked at, and vacuumed when there are
    /// at least 10,000 and 1% of the live rows (PostgreSQL; SQLite needs no vacuum and
    /// the task ends at once). Default 15 s. `None` leaves the table to the server's
    /// autovacuum alone, which starts a pass at most once per `autovacuum_naptime`
    /// (60 s by default). Each look is one read of the table's statistics; each pass
    /// reads the table's indexes in full and the pages changed since the last pass.
    pub vacuum_interval: Option<Duration>,
    /// Workers not seen for this long are removed from the registry. Default 10 min,
    /// so a crashed worker stays visible (as not alive) for a while before it goes.
    pub stale_worker_after: Duration,
    /// How often the per-queue gauges (`revenant_queue_*`) are sampled from the store,
    /// if at all. Default `None`: without a metrics exporter nobody reads them, and
    /// each sample is a count query over the jobs table. `revenant work
    /// --metrics-addr` sets 15 s, about one Prometheus scrape interval.
    pub queue_gauges: Option<Duration>,
    /// Whether this worker runs maintenance at all. Default true. Turn it off only
    /// when another process is sure to run it; without any sweep, a job that kills
    /// its worker on its last attempt stays `running` until a claim finds it.
    pub enabled: bool,
}

impl Default for MaintenanceConfig {
    fn default() -> Self {
        MaintenanceConfig {
            sweep_interval: Duration::from_secs(5),
            prune_interval: Duration::from_secs(60),
            retention: Duration::from_secs(24 * 3600),
            vacuum_interval: Some(Duration::from_secs(15)),
            registry_interval: Duration::from_secs(10),
            stale_worker_after: Duration::from_secs(600),
            queue_gauges: None,
            enabled: true,
        }
    }
}

impl MaintenanceConfig {
    /// A worker counts as alive in the stats that gauges and alerts read when seen
    /// within three registry intervals (30 s by default): one missed heartbeat is not
    /// a dead worker.
    pub fn alive_within(&self) -> Duration {
        self.registry_interval * 3
    }

    /// Refuses zero intervals (a busy loop) and a stale age not above the registry
    /// interval (live workers would be removed).
    pub fn validate(&self) -> Result<(), InputError> {
        for (field, value) in [
            ("sweep_interval", self.sweep_interval),
            ("prune_interval", self.prune_interval),
            ("registry_interval", self.registry_interval),
        ] {
            if value.is_zero() {
                return Err(InputError::new(field, "must be above zero"));
            }
        }
        if self.queue_gauges.is_some_and(|d| d.is_zero()) {
            return Err(InputError::new("queue_gauges", "must be above zero"));
        }
        if self.vacuum_interval.is_some_and(|d| d.is_zero()) {
            return Err(InputError::new(
                "vacuum_interval",
                "must be above zero (None turns the vacuum off)",
            ));
        }
        if self.stale_worker_after <= self.registry_interval {
            return Err(InputError::new(
                "stale_worker_after",
                "must be above registry_interval, or live workers would be removed",
            ));
        }
        Ok(())
    }
}

/// Rows deleted per prune call.
const PRUNE_BATCH: u32 = 1000;
/// The vacuum's thresholds: at least this many dead rows...
const VACUUM_MIN_DEAD_ROWS: u64 = 10_000;
/// ...and this fraction of the live ones, so a large table with little churn is not
/// read in full every 15 s for a few dead rows.
const VACUUM_MIN_DEAD_FRACTION: f64 = 0.01;
/// Dead letters from one sweep that are looked up and logged one by one; past it, one
/// summary line.
const SWEEP_LOG_LIMIT: usize = 100;

pub(crate) async fn run(
    shared: Arc<Shared>,
    config: MaintenanceConfig,
    registration: WorkerHeartbeatParams,
    alerts: Option<AlertConfig>,
    stop: CancellationToken,
) {
    let alive_within = config.alive_within();
    let alert_task = alerts.map(|rules| {
        tokio::spawn(alert_loop(
            shared.clone(),
            rules,
            alive_within,
            stop.clone(),
        ))
    });
    let vacuum_task = config
        .vacuum_interval
        .filter(|_| config.enabled)
        .map(|period| tokio::spawn(vacuum_loop(shared.clone(), period, stop.clone())));
    let mut registry = every(config.registry_interval);
    let mut sweep = every(config.sweep_interval);
    let mut prune = every(config.prune_interval);
    // The stored retry policies, read again off the attempts' path (the first tick is
    // at once; the worker read them just before).
    let mut policies = every(
        shared
            .policies
            .refresh_interval()
            .max(Duration::from_millis(100)),
    );
    policies.tick().await;
    // Never ticks when gauges are off (the branch below is disabled then).
    let mut gauges = every(config.queue_gauges.unwrap_or(Duration::from_secs(3600)));
    loop {
        tokio::select! {
            _ = stop.cancelled() => {
                if let Some(task) = alert_task {
                    let _ = task.await;
                }
                if let Some(task) = vacuum_task {
                    let _ = task.await;
                }
                return;
            }
            _ = registry.tick() => {
                // The registry heartbeat runs even with maintenance off: liveness is
                // this worker's own business.
                if let Err(err) = shared.store.worker_heartbeat(registration.clone()).await {
                    tracing::warn!(worker = %shared.worker_id, error = %err, "worker registry heartbeat failed");
                }
                if config.enabled {
                    let params = WorkerRemoveParams::StaleFor { stale_after: config.stale_worker_after, now: None };
                    match shared.store.worker_remove(params).await {
                        Ok(0) => {}
                        Ok(n) => tracing::info!(removed = n, "removed stale workers from the registry"),
                        Err(err) => tracing::warn!(error = %err, "stale worker removal failed"),
                    }
                }
            }
            _ = policies.tick() => {
                if let Err(err) = shared.policies.reload(&*shared.store).await {
                    tracing::warn!(error = %err, "could not read the stored retry policies; using the last ones read");
                }
            }
            _ = sweep.tick(), if config.enabled => sweep_once(&shared).await,
            _ = prune.tick(), if config.enabled => prune_once(&shared, config.retention).await,
            _ = gauges.tick(), if config.queue_gauges.is_some() => sample_gauges(&shared, alive_within).await,
        }
    }
}

/// A tokio interval whose missed ticks are delayed, not bunched.
fn every(period: Duration) -> tokio::time::Interval {
    let mut interval = tokio::time::interval(period);
    interval.set_missed_tick_behavior(MissedTickBehavior::Delay);
    interval
}

/// Looks at the jobs table every `period` and vacuums it when enough rows are dead,
/// until `stop`, or until the store says there is nothing it may or need ever do. In
/// its own task: a pass over a large table takes seconds, and the lease sweep must not
/// wait for it. A stop abandons a pass under way (the server finishes it).
async fn vacuum_loop(shared: Arc<Shared>, period: Duration, stop: CancellationToken) {
    let params = JobVacuumParams {
        min_dead_rows: VACUUM_MIN_DEAD_ROWS,
        min_dead_fraction: VACUUM_MIN_DEAD_FRACTION,
    };
    let mut interval = every(period);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = interval.tick() => {}
        }
        let started = Instant::now();
        let outcome = tokio::select! {
            _ = stop.cancelled() => return,
            outcome = shared.store.job_vacuum(params.clone()) => outcome,
        };
        match outcome {
            Ok(JobVacuumed::Vacuumed {
                live_rows,
                dead_rows,
            }) => tracing::debug!(
                live_rows,
                dead_rows,
                elapsed_ms = started.elapsed().as_millis() as u64,
                "vacuumed the jobs table"
            ),
            Ok(JobVacuumed::NotNeeded { .. } | JobVacuumed::Busy) => {}
            Ok(JobVacuumed::NotPermitted) => {
                tracing::info!(
                    "the store's database role may not vacuum the jobs table (only its owner, the \
                     database's owner or a superuser may); the server's autovacuum alone keeps it"
                );
                return;
            }
            Ok(JobVacuumed::NotApplicable) => return,
            Err(err) => tracing::warn!(error = %err, "vacuum of the jobs table failed"),
        }
    }
}

async fn sweep_once(shared: &Shared) {
    if shared.dependencies.is_some() {
        match shared
            .store
            .dependency_sweep(DependencySweepParams { now: None })
            .await
        {
            Ok(keys) => {
                for key in keys {
                    tracing::info!(dependency = %key, "breaker wants a probe and no job of its key came: a parked job is due now");
                }
            }
            Err(err) => tracing::warn!(error = %err, "dependency sweep failed"),
        }
    }
    let ids = match shared.store.job_sweep(JobSweepParams { now: None }).await {
        Ok(ids) => ids,
        Err(err) => {
            tracing::warn!(error = %err, "lease sweep failed");
            return;
        }
    };
    for (n, id) in ids.iter().enumerate() {
        match shared.store.job_get(JobGetParams { id: *id }).await {
            Ok(Some(job)) if n >= SWEEP_LOG_LIMIT => {
                // Past the log limit, still counted: the metrics must add up.
                metrics::dead_letter(&job.queue, &job.kind, DeadReason::LeaseExpired.as_str());
                count_lease_expired(&job);
            }
            Ok(Some(job)) => {
                count_lease_expired(&job);
                let error = job
                    .last_error
                    .as_ref()
                    .map(|e| e.message.clone())
                    .unwrap_or_else(|| "the lease expired on the last attempt".into());
                settle::dead_letter(
                    &job,
                    &shared.worker_id,
                    DeadReason::LeaseExpired,
                    FailureClass::LeaseExpired,
                    &error,
                );
            }
            Ok(None) => {}
            Err(err) if n < SWEEP_LOG_LIMIT => {
                tracing::error!(job_id = id, dead_reason = "lease_expired", error = %err, "job dead-lettered (details unavailable)")
            }
            Err(_) => {}
        }
    }
    if ids.len() > SWEEP_LOG_LIMIT {
        tracing::error!(
            count = ids.len(),
            dead_reason = "lease_expired",
            "many jobs dead-lettered by one sweep; the first {SWEEP_LOG_LIMIT} were logged"
        );
    }
}

/// The attempt that ended with its worker (or its stall): counted here, since the
/// worker that ran it could not.
fn count_lease_expired(job: &revenant_core::job::Job) {
    metrics::attempt(
        &job.queue,
        &job.kind,
        AttemptOutcome::Dead,
        FailureClass::LeaseExpired.as_str(),
    );
}

async fn sample_gauges(shared: &Shared, alive_within: Duration) {
    let params = QueueStatsParams {
        queue: None,
        worker_alive_within: alive_within,
        ..QueueStatsParams::default()
    };
    match shared.store.queue_stats(params).await {
        Ok(stats) => metrics::queue_gauges(&stats),
        Err(err) => tracing::warn!(error = %err, "stats sampling for the queue gauges failed"),
    }
    if shared.dependencies.is_some() {
        match shared
            .store
            .dependency_list(DependencyListParams::default())
            .await
        {
            Ok(states) => metrics::dependency_gauges(&states),
            Err(err) => {
                tracing::warn!(error = %err, "sampling the dependency gauges failed")
            }
        }
    }
}

/// Evaluates the alert rules every `rules.interval` until `stop`.
async fn alert_loop(
    shared: Arc<Shared>,
    rules: AlertConfig,
    alive_within: Duration,
    stop: CancellationToken,
) {
    let notifier = match Notifier::new(&rules) {
        Ok(notifier) => notifier,
        Err(err) => {
            // Only a broken TLS setup gets here; alerts still go to the log.
            tracing::error!(error = %err, "cannot build the alert webhook client; alerts go to the log only");
            Notifier::new(&AlertConfig {
                webhook: None,
                ..rules.clone()
            })
            .expect("no webhook, no client")
        }
    };
    let mut state = AlertState::default();
    let mut interval = tokio::time::interval(rules.interval);
    interval.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = interval.tick() => {}
        }
        let params = QueueStatsParams {
            queue: None,
            worker_alive_within: alive_within,
            ..QueueStatsParams::default()
        };
        let stats = match shared.store.queue_stats(params).await {
            Ok(stats) => stats,
            Err(err) => {
                tracing::warn!(error = %err, "alert evaluation skipped: cannot read the queue stats");
                continue;
            }
        };
        let events = alert::evaluate(&rules, &stats, chrono::Utc::now(), &mut state);
        for event in events {
            notifier.log(&event);
            // A shutdown does not wait for a slow webhook.
            let posted = tokio::select! {
                _ = stop.cancelled() => return,
                posted = notifier.post(&event) => posted,
            };
            if let Err(err) = posted {
                tracing::warn!(
                    queue = %event.queue,
                    rule = %event.rule,
                    state = event.state.as_str(),
                    error = %err,
                    "alert webhook failed; sending again at the next evaluation"
                );
                state.delivery_failed(&event);
            }
        }
    }
}

async fn prune_once(shared: &Shared, retention: Duration) {
    loop {
        let params = JobPruneParams {
            retention,
            limit: PRUNE_BATCH,
            now: None,
        };
        match shared.store.job_prune(params).await {
            Ok(n) => {
                if n > 0 {
                    tracing::debug!(pruned = n, "pruned finished jobs");
                }
                if n < u64::from(PRUNE_BATCH) {
                    return;
                }
            }
            Err(err) => {
                tracing::warn!(error = %err, "prune failed");
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_zero_vacuum_interval_is_refused_and_none_turns_it_off() {
        let zero = MaintenanceConfig {
            vacuum_interval: Some(Duration::ZERO),
            ..MaintenanceConfig::default()
        };
        let err = zero.validate().unwrap_err();
        assert_eq!(err.field, "vacuum_interval");
        assert!(
            err.to_string().contains("None turns the vacuum off"),
            "{err}"
        );
        let off = MaintenanceConfig {
            vacuum_interval: None,
            ..MaintenanceConfig::default()
        };
        off.validate().unwrap();
        MaintenanceConfig::default().validate().unwrap();
    }
}
