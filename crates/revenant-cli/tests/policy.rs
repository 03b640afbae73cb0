//! Stored retry policies from the command line, as a new user tries them: a policy set
//! once for a queue decides a job's attempts at enqueue and its backoff in the worker,
//! and the worker has no flag that could silently disagree.

use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

struct Db {
    _dir: tempfile::TempDir,
    url: String,
}

impl Db {
    fn new() -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let path: PathBuf = dir.path().join("try.db");
        Db {
            url: format!("sqlite://{}", path.display()),
            _dir: dir,
        }
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_revenant"));
        command
            .args(args)
            .env("REVENANT_DATABASE_URL", &self.url)
            .env_remove("REVENANT_LOG");
        command
    }

    fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().expect("run revenant")
    }

    fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).expect("utf-8 output")
    }

    fn ok_json(&self, args: &[&str]) -> Value {
        let text = self.ok(args);
        serde_json::from_str(&text)
            .unwrap_or_else(|err| panic!("{args:?} printed no JSON ({err}): {text}"))
    }

    fn fails(&self, args: &[&str], code: i32, mentions: &str) {
        let out = self.run(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{args:?}: {stderr}");
        assert!(
            stderr.contains(mentions),
            "{args:?}: stderr should mention {mentions:?}: {stderr}"
        );
    }
}

/// A `revenant work` process, killed when dropped (the test's checks are done by then;
/// leases it held do not matter to a throwaway database).
struct Worker(Child);

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Polls `jobs show` until the job is finished, or panics after a generous bound.
fn wait_finished(db: &Db, id: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let job = db.ok_json(&["jobs", "show", id, "--json"]);
        if matches!(
            job["status"].as_str(),
            Some("dead" | "completed" | "cancelled")
        ) {
            return job;
        }
        assert!(
            Instant::now() < deadline,
            "job {id} still {} after 60 s: {job}",
            job["status"]
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_stored_queue_policy_gives_three_attempts_and_dead_at_three() {
    let db = Db::new();
    let stored = db.ok_json(&[
        "policy",
        "set",
        "--queue",
        "q",
        "--attempts",
        "3",
        "--base",
        "100ms",
        "--cap",
        "200ms",
        "--json",
    ]);
    assert_eq!(
        stored["scope"],
        serde_json::json!({"scope": "queue", "name": "q"})
    );
    assert_eq!(stored["policy"]["max_attempts"], 3);

    // Port 9 (discard) on loopback: refused at once, a transient failure each time.
    let enqueued = db.ok_json(&[
        "enqueue",
        "--queue",
        "q",
        "--kind",
        "http",
        "--payload",
        r#"{"url":"http://127.0.0.1:9/x"}"#,
        "--json",
    ]);
    assert_eq!(
        enqueued["max_attempts"], 3,
        "resolved at enqueue: {enqueued}"
    );
    let id = enqueued["id"].to_string();

    let _worker = Worker(
        // 127.0.0.1:9 must stay a refused connection (transient), not a destination
        // the outbound policy refuses (permanent): open it.
        db.command(&[
            "work",
            "-q",
            "q",
            "--no-breaker",
            "--allow-net",
            "127.0.0.1/32",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start revenant work"),
    );
    let job = wait_finished(&db, &id);
    assert_eq!(job["status"], "dead", "{job}");
    assert_eq!(job["dead_reason"], "attempts_exhausted", "{job}");
    assert_eq!(job["attempts"], 3, "{job}");
    assert_eq!(job["max_attempts"], 3, "{job}");
    let errors = job["errors"].as_array().expect("the error history");
    assert_eq!(errors.len(), 3, "one entry per attempt: {job}");
}

#[test]
fn a_kind_policy_wins_over_its_queue_and_an_explicit_max_attempts_wins_over_both() {
    let db = Db::new();
    db.ok(&["policy", "set", "--queue", "q", "--attempts", "3"]);
    db.ok(&["policy", "set", "--kind", "webhook", "--attempts", "7"]);
    let enqueue = |kind: &str, extra: &[&str]| {
        let mut args = vec!["enqueue", "--queue", "q", "--kind", kind, "--json"];
        args.extend_from_slice(extra);
        db.ok_json(&args)["max_attempts"].clone()
    };
    assert_eq!(enqueue("webhook", &[]), 7);
    assert_eq!(enqueue("receipt", &[]), 3);
    assert_eq!(enqueue("webhook", &["--max-attempts", "2"]), 2);

    let listed = db.ok_json(&["policy", "list", "--json"]);
    let scopes: Vec<&Value> = listed["stored"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| &r["scope"])
        .collect();
    assert_eq!(
        scopes,
        [
            &serde_json::json!({"scope": "queue", "name": "q"}),
            &serde_json::json!({"scope": "kind", "name": "webhook"}),
        ]
    );
    assert_eq!(listed["default"]["max_attempts"], 12);

    // Unset falls back to the queue's policy; unsetting nothing says so.
    assert!(db
        .ok(&["policy", "unset", "--kind", "webhook"])
        .contains("removed"));
    assert_eq!(enqueue("webhook", &[]), 3);
    assert!(db
        .ok(&["policy", "unset", "--kind", "webhook"])
        .contains("nothing changed"));
}

#[test]
fn set_keeps_the_scopes_other_stored_values() {
    let db = Db::new();
    db.ok(&[
        "policy",
        "set",
        "--default",
        "--attempts",
        "4",
        "--base",
        "1s",
    ]);
    let stored = db.ok_json(&["policy", "set", "--default", "--cap", "5s", "--json"]);
    assert_eq!(stored["policy"]["max_attempts"], 4, "{stored}");
    assert_eq!(stored["policy"]["backoff"]["base"], "1s", "{stored}");
    assert_eq!(stored["policy"]["backoff"]["cap"], "5s", "{stored}");
}

#[test]
fn policy_flags_that_cannot_take_effect_do_not_exist_on_the_worker() {
    let db = Db::new();
    for flag in [
        "--attempts",
        "--base",
        "--cap",
        "--multiplier",
        "--jitter",
        "--lease",
    ] {
        db.fails(&["work", "-q", "q", flag, "3"], 2, flag);
    }
}

#[test]
fn policy_set_refuses_bad_input_by_name_and_stores_nothing() {
    let db = Db::new();
    db.fails(
        &["policy", "set", "--queue", "q", "--attempts", "0"],
        2,
        "attempts",
    );
    db.fails(
        &["policy", "set", "--queue", "q", "--attempts", "-1"],
        2,
        "attempts",
    );
    db.fails(
        &[
            "policy", "set", "--queue", "q", "--base", "1h", "--cap", "1s",
        ],
        2,
        "cap",
    );
    db.fails(
        &["policy", "set", "--queue", "q", "--jitter", "wobbly"],
        2,
        "jitter",
    );
    db.fails(
        &[
            "policy",
            "set",
            "--queue",
            "q",
            "--attempt-timeout",
            "2m",
            "--lease",
            "1m",
        ],
        2,
        "attempt_timeout",
    );
    db.fails(&["policy", "set", "--queue", "bad name!"], 2, "queue");
    // A scope is required, and only one.
    db.fails(&["policy", "set", "--attempts", "3"], 2, "--default");
    db.fails(
        &[
            "policy",
            "set",
            "--default",
            "--queue",
            "q",
            "--attempts",
            "3",
        ],
        2,
        "cannot be used with",
    );
    let listed = db.ok_json(&["policy", "list", "--json"]);
    assert_eq!(listed["stored"], serde_json::json!([]));
}
