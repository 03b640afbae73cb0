//! The command line: every flag, with its default and what it is for.

use clap::{Args, Parser, Subcommand};

/// revenant: a background job queue whose reason to exist is failure handling.
///
/// Exit codes: 0 success, 1 failure, 2 bad usage or bad input.
#[derive(Debug, Parser)]
#[command(name = "revenant", version = crate::version::VERSION, about, long_about = None)]
pub struct Cli {
    /// The database: sqlite://PATH (embedded, created if missing) or
    /// postgres://USER@HOST/DB.
    #[arg(
        long,
        global = true,
        env = "REVENANT_DATABASE_URL",
        default_value = revenant::DEFAULT_DATABASE_URL,
        hide_env_values = true
    )]
    pub database_url: String,

    /// Whether opening the database applies pending schema migrations: `auto`, or
    /// `never` (refuse to start while one is pending; run `revenant migrate` as a
    /// step of the deploy). See docs/deploy.md.
    #[arg(long, global = true, env = "REVENANT_MIGRATE", default_value = "auto")]
    pub migrate: revenant::MigrateMode,

    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Enqueue one job.
    Enqueue(EnqueueArgs),
    /// Look at and cancel jobs.
    #[command(subcommand)]
    Jobs(JobsCommand),
    /// Triage, redrive and purge dead jobs.
    #[command(subcommand)]
    Dead(DeadCommand),
    /// List, pause and resume queues.
    #[command(subcommand)]
    Queues(QueuesCommand),
    /// The four numbers per queue: depth, oldest due job, dead, workers alive; and the
    /// dependencies' breakers, rate limits and retry budgets.
    Stats(StatsArgs),
    /// List the dependencies' circuit breakers, rate limits and retry budgets; open,
    /// close or release a breaker by hand.
    #[command(subcommand)]
    Breaker(crate::commands::BreakerCommand),
    /// The retry policies stored for every door and worker (list, set, unset), or a
    /// policy's schedule: each retry's delay range and the total span.
    Policy(PolicyArgs),
    /// Periodic jobs: list, set, unset, pause, resume, or run a schedule by hand.
    /// Every worker enqueues each tick once, whatever their number.
    #[command(subcommand)]
    Cron(crate::commands::CronCommand),
    /// Play the outage story in virtual time, without a database: what a policy does
    /// to the provider's load and to the jobs.
    Simulate(crate::commands::SimulateArgs),
    /// The Friday outage end to end on embedded SQLite, in a temporary directory: a
    /// fake email provider down for a simulated 30 minutes, protected by a circuit
    /// breaker, a rate limit and a retry budget (--no-breaker to compare), a poison
    /// receipt, the summary beside the simulator's prediction, a chart, and the
    /// redrive.
    Demo(crate::commands::DemoArgs),
    /// Run a worker for the built-in kinds (`http`; `exec` for allowed commands)
    /// until SIGTERM or Ctrl-C.
    Work(crate::commands::WorkArgs),
    /// Evaluate the alert rules once, for cron. Exit codes (Nagios convention, for
    /// this command only): 0 OK, 1 warning, 2 critical, 3 unknown (the check could
    /// not run: bad usage, a bad rules file, an unreachable store).
    Check(crate::commands::CheckArgs),
    /// Print the queue gauges computed from the store now, in Prometheus text format
    /// (for a textfile collector). A worker serves live metrics with --metrics-addr.
    Metrics(crate::commands::MetricsArgs),
    /// Serve the HTTP API (producers, remote workers, operators), /metrics and the
    /// web dashboard until SIGTERM or Ctrl-C. Tokens come from --config and
    /// REVENANT_TOKENS; without any, only a loopback address is allowed.
    Serve(crate::commands::ServeArgs),
    /// Apply the pending schema migrations and print them, or list every migration
    /// as applied or pending (--status). Processes also migrate when they open the
    /// database, unless --migrate never.
    Migrate(crate::commands::MigrateArgs),
    /// Print the shell completion script for bash, zsh or fish to standard output.
    Completions(crate::commands::CompletionsArgs),
    /// Write the man pages: revenant.1 and one page per subcommand
    /// (revenant-dead-redrive.1, ...).
    Man(crate::commands::ManArgs),
}

