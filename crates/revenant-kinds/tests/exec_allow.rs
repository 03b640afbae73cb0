//! The `exec` kind's allow lists, tried as a producer with a produce-only token would:
//! an allowed command made to run other code through `PATH`, `LD_PRELOAD`, another
//! variable, a working directory or a relative path. Each is refused as permanent
//! before anything runs (the planted program's marker file stays absent).

mod attempt;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use revenant_core::Outcome;
use revenant_kinds::exec::ExecConfigError;
use revenant_kinds::ExecHandler;
use serde_json::{json, Value};

use attempt::{context, message, run};

const LONG: Duration = Duration::from_secs(60);

/// A directory holding an executable `name` that creates `marker` when it runs: what
/// an attacker would like the worker to run instead of the allowed program.
struct Planted {
    dir: tempfile::TempDir,
    marker: PathBuf,
}

impl Planted {
    fn new(name: &str) -> Planted {
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("pwned");
        let program = dir.path().join(name);
        std::fs::write(
            &program,
            format!("#!/bin/sh\ntouch '{}'\n", marker.display()),
        )
        .unwrap();
        std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o755)).unwrap();
        Planted { dir, marker }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn assert_not_run(&self) {
        assert!(!self.marker.exists(), "the planted program ran");
    }
}

async fn attempt(handler: &ExecHandler, payload: Value) -> Outcome {
    run(handler, context(1, 1, LONG), payload).await
}

fn assert_refused(outcome: &Outcome, prefix: &str) {
    assert!(
        matches!(outcome, Outcome::Permanent { .. }),
        "expected a permanent refusal, got {outcome:?}"
    );
    assert!(
        message(outcome).starts_with(prefix),
        "expected {prefix:?}, got {outcome:?}"
    );
}

#[tokio::test]
async fn a_payload_cannot_choose_the_program_through_path() {
    let planted = Planted::new("true");
    let handler = ExecHandler::new().allow(["true"]).unwrap();
    let outcome = attempt(
        &handler,
        json!({ "command": "true", "env": { "PATH": planted.path() } }),
    )
    .await;
    assert_refused(&outcome, "exec payload: env.PATH: may not be set by a job");
    planted.assert_not_run();
}

#[tokio::test]
async fn path_and_the_loader_variables_cannot_be_allowed_even_by_the_operator() {
    for name in [
        "PATH",
        "LD_PRELOAD",
        "LD_LIBRARY_PATH",
        "DYLD_INSERT_LIBRARIES",
    ] {
        let err = ExecHandler::new().allow_env([name]).unwrap_err();
        assert!(
            matches!(err, ExecConfigError::EnvNeverAllowed { .. }),
            "{name}: {err}"
        );
    }
}

#[tokio::test]
async fn ld_preload_and_its_kin_are_refused_even_when_any_command_may_run() {
    let handler = ExecHandler::new().allow_any();
    for name in [
        "LD_PRELOAD",
        "LD_AUDIT",
        "LD_LIBRARY_PATH",
        "DYLD_INSERT_LIBRARIES",
    ] {
        let outcome = attempt(
            &handler,
            json!({ "command": "true", "env": { name: "/tmp/evil.so" } }),
        )
        .await;
        assert_refused(
            &outcome,
            &format!("exec payload: env.{name}: may not be set"),
        );
    }
}

#[tokio::test]
async fn a_variable_off_the_allow_list_is_refused_and_named() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");
    let handler = ExecHandler::new()
        .allow(["touch"])
        .unwrap()
        .allow_env(["LANG"])
        .unwrap();
    let outcome = attempt(
        &handler,
        json!({ "command": "touch", "args": [marker], "env": { "BASH_ENV": "/tmp/evil.sh" } }),
    )
    .await;
    assert_refused(
        &outcome,
        "exec payload: env.BASH_ENV: is not on this worker's allow list",
    );
    assert!(
        message(&outcome).contains("--allow-exec-env BASH_ENV"),
        "{outcome:?}"
    );
    assert!(!marker.exists(), "a refused job must not run");
}

#[tokio::test]
async fn an_allowed_variable_reaches_the_command() {
    let handler = ExecHandler::new()
        .allow(["sh"])
        .unwrap()
        .allow_env(["GREETING"])
        .unwrap();
    let outcome = attempt(
        &handler,
        json!({ "command": "sh", "args": ["-c", "test \"$GREETING\" = hello"], "env": { "GREETING": "hello" } }),
    )
    .await;
    assert_eq!(outcome, Outcome::Success);
}

