//! The `revenant` binary as a user runs it: real processes, a real SQLite file, exit
//! codes and JSON checked.

use std::path::PathBuf;
use std::process::{Command, Output};

use serde_json::Value;

struct Db {
    _dir: tempfile::TempDir,
    url: String,
}

impl Db {
    fn new() -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let path: PathBuf = dir.path().join("revenant.db");
        Db {
            url: format!("sqlite://{}", path.display()),
            _dir: dir,
        }
    }

    fn run(&self, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_revenant"))
            .args(args)
            .env("REVENANT_DATABASE_URL", &self.url)
            .env_remove("REVENANT_LOG")
            .output()
            .expect("run revenant")
    }

    fn run_with_stdin(&self, args: &[&str], stdin: &[u8]) -> Output {
        use std::io::Write;
        let mut child = Command::new(env!("CARGO_BIN_EXE_revenant"))
            .args(args)
            .env("REVENANT_DATABASE_URL", &self.url)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("run revenant");
        // The child may stop reading early once it has seen too much; that is fine.
        let _ = child.stdin.take().unwrap().write_all(stdin);
        child.wait_with_output().expect("wait for revenant")
    }

    fn ok_json(&self, args: &[&str]) -> Value {
        let out = self.run(args);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap_or_else(|err| {
            panic!(
                "{args:?} printed no JSON ({err}): {}",
                String::from_utf8_lossy(&out.stdout)
            )
        })
    }

    fn fails(&self, args: &[&str], code: i32, mentions: &str) {
        let out = self.run(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(code),
            "{args:?}: expected exit {code}, stderr: {stderr}"
        );
        assert!(
            stderr.contains(mentions),
            "{args:?}: stderr should mention {mentions:?}: {stderr}"
        );
    }

    fn job_count(&self) -> usize {
        self.ok_json(&["jobs", "list", "--json", "--limit", "10000"])
            .as_array()
            .unwrap()
            .len()
    }
}

#[test]
fn enqueue_json_prints_the_new_job_and_show_prints_every_field() {
    let db = Db::new();
    let job = db.ok_json(&[
        "enqueue",
        "--queue",
        "emails",
        "--kind",
        "send_receipt",
        "--payload",
        r#"{"order":42}"#,
        "--max-attempts",
        "5",
        "--correlation-id",
        "req-7",
        "--json",
    ]);
    let id = job["id"].as_i64().expect("id");
    assert_eq!(job["status"], "ready");
    assert_eq!(job["duplicate"], false);

    let shown = db.ok_json(&["jobs", "show", &id.to_string(), "--json"]);
    for field in [
        "id",
        "queue",
        "kind",
        "status",
        "attempts",
        "max_attempts",
        "run_at",
        "dead_reason",
        "last_error",
        "errors",
    ] {
        assert!(
            shown.get(field).is_some(),
            "jobs show --json lacks {field}: {shown}"
        );
    }
    assert_eq!(shown["queue"], "emails");
    assert_eq!(shown["kind"], "send_receipt");
    assert_eq!(shown["payload"]["order"], 42);
    assert_eq!(shown["attempts"], 0);
    assert_eq!(shown["max_attempts"], 5);
    assert_eq!(shown["correlation_id"], "req-7");
    assert_eq!(shown["errors"], serde_json::json!([]));
}

#[test]
fn a_second_enqueue_with_a_unique_key_returns_the_first_job() {
    let db = Db::new();
    let args = [
        "enqueue",
        "-q",
        "emails",
        "-k",
        "send_receipt",
        "--unique-key",
        "order-42",
        "--json",
    ];
    let first = db.ok_json(&args);
    let second = db.ok_json(&args);
    assert_eq!(first["id"], second["id"]);
    assert_eq!(second["duplicate"], true);
    assert_eq!(db.job_count(), 1);
}

