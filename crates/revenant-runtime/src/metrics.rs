//! Every metric revenant records, in one place: names, types, labels, and the calls
//! the runtime makes.
//!
//! Recording goes through the [`metrics`] facade: the core records, the program
//! installs an exporter (`revenant work --metrics-addr` installs the Prometheus one).
//! With no exporter installed a call records nothing, but naming a series still copies
//! its labels: the series recorded at every attempt are registered once per worker
//! (`JobSeries`).
//!
//! Names follow Prometheus conventions: `revenant_` prefix, base units in the name
//! (`_seconds`), `_total` on counters. `docs/metrics.md` is the reference; a test
//! checks that it and `docs/prometheus/alerts.yml` name only metrics listed in
//! [`METRICS`].

use std::sync::{Arc, Mutex, PoisonError, RwLock};

use metrics::{Counter, Histogram};
use revenant_core::dependency::{BreakerState, DependencyState, WaitReason};
use revenant_core::store::QueueStats;

/// Attempts by how they ended. Labels: `queue`, `kind`, `outcome`, `class`.
pub const JOB_ATTEMPTS: &str = "revenant_job_attempts_total";
/// Jobs dead-lettered. Labels: `queue`, `kind`, `reason`.
pub const DEAD_LETTERS: &str = "revenant_dead_letters_total";
/// Handler run time. Labels: `queue`, `kind`.
pub const JOB_RUN_SECONDS: &str = "revenant_job_run_seconds";
/// Wait from `run_at` to the claim. Label: `queue`.
pub const JOB_WAIT_SECONDS: &str = "revenant_job_wait_seconds";
/// Ready and due jobs. Label: `queue`.
pub const QUEUE_READY: &str = "revenant_queue_ready_jobs";
/// Scheduled (not yet due, never attempted) jobs.
pub const QUEUE_SCHEDULED: &str = "revenant_queue_scheduled_jobs";
/// Jobs waiting out a backoff.
pub const QUEUE_RETRYING: &str = "revenant_queue_retrying_jobs";
/// Running (leased) jobs.
pub const QUEUE_RUNNING: &str = "revenant_queue_running_jobs";
/// Dead jobs.
pub const QUEUE_DEAD: &str = "revenant_queue_dead_jobs";
/// Jobs that died in the last hour.
pub const QUEUE_DEAD_LAST_HOUR: &str = "revenant_queue_dead_last_hour";
/// Jobs of the queue completed in the last minute.
pub const QUEUE_COMPLETED_LAST_MINUTE: &str = "revenant_queue_completed_last_minute";
/// Failed attempts of the queue in the last minute.
pub const QUEUE_FAILED_LAST_MINUTE: &str = "revenant_queue_failed_last_minute";
/// Age of the oldest due job.
pub const QUEUE_OLDEST_DUE_AGE: &str = "revenant_queue_oldest_due_age_seconds";
/// Workers serving the queue seen recently.
pub const QUEUE_WORKERS_ALIVE: &str = "revenant_queue_workers_alive";
/// When a job of the queue last completed.
pub const QUEUE_LAST_COMPLETED: &str = "revenant_queue_last_completed_timestamp_seconds";
/// 1 when the queue is paused.
pub const QUEUE_PAUSED: &str = "revenant_queue_paused";
/// What dependency_acquire said to claimed jobs. Labels: `dependency`, `permit`.
pub const DEPENDENCY_PERMITS: &str = "revenant_dependency_permits_total";
/// Answers counted by a dependency's breaker. Labels: `dependency`, `answer`.
pub const DEPENDENCY_ANSWERS: &str = "revenant_dependency_answers_total";
/// The breaker's state: 0 closed, 1 half-open, 2 open. Label: `dependency`.
pub const DEPENDENCY_BREAKER_STATE: &str = "revenant_dependency_breaker_state";
/// 1 while an operator holds the breaker open. Label: `dependency`.
pub const DEPENDENCY_HELD_OPEN: &str = "revenant_dependency_held_open";
/// Times the breaker opened from closed, as the store counts them.
pub const DEPENDENCY_TRIPS: &str = "revenant_dependency_breaker_trips";
/// Transient failures among the answers in the breaker's window.
pub const DEPENDENCY_FAILURE_SHARE: &str = "revenant_dependency_failure_share";
/// Requests the rate limit would let start now.
pub const DEPENDENCY_TOKENS: &str = "revenant_dependency_rate_tokens";
/// How far ahead the rate limit's schedule is booked, seconds.
pub const DEPENDENCY_BOOKED: &str = "revenant_dependency_rate_booked_seconds";
/// Retries sent in the budget's window, and the retries it allows.
pub const DEPENDENCY_BUDGET_RETRIES: &str = "revenant_dependency_budget_retries";
/// Retries the budget allows in its window now.
pub const DEPENDENCY_BUDGET_ALLOWED: &str = "revenant_dependency_budget_allowed";
/// Attempts of a dependency in flight across every worker, as the store counts its
/// bulkhead's permits. Label: `dependency`.
pub const DEPENDENCY_IN_FLIGHT: &str = "revenant_dependency_in_flight";
/// The bulkhead's limit across every worker (absent when none is set). Label:
/// `dependency`.
pub const DEPENDENCY_IN_FLIGHT_LIMIT: &str = "revenant_dependency_in_flight_limit";
/// Jobs turned back at the bulkhead's limit since the dependency was first seen.
/// Label: `dependency`.
pub const DEPENDENCY_TURNED_BACK: &str = "revenant_dependency_bulkhead_turned_back";
/// The share of slow calls in the breaker's window, 0 to 1. Label: `dependency`.
pub const DEPENDENCY_SLOW_SHARE: &str = "revenant_dependency_slow_share";
/// Jobs ready and waiting on a dependency. Labels: `dependency`, `reason`.
pub const DEPENDENCY_WAITING: &str = "revenant_dependency_waiting_jobs";