#[tokio::test]
async fn a_cwd_is_refused_unless_the_worker_allows_it() {
    let allowed = tempfile::tempdir().unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    std::fs::create_dir(allowed.path().join("inner")).unwrap();

    let no_cwd = ExecHandler::new().allow(["true"]).unwrap();
    let outcome = attempt(&no_cwd, json!({ "command": "true", "cwd": allowed.path() })).await;
    assert_refused(
        &outcome,
        "exec payload: cwd: this worker allows no working directory",
    );

    let handler = ExecHandler::new()
        .allow(["sh"])
        .unwrap()
        .allow_cwd([allowed.path()])
        .unwrap();
    let escapes = [
        elsewhere.path().to_path_buf(),
        allowed.path().join("inner/../.."),
        allowed.path().join(".."),
        PathBuf::from("/"),
    ];
    for cwd in escapes {
        let outcome = attempt(
            &handler,
            json!({ "command": "sh", "args": ["-c", "true"], "cwd": cwd }),
        )
        .await;
        assert_refused(&outcome, "exec payload: cwd:");
        assert!(
            message(&outcome).contains("outside"),
            "{}: {outcome:?}",
            cwd.display()
        );
    }

    // Inside the allowed directory, `..` that stays inside is fine, and the command
    // runs in the canonical directory.
    let inner = allowed.path().join("inner/../inner");
    let expected = allowed.path().join("inner").canonicalize().unwrap();
    let outcome = attempt(
        &handler,
        json!({ "command": "sh", "args": ["-c", "test \"$(pwd -P)\" = \"$1\"", "sh", expected], "cwd": inner }),
    )
    .await;
    assert_eq!(outcome, Outcome::Success);
}

#[tokio::test]
async fn a_relative_path_is_not_an_allowed_command() {
    let planted = Planted::new("true");
    let handler = ExecHandler::new()
        .allow(["true"])
        .unwrap()
        .allow_cwd([planted.path()])
        .unwrap();
    for command in ["./true", "true/..", "../true", "bin/true"] {
        let outcome = attempt(
            &handler,
            json!({ "command": command, "cwd": planted.path() }),
        )
        .await;
        assert_refused(&outcome, "exec payload: command:");
        assert!(message(&outcome).contains("allow list"), "{outcome:?}");
    }
    planted.assert_not_run();
}

#[tokio::test]
async fn an_allowed_name_runs_the_file_found_at_start_whatever_the_jobs_cwd() {
    // The job runs in a directory holding a `true` of its own: the worker still runs
    // the `true` it found in its PATH when it started.
    let planted = Planted::new("true");
    let handler = ExecHandler::new()
        .allow(["true"])
        .unwrap()
        .allow_cwd([planted.path()])
        .unwrap();
    let outcome = attempt(
        &handler,
        json!({ "command": "true", "cwd": planted.path() }),
    )
    .await;
    assert_eq!(outcome, Outcome::Success);
    planted.assert_not_run();
}

#[tokio::test]
async fn an_allowed_command_may_be_named_by_the_path_it_resolved_to() {
    let script = Planted::new("job");
    let path = script.path().join("job");
    let handler = ExecHandler::new().allow([path.to_str().unwrap()]).unwrap();
    let outcome = attempt(&handler, json!({ "command": path })).await;
    assert_eq!(outcome, Outcome::Success);
    assert!(script.marker.exists(), "the allowed program did not run");
}

#[test]
fn allow_lists_that_cannot_work_are_refused_when_the_worker_starts() {
    assert!(matches!(
        ExecHandler::new().allow(["revenant-test-no-such-command"]),
        Err(ExecConfigError::CommandNotFound { .. })
    ));
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("notes.txt");
    std::fs::write(&data, "not a program").unwrap();
    assert!(matches!(
        ExecHandler::new().allow([data.to_str().unwrap()]),
        Err(ExecConfigError::NotExecutable { .. })
    ));
    assert!(matches!(
        ExecHandler::new().allow_cwd([dir.path().join("missing")]),
        Err(ExecConfigError::Cwd { .. })
    ));
    assert!(matches!(
        ExecHandler::new().allow_env(["NOT-A-NAME"]),
        Err(ExecConfigError::EnvName { .. })
    ));
}

#[tokio::test]
async fn a_handler_without_an_allow_list_runs_no_command() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");
    let outcome = attempt(
        &ExecHandler::new(),
        json!({ "command": "touch", "args": [marker.to_str().unwrap()] }),
    )
    .await;
    assert_refused(
        &outcome,
        "exec payload: command: \"touch\": this worker allows no command",
    );
    assert!(!marker.exists(), "nothing ran");
}
