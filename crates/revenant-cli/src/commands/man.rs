//! `revenant man --out DIR`: the man pages, generated from the clap definitions by
//! `clap_mangen`: `revenant.1`, and one page per subcommand at every depth, named by
//! its path (`revenant-dead-redrive.1`).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::CommandFactory;

use crate::cli::Cli;
use crate::error::CliError;

/// `revenant man`.
#[derive(Debug, clap::Args)]
pub struct ManArgs {
    /// The directory to write the pages to (created if missing; existing pages of the
    /// same names are replaced).
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
}

/// Writes the pages and prints each one's path.
pub fn run(args: ManArgs) -> Result<ExitCode, CliError> {
    let pages = write_pages(&args.out).map_err(|err| {
        CliError::Failed(format!(
            "cannot write the man pages to {}: {err}",
            args.out.display()
        ))
    })?;
    for page in pages {
        println!("{}", page.display());
    }
    Ok(ExitCode::SUCCESS)
}

/// Writes every page into `dir`; their paths, the top-level page first.
fn write_pages(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)?;
    // `help` is clap's, not ours: `revenant help dead` is `revenant dead --help`.
    // Building names each subcommand `revenant-dead-redrive`, which names its page.
    let mut cmd = Cli::command().disable_help_subcommand(true);
    cmd.build();
    let mut pages = Vec::new();
    write_tree(cmd, dir, &mut pages)?;
    Ok(pages)
}

fn write_tree(cmd: clap::Command, dir: &Path, pages: &mut Vec<PathBuf>) -> std::io::Result<()> {
    pages.push(clap_mangen::Man::new(cmd.clone()).generate_to(dir)?);
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        write_tree(sub.clone(), dir, pages)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every subcommand's page name, walked from the parser itself: `revenant`,
    /// `revenant-dead`, `revenant-dead-redrive`, ...
    fn page_names(cmd: &clap::Command, prefix: &str, names: &mut Vec<String>) {
        names.push(prefix.to_string());
        for sub in cmd.get_subcommands() {
            page_names(sub, &format!("{prefix}-{}", sub.get_name()), names);
        }
    }

    #[test]
    fn every_subcommand_at_every_depth_gets_a_page() {
        let dir = tempfile::tempdir().unwrap();
        let written = write_pages(dir.path()).unwrap();
        let mut names = Vec::new();
        page_names(&Cli::command(), "revenant", &mut names);
        assert!(names.contains(&"revenant-dead-redrive".to_string()));
        assert!(
            names.contains(&"revenant-breaker-open".to_string()),
            "{names:?}"
        );
        for name in &names {
            let page = dir.path().join(format!("{name}.1"));
            let text = std::fs::read_to_string(&page)
                .unwrap_or_else(|err| panic!("{}: {err}", page.display()));
            assert!(text.contains(".TH"), "{name}.1 has no title");
            assert!(written.contains(&page), "{name}.1 not reported");
        }
        assert_eq!(written.len(), names.len(), "{written:?}");
    }
}