/// `revenant enqueue`.
#[derive(Debug, Args)]
pub struct EnqueueArgs {
    /// The queue (letters, digits, `_ - . :`; at most 64 bytes).
    #[arg(long, short)]
    pub queue: String,
    /// The kind: the name its handler is registered under.
    #[arg(long, short)]
    pub kind: String,
    /// The JSON payload; `-` reads it from standard input. Default `{}`.
    #[arg(long, short)]
    pub payload: Option<String>,
    /// Higher runs first (-1000..=1000).
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    pub priority: i32,
    /// Run after this long: `500ms`, `10s`, `5m`, `1h`.
    #[arg(long, conflicts_with = "run_at", allow_hyphen_values = true)]
    pub delay: Option<String>,
    /// Run at this time (RFC 3339, e.g. 2026-12-01T08:00:00Z).
    #[arg(long)]
    pub run_at: Option<String>,
    /// Attempts before the job is dead. Default: the global policy's (12).
    #[arg(long, allow_negative_numbers = true)]
    pub max_attempts: Option<i32>,
    /// FIFO group: jobs of one group run one at a time, in order.
    #[arg(long)]
    pub group: Option<String>,
    /// Idempotency key: a second enqueue with it returns the first job.
    #[arg(long)]
    pub unique_key: Option<String>,
    /// A caller's id to follow the work across systems.
    #[arg(long)]
    pub correlation_id: Option<String>,
    /// The W3C trace context the job's attempt spans join (00-<trace id>-<span
    /// id>-<flags>); refused when malformed. Default: $TRACEPARENT when set.
    #[arg(long, env = "TRACEPARENT")]
    pub traceparent: Option<String>,
    /// Its W3C tracestate (vendor key=value pairs); needs --traceparent.
    #[arg(long, env = "TRACESTATE", requires = "traceparent")]
    pub tracestate: Option<String>,
    /// Print the new job as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Filters shared by `jobs list`, `dead list`, `dead redrive` and `dead purge`.
#[derive(Debug, Args, Default, Clone)]
pub struct FilterArgs {
    /// Only this queue.
    #[arg(long, short)]
    pub queue: Option<String>,
    /// Only this kind.
    #[arg(long, short)]
    pub kind: Option<String>,
    /// Only this group.
    #[arg(long)]
    pub group: Option<String>,
    /// Only this correlation id.
    #[arg(long)]
    pub correlation_id: Option<String>,
    /// Only jobs whose last error contains this text.
    #[arg(long)]
    pub error: Option<String>,
    /// Only jobs finished since: a duration ago (`1h`) or an RFC 3339 time.
    #[arg(long)]
    pub since: Option<String>,
    /// Only jobs finished before: a duration ago (`10m`) or an RFC 3339 time.
    #[arg(long)]
    pub until: Option<String>,
    /// Only dead jobs with this error fingerprint (12 hex digits, from
    /// `revenant dead fingerprints`).
    #[arg(long)]
    pub fingerprint: Option<String>,
}

/// `revenant jobs ...`.
#[derive(Debug, Subcommand)]
// Parsed once per process: the size of the largest variant costs nothing worth a Box.
#[allow(clippy::large_enum_variant)]
pub enum JobsCommand {
    /// List jobs, newest first.
    List {
        /// Filters.
        #[command(flatten)]
        filter: FilterArgs,
        /// Only this status: ready, running, completed, dead, cancelled.
        #[arg(long, short)]
        status: Option<String>,
        /// At most this many (1..=10000).
        #[arg(long, default_value_t = 50)]
        limit: u32,
        /// Only ids below this one (the last id of the previous page).
        #[arg(long)]
        before: Option<i64>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Show one job with its whole error history.
    Show {
        /// The job id.
        id: i64,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Cancel a ready or running job.
    Cancel {
        /// The job id.
        id: i64,
        /// Why (kept in the job's history).
        #[arg(long)]
        reason: Option<String>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

/// `revenant dead ...`.
#[derive(Debug, Subcommand)]
pub enum DeadCommand {
    /// List dead jobs, newest first.
    List {
        /// Filters.
        #[command(flatten)]
        filter: FilterArgs,
        /// Only this reason: permanent, attempts_exhausted, lease_expired,
        /// decode_error, unknown_kind.
        #[arg(long)]
        reason: Option<String>,
        /// At most this many (1..=10000).
        #[arg(long, default_value_t = 50)]
        limit: u32,
        /// Only ids below this one (paging).
        #[arg(long)]
        before: Option<i64>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Show a dead job: payload, every attempt, why it died.
    Show {
        /// The job id.
        id: i64,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Group dead jobs by the fingerprint of their last error (numbers, ids, quoted
    /// values and URL paths stripped, hosts kept), largest group first: one line per
    /// bug, with its grouped form.
    Fingerprints {
        /// Filters.
        #[command(flatten)]
        filter: FilterArgs,
        /// Only this reason.
        #[arg(long)]
        reason: Option<String>,
        /// At most this many groups (1..=10000).
        #[arg(long, default_value_t = 50)]
        limit: u32,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Move dead jobs back to ready with a fresh attempt budget, history kept.
    Redrive(RedriveArgs),
    /// The redrive audit: when, which filter, how many, at what rate, by whom.
    History {
        /// At most this many records, newest first (1..=10000).
        #[arg(long, default_value_t = 20)]
        limit: u32,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Delete dead jobs for good.
    Purge(PurgeArgs),
    /// Write dead jobs as JSON Lines (one job per line, newest first), page by page.
    Export(ExportArgs),
}

/// `revenant dead export`.
#[derive(Debug, Args)]
pub struct ExportArgs {
    /// These job ids (else every dead job matching the filters).
    pub ids: Vec<i64>,
    /// Filters.
    #[command(flatten)]
    pub filter: FilterArgs,
    /// Only this reason.
    #[arg(long)]
    pub reason: Option<String>,
    /// Write to this file (created or truncated) instead of standard output.
    #[arg(long, short)]
    pub output: Option<std::path::PathBuf>,
}

/// `revenant dead redrive`.
#[derive(Debug, Args)]
pub struct RedriveArgs {
    /// These job ids (else every dead job matching the filters).
    pub ids: Vec<i64>,
    /// Filters.
    #[command(flatten)]
    pub filter: FilterArgs,
    /// Only this reason.
    #[arg(long)]
    pub reason: Option<String>,
    /// Redrive every dead job when no id or filter is given.
    #[arg(long)]
    pub all: bool,
    /// At most this many.
    #[arg(long)]
    pub limit: Option<u32>,
    /// Spread the redriven jobs so workers pick them up no faster than this:
    /// `20/s`, `600/m`, `5` (per second).
    #[arg(long)]
    pub rate: Option<String>,
    /// Show how many would be redriven and a sample, change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Who is redriving, for the audit. Default: $REVENANT_ACTOR, else $USER.
    #[arg(long)]
    pub actor: Option<String>,
    /// Why (a ticket, "provider fixed"), for the audit.
    #[arg(long)]
    pub note: Option<String>,
    /// No progress bar (it is drawn only on a terminal, and never with --json).
    #[arg(long)]
    pub no_progress: bool,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// `revenant dead purge`.
#[derive(Debug, Args)]
pub struct PurgeArgs {
    /// These job ids (else every dead job matching the filters).
    pub ids: Vec<i64>,
    /// Filters.
    #[command(flatten)]
    pub filter: FilterArgs,
    /// Only this reason.
    #[arg(long)]
    pub reason: Option<String>,
    /// Purge every dead job when no id or filter is given.
    #[arg(long)]
    pub all: bool,
    /// At most this many.
    #[arg(long)]
    pub limit: Option<u32>,
    /// Show how many would be purged, change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Do not ask for confirmation.
    #[arg(long, short)]
    pub yes: bool,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// `revenant queues ...`.
#[derive(Debug, Subcommand)]
pub enum QueuesCommand {
    /// List queues with their numbers.
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Stop claims from a queue (enqueues are still accepted).
    Pause {
        /// The queue.
        queue: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Restart claims from a paused queue.
    Resume {
        /// The queue.
        queue: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

/// `revenant stats`.
#[derive(Debug, Args)]
pub struct StatsArgs {
    /// Only this queue.
    #[arg(long, short)]
    pub queue: Option<String>,
    /// A worker seen within this long counts as alive.
    #[arg(long, default_value = "30s")]
    pub alive_within: String,
    /// The window of the COMPLETED and FAILED counts.
    #[arg(long, default_value = "60s")]
    pub window: String,
    /// Refresh every INTERVAL (default 2s) until Ctrl-C: in place on a terminal, one
    /// table (or one JSON line) after another otherwise.
    #[arg(long, value_name = "INTERVAL", num_args = 0..=1, default_missing_value = "2s")]
    pub watch: Option<String>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// `revenant policy`: the stored retry policies every door and worker resolves
/// against (`list`, `set`, `unset`), or, with flags and no subcommand, the schedule of
/// a policy before anyone trusts it.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct PolicyArgs {
    /// What to do; none: print the schedule the flags describe.
    #[command(subcommand)]
    pub command: Option<crate::commands::PolicyCommand>,
    /// The policy whose schedule to print.
    #[command(flatten)]
    pub schedule: ScheduleArgs,
}

/// `revenant policy [FLAGS]`: defaults are revenant's global default policy.
#[derive(Debug, Args)]
pub struct ScheduleArgs {
    /// The delay after the first failure.
    #[arg(long, default_value = "10s")]
    pub base: String,
    /// How much each further failure multiplies the delay.
    #[arg(long, default_value_t = 2.0)]
    pub multiplier: f64,
    /// No delay is longer than this.
    #[arg(long, default_value = "1h")]
    pub cap: String,
    /// Attempts in all (the first try included).
    #[arg(long, default_value_t = 12, allow_negative_numbers = true)]
    pub attempts: i64,
    /// none, full, equal, proportional(F) or decorrelated.
    #[arg(long, default_value = "equal")]
    pub jitter: String,
    /// Also say whether an outage of this length dead-letters a job that fails at
    /// its start (e.g. `30m`).
    #[arg(long)]
    pub outage: Option<String>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}
