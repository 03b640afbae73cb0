//! What the operator lets an `exec` job do: which programs run (resolved to a file
//! once, when the worker starts), which environment variables a payload may set, and
//! in which directories it may run.
//!
//! A producer controls the payload entirely. Checking the `command` alone is not
//! enough: `PATH` decides which file a bare name runs, `LD_PRELOAD` (and the rest of
//! `LD_*`, `DYLD_*` on macOS) loads any library into an allowed program, and `cwd`
//! decides which file a relative path names. So the program is fixed at start, and
//! `env` and `cwd` are refused unless the operator opened them.

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use revenant_runtime::JobError;

/// A worker setting of the `exec` kind that cannot work, refused when the handler is
/// configured (that is, when the worker starts).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ExecConfigError {
    /// An allowed command was not found: a bare name in none of the worker's `PATH`
    /// directories, or a path to nothing.
    #[error("command {command:?} not found{where_}")]
    CommandNotFound {
        /// The command as given.
        command: String,
        /// Where it was looked for.
        where_: String,
    },
    /// An allowed command names a file that is not an executable regular file.
    #[error("command {command:?} ({path}) is not an executable file")]
    NotExecutable {
        /// The command as given.
        command: String,
        /// The file it resolved to.
        path: String,
    },
    /// A variable that may never be set by a job: `PATH`, `LD_*`, `DYLD_*`.
    #[error("{name:?} cannot be allowed: it decides which code runs (PATH, LD_*, DYLD_* are never taken from a job)")]
    EnvNeverAllowed {
        /// The variable.
        name: String,
    },
    /// Not a variable name.
    #[error("{name:?} is not an environment variable name (letters, digits and '_', not starting with a digit)")]
    EnvName {
        /// The name as given.
        name: String,
    },
    /// An allowed working directory that does not exist or is not a directory.
    #[error("{dir:?} is not a directory on this worker: {reason}")]
    Cwd {
        /// The directory as given.
        dir: PathBuf,
        /// Why not.
        reason: String,
    },
}

/// Whether a job may never set `name`, whatever the operator allows: the variables
/// that decide which file a name runs or which code a program loads. Compared without
/// case, to be safe on systems that fold it.
pub(crate) fn never_allowed(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    upper == "PATH" || upper.starts_with("LD_") || upper.starts_with("DYLD_")
}

/// Checks an operator's `--allow-exec-env` entry.
pub(crate) fn env_name(name: &str) -> Result<String, ExecConfigError> {
    let name = name.trim();
    let valid = !name.is_empty()
        && !name.as_bytes()[0].is_ascii_digit()
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    if !valid {
        return Err(ExecConfigError::EnvName {
            name: name.to_string(),
        });
    }
    if never_allowed(name) {
        return Err(ExecConfigError::EnvNeverAllowed {
            name: name.to_string(),
        });
    }
    Ok(name.to_string())
}

/// The file an allowed command runs: a path is made absolute (against the worker's
/// directory now, not the job's `cwd` later); a bare name is looked up in the worker's
/// own `PATH` now (relative `PATH` entries skipped). Symbolic links are kept as they
/// are, so a multi-call program still sees the name it was called by.
pub(crate) fn resolve_program(command: &str) -> Result<PathBuf, ExecConfigError> {
    let not_found = |where_: String| ExecConfigError::CommandNotFound {
        command: command.to_string(),
        where_,
    };
    if command.trim().is_empty() || command.contains('\0') {
        return Err(not_found(" (empty, or contains NUL)".into()));
    }
    let path = if command.contains('/') {
        let path = std::path::absolute(command).map_err(|err| not_found(format!(": {err}")))?;
        if !path.exists() {
            return Err(not_found(String::new()));
        }
        path
    } else {
        let search = std::env::var_os("PATH").unwrap_or_default();
        std::env::split_paths(&search)
            .filter(|dir| dir.is_absolute())
            .map(|dir| dir.join(command))
            .find(|candidate| is_executable(candidate))
            .ok_or_else(|| {
                not_found(format!(
                    " in the worker's PATH ({})",
                    search.to_string_lossy()
                ))
            })?
    };
    if !is_executable(&path) {
        return Err(ExecConfigError::NotExecutable {
            command: command.to_string(),
            path: path.display().to_string(),
        });
    }
    Ok(path)
}

fn is_executable(path: &Path) -> bool {
    std::fs::metadata(path)
        .is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
}

/// Checks an operator's `--allow-exec-cwd` entry: the directory, canonical.
pub(crate) fn cwd_root(dir: &Path) -> Result<PathBuf, ExecConfigError> {
    let refuse = |reason: String| ExecConfigError::Cwd {
        dir: dir.to_path_buf(),
        reason,
    };
    let canonical = dir.canonicalize().map_err(|err| refuse(err.to_string()))?;
    if !canonical.is_dir() {
        return Err(refuse("not a directory".into()));
    }
    Ok(canonical)
}

/// What a worker lets `exec` jobs do. Built by [`crate::ExecHandler`]'s methods.
#[derive(Debug, Clone)]
pub(crate) struct Allowed {
    /// The commands, as jobs write them, and the file each runs. Empty (the default):
    /// none runs. `None`: any command, run as written (looked up in the worker's
    /// `PATH` by the system), only after `ExecHandler::allow_any`.
    pub(crate) commands: Option<BTreeMap<String, PathBuf>>,
    pub(crate) env: BTreeSet<String>,
    pub(crate) cwd_roots: Vec<PathBuf>,
}

impl Default for Allowed {
    /// Safe by default: no command, no variable, no working directory.
    fn default() -> Self {
        Allowed {
            commands: Some(BTreeMap::new()),
            env: BTreeSet::new(),
            cwd_roots: Vec::new(),
        }
    }
}

