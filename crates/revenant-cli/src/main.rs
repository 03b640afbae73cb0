//! `revenant`: the command-line face of the queue. Everything an operator does at 3am,
//! with `--json` on every read and exit codes for scripts:
//! 0 success, 1 failure, 2 bad usage or bad input.

mod cli;
mod commands;
mod error;
mod output;
mod version;

use std::process::ExitCode;

use clap::Parser;

#[tokio::main]
async fn main() -> ExitCode {
    let cli = match cli::Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => {
            let _ = err.print();
            // `revenant check` keeps 2 for "critical": its bad usage is 3 (unknown).
            return match err.use_stderr() {
                true if subcommand().as_deref() == Some("check") => {
                    ExitCode::from(commands::CHECK_UNKNOWN)
                }
                _ => ExitCode::from(err.exit_code() as u8),
            };
        }
    };
    // The demo fails a hundred thousand attempts on purpose: its live view tells the
    // story, so its log is off unless REVENANT_LOG asks for it.
    let default_filter = match cli.command {
        cli::Command::Demo(_) => "off",
        _ => "warn",
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("REVENANT_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_filter)),
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

/// The subcommand named on the command line, read without clap (for when clap
/// refused the line): the first word that is not a flag or the global flag's value.
fn subcommand() -> Option<String> {
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        if arg == "--database-url" {
            args.next();
        } else if !arg.starts_with('-') {
            return Some(arg);
        }
    }
    None
}
