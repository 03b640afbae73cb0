//! The worker: its configuration, the checks that refuse a configuration that cannot
//! work, and the run loop that ties fetchers, executors, the completer and maintenance
//! together.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use serde::de::DeserializeOwned;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use crate::alert::AlertConfig;
use crate::completer::{self, CompleterHandle};
use crate::context::JobContext;
use crate::gate::{self, Dependencies, DependencyConfig};
use crate::handler::{Handler, JobError};
use crate::maintenance::{self, MaintenanceConfig};
use crate::policies::Policies;
use crate::registry::Registry;
use crate::shutdown::{self, ShutdownHandle};
use crate::{fetcher, store_retry};
use revenant_core::error::{InputError, StoreError};
use revenant_core::names;
use revenant_core::policy::{PolicyError, PolicySet, RetryPolicy};
use revenant_core::store::{Store, WorkerHeartbeatParams, WorkerRemoveParams};

/// A configuration that cannot work, refused by [`WorkerBuilder::build`] before
/// anything runs.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// No queue was given: the worker would claim nothing.
    #[error("no queues: add at least one with .queue(name, concurrency)")]
    NoQueues,
    /// No handler was registered: every job would die as `unknown_kind`.
    #[error("no handlers: register at least one with .handler(..) or .handler_fn(..)")]
    NoHandlers,
    /// A queue was given a concurrency of zero.
    #[error("queue {queue:?} has concurrency 0; give it at least 1")]
    ZeroConcurrency {
        /// The queue.
        queue: String,
    },
    /// A queue was listed twice.
    #[error("queue {queue:?} is listed twice")]
    DuplicateQueue {
        /// The queue.
        queue: String,
    },
    /// Two handlers were registered for one kind.
    #[error("kind {kind:?} has two handlers")]
    DuplicateHandler {
        /// The kind.
        kind: String,
    },
    /// A queue name, kind name or worker id is not valid.
    #[error(transparent)]
    Input(#[from] InputError),
    /// A retry policy cannot work (an attempt timeout not below the lease, a heartbeat
    /// interval not below the lease, ...).
    #[error("the {scope} retry policy cannot work: {source}")]
    Policy {
        /// Which policy: `default`, `queue "emails"`, `kind "send_receipt"`.
        scope: String,
        /// What is wrong with it.
        #[source]
        source: PolicyError,
    },
    /// `claim_ahead` is above [`MAX_CLAIM_AHEAD`].
    #[error("claim_ahead {claim_ahead} is above its bound of {MAX_CLAIM_AHEAD}")]
    ClaimAheadTooLarge {
        /// The value given.
        claim_ahead: usize,
    },
    /// `claim_ahead` was set on a worker that protects dependencies: the dependency
    /// gate takes its permits at claim time, so such a worker never claims ahead and
    /// the setting could not take effect.
    #[error("claim_ahead cannot be set on a worker with .dependencies(..): such a worker claims only into free slots")]
    ClaimAheadWithDependencies,
    /// A duration that must be above zero is zero.
    #[error("{field} must be above zero")]
    ZeroDuration {
        /// The setting.
        field: &'static str,
    },
}

/// What can end [`Worker::run`] with an error. Once started, a worker does not end on a
/// storage error (it retries); only a start that cannot succeed does.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WorkerError {
    /// The worker could not register itself in the store at start, with an error that
    /// retrying does not fix (a missing table, say).
    #[error("could not register the worker: {0}")]
    Register(#[source] StoreError),
}

/// The most jobs [`WorkerBuilder::claim_ahead`] allows per queue: a crash costs at most
/// that many reclaims per queue, and a claim of more rows than this gains nothing
/// measurable (the completer writes at most this many results per call, and gathers
/// half as many while results keep coming).
pub const MAX_CLAIM_AHEAD: usize = 1_000;

/// One queue a worker serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct QueueConfig {
    pub(crate) name: String,
    pub(crate) concurrency: usize,
}