fn refuse(field: &str, message: impl std::fmt::Display) -> JobError {
    JobError::permanent(format!("exec payload: {field}: {message}"))
}

impl Allowed {
    /// The file to run for a job's `command`, or a permanent refusal.
    pub(crate) fn program(&self, command: &str) -> Result<PathBuf, JobError> {
        let Some(commands) = &self.commands else {
            return Ok(PathBuf::from(command));
        };
        if let Some(path) = commands.get(command) {
            return Ok(path.clone());
        }
        // The resolved file named by its absolute path is the same program.
        if let Some(path) = commands.values().find(|path| path.as_os_str() == command) {
            return Ok(path.clone());
        }
        if commands.is_empty() {
            return Err(refuse(
                "command",
                format!("{command:?}: this worker allows no command (revenant work --allow-exec COMMAND, or ExecHandler::allow)"),
            ));
        }
        Err(refuse(
            "command",
            format!("{command:?} is not on this worker's allow list (--allow-exec)"),
        ))
    }

    /// Refuses the first variable a job may not set.
    pub(crate) fn check_env<'a>(
        &self,
        names: impl IntoIterator<Item = &'a String>,
    ) -> Result<(), JobError> {
        for name in names {
            if never_allowed(name) {
                return Err(refuse(
                    &format!("env.{name}"),
                    "may not be set by a job: it decides which code runs (PATH, LD_*, DYLD_* are never taken from a payload)",
                ));
            }
            if !self.env.contains(name) {
                return Err(refuse(
                    &format!("env.{name}"),
                    format!("is not on this worker's allow list (allow it with --allow-exec-env {name})"),
                ));
            }
        }
        Ok(())
    }

    /// The canonical directory to run in, when it is inside an allowed one.
    pub(crate) fn check_cwd(&self, cwd: &Path) -> Result<PathBuf, JobError> {
        if self.cwd_roots.is_empty() {
            return Err(refuse(
                "cwd",
                "this worker allows no working directory for jobs (allow one with --allow-exec-cwd DIR)",
            ));
        }
        // Canonical: `..` and symbolic links resolved, so neither escapes the roots.
        let canonical = cwd.canonicalize().map_err(|err| {
            refuse(
                "cwd",
                format!("{} is not a directory on this worker: {err}", cwd.display()),
            )
        })?;
        if !canonical.is_dir() {
            return Err(refuse(
                "cwd",
                format!("{} is not a directory on this worker", cwd.display()),
            ));
        }
        if self
            .cwd_roots
            .iter()
            .any(|root| canonical.starts_with(root))
        {
            Ok(canonical)
        } else {
            Err(refuse(
                "cwd",
                format!(
                    "{} ({}) is outside the directories this worker allows (--allow-exec-cwd)",
                    cwd.display(),
                    canonical.display()
                ),
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variables_that_choose_the_code_can_never_be_allowed() {
        for name in [
            "PATH",
            "LD_PRELOAD",
            "LD_LIBRARY_PATH",
            "DYLD_INSERT_LIBRARIES",
            "ld_preload",
        ] {
            assert!(
                matches!(
                    env_name(name),
                    Err(ExecConfigError::EnvNeverAllowed { .. })
                        | Err(ExecConfigError::EnvName { .. })
                ),
                "{name}"
            );
        }
        assert!(matches!(
            env_name("A=B"),
            Err(ExecConfigError::EnvName { .. })
        ));
        assert!(matches!(
            env_name("1X"),
            Err(ExecConfigError::EnvName { .. })
        ));
        assert_eq!(env_name(" LANG ").unwrap(), "LANG");
    }

    #[test]
    fn a_bare_name_resolves_to_an_absolute_file_in_the_workers_path() {
        let path = resolve_program("sh").unwrap();
        assert!(path.is_absolute(), "{}", path.display());
        assert!(matches!(
            resolve_program("revenant-test-no-such-command"),
            Err(ExecConfigError::CommandNotFound { .. })
        ));
        let dir = tempfile::tempdir().unwrap();
        let plain = dir.path().join("data.txt");
        std::fs::write(&plain, "x").unwrap();
        assert!(matches!(
            resolve_program(plain.to_str().unwrap()),
            Err(ExecConfigError::NotExecutable { .. })
        ));
        assert!(matches!(
            resolve_program(dir.path().to_str().unwrap()),
            Err(ExecConfigError::NotExecutable { .. })
        ));
    }

    #[test]
    fn a_cwd_is_judged_after_canonicalizing() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("jobs");
        std::fs::create_dir_all(root.join("inner")).unwrap();
        std::fs::create_dir_all(dir.path().join("secrets")).unwrap();
        std::os::unix::fs::symlink(dir.path().join("secrets"), root.join("link")).unwrap();
        let allowed = Allowed {
            cwd_roots: vec![cwd_root(&root).unwrap()],
            ..Allowed::default()
        };
        assert!(allowed.check_cwd(&root.join("inner")).is_ok());
        assert!(allowed.check_cwd(&root.join("inner/..")).is_ok());
        for escape in [
            root.join("../secrets"),
            root.join("link"),
            PathBuf::from("/"),
        ] {
            let err = allowed.check_cwd(&escape).unwrap_err();
            assert!(
                err.message().contains("outside"),
                "{}: {}",
                escape.display(),
                err.message()
            );
        }
        // A sibling whose name starts with the root's is not inside it.
        std::fs::create_dir_all(dir.path().join("jobs-evil")).unwrap();
        assert!(allowed.check_cwd(&dir.path().join("jobs-evil")).is_err());
    }
}
