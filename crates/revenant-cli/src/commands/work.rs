//! `revenant work`: a worker for the built-in kinds (`http`, and `exec` for the
//! commands you allow), until SIGTERM or Ctrl-C.
//!
//! Both kinds run what producers enqueue, so both are closed by default: `http`
//! refuses internal destinations unless `--allow-net` opens them, and `exec` runs only
//! the `--allow-exec` commands, with only the `--allow-exec-env` variables and
//! `--allow-exec-cwd` directories a job may choose (docs/security.md).
//!
//! It protects the dependencies its jobs call (an `http` job's is its payload's
//! `dependency`, else its URL's host): a circuit breaker and a retry budget per key,
//! and the rate limits given with `--rate-limit`, all shared with every other worker
//! through the store. `--no-breaker` turns that off.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use revenant::alert::AlertConfig;
use revenant::duration::parse;
use revenant::runtime::MaintenanceConfig;
use revenant::{names, Client, DependencyConfig, InputError};
use revenant_kinds::{ExecHandler, HttpHandler};

use crate::commands::protection::ProtectionArgs;
use crate::error::CliError;

/// `revenant work`: the flags left out take revenant's defaults.
#[derive(Debug, Args)]
pub struct WorkArgs {
    /// A queue to serve, as `NAME` or `NAME=CONCURRENCY`. Repeat for several.
    #[arg(long = "queue", short = 'q', required = true)]
    pub queues: Vec<String>,
    /// Jobs run at once per queue, when `NAME=CONCURRENCY` does not say.
    #[arg(long, default_value_t = 10)]
    pub concurrency: usize,
    /// Let `http` jobs reach this internal destination: a CIDR (10.20.0.0/16), an IP
    /// address (127.0.0.1) or a host name (every address it resolves to). Repeat for
    /// several. By default loopback, link-local (cloud metadata), private and other
    /// internal ranges are refused: a producer could otherwise read them through the
    /// worker (see docs/security.md).
    #[arg(long = "allow-net", value_name = "CIDR_OR_HOST")]
    pub allow_net: Vec<String>,
    /// Serve the `exec` kind for this command, as jobs name it: a bare name is looked
    /// up in this worker's PATH now, and that file is what runs. Repeat for several.
    /// Without it, `exec` jobs are dead at once as `unknown_kind`: whoever can enqueue
    /// could otherwise run any program on this machine.
    #[arg(long = "allow-exec", value_name = "COMMAND")]
    pub allow_exec: Vec<String>,
    /// Let `exec` jobs set this environment variable in their payload's `env`. Repeat
    /// for several. Default none. PATH, LD_* and DYLD_* are never allowed.
    #[arg(long = "allow-exec-env", value_name = "NAME", requires = "allow_exec")]
    pub allow_exec_env: Vec<String>,
    /// Let `exec` jobs run in this directory or below it (their `cwd`, judged after
    /// resolving `..` and symbolic links). Repeat for several. Default none: a job's
    /// `cwd` is refused.
    #[arg(long = "allow-exec-cwd", value_name = "DIR", requires = "allow_exec")]
    pub allow_exec_cwd: Vec<PathBuf>,
    /// Retry-policy flags a worker once took. Hidden, and refused with a pointer to
    /// `revenant policy set`: a worker cannot change the attempts a job was enqueued
    /// with, and two workers with different flags would retry one job on two schedules.
    #[command(flatten)]
    pub removed: RemovedPolicyFlags,
    /// This worker's id in the registry and on the jobs it claims (default host-pid).
    #[arg(long)]
    pub worker_id: Option<String>,
    /// How long running jobs may finish after SIGTERM (default 30s).
    #[arg(long)]
    pub grace: Option<String>,
    /// How long completed and cancelled jobs are kept (default 24h).
    #[arg(long)]
    pub retention: Option<String>,
    /// PostgreSQL: how often the jobs table's dead rows are looked at and, past 10,000
    /// and 1% of the live rows, vacuumed (default 15s); `off` leaves the table to the
    /// server's autovacuum alone. Needs the role to own the table; without it, one
    /// line in the log says so. Refused on SQLite, which needs no vacuum.
    #[arg(long, value_name = "DURATION|off")]
    pub vacuum_interval: Option<String>,
    /// Evaluate these alert rules (TOML; see docs/alerts.md) every `interval` (default
    /// 15s) over every queue, sending to the log and the rules' webhook. Give them to
    /// one worker: each worker given them sends its own messages.
    #[arg(long, env = "REVENANT_ALERTS", value_name = "FILE")]
    pub alerts: Option<PathBuf>,
    /// Serve Prometheus metrics at http://ADDR/metrics, e.g. 127.0.0.1:9464 (port 0
    /// picks a free port; the address is printed). Loopback only unless
    /// --metrics-public: the endpoint has no authentication.
    #[arg(long, value_name = "ADDR")]
    pub metrics_addr: Option<String>,
    /// Allow --metrics-addr to be a non-loopback address.
    #[arg(long, requires = "metrics_addr")]
    pub metrics_public: bool,
    /// How often the queue gauges are read from the store for /metrics: about one
    /// scrape interval; each read is one stats query.
    #[arg(long, default_value = "15s", requires = "metrics_addr")]
    pub metrics_interval: String,
    /// How the dependencies the jobs call are protected.
    #[command(flatten)]
    pub protection: ProtectionArgs,
    /// Send a span per attempt to this OpenTelemetry collector (OTLP over HTTP, e.g.
    /// http://127.0.0.1:4318). Default: off, unless OTEL_EXPORTER_OTLP_ENDPOINT or
    /// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set (see docs/tracing.md).
    #[arg(long, value_name = "URL")]
    pub otlp_endpoint: Option<String>,
}