#[test]
fn bad_input_exits_2_names_the_problem_and_writes_nothing() {
    let db = Db::new();
    db.fails(
        &[
            "enqueue",
            "-q",
            "emails",
            "-k",
            "x",
            "--payload",
            "{not json",
        ],
        2,
        "payload",
    );
    db.fails(&["enqueue", "-q", "", "-k", "x"], 2, "queue");
    db.fails(&["enqueue", "-q", &"q".repeat(65), "-k", "x"], 2, "queue");
    db.fails(&["enqueue", "-q", "emails\u{7}", "-k", "x"], 2, "queue");
    db.fails(&["enqueue", "-q", "emails", "-k", "drop table;"], 2, "kind");
    db.fails(
        &["enqueue", "-q", "emails", "-k", "x", "--delay", "-5s"],
        2,
        "delay",
    );
    db.fails(
        &["enqueue", "-q", "emails", "-k", "x", "--delay", "9999d"],
        2,
        "delay",
    );
    db.fails(
        &["enqueue", "-q", "emails", "-k", "x", "--delay", "10"],
        2,
        "unit",
    );
    db.fails(
        &["enqueue", "-q", "emails", "-k", "x", "--max-attempts", "0"],
        2,
        "max_attempts",
    );
    db.fails(
        &["enqueue", "-q", "emails", "-k", "x", "--max-attempts", "-3"],
        2,
        "max_attempts",
    );
    db.fails(
        &["enqueue", "-q", "emails", "-k", "x", "--run-at", "tomorrow"],
        2,
        "run_at",
    );
    db.fails(
        &["enqueue", "-q", "emails", "-k", "x", "--priority", "99999"],
        2,
        "priority",
    );
    let big = format!("{{\"blob\":\"{}\"}}", "x".repeat(1024 * 1024 + 10));
    let out = db.run_with_stdin(
        &["enqueue", "-q", "emails", "-k", "x", "--payload", "-"],
        big.as_bytes(),
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("payload"));
    let out = db.run_with_stdin(
        &["enqueue", "-q", "emails", "-k", "x", "--payload", "-"],
        b"[1, 2,",
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not valid JSON"));
    db.fails(&["jobs", "list", "--status", "zombie"], 2, "status");
    db.fails(&["jobs", "list", "--limit", "0"], 2, "limit");
    db.fails(&["dead", "list", "--reason", "bored"], 2, "reason");
    db.fails(&["dead", "redrive"], 2, "--all");
    db.fails(
        &["dead", "redrive", "--queue", "emails", "--rate", "0/s"],
        2,
        "rate",
    );
    db.fails(&["dead", "purge", "--all"], 2, "--yes");
    db.fails(&["jobs", "bogus"], 2, "bogus");
    db.fails(
        &["work", "-q", "emails", "--vacuum-interval", "0s"],
        2,
        "`off` turns the vacuum off",
    );
    db.fails(
        &["work", "-q", "emails", "--vacuum-interval", "often"],
        2,
        "vacuum-interval",
    );
    db.fails(
        &["work", "-q", "emails", "--vacuum-interval", "5s"],
        2,
        "SQLite needs no vacuum",
    );
    assert_eq!(db.job_count(), 0, "bad input must write nothing");
}

#[test]
fn an_unsupported_url_is_refused_with_the_supported_schemes() {
    let out = Command::new(env!("CARGO_BIN_EXE_revenant"))
        .args(["--database-url", "mysql://localhost/app", "stats"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("sqlite://") && stderr.contains("postgres://"),
        "{stderr}"
    );
}

#[test]
fn missing_jobs_are_a_failure_not_a_crash() {
    let db = Db::new();
    db.fails(&["jobs", "show", "999"], 1, "no job with id 999");
    db.fails(&["jobs", "cancel", "999"], 1, "no job with id 999");
}

#[test]
fn cancel_moves_a_ready_job_to_cancelled_and_refuses_twice() {
    let db = Db::new();
    let id = db.ok_json(&["enqueue", "-q", "emails", "-k", "x", "--json"])["id"]
        .as_i64()
        .unwrap()
        .to_string();
    let out = db.run(&["jobs", "cancel", &id]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        db.ok_json(&["jobs", "show", &id, "--json"])["status"],
        "cancelled"
    );
    db.fails(&["jobs", "cancel", &id], 1, "cancelled");
}

#[test]
fn queues_pause_and_resume_show_in_stats() {
    let db = Db::new();
    db.ok_json(&["enqueue", "-q", "emails", "-k", "x", "--json"]);
    db.ok_json(&["enqueue", "-q", "emails", "-k", "x", "--json"]);
    db.ok_json(&["queues", "pause", "emails", "--json"]);
    let stats = db.ok_json(&["stats", "--json"]);
    let emails = &stats.as_array().unwrap()[0];
    assert_eq!(emails["queue"], "emails");
    assert_eq!(emails["paused"], true);
    assert_eq!(emails["ready"], 2);
    assert_eq!(emails["dead"], 0);
    assert_eq!(emails["workers_alive"], 0);
    db.ok_json(&["queues", "resume", "emails", "--json"]);
    assert_eq!(
        db.ok_json(&["queues", "list", "--json"])[0]["paused"],
        false
    );
}

#[test]
fn policy_prints_the_seed_schedule_spanning_about_85_minutes() {
    let out = Command::new(env!("CARGO_BIN_EXE_revenant"))
        .args([
            "policy",
            "--base",
            "10s",
            "--multiplier",
            "2",
            "--cap",
            "1h",
            "--attempts",
            "10",
            "--jitter",
            "none",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("about 85 minutes"), "{text}");
    assert!(text.contains("1h25m10s"), "{text}");

    let json: Value = serde_json::from_slice(
        &Command::new(env!("CARGO_BIN_EXE_revenant"))
            .args([
                "policy",
                "--attempts",
                "10",
                "--jitter",
                "full",
                "--outage",
                "30m",
                "--json",
            ])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    assert_eq!(json["schedule"].as_array().unwrap().len(), 9);
    assert_eq!(json["span_nominal_secs"], 5110.0);
    assert_eq!(json["span_min_secs"], 0.0);
    assert_eq!(json["outage"]["survived_by_every_job"], false);
}

#[test]
fn the_default_policy_survives_a_thirty_minute_outage() {
    let json: Value = serde_json::from_slice(
        &Command::new(env!("CARGO_BIN_EXE_revenant"))
            .args(["policy", "--outage", "30m", "--json"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    assert_eq!(json["outage"]["survived_by_every_job"], true, "{json}");
}

#[test]
fn policy_refuses_what_cannot_work() {
    let db = Db::new();
    db.fails(&["policy", "--attempts", "0"], 2, "attempts");
    db.fails(
        &["policy", "--base", "1h", "--cap", "10s"],
        2,
        "backoff.cap",
    );
    db.fails(&["policy", "--jitter", "wobbly"], 2, "jitter");
    db.fails(&["policy", "--multiplier", "0.5"], 2, "multiplier");
}