/// The settings shared by every part of a running worker.
pub(crate) struct Shared {
    pub(crate) store: Arc<dyn Store>,
    /// Attempt spans (see [`crate::otel`]); `None`: tracing off, nothing spent.
    pub(crate) tracer: Option<crate::otel::AttemptTracer>,
    pub(crate) registry: Registry,
    pub(crate) policies: Arc<Policies>,
    pub(crate) worker_id: String,
    pub(crate) poll_interval: Duration,
    pub(crate) claim_cooldown: Duration,
    /// Jobs each fetcher may claim beyond its free slots (see [`crate::fetcher`]).
    /// Zero by default and on a worker that protects dependencies.
    pub(crate) claim_ahead: usize,
    pub(crate) heartbeats: bool,
    /// Fired at the shutdown signal: claim nothing more.
    pub(crate) stop_claiming: CancellationToken,
    /// Fired when the grace period is over: cancel running handlers, release leases.
    pub(crate) hard_stop: CancellationToken,
    /// Fired when the drain deadline is over: stop retrying the store.
    pub(crate) abandon: CancellationToken,
    pub(crate) completer: CompleterHandle,
    /// The dependency gate, when the worker protects dependencies.
    pub(crate) dependencies: Option<Dependencies>,
    /// Short retries this worker wrote, so its fetchers wake when they come due.
    pub(crate) due_soon: crate::due_soon::DueSoon,
    /// Jobs whose retry this worker keeps, on their way back to their fetcher (see
    /// [`crate::executor`]): shutdown waits for each to be taken or released.
    pub(crate) kept: tokio_util::task::TaskTracker,
    /// The per-attempt metrics of each queue and kind, registered once.
    pub(crate) series: crate::metrics::SeriesCache,
    /// The handlers alive, for the thread that keeps timers going while one blocks
    /// its thread ([`crate::nudge`]).
    pub(crate) alive: crate::nudge::Alive,
}

/// Builds a [`Worker`]. Every setting has a default except the store, the queues and the
/// handlers.
pub struct WorkerBuilder {
    store: Arc<dyn Store>,
    queues: Vec<QueueConfig>,
    registry: Registry,
    duplicate_kinds: Vec<String>,
    policies: PolicySet,
    shared_policies: Option<Arc<Policies>>,
    worker_id: Option<String>,
    poll_interval: Duration,
    claim_cooldown: Duration,
    claim_ahead: Option<usize>,
    grace: Duration,
    drain_timeout: Duration,
    heartbeats: bool,
    maintenance: MaintenanceConfig,
    alerts: Option<AlertConfig>,
    dependencies: Option<DependencyConfig>,
    dependency_kinds: HashMap<String, String>,
    schedules: Vec<revenant_core::schedule::ScheduleSpec>,
    scheduler: bool,
    tracer: Option<crate::otel::AttemptTracer>,
}

impl WorkerBuilder {
    /// Serves `queue` with up to `concurrency` jobs at once. Concurrency must be at
    /// least 1.
    pub fn queue(mut self, queue: impl Into<String>, concurrency: usize) -> Self {
        self.queues.push(QueueConfig {
            name: queue.into(),
            concurrency,
        });
        self
    }

    /// Registers a handler for its kind ([`Handler::KIND`]).
    pub fn handler<H: Handler>(mut self, handler: H) -> Self {
        if !self.registry.insert(handler) {
            self.duplicate_kinds.push(H::KIND.to_string());
        }
        self
    }