/// The policy flags `revenant work` no longer takes (see [`WorkArgs::removed`]).
#[derive(Debug, Args)]
pub struct RemovedPolicyFlags {
    #[arg(long, hide = true, allow_hyphen_values = true)]
    attempts: Option<String>,
    #[arg(long, hide = true)]
    base: Option<String>,
    #[arg(long, hide = true)]
    multiplier: Option<String>,
    #[arg(long, hide = true)]
    cap: Option<String>,
    #[arg(long, hide = true)]
    jitter: Option<String>,
    #[arg(long, hide = true)]
    attempt_timeout: Option<String>,
    #[arg(long, hide = true)]
    lease: Option<String>,
}

impl RemovedPolicyFlags {
    /// Refuses the first one given, saying where the setting lives now.
    fn refuse(&self) -> Result<(), InputError> {
        let given = [
            ("attempts", &self.attempts),
            ("base", &self.base),
            ("multiplier", &self.multiplier),
            ("cap", &self.cap),
            ("jitter", &self.jitter),
            ("attempt-timeout", &self.attempt_timeout),
            ("lease", &self.lease),
        ];
        match given.iter().find(|(_, value)| value.is_some()) {
            Some((flag, value)) => Err(InputError::new(
                "policy",
                format!(
                    "--{flag} is not a worker flag: retry policies are stored once for every door and worker; run `revenant policy set --queue QUEUE --{flag} {}` (or --kind KIND, --default), then `revenant work`",
                    value.as_deref().unwrap_or_default()
                ),
            )),
            None => Ok(()),
        }
    }
}

