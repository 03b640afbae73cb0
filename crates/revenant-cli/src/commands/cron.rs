//! `revenant cron`: periodic jobs, stored in the database so every worker, the CLI and
//! the server see the same ones. Every `revenant work` process runs the scheduler;
//! each tick is enqueued once however many run (see docs/periodic-jobs.md).

use std::process::ExitCode;

use revenant::duration::{format, parse};
use revenant::schedule::{ScheduleListing, ScheduleRecord, ScheduleSpec, ScheduledJob};
use revenant::{Client, InputError};

use crate::error::CliError;
use crate::output::{self, Table};

/// `revenant cron list|set|unset|pause|resume|run`.
#[derive(Debug, clap::Subcommand)]
pub enum CronCommand {
    /// Every schedule: its rule, next and last tick, paused or not, misfire policy.
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Store a schedule, replacing the one of the same name. Its first tick is the
    /// first after now; setting an unchanged schedule again moves nothing.
    Set(SetArgs),
    /// Remove a schedule. The jobs it enqueued stay.
    Unset(NameArgs),
    /// Pause a schedule: no tick is enqueued until it is resumed.
    Pause(NameArgs),
    /// Resume a schedule from its next tick after now (ticks that fell while it was
    /// paused are not enqueued).
    Resume(NameArgs),
    /// Enqueue a schedule's job now, by hand (paused or not; its ticks are untouched).
    Run(NameArgs),
}

/// A schedule's name, and `--json`.
#[derive(Debug, clap::Args)]
pub struct NameArgs {
    /// The schedule's name.
    name: String,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// `revenant cron set`.
#[derive(Debug, clap::Args)]
pub struct SetArgs {
    /// The schedule's name (letters, digits, `_ - . :`; at most 64 bytes).
    name: String,
    /// A cron expression: five fields (minute hour day month weekday), or six with
    /// seconds first. Quote it: `--cron "30 2 * * *"`.
    #[arg(
        long,
        allow_hyphen_values = true,
        conflicts_with = "every",
        required_unless_present = "every"
    )]
    cron: Option<String>,
    /// A fixed interval instead, counted from the Unix epoch: `30s`, `5m`, `1h`.
    #[arg(long)]
    every: Option<String>,
    /// The IANA time zone the cron expression is read in.
    #[arg(long, default_value = "UTC")]
    timezone: String,
    /// Ticks missed while no worker ran: `skip` them, or enqueue the `last` one.
    #[arg(long, default_value = "skip")]
    misfire: String,
    /// How late a tick may be enqueued and still count as on time. Default 1m.
    #[arg(long)]
    grace: Option<String>,
    /// The queue of the job to enqueue.
    #[arg(long, short)]
    queue: String,
    /// The kind of the job to enqueue.
    #[arg(long, short)]
    kind: String,
    /// The job's JSON payload. Default `{}`.
    #[arg(long, short)]
    payload: Option<String>,
    /// The job's priority (-1000..=1000).
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    priority: i32,
    /// The job's attempts. Default: its retry policy's, at each enqueue.
    #[arg(long, allow_negative_numbers = true)]
    max_attempts: Option<i32>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

impl SetArgs {
    fn spec(&self) -> Result<ScheduleSpec, InputError> {
        let payload = match &self.payload {
            None => serde_json::json!({}),
            Some(text) => serde_json::from_str(text)
                .map_err(|err| InputError::new("payload", format!("is not JSON: {err}")))?,
        };
        let spec = ScheduleSpec {
            name: self.name.clone(),
            cron: self.cron.clone(),
            every: self
                .every
                .as_deref()
                .map(|e| parse("every", e))
                .transpose()?,
            timezone: self.timezone.clone(),
            misfire: self.misfire.parse()?,
            grace: self
                .grace
                .as_deref()
                .map(|g| parse("grace", g))
                .transpose()?,
            job: ScheduledJob {
                queue: self.queue.clone(),
                kind: self.kind.clone(),
                payload,
                priority: self.priority,
                max_attempts: self.max_attempts,
            },
        };
        spec.validate()?;
        Ok(spec)
    }
}

fn listed(record: &ScheduleRecord) -> ScheduleListing {
    ScheduleListing::from(record)
}

/// Runs `revenant cron`.
pub async fn run(client: &Client, command: CronCommand) -> Result<ExitCode, CliError> {
    match command {
        CronCommand::List { json } => {
            let records = client.schedules().await?;
            if json {
                let rows: Vec<ScheduleListing> = records.iter().map(listed).collect();
                output::json(&rows)?;
                return Ok(ExitCode::SUCCESS);
            }
            let mut table = Table::new(vec![
                "NAME", "RULE", "JOB", "NEXT", "LAST", "STATE", "MISFIRE", "GRACE",
            ]);
            for record in &records {
                let spec = &record.spec;
                table.row(vec![
                    spec.name.clone(),
                    spec.describe(),
                    format!("{}/{}", spec.job.queue, spec.job.kind),
                    output::time(record.next_tick),
                    output::time_opt(record.last_tick),
                    if record.paused { "paused" } else { "active" }.to_string(),
                    spec.misfire.as_str().to_string(),
                    format(spec.grace()),
                ]);
            }
            table.print("no schedules (add one with `revenant cron set`)")?;
            Ok(ExitCode::SUCCESS)
        }
        CronCommand::Set(args) => {
            let spec = args.spec()?;
            let name = spec.name.clone();
            client.set_schedule(spec).await?;
            let record = revenant::runtime::scheduler::find(&**client.store(), &name)
                .await?
                .ok_or_else(|| CliError::Failed(format!("schedule {name:?} vanished")))?;
            if args.json {
                output::json(&listed(&record))?;
            } else {
                println!(
                    "schedule {name} stored: {}, next tick {}",
                    record.spec.describe(),
                    output::time(record.next_tick)
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        CronCommand::Unset(args) => {
            let removed = client.delete_schedule(&args.name).await?;
            done(&args, "removed", removed)
        }
        CronCommand::Pause(args) => {
            let found = client.pause_schedule(&args.name).await?;
            done(&args, "paused", found)
        }
        CronCommand::Resume(args) => {
            let found = client.resume_schedule(&args.name).await?;
            done(&args, "resumed", found)
        }
        CronCommand::Run(args) => match client.run_schedule(&args.name).await? {
            Some(job) => {
                if args.json {
                    output::json(&serde_json::json!({"schedule": args.name, "job": job}))?;
                } else {
                    println!("schedule {} run by hand: job {}", args.name, job.id);
                }
                Ok(ExitCode::SUCCESS)
            }
            None => Err(no_such(&args.name)),
        },
    }
}

fn no_such(name: &str) -> CliError {
    CliError::Failed(format!(
        "no schedule named {name:?} (see `revenant cron list`)"
    ))
}

fn done(args: &NameArgs, verb: &str, found: bool) -> Result<ExitCode, CliError> {
    if !found {
        return Err(no_such(&args.name));
    }
    if args.json {
        output::json(&serde_json::json!({"schedule": args.name, verb: true}))?;
    } else {
        println!("schedule {} {verb}", args.name);
    }
    Ok(ExitCode::SUCCESS)
}