/// 1, labelled with the running version and the store's backend: a scrape is never
/// empty, and a dashboard can show which release each process runs. Labels: `version`,
/// `backend`.
pub const BUILD_INFO: &str = "revenant_build_info";
/// HTTP requests `revenant serve` answered. Labels: `route`, `method`, `status`.
pub const HTTP_REQUESTS: &str = "revenant_http_requests_total";
/// How long `revenant serve` took to answer. Labels: `route`, `method`.
pub const HTTP_REQUEST_SECONDS: &str = "revenant_http_request_duration_seconds";

/// A metric's type, as Prometheus names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricType {
    /// Only goes up (resets at process start).
    Counter,
    /// A value now.
    Gauge,
    /// A distribution in buckets (`_bucket`, `_sum`, `_count`).
    Histogram,
}

/// One metric: what `docs/metrics.md` says about it.
#[derive(Debug, Clone, Copy)]
pub struct MetricInfo {
    /// The name.
    pub name: &'static str,
    /// Counter, gauge or histogram.
    pub kind: MetricType,
    /// Its labels.
    pub labels: &'static [&'static str],
    /// What it means (the `# HELP` line).
    pub help: &'static str,
}

/// Every metric revenant records.
pub const METRICS: &[MetricInfo] = &[
    MetricInfo { name: JOB_ATTEMPTS, kind: MetricType::Counter, labels: &["queue", "kind", "outcome", "class"], help: "Attempts by how they ended: outcome completed, retried, dead, snoozed, cancelled, lease_lost, released or unwritten; class is the failure class (transient, permanent, panic, timeout, decode_error, unknown_kind, lease_expired) or none." },
    MetricInfo { name: DEAD_LETTERS, kind: MetricType::Counter, labels: &["queue", "kind", "reason"], help: "Jobs dead-lettered, by dead reason (permanent, attempts_exhausted, lease_expired, decode_error, unknown_kind)." },
    MetricInfo { name: JOB_RUN_SECONDS, kind: MetricType::Histogram, labels: &["queue", "kind"], help: "How long handlers ran, per attempt." },
    MetricInfo { name: JOB_WAIT_SECONDS, kind: MetricType::Histogram, labels: &["queue"], help: "How long a job waited from its run_at to its claim." },
    MetricInfo { name: QUEUE_READY, kind: MetricType::Gauge, labels: &["queue"], help: "Depth: jobs ready and due now." },
    MetricInfo { name: QUEUE_SCHEDULED, kind: MetricType::Gauge, labels: &["queue"], help: "Jobs ready but not yet due, never attempted." },
    MetricInfo { name: QUEUE_RETRYING, kind: MetricType::Gauge, labels: &["queue"], help: "Jobs waiting out a backoff before their next attempt." },
    MetricInfo { name: QUEUE_RUNNING, kind: MetricType::Gauge, labels: &["queue"], help: "Jobs running (leased), including expired leases not yet reclaimed." },
    MetricInfo { name: QUEUE_DEAD, kind: MetricType::Gauge, labels: &["queue"], help: "Dead jobs." },
    MetricInfo { name: QUEUE_DEAD_LAST_HOUR, kind: MetricType::Gauge, labels: &["queue"], help: "Jobs that died in the last hour." },
    MetricInfo { name: QUEUE_COMPLETED_LAST_MINUTE, kind: MetricType::Gauge, labels: &["queue"], help: "Jobs completed in the last 60 seconds (throughput without a counter, for `revenant metrics`)." },
    MetricInfo { name: QUEUE_FAILED_LAST_MINUTE, kind: MetricType::Gauge, labels: &["queue"], help: "Failed attempts (retried or dead, expired leases included) in the last 60 seconds." },
    MetricInfo { name: QUEUE_OLDEST_DUE_AGE, kind: MetricType::Gauge, labels: &["queue"], help: "Seconds the oldest due job has waited past its run_at; 0 when none is due." },
    MetricInfo { name: QUEUE_WORKERS_ALIVE, kind: MetricType::Gauge, labels: &["queue"], help: "Workers serving the queue seen in the last 30 seconds." },
    MetricInfo { name: QUEUE_LAST_COMPLETED, kind: MetricType::Gauge, labels: &["queue"], help: "Unix time a job of the queue last completed; 0 if none is on record." },
    MetricInfo { name: QUEUE_PAUSED, kind: MetricType::Gauge, labels: &["queue"], help: "1 when claims from the queue are paused, else 0." },
    MetricInfo { name: DEPENDENCY_PERMITS, kind: MetricType::Counter, labels: &["dependency", "permit"], help: "What the dependency's breaker, rate limit and retry budget said to claimed jobs: permit run, probe, breaker, rate_limit, retry_budget (sent back to wait, attempt given back) or lease_lost." },
    MetricInfo { name: DEPENDENCY_ANSWERS, kind: MetricType::Counter, labels: &["dependency", "answer"], help: "Attempts' answers as the dependency's breaker counts them: success, failure (transient, timeout) or neutral (permanent, panic, decode error, cancel: not counted)." },
    MetricInfo { name: DEPENDENCY_BREAKER_STATE, kind: MetricType::Gauge, labels: &["dependency"], help: "The dependency's circuit breaker: 0 closed, 1 half-open (a probe may go), 2 open." },
    MetricInfo { name: DEPENDENCY_HELD_OPEN, kind: MetricType::Gauge, labels: &["dependency"], help: "1 while an operator holds the breaker open (revenant breaker open), else 0." },
    MetricInfo { name: DEPENDENCY_TRIPS, kind: MetricType::Gauge, labels: &["dependency"], help: "Times the breaker opened from closed, as the store counts them (shared by every worker)." },
    MetricInfo { name: DEPENDENCY_FAILURE_SHARE, kind: MetricType::Gauge, labels: &["dependency"], help: "Transient failures among the answers in the breaker's window, 0 to 1." },
    MetricInfo { name: DEPENDENCY_TOKENS, kind: MetricType::Gauge, labels: &["dependency"], help: "Requests the rate limit would let start right now (0 to the burst); absent without a rate limit." },
    MetricInfo { name: DEPENDENCY_BOOKED, kind: MetricType::Gauge, labels: &["dependency"], help: "How far ahead the rate limit's schedule is booked, seconds: the backlog still to be paced out." },
    MetricInfo { name: DEPENDENCY_BUDGET_RETRIES, kind: MetricType::Gauge, labels: &["dependency"], help: "Retries sent in the retry budget's window." },
    MetricInfo { name: DEPENDENCY_BUDGET_ALLOWED, kind: MetricType::Gauge, labels: &["dependency"], help: "Retries the retry budget allows in its window now." },
    MetricInfo { name: DEPENDENCY_IN_FLIGHT, kind: MetricType::Gauge, labels: &["dependency"], help: "Attempts of the dependency in flight across every worker (bulkhead permits held)." },
    MetricInfo { name: DEPENDENCY_IN_FLIGHT_LIMIT, kind: MetricType::Gauge, labels: &["dependency"], help: "The bulkhead's limit across every worker, when one is set." },
    MetricInfo { name: DEPENDENCY_TURNED_BACK, kind: MetricType::Gauge, labels: &["dependency"], help: "Jobs turned back at the bulkhead's limit (attempt given back) since the dependency was first seen." },
    MetricInfo { name: DEPENDENCY_SLOW_SHARE, kind: MetricType::Gauge, labels: &["dependency"], help: "Share of slow calls among the answers in the breaker's window." },
    MetricInfo { name: DEPENDENCY_WAITING, kind: MetricType::Gauge, labels: &["dependency", "reason"], help: "Jobs ready and waiting on the dependency, by reason: breaker (parked until it closes), rate_limit (holding a turn), retry_budget." },
    MetricInfo { name: BUILD_INFO, kind: MetricType::Gauge, labels: &["version", "backend"], help: "1, labelled with the revenant version this process runs and its store's backend (sqlite, postgres)." },
    MetricInfo { name: HTTP_REQUESTS, kind: MetricType::Counter, labels: &["route", "method", "status"], help: "HTTP requests revenant serve answered: route is the route template (/v1/jobs/{id}, or unmatched), status the class (2xx, 3xx, 4xx, 5xx)." },
    MetricInfo { name: HTTP_REQUEST_SECONDS, kind: MetricType::Histogram, labels: &["route", "method"], help: "How long revenant serve took to answer, by route template and method." },
];

