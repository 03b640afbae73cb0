//! `revenant completions SHELL`: the shell's completion script, generated from the
//! clap definitions by `clap_complete`, so it cannot drift from the parser.

use std::io::Write;
use std::process::ExitCode;

use clap::CommandFactory;

use crate::cli::Cli;
use crate::error::CliError;

/// `revenant completions`.
#[derive(Debug, clap::Args)]
pub struct CompletionsArgs {
    /// The shell. bash: source it from ~/.bashrc, or save it as
    /// /usr/share/bash-completion/completions/revenant. zsh: save it as `_revenant` in a
    /// directory on $fpath. fish: save it as ~/.config/fish/completions/revenant.fish.
    #[arg(value_enum)]
    pub shell: Shell,
}

/// The shells whose scripts CI checks (scripts/cli-docs-check.sh parses each one).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Shell {
    /// GNU bash.
    Bash,
    /// The Z shell.
    Zsh,
    /// The friendly interactive shell.
    Fish,
}

impl Shell {
    fn generator(self) -> clap_complete::Shell {
        match self {
            Shell::Bash => clap_complete::Shell::Bash,
            Shell::Zsh => clap_complete::Shell::Zsh,
            Shell::Fish => clap_complete::Shell::Fish,
        }
    }
}

/// Prints the script to standard output.
pub fn run(args: CompletionsArgs) -> Result<ExitCode, CliError> {
    let mut out = std::io::stdout().lock();
    write(args.shell, &mut out)?;
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

/// Writes the completion script for `shell`.
fn write(shell: Shell, out: &mut dyn Write) -> Result<(), CliError> {
    let mut cmd = Cli::command();
    let name = cmd.get_name().to_string();
    // clap_complete panics on a failed write; render to memory, then write.
    let mut script = Vec::new();
    clap_complete::generate(shell.generator(), &mut cmd, name, &mut script);
    out.write_all(&script)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::ValueEnum;

    /// Whether `word` stands alone in `text`: not part of a longer name (`man` in
    /// `command`, `dead` in `deadline`).
    fn mentions(text: &str, word: &str) -> bool {
        let is_name = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '_';
        text.match_indices(word).any(|(at, _)| {
            let before = text[..at].chars().next_back();
            let after = text[at + word.len()..].chars().next();
            !before.is_some_and(is_name) && !after.is_some_and(is_name)
        })
    }

    #[test]
    fn every_shells_script_names_every_top_level_subcommand() {
        let names: Vec<String> = Cli::command()
            .get_subcommands()
            .map(|c| c.get_name().to_string())
            .collect();
        assert!(names.len() > 10, "only {names:?}");
        for shell in Shell::value_variants() {
            let mut script = Vec::new();
            write(*shell, &mut script).unwrap();
            let script = String::from_utf8(script).unwrap();
            assert!(script.len() > 1000, "{shell:?}: {} bytes", script.len());
            for name in &names {
                assert!(mentions(&script, name), "{shell:?} misses `{name}`");
            }
        }
    }

    #[test]
    fn a_word_inside_a_longer_name_is_not_a_mention() {
        assert!(mentions("'man' 'dead'", "man"));
        assert!(!mentions("command deadline", "man"));
        assert!(!mentions("revenant-dead", "dead"));
    }
}