    /// Registers an async closure for `kind`; its second argument's type is the
    /// payload type.
    ///
    /// ```no_run
    /// # use std::sync::Arc;
    /// # use revenant_runtime::{Worker, JobContext, JobError};
    /// # fn f(store: Arc<dyn revenant_core::Store>) {
    /// let worker = Worker::builder(store)
    ///     .queue("emails", 10)
    ///     .handler_fn("ping", |_ctx: JobContext, host: String| async move {
    ///         if host.is_empty() {
    ///             return Err(JobError::permanent("empty host"));
    ///         }
    ///         Ok(())
    ///     })
    ///     .build()
    ///     .unwrap();
    /// # }
    /// ```
    pub fn handler_fn<P, F, Fut>(mut self, kind: impl Into<String>, f: F) -> Self
    where
        P: DeserializeOwned + Send + 'static,
        F: Fn(JobContext, P) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), JobError>> + Send + 'static,
    {
        let kind = kind.into();
        if !self.registry.insert_fn::<P, F>(kind.clone(), f) {
            self.duplicate_kinds.push(kind);
        }
        self
    }

    /// The retry policies declared in code. Default: [`PolicySet::default`] (see
    /// [`RetryPolicy`] for its numbers). The policies stored in the database
    /// (`revenant policy set`) are laid over them and win (see [`Policies`]), so every
    /// worker and every door resolves a job's policy the same way. Each policy is
    /// checked again at build, so one deserialized from a config file is held to the
    /// same rules as one built in code.
    pub fn policies(mut self, policies: PolicySet) -> Self {
        self.policies = policies;
        self.shared_policies = None;
        self
    }

    /// Shares a [`Policies`] cache with the code that enqueues (`revenant::Client`
    /// does this), so a policy changed through it is seen here at once. Replaces
    /// [`WorkerBuilder::policies`].
    pub fn shared_policies(mut self, policies: Arc<Policies>) -> Self {
        self.policies = policies.base().clone();
        self.shared_policies = Some(policies);
        self
    }

    /// The worker's id, recorded on every job it claims and in the worker registry.
    /// Default: `<host>-<pid>`. Must be unique among live workers; a restarted process
    /// may reuse its predecessor's id.
    pub fn worker_id(mut self, id: impl Into<String>) -> Self {
        self.worker_id = Some(id.into());
        self
    }

    /// How long a fetcher with free slots waits for a wake-up before claiming again.
    /// Default 1 s. The in-process wake-up (SQLite) or LISTEN/NOTIFY (PostgreSQL)
    /// makes new jobs start at once; polling catches what they miss: retries coming
    /// due, jobs enqueued by another process on SQLite, expired leases.
    pub fn poll_interval(mut self, interval: Duration) -> Self {
        self.poll_interval = interval;
        self
    }

    /// The shortest time between two claims of one queue. Default 20 ms: slots that
    /// free up within it are refilled by one claim (one transaction) instead of one
    /// claim each, which is what lets a busy SQLite queue run hundreds of jobs a
    /// second; it adds at most that much latency to a job enqueued right after a
    /// claim. Zero claims as soon as any slot is free.
    pub fn claim_cooldown(mut self, cooldown: Duration) -> Self {
        self.claim_cooldown = cooldown;
        self
    }

    /// How many jobs each queue's fetcher may claim beyond its free slots, into a
    /// local buffer from which slots are refilled as they free up, so that one claim
    /// serves many short jobs and the next claim is made while the buffer still feeds
    /// the slots. Default 0: a worker claims only into free slots. At most
    /// [`MAX_CLAIM_AHEAD`]. For a queue of many short jobs, the most (1,000): the
    /// buffer sets how many jobs one claim brings (the buffer is refilled at half, so
    /// about half of it) and, below, how many results one completion write carries
    /// (up to half of it, gathered for at most 10 ms). On the W1 drain of
    /// docs/benchmarks.md (20,000 no-op jobs, 64 slots) 500 took PostgreSQL from about
    /// 19,000 jobs/s (64 ahead) to 24,000 to 41,000 and SQLite from about 15,000 to
    /// 32,000, at a quarter of the commits per job; 1,000 brought another tenth or so
    /// and a fifth fewer commits (docs/benchmarks.md has the figures).
    ///
    /// Why it is off by default: the attempt is counted at claim (so a job that kills
    /// its worker still reaches the dead letters), and a buffered job holds its lease
    /// and its spent attempt while it waits. A process killed with a full buffer
    /// leaves up to this many jobs per queue, never started, to be reclaimed when their
    /// leases expire, each with an attempt spent; one on its last attempt dies
    /// `lease_expired` without having run. A graceful shutdown releases them at once,
    /// attempt given back. A job that has waited in the buffer for part of its lease (half of what
    /// is left of it after one heartbeat interval) is released, not run on a lease
    /// that could run out before its first heartbeat.
    ///
    /// The same setting lets up to this many finished attempts free
    /// their slots while their results wait to be written (batched with the other
    /// slots' results, and gathered while they keep coming, for at most 10 ms), so the
    /// next job starts during the write: a crash can run those attempts again too,
    /// when their leases expire, and a job's completion reaches the store (and the
    /// next job of its group) up to 10 ms later. Off, a slot stays taken until its
    /// result is written.
    ///
    /// And it keeps short retries: a failed attempt whose retry is due within 20 ms
    /// stays with this worker, running under its lease with the failure recorded and
    /// the next attempt counted, and starts again ahead of the buffer once due, rather
    /// than go to the back of the queue through a write and a claim. It waits as a
    /// buffered job does (no slot, the same hold, released at shutdown with the
    /// attempt given back; a crash spends it). A job of a group keeps its group's turn
    /// meanwhile, as it would while running. A kind whose lease is shorter than its
    /// queue's has its retries go through the queue.
    ///
    /// A worker with
    /// [`WorkerBuilder::dependencies`] never claims ahead (the dependency gate takes
    /// its permits at claim time) and refuses this setting.
    pub fn claim_ahead(mut self, jobs: usize) -> Self {
        self.claim_ahead = Some(jobs);
        self
    }

    /// How long running jobs may finish after a shutdown signal before they are
    /// cancelled and their leases released. Default 30 s: a little under the 30 s
    /// Kubernetes and systemd give before SIGKILL would be tighter than most attempt
    /// timeouts; set it below your orchestrator's kill timeout.
    pub fn shutdown_grace(mut self, grace: Duration) -> Self {
        self.grace = grace;
        self
    }

    /// How long, after the grace period, the worker keeps trying to write the last
    /// results and releases when the store is failing. Default 10 s. Past it the
    /// worker exits anyway; jobs whose release was not written are reclaimed when
    /// their leases expire.
    pub fn drain_timeout(mut self, timeout: Duration) -> Self {
        self.drain_timeout = timeout;
        self
    }

    /// Turns lease heartbeats off. Default on. **For tests only**: without
    /// heartbeats, a handler that runs longer than its lease is reclaimed by another
    /// worker while it still runs (which is exactly what such a test wants to show).
    pub fn heartbeats(mut self, on: bool) -> Self {
        self.heartbeats = on;
        self
    }

    /// The maintenance settings (lease sweep, pruning, worker registry).
    pub fn maintenance(mut self, config: MaintenanceConfig) -> Self {
        self.maintenance = config;
        self
    }

    /// Alert rules to evaluate every `config.interval` (default 15 s) over every queue
    /// in the store, sending to the log and the webhook. Default none. Give them to one
    /// worker (every worker given them sends its own messages); see [`crate::alert`].
    pub fn alerts(mut self, config: AlertConfig) -> Self {
        self.alerts = Some(config);
        self
    }

    /// Protects the dependencies jobs call with a circuit breaker, a rate limit and a
    /// retry budget per key, shared with every other worker through the store (see
    /// [`revenant_core::dependency`]). Default: off, every job runs as soon as it is claimed.
    /// `DependencyConfig::default()` gives every key a breaker and a retry budget with
    /// their defaults and no rate limit.
    ///
    /// A job's key comes from its handler ([`Handler::dependency`]) or from
    /// [`WorkerBuilder::dependency`]; jobs without one are not affected.
    pub fn dependencies(mut self, config: DependencyConfig) -> Self {
        self.dependencies = Some(config);
        self
    }

    /// Says that every job of `kind` calls dependency `key`, for handlers that do not
    /// say so themselves (closures). Only used with
    /// [`WorkerBuilder::dependencies`].
    pub fn dependency(mut self, kind: impl Into<String>, key: impl Into<String>) -> Self {
        self.dependency_kinds.insert(kind.into(), key.into());
        self
    }

    /// Declares a periodic job: stored in the database when the worker starts
    /// (replacing a stored schedule of the same name; an unchanged one keeps its next
    /// tick and its pause), so the CLI, the server and every other worker see it. See
    /// [`revenant_core::schedule`] for ticks, time zones and missed ticks.
    pub fn schedule(mut self, spec: revenant_core::schedule::ScheduleSpec) -> Self {
        self.schedules.push(spec);
        self
    }

    /// Runs the scheduler in this worker (default on): every worker may enqueue the
    /// ticks of every stored schedule, each tick once whatever the number of workers.
    /// Off, this worker enqueues no periodic job (its declared schedules are still
    /// stored).
    pub fn scheduler(mut self, on: bool) -> Self {
        self.scheduler = on;
        self
    }

    /// Runs every attempt in an OpenTelemetry span made by `provider`: a consumer
    /// span, child of the job's enqueue trace context, with the messaging conventions'
    /// attributes and the outcome (see [`crate::otel`]). Default: no spans, at no
    /// cost. Give the provider your exporter is on (the `revenant` binary builds an
    /// OTLP one from `--otlp-endpoint` or `OTEL_EXPORTER_OTLP_ENDPOINT`); shut it down
    /// after the worker returns so its last spans are sent.
    pub fn tracer_provider<P>(mut self, provider: &P) -> Self
    where
        P: opentelemetry::trace::TracerProvider,
        P::Tracer: Send + Sync + 'static,
        <P::Tracer as opentelemetry::trace::Tracer>::Span: Send + Sync + 'static,
    {
        self.tracer = Some(crate::otel::AttemptTracer::new(provider));
        self
    }

    /// The worker, or the first setting that cannot work.
    pub fn build(self) -> Result<Worker, ConfigError> {
        if self.queues.is_empty() {
            return Err(ConfigError::NoQueues);
        }
        let mut seen = HashSet::new();
        for queue in &self.queues {
            names::validate_name("queue", &queue.name)?;
            if queue.concurrency == 0 {
                return Err(ConfigError::ZeroConcurrency {
                    queue: queue.name.clone(),
                });
            }
            if !seen.insert(queue.name.as_str()) {
                return Err(ConfigError::DuplicateQueue {
                    queue: queue.name.clone(),
                });
            }
        }
        if let Some(kind) = self.duplicate_kinds.first() {
            return Err(ConfigError::DuplicateHandler { kind: kind.clone() });
        }
        if self.registry.is_empty() {
            return Err(ConfigError::NoHandlers);
        }
        for kind in self.registry.kinds() {
            names::validate_name("kind", kind)?;
        }
        let recheck = |scope: String, policy: &RetryPolicy| {
            policy
                .to_builder()
                .build()
                .map(|_| ())
                .map_err(|source| ConfigError::Policy { scope, source })
        };
        recheck("default".into(), &self.policies.default)?;
        for (queue, policy) in &self.policies.queues {
            recheck(format!("queue {queue:?}"), policy)?;
        }
        for (kind, policy) in &self.policies.kinds {
            recheck(format!("kind {kind:?}"), policy)?;
        }
        if self.poll_interval.is_zero() {
            return Err(ConfigError::ZeroDuration {
                field: "poll_interval",
            });
        }
        if let Some(claim_ahead) = self.claim_ahead {
            if claim_ahead > MAX_CLAIM_AHEAD {
                return Err(ConfigError::ClaimAheadTooLarge { claim_ahead });
            }
            if claim_ahead > 0 && self.dependencies.is_some() {
                return Err(ConfigError::ClaimAheadWithDependencies);
            }
        }
        self.maintenance.validate()?;
        if let Some(alerts) = &self.alerts {
            if alerts.interval.is_zero() || alerts.repeat_interval.is_zero() {
                return Err(ConfigError::ZeroDuration {
                    field: "alert interval",
                });
            }
        }
        if let Some(config) = &self.dependencies {
            config.policies.validate()?;
            if config.report_interval.is_zero() {
                return Err(ConfigError::ZeroDuration {
                    field: "dependency report_interval",
                });
            }
        }
        for key in self.dependency_kinds.values() {
            names::validate_key("dependency", key)?;
        }
        let mut declared = HashSet::new();
        for spec in &self.schedules {
            spec.validate()?;
            if !declared.insert(spec.name.as_str()) {
                return Err(InputError::new(
                    "name",
                    format!("schedule {:?} is declared twice", spec.name),
                )
                .into());
            }
        }
        let worker_id = match self.worker_id {
            Some(id) => {
                names::validate_key("worker_id", &id)?;
                id
            }
            None => format!("{}-{}", host_name(), std::process::id()),
        };
        let policies = self
            .shared_policies
            .unwrap_or_else(|| Arc::new(Policies::new(self.policies)));
        Ok(Worker {
            store: self.store,
            queues: self.queues,
            registry: self.registry,
            policies,
            worker_id,
            poll_interval: self.poll_interval,
            claim_cooldown: self.claim_cooldown,
            claim_ahead: self.claim_ahead,
            grace: self.grace,
            drain_timeout: self.drain_timeout,
            heartbeats: self.heartbeats,
            maintenance: self.maintenance,
            alerts: self.alerts,
            dependencies: self.dependencies,
            dependency_kinds: self.dependency_kinds,
            schedules: self.schedules,
            scheduler: self.scheduler,
            tracer: self.tracer,
            shutdown: ShutdownHandle::new(),
        })
    }
}