/// Bucket bounds for [`JOB_RUN_SECONDS`]: 5 ms to 5 min, for handlers from a cache
/// write to a slow report (the default attempt timeout is 30 s).
pub const RUN_SECONDS_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0,
];

/// Bucket bounds for [`JOB_WAIT_SECONDS`]: 10 ms to 6 h, from a job picked up at once
/// to one stuck behind an outage.
pub const WAIT_SECONDS_BUCKETS: &[f64] = &[
    0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 1800.0, 3600.0, 21600.0,
];

/// Bucket bounds for [`HTTP_REQUEST_SECONDS`]: 1 ms to 10 s. An API answer is one or
/// two store calls; a slow one is a store in trouble (a lock, a failover).
pub const HTTP_SECONDS_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0,
];

/// The version [`BUILD_INFO`] reports: the revenant crates' version.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// Sets [`BUILD_INFO`] to 1 for `backend` (`Store::backend`).
pub fn build_info(backend: &'static str) {
    metrics::gauge!(BUILD_INFO, "version" => VERSION, "backend" => backend).set(1.0);
}

/// What a worker records at start, so its scrape shows every series a dashboard
/// queries from the first scrape on, at zero, instead of "no data" until the first
/// failure: [`BUILD_INFO`]; for each queue it serves and kind it handles,
/// [`JOB_ATTEMPTS`] with the outcomes a dashboard charts (completed, retried, dead)
/// and [`DEAD_LETTERS`] for every reason. The run-time histograms appear with the
/// first attempt (a histogram at zero would claim a latency of nothing).
pub fn worker_started<'a>(
    backend: &'static str,
    queues: impl Iterator<Item = &'a str> + Clone,
    kinds: impl Iterator<Item = &'a str> + Clone,
) {
    build_info(backend);
    for queue in queues {
        for kind in kinds.clone() {
            for (outcome, class) in [
                (AttemptOutcome::Completed, "none"),
                (AttemptOutcome::Retried, "transient"),
                (AttemptOutcome::Dead, "permanent"),
            ] {
                metrics::counter!(
                    JOB_ATTEMPTS,
                    "queue" => queue.to_string(),
                    "kind" => kind.to_string(),
                    "outcome" => outcome.as_str(),
                    "class" => class,
                )
                .increment(0);
            }
            for reason in revenant_core::DeadReason::ALL {
                metrics::counter!(
                    DEAD_LETTERS,
                    "queue" => queue.to_string(),
                    "kind" => kind.to_string(),
                    "reason" => reason.as_str(),
                )
                .increment(0);
            }
        }
    }
}

