//! `revenant`: the command-line face of the queue. Everything an operator does at 3am,
//! with `--json` on every read and exit codes for scripts:
//! 0 success, 1 failure, 2 bad usage or bad input.

mod cli;
mod commands;
mod error;
mod output;

use std::process::ExitCode;

use clap::Parser;

#[tokio::main]
async fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("REVENANT_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    match commands::run(cli).await {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {err}");
            err.exit_code()
        }
    }
}