/// The machine's host name, for the worker registry. Falls back to `localhost`.
fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .or_else(|| std::env::var("COMPUTERNAME").ok())
        .map(|name| name.trim().to_string())
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "localhost".to_string())
}

/// A worker process's runtime: per queue, a fetcher that claims jobs into free slots;
/// per job, an executor; one completer; one maintenance loop.
///
/// ```no_run
/// # use std::sync::Arc;
/// # use revenant_runtime::{Worker, JobContext};
/// # async fn f(store: Arc<dyn revenant_core::Store>) {
/// let worker = Worker::builder(store)
///     .queue("emails", 10)
///     .handler_fn("send_receipt", |_ctx: JobContext, _order: u64| async move { Ok(()) })
///     .build()
///     .expect("a worker configuration that can work");
/// // Runs until SIGTERM or Ctrl-C, then drains and returns Ok.
/// worker.run().await.unwrap();
/// # }
/// ```
pub struct Worker {
    store: Arc<dyn Store>,
    queues: Vec<QueueConfig>,
    registry: Registry,
    policies: Arc<Policies>,
    worker_id: String,
    poll_interval: Duration,
    claim_cooldown: Duration,
    claim_ahead: Option<usize>,
    grace: Duration,
    drain_timeout: Duration,
    heartbeats: bool,
    maintenance: MaintenanceConfig,
    alerts: Option<AlertConfig>,
    dependencies: Option<DependencyConfig>,
    dependency_kinds: HashMap<String, String>,
    schedules: Vec<revenant_core::schedule::ScheduleSpec>,
    scheduler: bool,
    tracer: Option<crate::otel::AttemptTracer>,
    shutdown: ShutdownHandle,
}

