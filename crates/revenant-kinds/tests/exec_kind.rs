//! The `exec` kind: exit codes, signals, timeouts that stop the whole process group,
//! the tail of standard error, and the payload on standard input.

mod attempt;

use std::path::Path;
use std::time::{Duration, Instant};

use revenant_core::Outcome;
use revenant_kinds::ExecHandler;
use serde_json::{json, Value};

use attempt::{context, message, run};

const LONG: Duration = Duration::from_secs(60);

async fn sh(script: &str) -> Outcome {
    run_payload(json!({ "command": "sh", "args": ["-c", script] })).await
}

async fn run_payload(payload: Value) -> Outcome {
    run(
        &ExecHandler::new().allow_any(),
        context(1, 1, LONG),
        payload,
    )
    .await
}

/// The pids of live (not zombie) processes in process group `pgid`, read from /proc.
fn live_members(pgid: i32) -> Vec<i32> {
    let mut live = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // "pid (comm) state ppid pgrp ...": comm may hold spaces, so split after ')'.
        let Some((_, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        if fields.len() > 2 && fields[0] != "Z" && fields[2] == pgid.to_string() {
            live.push(pid);
        }
    }
    live
}

/// Waits up to 2 s for process group `pgid` to have no live member.
async fn assert_group_gone(pgid: i32) {
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        let live = live_members(pgid);
        if live.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "process group {pgid} still has {live:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Reads "<pgid> <background pid>" written by the scripts below, waiting for it.
async fn read_pids(path: &Path) -> (i32, i32) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        if let Ok(text) = std::fs::read_to_string(path) {
            let parts: Vec<i32> = text
                .split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect();
            if let [pgid, background] = parts[..] {
                return (pgid, background);
            }
        }
        assert!(Instant::now() < deadline, "the script never wrote its pids");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `sh -c 'sleep 30 & sleep 30'`, writing its own pid (the group id) and the
/// background sleep's pid to `$1` first.
fn two_sleeps(pids: &Path) -> Value {
    json!({
        "command": "sh",
        "args": ["-c", "sleep 30 & echo $$ $! > \"$1\"; sleep 30", "sh", pids],
    })
}

#[tokio::test]
async fn exit_zero_is_success() {
    assert_eq!(sh("exit 0").await, Outcome::Success);
}

#[tokio::test]
async fn exit_75_is_transient() {
    let outcome = sh("echo 'smtp busy' >&2; exit 75").await;
    assert_eq!(
        outcome,
        Outcome::Retry {
            message: "sh exited with 75 (EX_TEMPFAIL: try again later): smtp busy".into()
        }
    );
}

#[tokio::test]
async fn any_other_exit_code_is_permanent() {
    for code in [1, 2, 127] {
        let outcome = sh(&format!("exit {code}")).await;
        assert_eq!(
            outcome,
            Outcome::Permanent {
                message: format!("sh exited with {code}")
            }
        );
    }
}

#[tokio::test]
async fn a_command_that_does_not_exist_is_permanent() {
    let outcome = run_payload(json!({ "command": "revenant-test-no-such-command" })).await;
    assert!(matches!(outcome, Outcome::Permanent { .. }), "{outcome:?}");
    assert!(
        message(&outcome).contains("command not found"),
        "{outcome:?}"
    );
}

#[tokio::test]
async fn death_by_a_signal_is_transient_and_names_the_signal() {
    let outcome = sh("kill -USR1 $$").await;
    assert!(matches!(outcome, Outcome::Retry { .. }), "{outcome:?}");
    assert!(
        message(&outcome).contains("killed by signal SIGUSR1 (10)"),
        "{outcome:?}"
    );
}

#[tokio::test]
async fn a_timeout_kills_the_whole_process_group() {
    let dir = tempfile::tempdir().unwrap();
    let pids = dir.path().join("pids");
    let mut payload = two_sleeps(&pids);
    payload["timeout"] = json!("500ms");
    let started = Instant::now();
    let outcome = run_payload(payload).await;
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert!(matches!(outcome, Outcome::Retry { .. }), "{outcome:?}");
    assert!(
        message(&outcome).starts_with("sh timed out after 500ms; process group"),
        "{outcome:?}"
    );
    let (pgid, background) = read_pids(&pids).await;
    assert_group_gone(pgid).await;
    assert!(!live_members(pgid).contains(&background));
}

#[tokio::test]
async fn a_group_that_ignores_sigterm_gets_sigkill_after_the_grace() {
    let handler = ExecHandler::new()
        .allow_any()
        .kill_grace(Duration::from_millis(300));
    let outcome = run(
        &handler,
        context(1, 1, LONG),
        json!({ "command": "sh", "args": ["-c", "trap '' TERM; sleep 30 & sleep 30"], "timeout": "300ms" }),
    )
    .await;
    assert!(matches!(outcome, Outcome::Retry { .. }), "{outcome:?}");
    assert!(
        message(&outcome).contains("ignored SIGTERM for 300ms, killed with SIGKILL"),
        "{outcome:?}"
    );
}

#[tokio::test]
async fn cancelling_the_attempt_stops_the_process_group() {
    let dir = tempfile::tempdir().unwrap();
    let pids = dir.path().join("pids");
    let ctx = context(1, 1, LONG);
    let token = ctx.cancellation().clone();
    let attempt =
        tokio::spawn(
            async move { run(&ExecHandler::new().allow_any(), ctx, two_sleeps(&pids)).await },
        );
    let (pgid, _) = read_pids(&dir.path().join("pids")).await;
    token.cancel();
    let outcome = attempt.await.unwrap();
    assert!(matches!(outcome, Outcome::Retry { .. }), "{outcome:?}");
    assert!(
        message(&outcome).contains("attempt cancelled"),
        "{outcome:?}"
    );
    assert_group_gone(pgid).await;
}

#[tokio::test]
async fn dropping_the_attempt_kills_the_process_group() {
    // What the runtime does at the attempt timeout: fire the token and drop the future
    // at once. Here only the drop, so only the process-group guard can clean up.
    let dir = tempfile::tempdir().unwrap();
    let pids = dir.path().join("pids");
    let payload = two_sleeps(&pids);
    let attempt = tokio::spawn(async move {
        run(
            &ExecHandler::new().allow_any(),
            context(1, 1, LONG),
            payload,
        )
        .await
    });
    let (pgid, _) = read_pids(&pids).await;
    attempt.abort();
    assert!(attempt.await.unwrap_err().is_cancelled());
    assert_group_gone(pgid).await;
}

#[tokio::test]
async fn the_error_ends_with_the_tail_of_standard_error() {
    let outcome =
        sh("i=0; while [ $i -lt 2000 ]; do echo \"line $i\" >&2; i=$((i+1)); done; exit 3").await;
    let text = message(&outcome);
    assert!(matches!(outcome, Outcome::Permanent { .. }), "{outcome:?}");
    assert!(text.starts_with("sh exited with 3: …"), "{text}");
    assert!(text.ends_with("line 1998\nline 1999"), "{text}");
    assert!(!text.contains("line 0\n"), "{text}");
    assert!(text.len() <= 2048 + 64, "{} bytes", text.len());
}

#[tokio::test]
async fn standard_input_receives_the_payload_input_as_json() {
    let dir = tempfile::tempdir().unwrap();
    let got = dir.path().join("stdin");
    let outcome = run_payload(json!({
        "command": "sh",
        "args": ["-c", "cat > \"$1\"", "sh", got],
        "input": { "order": 42, "name": "Café" },
    }))
    .await;
    assert_eq!(outcome, Outcome::Success);
    let written: Value = serde_json::from_slice(&std::fs::read(&got).unwrap()).unwrap();
    assert_eq!(written, json!({ "order": 42, "name": "Café" }));
}

#[tokio::test]
async fn env_args_and_cwd_reach_the_command() {
    let dir = tempfile::tempdir().unwrap();
    let handler = ExecHandler::new()
        .allow_any()
        .allow_env(["GREETING"])
        .unwrap()
        .allow_cwd([dir.path()])
        .unwrap();
    let outcome = run(&handler, context(1, 1, LONG), json!({
        "command": "sh",
        "args": ["-c", "test \"$GREETING $1\" = 'hello world' && test \"$(pwd -P)\" = \"$2\"", "sh", "world",
                 dir.path().canonicalize().unwrap()],
        "env": { "GREETING": "hello" },
        "cwd": dir.path(),
    }))
    .await;
    assert_eq!(outcome, Outcome::Success);
}

#[tokio::test]
async fn a_command_that_leaves_children_behind_does_not_hang_the_attempt() {
    // The background sleep keeps standard error open; its group is killed when sh
    // exits, so the attempt ends at once.
    let started = Instant::now();
    let outcome = sh("sleep 30 & echo done >&2; exit 1").await;
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(
        outcome,
        Outcome::Permanent {
            message: "sh exited with 1: done".into()
        }
    );
}

#[tokio::test]
async fn a_command_off_the_allow_list_is_permanent_and_runs_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");
    let handler = ExecHandler::new().allow(["true"]).unwrap();
    let payload = json!({ "command": "touch", "args": [marker.to_str().unwrap()] });
    let outcome = run(&handler, context(1, 1, LONG), payload).await;
    assert!(matches!(outcome, Outcome::Permanent { .. }), "{outcome:?}");
    assert!(message(&outcome).contains("allow list"), "{outcome:?}");
    assert!(!marker.exists(), "a refused command must not run");

    let allowed = run(&handler, context(1, 1, LONG), json!({ "command": "true" })).await;
    assert_eq!(allowed, Outcome::Success);
}