/// Registers every metric's help text and unit with the installed recorder. Call once
/// after installing one; the runtime records without it, only the `# HELP` lines
/// are then missing.
pub fn describe() {
    for m in METRICS {
        match m.kind {
            MetricType::Counter => metrics::describe_counter!(m.name, m.help),
            MetricType::Gauge => metrics::describe_gauge!(m.name, m.help),
            MetricType::Histogram => metrics::describe_histogram!(m.name, m.help),
        }
    }
}

/// How an attempt ended, for [`JOB_ATTEMPTS`]'s `outcome` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AttemptOutcome {
    Completed,
    Retried,
    Dead,
    Snoozed,
    Cancelled,
    /// The lease was lost: a heartbeat found it gone, or the result was fenced out.
    LeaseLost,
    /// Shutdown cancelled the handler and released the lease.
    Released,
    /// The result could not be written (the store failed past the drain deadline).
    Unwritten,
}

impl AttemptOutcome {
    fn as_str(self) -> &'static str {
        match self {
            AttemptOutcome::Completed => "completed",
            AttemptOutcome::Retried => "retried",
            AttemptOutcome::Dead => "dead",
            AttemptOutcome::Snoozed => "snoozed",
            AttemptOutcome::Cancelled => "cancelled",
            AttemptOutcome::LeaseLost => "lease_lost",
            AttemptOutcome::Released => "released",
            AttemptOutcome::Unwritten => "unwritten",
        }
    }
}