impl Worker {
    /// A builder over `store`.
    pub fn builder(store: Arc<dyn Store>) -> WorkerBuilder {
        WorkerBuilder {
            store,
            queues: Vec::new(),
            registry: Registry::default(),
            duplicate_kinds: Vec::new(),
            policies: PolicySet::default(),
            shared_policies: None,
            worker_id: None,
            poll_interval: Duration::from_secs(1),
            claim_cooldown: Duration::from_millis(20),
            claim_ahead: None,
            grace: Duration::from_secs(30),
            drain_timeout: Duration::from_secs(10),
            heartbeats: true,
            maintenance: MaintenanceConfig::default(),
            alerts: None,
            dependencies: None,
            dependency_kinds: HashMap::new(),
            schedules: Vec::new(),
            scheduler: true,
            tracer: None,
        }
    }

    /// The worker's id.
    pub fn id(&self) -> &str {
        &self.worker_id
    }

    /// A handle that starts a graceful shutdown from elsewhere (tests, an admin
    /// endpoint), as SIGTERM would.
    pub fn shutdown_handle(&self) -> ShutdownHandle {
        self.shutdown.clone()
    }

    /// Runs until SIGTERM or Ctrl-C (or [`ShutdownHandle::shutdown`]), then shuts down
    /// gracefully and returns `Ok`, so `main` can exit 0.
    pub async fn run(self) -> Result<(), WorkerError> {
        self.run_until(shutdown::signal()).await
    }

