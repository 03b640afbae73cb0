//! `revenant migrate`: apply the pending schema migrations as a step of its own, or
//! list which are applied and which are pending (`--status`). See docs/deploy.md for
//! when to run it instead of letting processes migrate at start.

use std::process::ExitCode;

use clap::Args;
use revenant::Migration;

use crate::error::CliError;
use crate::output::{self, Table};

/// `revenant migrate`.
#[derive(Debug, Args)]
pub struct MigrateArgs {
    /// Change nothing: list every migration this version knows, applied or pending.
    #[arg(long)]
    pub status: bool,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// Runs `revenant migrate`. Exit 0 when the schema is current afterwards (or, with
/// `--status`, always once the status is read).
pub async fn run(url: &str, args: MigrateArgs) -> Result<ExitCode, CliError> {
    if args.status {
        let migrations = revenant::migration_status(url).await?;
        if args.json {
            output::json(&migrations)?;
        } else {
            let mut table = Table::new(vec!["VERSION", "NAME", "APPLIED"]);
            for m in &migrations {
                table.row(vec![
                    format!("{:04}", m.version),
                    m.name.clone(),
                    m.applied_at
                        .map_or_else(|| "pending".to_string(), output::time),
                ]);
            }
            table.print("no migrations")?;
        }
        return Ok(ExitCode::SUCCESS);
    }
    let applied = revenant::migrate(url, None).await?;
    if args.json {
        output::json(&serde_json::json!({ "applied": applied }))?;
    } else if applied.is_empty() {
        println!("the schema is current: no migration to apply");
    } else {
        for m in &applied {
            println!("applied {}", label(m));
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn label(m: &Migration) -> String {
    format!("{:04}_{}", m.version, m.name)
}