/// One attempt ended. `class` is the failure class, or `none`.
pub(crate) fn attempt(queue: &str, kind: &str, outcome: AttemptOutcome, class: &'static str) {
    attempt_counter(queue, kind, outcome, class).increment(1);
}

fn attempt_counter(
    queue: &str,
    kind: &str,
    outcome: AttemptOutcome,
    class: &'static str,
) -> Counter {
    metrics::counter!(
        JOB_ATTEMPTS,
        "queue" => queue.to_string(),
        "kind" => kind.to_string(),
        "outcome" => outcome.as_str(),
        "class" => class,
    )
}

/// One job was dead-lettered.
pub(crate) fn dead_letter(queue: &str, kind: &str, reason: &str) {
    metrics::counter!(
        DEAD_LETTERS,
        "queue" => queue.to_string(),
        "kind" => kind.to_string(),
        "reason" => reason.to_string(),
    )
    .increment(1);
}

/// The series a worker records at every attempt of one queue and kind
/// ([`JOB_WAIT_SECONDS`], [`JOB_RUN_SECONDS`], [`JOB_ATTEMPTS`] by outcome and class),
/// registered with the recorder once instead of at every attempt. Registering a series
/// copies its labels and has the recorder look it up: for the three of them about 2,600
/// instructions an attempt with no recorder installed, 7% of the worker's own
/// instructions per job in a drain of no-op jobs on PostgreSQL (callgrind), and more
/// with an exporter. A series counts in the recorder that was current when it was
/// registered (at the first attempt of its queue and kind): install the recorder before
/// the worker starts, as `revenant work --metrics-addr` does.
pub(crate) struct JobSeries {
    queue: String,
    kind: String,
    wait: Histogram,
    run: Histogram,
    /// The attempt counters registered so far, by (outcome, class): a handful.
    attempts: Mutex<Vec<(AttemptOutcome, &'static str, Counter)>>,
}

impl JobSeries {
    fn register(queue: &str, kind: &str) -> JobSeries {
        JobSeries {
            queue: queue.to_string(),
            kind: kind.to_string(),
            wait: metrics::histogram!(JOB_WAIT_SECONDS, "queue" => queue.to_string()),
            run: metrics::histogram!(JOB_RUN_SECONDS, "queue" => queue.to_string(), "kind" => kind.to_string()),
            attempts: Mutex::new(Vec::new()),
        }
    }