    /// Runs until `signal` completes (or [`ShutdownHandle::shutdown`]), then shuts down
    /// gracefully:
    ///
    /// 1. no claim after the signal (a claim already in flight has its jobs released
    ///    at once);
    /// 2. running jobs get the grace period to finish;
    /// 3. then their handlers are cancelled and their leases released: back to
    ///    `ready`, due now, the attempt given back;
    /// 4. the last results are written, the worker leaves the registry, and this
    ///    returns `Ok`.
    pub async fn run_until(self, signal: impl Future<Output = ()>) -> Result<(), WorkerError> {
        let stop_claiming = self.shutdown.token();
        let hard_stop = CancellationToken::new();
        let abandon = CancellationToken::new();
        let completer_stop = CancellationToken::new();
        let maintenance_stop = CancellationToken::new();

        let registration = WorkerHeartbeatParams {
            worker: self.worker_id.clone(),
            host: host_name(),
            pid: i64::from(std::process::id()),
            queues: self.queues.iter().map(|q| q.name.clone()).collect(),
            now: None,
        };
        if let Err(err) = store_retry::retry("worker_heartbeat", &stop_claiming, || {
            self.store.worker_heartbeat(registration.clone())
        })
        .await
        {
            if !stop_claiming.is_cancelled() {
                return Err(WorkerError::Register(err));
            }
        }

        // `build` refuses claim_ahead beside dependencies; 0 there all the same.
        let claim_ahead = if self.dependencies.is_some() {
            0
        } else {
            self.claim_ahead.unwrap_or(0)
        };
        let (completer, completer_task) = completer::spawn(
            self.store.clone(),
            claim_ahead,
            completer_stop.clone(),
            abandon.clone(),
        );
        let reporter_stop = CancellationToken::new();
        let (dependencies, reporter_task) = match self.dependencies {
            Some(config) => {
                let (reporter, task) = gate::spawn_reporter(
                    self.store.clone(),
                    config.clone(),
                    reporter_stop.clone(),
                    abandon.clone(),
                );
                let dependencies = Dependencies {
                    config,
                    kinds: self.dependency_kinds,
                    reporter,
                    pacers: std::sync::Mutex::new(HashMap::new()),
                    bulkheads: std::sync::Mutex::new(HashMap::new()),
                    freed: tokio::sync::watch::channel(0).0,
                };
                (Some(dependencies), Some(task))
            }
            None => (None, None),
        };
        let shared = Arc::new(Shared {
            store: self.store.clone(),
            tracer: self.tracer.clone(),
            registry: self.registry,
            policies: self.policies,
            worker_id: self.worker_id.clone(),
            poll_interval: self.poll_interval,
            claim_cooldown: self.claim_cooldown,
            claim_ahead,
            heartbeats: self.heartbeats,
            stop_claiming: stop_claiming.clone(),
            hard_stop: hard_stop.clone(),
            abandon: abandon.clone(),
            completer,
            dependencies,
            due_soon: crate::due_soon::DueSoon::new(self.poll_interval),
            kept: tokio_util::task::TaskTracker::new(),
            series: crate::metrics::SeriesCache::default(),
            alive: crate::nudge::Alive::default(),
        });
        // Stopped when dropped, as this returns.
        let _nudger = crate::nudge::Nudger::start(shared.alive.clone());
        // The stored policies, read once before the first claim; the maintenance loop
        // reads them again every refresh interval. A store that cannot be read now
        // leaves the policies declared in code until it can.
        if let Err(err) = shared.policies.reload(&*shared.store).await {
            tracing::warn!(error = %err, "could not read the stored retry policies at start; using the ones declared in code until the next refresh");
        }
        // The schedules declared in code, stored before the scheduler's first round.
        for spec in self.schedules {
            let name = spec.name.clone();
            if let Err(err) = store_retry::retry("schedule_set", &stop_claiming, || {
                crate::scheduler::declare(&*self.store, spec.clone())
            })
            .await
            {
                if !stop_claiming.is_cancelled() {
                    tracing::error!(schedule = name, error = %err, "could not store a declared schedule");
                }
            }
        }
        let scheduler_stop = CancellationToken::new();
        let scheduler_task = self.scheduler.then(|| {
            tokio::spawn(crate::scheduler::run(
                self.store.clone(),
                shared.policies.clone(),
                scheduler_stop.clone(),
            ))
        });
        let maintenance_task = tokio::spawn(maintenance::run(
            shared.clone(),
            self.maintenance.clone(),
            registration,
            self.alerts.clone(),
            maintenance_stop.clone(),
        ));
        let mut slots = Vec::new();
        let mut fetchers = Vec::new();
        for queue in &self.queues {
            let semaphore = Arc::new(Semaphore::new(queue.concurrency));
            slots.push((semaphore.clone(), queue.concurrency));
            fetchers.push(tokio::spawn(fetcher::run(
                shared.clone(),
                queue.clone(),
                semaphore,
            )));
        }
        tracing::info!(
            worker = %self.worker_id,
            queues = ?self.queues.iter().map(|q| (&q.name, q.concurrency)).collect::<Vec<_>>(),
            "worker started"
        );
        let kinds: Vec<&str> = shared.registry.kinds().collect();
        crate::metrics::worker_started(
            shared.store.backend(),
            self.queues.iter().map(|q| q.name.as_str()),
            kinds.iter().copied(),
        );

        tokio::select! {
            _ = signal => {}
            _ = stop_claiming.cancelled() => {}
        }
        stop_claiming.cancel();
        // A stopping worker enqueues no more ticks; the other workers (or the next
        // start) carry on from the schedule's next tick.
        scheduler_stop.cancel();
        if let Some(task) = scheduler_task {
            let _ = task.await;
        }
        tracing::info!(worker = %self.worker_id, grace_ms = self.grace.as_millis() as u64, "shutting down: no more claims");
        for fetcher in fetchers {
            let _ = fetcher.await;
        }
        // Every executor holds a slot until its result is written or queued for the
        // completer (which counts what it has queued until written), so holding every
        // slot, then seeing nothing queued, means every job has left this worker.
        // A kept job on its way back to its fetcher holds no slot; it counts in
        // `shared.kept` until the fetcher takes it (the fetchers have stopped and
        // released theirs by now) or, the fetcher gone, its own task releases it
        // through the completer.
        shared.kept.close();
        let all_idle = || async {
            for (semaphore, n) in &slots {
                let _ = semaphore.acquire_many(*n as u32).await;
            }
            shared.kept.wait().await;
            shared.completer.written().await;
        };
        if tokio::time::timeout(self.grace, all_idle()).await.is_err() {
            tracing::warn!(worker = %self.worker_id, "grace period over: cancelling running jobs and releasing their leases");
            hard_stop.cancel();
            if tokio::time::timeout(self.drain_timeout, all_idle())
                .await
                .is_err()
            {
                tracing::error!(worker = %self.worker_id, "drain deadline over: exiting with results unwritten; their jobs are reclaimed when their leases expire");
                abandon.cancel();
                let _ = tokio::time::timeout(Duration::from_secs(1), all_idle()).await;
            }
        }
        completer_stop.cancel();
        let _ = completer_task.await;
        reporter_stop.cancel();
        if let Some(task) = reporter_task {
            let _ = task.await;
        }
        maintenance_stop.cancel();
        let _ = maintenance_task.await;
        let remove_stop = CancellationToken::new();
        let removing = store_retry::retry("worker_remove", &remove_stop, || {
            self.store
                .worker_remove(WorkerRemoveParams::Worker(self.worker_id.clone()))
        });
        if tokio::time::timeout(self.drain_timeout, removing)
            .await
            .is_err()
        {
            remove_stop.cancel();
        }
        tracing::info!(worker = %self.worker_id, "worker stopped");
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::faulty::FaultyStore;

    /// A builder factory over one fresh store (each test opens its own).
    async fn builders() -> impl Fn() -> WorkerBuilder {
        let store: Arc<dyn Store> = Arc::new(FaultyStore::open().await);
        move || Worker::builder(store.clone())
    }

    fn noop(_: JobContext, _: serde_json::Value) -> futures::future::Ready<Result<(), JobError>> {
        futures::future::ready(Ok(()))
    }

    #[tokio::test]
    async fn configurations_that_cannot_work_are_refused_at_start() {
        let builder = builders().await;
        let err = |b: WorkerBuilder| b.build().err().expect("refused").to_string();
        assert!(err(builder().handler_fn("k", noop)).contains("no queues"));
        assert!(err(builder().queue("q", 1)).contains("no handlers"));
        assert!(err(builder().queue("q", 0).handler_fn("k", noop)).contains("concurrency 0"));
        assert!(
            err(builder().queue("q", 1).queue("q", 2).handler_fn("k", noop))
                .contains("listed twice")
        );
        assert!(err(builder()
            .queue("q", 1)
            .handler_fn("k", noop)
            .handler_fn("k", noop))
        .contains("two handlers"));
        assert!(err(builder().queue("bad queue!", 1).handler_fn("k", noop)).contains("queue"));
        assert!(err(builder()
            .queue("q", 1)
            .handler_fn("k", noop)
            .poll_interval(Duration::ZERO))
        .contains("poll_interval"));
        assert!(builder()
            .queue("q", 1)
            .handler_fn("k", noop)
            .build()
            .is_ok());
    }

    #[tokio::test]
    async fn claim_ahead_is_bounded_and_refused_where_it_cannot_take_effect() {
        let builder = builders().await;
        let base = || builder().queue("q", 1).handler_fn("k", noop);
        assert!(base().claim_ahead(0).build().is_ok(), "0 turns it off");
        assert!(base().claim_ahead(MAX_CLAIM_AHEAD).build().is_ok());
        let err = base()
            .claim_ahead(MAX_CLAIM_AHEAD + 1)
            .build()
            .err()
            .expect("refused")
            .to_string();
        assert!(err.contains("claim_ahead"), "{err}");
        let err = base()
            .dependencies(DependencyConfig::default())
            .claim_ahead(10)
            .build()
            .err()
            .expect("refused")
            .to_string();
        assert!(err.contains("claim_ahead"), "{err}");
        assert!(base()
            .dependencies(DependencyConfig::default())
            .claim_ahead(0)
            .build()
            .is_ok());
    }

    #[tokio::test]
    async fn a_policy_from_a_config_file_is_checked_like_one_built_in_code() {
        let builder = builders().await;
        // Deserializing skips the builder's checks; the worker checks again.
        let bad: RetryPolicy = serde_json::from_value(serde_json::json!({
            "max_attempts": 3,
            "backoff": {"base": "1s", "multiplier": 2.0, "cap": "1m"},
            "jitter": {"kind": "none"},
            "attempt_timeout": "2m",
            "lease": "1m",
            "heartbeat": "20s"
        }))
        .expect("the policy deserializes");
        let err = builder()
            .queue("q", 1)
            .handler_fn("k", noop)
            .policies(PolicySet::default().with_kind("k", bad))
            .build()
            .err()
            .expect("refused")
            .to_string();
        assert!(err.contains("kind \"k\""), "{err}");
        assert!(err.contains("attempt_timeout"), "{err}");
    }
}