/// Runs the worker until a signal; exits 0 after a clean shutdown.
///
/// Retry policies are not flags here: a worker cannot decide a job's attempts (they
/// are fixed at enqueue), and two workers with different flags would disagree on one
/// job's backoff. They are stored once, with `revenant policy set`, and every worker
/// reads them (see `revenant policy list`).
pub async fn run(client: &Client, args: WorkArgs) -> Result<ExitCode, CliError> {
    args.removed.refuse()?;
    let queues = queues(&args)?;
    let mut builder = client.worker();
    for (queue, concurrency) in &queues {
        builder = builder.queue(queue.clone(), *concurrency);
    }
    builder = builder.handler(http_handler(&args.allow_net)?);
    if !args.allow_exec.is_empty() {
        builder = builder.handler(exec_handler(&args)?);
    }
    if let Some(id) = &args.worker_id {
        builder = builder.worker_id(id.clone());
    }
    if let Some(grace) = &args.grace {
        builder = builder.shutdown_grace(parse("grace", grace)?);
    }
    let mut maintenance = MaintenanceConfig::default();
    if let Some(retention) = &args.retention {
        maintenance.retention = parse("retention", retention)?;
    }
    match args.vacuum_interval.as_deref() {
        None => {}
        Some("off") => maintenance.vacuum_interval = None,
        Some(interval) => {
            let interval = parse("vacuum-interval", interval)?;
            if interval.is_zero() {
                return Err(InputError::new(
                    "vacuum-interval",
                    "must be above zero; `off` turns the vacuum off",
                )
                .into());
            }
            maintenance.vacuum_interval = Some(interval);
        }
    }
    if args.vacuum_interval.is_some() && client.store().backend() == "sqlite" {
        // A flag that cannot take effect is refused, not ignored.
        return Err(InputError::new(
            "vacuum-interval",
            "SQLite needs no vacuum from its workers; the flag is for PostgreSQL",
        )
        .into());
    }
    if let Some(path) = &args.alerts {
        let rules =
            AlertConfig::load(path).map_err(|err| InputError::new("alerts", err.to_string()))?;
        eprintln!(
            "alerts: {} every {}, to the log{}",
            path.display(),
            revenant::duration::format(rules.interval),
            if rules.webhook.is_some() {
                " and the webhook"
            } else {
                ""
            }
        );
        builder = builder.alerts(rules);
    }
    if let Some(addr) = &args.metrics_addr {
        let handle = super::metrics::install()?;
        let bound = super::metrics::serve(addr, args.metrics_public, handle).await?;
        maintenance.queue_gauges = Some(parse("metrics-interval", &args.metrics_interval)?);
        eprintln!("metrics: http://{bound}/metrics");
    }
    if let Some(policies) = args.protection.policies()? {
        builder = builder.dependencies(DependencyConfig::new(policies));
    }
    builder = builder.maintenance(maintenance);
    let tracing = super::otel::from_config(args.otlp_endpoint.as_deref(), "revenant-worker")?;
    if let Some(tracing) = &tracing {
        builder = builder.tracer_provider(tracing.provider());
        eprintln!("traces: OTLP to {}", tracing.endpoint());
    }
    let worker = builder
        .build()
        .map_err(|err| InputError::new("worker", err.to_string()))?;
    eprintln!(
        "revenant worker {} serving {} (kinds: http{}{}; {}); stop with Ctrl-C or SIGTERM",
        worker.id(),
        queues
            .iter()
            .map(|(q, c)| format!("{q}={c}"))
            .collect::<Vec<_>>()
            .join(", "),
        if args.allow_net.is_empty() {
            " to public addresses".to_string()
        } else {
            format!(" to public addresses and {}", args.allow_net.join(" "))
        },
        if args.allow_exec.is_empty() {
            String::new()
        } else {
            format!(", exec for {}", args.allow_exec.join(" "))
        },
        if args.protection.no_breaker {
            "dependencies unprotected"
        } else {
            "dependencies protected: see `revenant breaker list`"
        },
    );
    let ran = worker
        .run()
        .await
        .map_err(|err| CliError::Failed(err.to_string()));
    if let Some(tracing) = tracing {
        // Sends the spans still batched before the process exits.
        tracing.shutdown().await;
    }
    ran?;
    eprintln!("revenant worker stopped cleanly");
    Ok(ExitCode::SUCCESS)
}

/// The `http` kind with the outbound policy the `--allow-net` flags open.
fn http_handler(allow_net: &[String]) -> Result<HttpHandler, CliError> {
    let mut http = HttpHandler::builder();
    for spec in allow_net {
        http = http
            .allow_net(spec)
            .map_err(|err| InputError::new("--allow-net", err.to_string()))?;
    }
    http.build()
        .map_err(|err| CliError::Failed(format!("cannot start the http kind: {err}")))
}

/// The `exec` kind with the commands, variables and directories the flags allow, each
/// checked now so a worker that cannot do what it was told does not start.
fn exec_handler(args: &WorkArgs) -> Result<ExecHandler, InputError> {
    ExecHandler::new()
        .allow(args.allow_exec.iter().cloned())
        .map_err(|err| InputError::new("--allow-exec", err.to_string()))?
        .allow_env(&args.allow_exec_env)
        .map_err(|err| InputError::new("--allow-exec-env", err.to_string()))?
        .allow_cwd(&args.allow_exec_cwd)
        .map_err(|err| InputError::new("--allow-exec-cwd", err.to_string()))
}

fn queues(args: &WorkArgs) -> Result<Vec<(String, usize)>, InputError> {
    args.queues
        .iter()
        .map(|spec| {
            let (name, concurrency) = match spec.split_once('=') {
                Some((name, n)) => {
                    let n: usize = n.parse().map_err(|_| {
                        InputError::new(
                            "queue",
                            format!("{spec:?}: concurrency {n:?} is not a whole number"),
                        )
                    })?;
                    (name, n)
                }
                None => (spec.as_str(), args.concurrency),
            };
            names::validate_name("queue", name)?;
            if concurrency == 0 || concurrency > 10_000 {
                return Err(InputError::new(
                    "concurrency",
                    format!("{concurrency} for queue {name} is out of range; use 1..=10000"),
                ));
            }
            Ok((name.to_string(), concurrency))
        })
        .collect()
}