    /// The job waited this long from its `run_at` to its claim (both on the store's
    /// clock; never below zero).
    pub(crate) fn wait_time(&self, seconds: f64) {
        self.wait.record(seconds.max(0.0));
    }

    /// The handler ran this long.
    pub(crate) fn run_time(&self, seconds: f64) {
        self.run.record(seconds);
    }

    /// One attempt ended. `class` is the failure class, or `none`.
    pub(crate) fn attempt(&self, outcome: AttemptOutcome, class: &'static str) {
        let mut attempts = self.attempts.lock().unwrap_or_else(PoisonError::into_inner);
        let at = match attempts
            .iter()
            .position(|(o, c, _)| *o == outcome && *c == class)
        {
            Some(at) => at,
            None => {
                let counter = attempt_counter(&self.queue, &self.kind, outcome, class);
                attempts.push((outcome, class, counter));
                attempts.len() - 1
            }
        };
        attempts[at].2.increment(1);
    }
}

/// A worker's [`JobSeries`], by queue and kind. Bounded: kinds come from whoever
/// enqueues, so past [`SeriesCache::LIMIT`] pairs a series is registered for the attempt
/// and not kept (each such attempt costs what every attempt did before the cache).
#[derive(Default)]
pub(crate) struct SeriesCache(RwLock<ByQueue>);

/// The kept series: kind by queue. foldhash, not SipHash: two lookups at every attempt
/// (SipHash was 300 instructions of them), and the kinds a producer chooses are at most
/// [`SeriesCache::LIMIT`].
type ByQueue = foldhash::HashMap<String, foldhash::HashMap<String, Arc<JobSeries>>>;

impl SeriesCache {
    /// The most (queue, kind) pairs kept.
    pub(crate) const LIMIT: usize = 1024;

    /// The series of `queue` and `kind`, registered now if this worker has not yet.
    pub(crate) fn of(&self, queue: &str, kind: &str) -> Arc<JobSeries> {
        let found = |by_queue: &ByQueue| {
            by_queue
                .get(queue)
                .and_then(|kinds| kinds.get(kind))
                .cloned()
        };
        if let Some(series) = found(&self.0.read().unwrap_or_else(PoisonError::into_inner)) {
            return series;
        }
        let mut by_queue = self.0.write().unwrap_or_else(PoisonError::into_inner);
        if let Some(series) = found(&by_queue) {
            return series;
        }
        let series = Arc::new(JobSeries::register(queue, kind));
        if Self::pairs(&by_queue) < Self::LIMIT {
            by_queue
                .entry(queue.to_string())
                .or_default()
                .insert(kind.to_string(), series.clone());
        }
        series
    }

