//! One module per command group. Each opens the store itself when it needs one, so
//! `revenant policy` works without a database.

mod breaker;
mod check;
mod completions;
mod cron;
mod dead;
mod demo;
mod enqueue;
mod filter;
mod jobs;
mod man;
mod metrics;
mod migrate;
mod otel;
mod policy;
mod protection;
mod queues;
mod serve;
mod simulate;
mod stats;
mod work;

pub use breaker::BreakerCommand;
pub use check::{CheckArgs, UNKNOWN as CHECK_UNKNOWN};
pub use completions::CompletionsArgs;
pub use cron::CronCommand;
pub use demo::DemoArgs;
pub use man::ManArgs;
pub use metrics::MetricsArgs;
pub use migrate::MigrateArgs;
pub use policy::PolicyCommand;
pub use serve::ServeArgs;
pub use simulate::SimulateArgs;
pub use work::WorkArgs;

use revenant::{Client, MigrateMode};
use std::process::ExitCode;

use crate::cli::{Cli, Command};
use crate::error::CliError;

/// Runs the parsed command line.
pub async fn run(cli: Cli) -> Result<ExitCode, CliError> {
    let url = cli.database_url;
    match cli.command {
        Command::Policy(command) => policy::run(&url, command).await,
        Command::Simulate(args) => simulate::run(args).await,
        Command::Demo(args) => demo::run(args).await,
        Command::Enqueue(args) => enqueue::run(&open(&url, cli.migrate).await?, args).await,
        Command::Jobs(command) => jobs::run(&open(&url, cli.migrate).await?, command).await,
        Command::Dead(command) => dead::run(&open(&url, cli.migrate).await?, command).await,
        Command::Queues(command) => queues::run(&open(&url, cli.migrate).await?, command).await,
        Command::Stats(args) => stats::run(open(&url, cli.migrate).await?.store(), args).await,
        Command::Breaker(command) => breaker::run(&open(&url, cli.migrate).await?, command).await,
        Command::Cron(command) => cron::run(&open(&url, cli.migrate).await?, command).await,
        Command::Work(args) => work::run(&open(&url, cli.migrate).await?, args).await,
        Command::Check(args) => check::run(&url, args).await,
        Command::Migrate(args) => migrate::run(&url, args).await,
        Command::Metrics(args) => metrics::run(open(&url, cli.migrate).await?.store(), args).await,
        Command::Serve(args) => serve::run(&url, cli.migrate, args).await,
        Command::Completions(args) => completions::run(args),
        Command::Man(args) => man::run(args),
    }
}

/// Opens the store the URL names, behind the client every command goes through.
/// Applies pending migrations first unless `migrate` is `never`.
async fn open(url: &str, migrate: MigrateMode) -> Result<Client, CliError> {
    Ok(Client::new(revenant::connect_with(url, migrate).await?))
}
