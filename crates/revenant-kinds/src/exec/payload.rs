//! The `exec` kind's payload, and its checks.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use revenant_runtime::JobError;

/// The payload of an `exec` job.
///
/// ```json
/// { "command": "/usr/local/bin/render-receipt", "args": ["--order", "42"],
///   "env": { "LANG": "C.UTF-8" }, "cwd": "/srv/receipts",
///   "input": { "order": 42 }, "timeout": "2m" }
/// ```
///
/// Unknown fields are refused (`decode_error`), so a misspelt `timout` does not
/// silently fall back to the default.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExecPayload {
    /// The program: a path, or a name looked up in the worker's `PATH`. Run directly,
    /// not through a shell (use `"command": "sh", "args": ["-c", "..."]` for one).
    /// Required. A program that does not exist is a permanent failure. On a worker
    /// with an allow list, one of its entries as written (or the absolute path it
    /// resolved to when the worker started), and that file runs.
    pub command: String,
    /// Its arguments. Default none.
    #[serde(default)]
    pub args: Vec<String>,
    /// Variables added to (or replacing in) the worker's environment. Default none:
    /// the command inherits the worker's environment as it is. Only the variables the
    /// worker allows (`--allow-exec-env`); never `PATH`, `LD_*` or `DYLD_*`.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// The working directory. Default: the worker's. Only inside a directory the
    /// worker allows (`--allow-exec-cwd`), judged after resolving `..` and symbolic
    /// links. A directory that does not exist is a permanent failure.
    #[serde(default)]
    pub cwd: Option<PathBuf>,
    /// Text written to standard input as it is. At most one of `stdin` and `input`.
    #[serde(default)]
    pub stdin: Option<String>,
    /// JSON written to standard input, serialized, when `stdin` is absent. With neither,
    /// standard input is empty (`/dev/null`).
    #[serde(default)]
    pub input: Option<serde_json::Value>,
    /// How long the command may run, as a duration string (`30s`, `5m`). Default: until
    /// shortly before the attempt's own timeout. Always cut so the process group can be
    /// stopped (SIGTERM, then SIGKILL after a grace) before the attempt ends.
    #[serde(default)]
    pub timeout: Option<String>,
}

/// A payload that passed its checks.
#[derive(Debug)]
pub(crate) struct Command {
    pub(crate) program: String,
    pub(crate) args: Vec<String>,
    pub(crate) env: BTreeMap<String, String>,
    pub(crate) cwd: Option<PathBuf>,
    pub(crate) stdin: Option<Vec<u8>>,
    pub(crate) timeout: Option<Duration>,
}

fn invalid(field: &str, message: impl std::fmt::Display) -> JobError {
    JobError::permanent(format!("exec payload: {field}: {message}"))
}

impl ExecPayload {
    /// Checks every field; the first bad one is a permanent failure naming it.
    pub(crate) fn validate(&self) -> Result<Command, JobError> {
        if self.command.trim().is_empty() {
            return Err(invalid("command", "is empty"));
        }
        if self.command.contains('\0') {
            return Err(invalid("command", "contains a NUL byte"));
        }
        if let Some(i) = self.args.iter().position(|a| a.contains('\0')) {
            return Err(invalid(&format!("args[{i}]"), "contains a NUL byte"));
        }
        for (name, value) in &self.env {
            if name.is_empty() || name.contains('=') || name.contains('\0') {
                return Err(invalid(
                    &format!("env.{name}"),
                    "is not a variable name (empty, or contains '=' or NUL)",
                ));
            }
            if value.contains('\0') {
                return Err(invalid(&format!("env.{name}"), "value contains a NUL byte"));
            }
        }
        // `cwd` is checked by the handler, against the directories the worker allows,
        // before anything reveals whether it exists.
        let stdin = match (&self.stdin, &self.input) {
            (Some(_), Some(_)) => {
                return Err(invalid(
                    "stdin",
                    "give either stdin (text) or input (JSON), not both",
                ))
            }
            (Some(text), None) => Some(text.clone().into_bytes()),
            (None, Some(json)) => {
                Some(serde_json::to_vec(json).map_err(|err| invalid("input", err))?)
            }
            (None, None) => None,
        };
        let timeout = match &self.timeout {
            None => None,
            Some(text) => {
                let limit = revenant_core::duration::parse("timeout", text)
                    .map_err(|err| invalid("timeout", err.message))?;
                if limit.is_zero() {
                    return Err(invalid("timeout", "must be above zero"));
                }
                Some(limit)
            }
        };
        Ok(Command {
            program: self.command.clone(),
            args: self.args.clone(),
            env: self.env.clone(),
            cwd: self.cwd.clone(),
            stdin,
            timeout,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use revenant_runtime::JobAction;

    fn refusal(p: ExecPayload) -> String {
        let err = p.validate().unwrap_err();
        assert_eq!(err.action(), JobAction::Permanent);
        err.message().to_string()
    }

    fn payload() -> ExecPayload {
        ExecPayload {
            command: "true".into(),
            ..ExecPayload::default()
        }
    }

    #[test]
    fn each_bad_field_is_permanent_and_named() {
        assert!(refusal(ExecPayload::default()).starts_with("exec payload: command:"));
        let mut p = payload();
        p.env.insert("A=B".into(), "x".into());
        assert!(refusal(p).starts_with("exec payload: env.A=B:"));
        let mut p = payload();
        p.stdin = Some("x".into());
        p.input = Some(serde_json::json!(1));
        assert!(refusal(p).starts_with("exec payload: stdin:"));
        let mut p = payload();
        p.timeout = Some("soon".into());
        assert!(refusal(p).starts_with("exec payload: timeout:"));
    }

    #[test]
    fn input_is_written_as_json_and_stdin_as_text() {
        let mut p = payload();
        p.input = Some(serde_json::json!({"order": 42}));
        assert_eq!(
            p.validate().unwrap().stdin.as_deref(),
            Some(&br#"{"order":42}"#[..])
        );
        let mut p = payload();
        p.stdin = Some("raw text".into());
        assert_eq!(
            p.validate().unwrap().stdin.as_deref(),
            Some(&b"raw text"[..])
        );
        assert_eq!(payload().validate().unwrap().stdin, None);
    }
}