    /// How many (queue, kind) pairs are kept: counted on registration only.
    fn pairs(by_queue: &ByQueue) -> usize {
        by_queue.values().map(foldhash::HashMap::len).sum()
    }
}

/// Sets the per-queue gauges from one stats sample, taken with the default 60 s
/// interval (the `_last_minute` gauges say so in their names). Used by the worker's maintenance
/// loop and by `revenant metrics` (with a local recorder).
pub fn queue_gauges(stats: &[QueueStats]) {
    for q in stats {
        let set = |name: &'static str, value: f64| {
            metrics::gauge!(name, "queue" => q.queue.clone()).set(value);
        };
        set(QUEUE_READY, q.ready as f64);
        set(QUEUE_SCHEDULED, q.scheduled as f64);
        set(QUEUE_RETRYING, q.retrying as f64);
        set(QUEUE_RUNNING, q.running as f64);
        set(QUEUE_DEAD, q.dead as f64);
        set(QUEUE_DEAD_LAST_HOUR, q.dead_last_hour as f64);
        set(
            QUEUE_COMPLETED_LAST_MINUTE,
            q.completed_last_interval as f64,
        );
        set(QUEUE_FAILED_LAST_MINUTE, q.failed_last_interval as f64);
        set(QUEUE_OLDEST_DUE_AGE, q.oldest_due_age_secs);
        set(QUEUE_WORKERS_ALIVE, q.workers_alive as f64);
        set(
            QUEUE_LAST_COMPLETED,
            q.last_completed_at
                .map_or(0.0, |t| t.timestamp_millis() as f64 / 1000.0),
        );
        set(QUEUE_PAUSED, if q.paused { 1.0 } else { 0.0 });
    }
}

/// What `dependency_acquire` said to a job (`permit` label).
pub(crate) fn dependency_permit(dependency: &str, permit: &'static str) {
    metrics::counter!(
        DEPENDENCY_PERMITS,
        "dependency" => dependency.to_string(),
        "permit" => permit,
    )
    .increment(1);
}

/// An answer counted (or not) by the dependency's breaker.
pub(crate) fn dependency_answer(dependency: &str, answer: &'static str) {
    metrics::counter!(
        DEPENDENCY_ANSWERS,
        "dependency" => dependency.to_string(),
        "answer" => answer,
    )
    .increment(1);
}

/// Sets the per-dependency gauges from the store's view of them (the worker's
/// maintenance loop, `revenant metrics`).
pub fn dependency_gauges(states: &[DependencyState]) {
    for d in states {
        breaker_gauges(d);
        for reason in WaitReason::ALL {
            let n = match reason {
                WaitReason::Breaker => d.waiting.breaker,
                WaitReason::RateLimit => d.waiting.rate_limit,
                WaitReason::RetryBudget => d.waiting.retry_budget,
                // Not stored on jobs: turned_back counts them.
                WaitReason::Bulkhead => continue,
            };
            metrics::gauge!(
                DEPENDENCY_WAITING,
                "dependency" => d.dependency.clone(),
                "reason" => reason.as_str(),
            )
            .set(n as f64);
        }
    }
}

/// Sets the gauges of one dependency's breaker, rate limit and budget (not the
/// waiting counts): what the worker knows after each report.
pub(crate) fn breaker_gauges(d: &DependencyState) {
    {
        let set = |name: &'static str, value: f64| {
            metrics::gauge!(name, "dependency" => d.dependency.clone()).set(value);
        };
        set(
            DEPENDENCY_BREAKER_STATE,
            match d.breaker {
                BreakerState::Closed => 0.0,
                BreakerState::HalfOpen => 1.0,
                BreakerState::Open => 2.0,
            },
        );
        set(DEPENDENCY_HELD_OPEN, if d.held_open { 1.0 } else { 0.0 });
        set(DEPENDENCY_TRIPS, d.trips as f64);
        set(DEPENDENCY_FAILURE_SHARE, d.answers.failure_share);
        if let Some(rate) = &d.rate_limit {
            set(DEPENDENCY_TOKENS, rate.tokens);
            set(DEPENDENCY_BOOKED, rate.booked_secs);
        }
        if let Some(budget) = &d.retry_budget {
            set(DEPENDENCY_BUDGET_RETRIES, budget.retries);
            set(DEPENDENCY_BUDGET_ALLOWED, budget.allowed);
        }
        set(DEPENDENCY_SLOW_SHARE, d.answers.slow_share);
        if let Some(bulkhead) = &d.bulkhead {
            set(DEPENDENCY_IN_FLIGHT, bulkhead.in_flight as f64);
            set(DEPENDENCY_TURNED_BACK, bulkhead.turned_back as f64);
            if let Some(limit) = bulkhead.shared_limit {
                set(DEPENDENCY_IN_FLIGHT_LIMIT, f64::from(limit));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use metrics_exporter_prometheus::PrometheusBuilder;

    /// What `record` counted, rendered: it runs with a Prometheus recorder of its own as
    /// the current one.
    fn rendered(record: impl FnOnce()) -> String {
        let recorder = PrometheusBuilder::new().build_recorder();
        let handle = recorder.handle();
        metrics::with_local_recorder(&recorder, record);
        handle.render()
    }

    /// The value of the series `name{labels}` in a rendering.
    fn value(text: &str, series: &str) -> Option<f64> {
        text.lines()
            .find_map(|line| line.strip_prefix(series)?.trim().parse().ok())
    }

    #[test]
    fn a_series_is_registered_once_and_counts_what_the_calls_it_replaced_counted() {
        let text = rendered(|| {
            let cache = SeriesCache::default();
            let series = cache.of("emails", "send");
            assert!(Arc::ptr_eq(&series, &cache.of("emails", "send")));
            assert!(!Arc::ptr_eq(&series, &cache.of("emails", "bounce")));
            assert!(!Arc::ptr_eq(&series, &cache.of("sms", "send")));
            series.wait_time(-1.0);
            series.wait_time(2.0);
            series.run_time(0.25);
            series.attempt(AttemptOutcome::Completed, "none");
            cache
                .of("emails", "send")
                .attempt(AttemptOutcome::Completed, "none");
            series.attempt(AttemptOutcome::Retried, "transient");
            // Beside an uncached count of the same series: one series, both counted.
            attempt("emails", "send", AttemptOutcome::Retried, "transient");
        });
        let attempts = |outcome: &str, class: &str| {
            value(
                &text,
                &format!("{JOB_ATTEMPTS}{{queue=\"emails\",kind=\"send\",outcome=\"{outcome}\",class=\"{class}\"}}"),
            )
        };
        assert_eq!(attempts("completed", "none"), Some(2.0), "{text}");
        assert_eq!(attempts("retried", "transient"), Some(2.0), "{text}");
        assert_eq!(
            value(
                &text,
                &format!("{JOB_WAIT_SECONDS}_count{{queue=\"emails\"}}")
            ),
            Some(2.0),
            "{text}"
        );
        // A negative wait (clocks apart) is recorded as none.
        assert_eq!(
            value(
                &text,
                &format!("{JOB_WAIT_SECONDS}_sum{{queue=\"emails\"}}")
            ),
            Some(2.0),
            "{text}"
        );
        assert_eq!(
            value(
                &text,
                &format!("{JOB_RUN_SECONDS}_sum{{queue=\"emails\",kind=\"send\"}}")
            ),
            Some(0.25),
            "{text}"
        );
    }

    #[test]
    fn past_its_limit_the_cache_keeps_no_more_series_and_still_counts_them() {
        let text = rendered(|| {
            let cache = SeriesCache::default();
            for i in 0..SeriesCache::LIMIT {
                cache.of("q", &format!("kind-{i}"));
            }
            let kept = cache.of("q", "kind-0");
            assert!(Arc::ptr_eq(&kept, &cache.of("q", "kind-0")));
            // A producer's new kinds past the limit: registered for the attempt only.
            let past = cache.of("q", "one-too-many");
            assert!(!Arc::ptr_eq(&past, &cache.of("q", "one-too-many")));
            assert_eq!(
                SeriesCache::pairs(&cache.0.read().unwrap()),
                SeriesCache::LIMIT
            );
            past.attempt(AttemptOutcome::Dead, "permanent");
            cache
                .of("q", "one-too-many")
                .attempt(AttemptOutcome::Dead, "permanent");
        });
        assert_eq!(
            value(
                &text,
                &format!("{JOB_ATTEMPTS}{{queue=\"q\",kind=\"one-too-many\",outcome=\"dead\",class=\"permanent\"}}")
            ),
            Some(2.0),
            "{text}"
        );
    }
}
