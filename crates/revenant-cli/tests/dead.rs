//! The dead-letter workbench as an operator uses it, on both backends: 200 jobs dead of
//! one bug and 12 of another read as two fingerprints; one is redriven at 20/s (the
//! spread of `run_at` is checked), the audit is read back, the rest is exported and
//! purged, and `stats` shows the interval counts (and `--watch` stops on Ctrl-C).
//!
//! The PostgreSQL run needs `REVENANT_TEST_DATABASE_URL` (as `scripts/test.sh` sets);
//! without it the test says so and runs SQLite only.

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use revenant::store::{
    FailAction, JobClaimParams, JobCompleteParams, JobEnqueueParams, JobFailParams, JobFailure,
    JobFilter, JobListParams, LeaseRef,
};
use revenant::{decide::Failure, DeadReason, FailureClass, JobState, NewJob, Store};
use serde_json::Value;

struct Cli {
    url: String,
}

impl Cli {
    fn run(&self, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_revenant"))
            .args(args)
            .env("REVENANT_DATABASE_URL", &self.url)
            .env_remove("REVENANT_LOG")
            .output()
            .expect("run revenant")
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
        assert!(stderr.contains(mentions), "{args:?}: {stderr}");
    }
}

/// Enqueues `messages.len()` jobs of `kind`, claims them and fails each dead with its
/// message, through the library (as a worker would).
async fn kill(store: &dyn Store, kind: &str, reason: DeadReason, messages: &[String]) {
    let jobs = messages
        .iter()
        .enumerate()
        .map(|(i, _)| {
            NewJob::new("emails", kind, serde_json::json!({ "order": i }))
                .with_correlation_id(format!("{kind}-{i}"))
        })
        .collect();
    store
        .job_enqueue(JobEnqueueParams {
            jobs,
            default_max_attempts: 3,
            now: None,
        })
        .await
        .unwrap();
    let claimed = store
        .job_claim(JobClaimParams {
            queue: "emails".into(),
            worker: "worker-1".into(),
            limit: 1_000,
            lease: Duration::from_secs(60),
            reclaim: true,
            now: None,
        })
        .await
        .unwrap();
    assert_eq!(claimed.len(), messages.len());
    let failures = claimed
        .iter()
        .zip(messages)
        .map(|(job, message)| JobFailure {
            lease: LeaseRef {
                id: job.id,
                lease_token: job.lease_token.unwrap(),
            },
            failure: Failure {
                class: FailureClass::Permanent,
                message: message.clone(),
            },
            action: FailAction::Dead { reason },
            worker: Some("worker-1".into()),
        })
        .collect();
    store
        .job_fail(JobFailParams {
            kept: Vec::new(),
            failures,
            now: None,
        })
        .await
        .unwrap();
}

async fn the_operator_story(url: String) {
    let store = revenant::connect(&url).await.expect("connect");
    let cli = Cli { url };
    let http: Vec<String> = (0..200)
        .map(|i| format!("HTTP 503 from provider after {}ms", 90 + i * 7))
        .collect();
    let names = [
        "Café Ünï",
        "Bob''s",
        "Zoë",
        "A&W",
        "Ōtoro",
        "Crème",
        "Ça va",
        "Løv",
        "Mañana",
        "Größe",
        "Ægir",
        "Œuf",
    ];
    let crashes: Vec<String> = names
        .iter()
        .map(|n| format!("template crashed on '{n}'"))
        .collect();
    kill(
        store.as_ref(),
        "send_receipt",
        DeadReason::AttemptsExhausted,
        &http,
    )
    .await;
    kill(
        store.as_ref(),
        "render_receipt",
        DeadReason::Permanent,
        &crashes,
    )
    .await;

    // Two fingerprints, largest first.
    let groups = cli.ok_json(&["dead", "fingerprints", "--json"]);
    let groups = groups.as_array().unwrap();
    assert_eq!(groups.len(), 2, "{groups:?}");
    assert_eq!(groups[0]["count"], 200);
    assert_eq!(groups[0]["kinds"], serde_json::json!(["send_receipt"]));
    assert_eq!(groups[1]["count"], 12);
    assert_eq!(groups[1]["kinds"], serde_json::json!(["render_receipt"]));
    let http_print = groups[0]["fingerprint"].as_str().unwrap().to_string();
    let crash_print = groups[1]["fingerprint"].as_str().unwrap().to_string();
    let table = cli.ok(&["dead", "fingerprints"]);
    assert_eq!(
        table.lines().count(),
        3,
        "a header and one line per bug:\n{table}"
    );
    assert!(table.contains(&http_print) && table.contains("template crashed on"));

    // Show: payload, every attempt, reason, correlation id, fingerprint.
    let example = groups[1]["example_id"].as_i64().unwrap().to_string();
    let shown = cli.ok(&["dead", "show", &example]);
    for needle in [
        "payload",
        "dead reason   permanent",
        "correlation",
        "fingerprint",
        "worker-1",
        "template crashed on",
    ] {
        assert!(
            shown.contains(needle),
            "dead show lacks {needle:?}:\n{shown}"
        );
    }
    let listed = cli.ok_json(&["dead", "list", "--fingerprint", &crash_print, "--json"]);
    assert_eq!(listed.as_array().unwrap().len(), 12);

    // Bad input names the flag.
    cli.fails(&["dead", "list", "--fingerprint", "nope"], 2, "fingerprint");
    cli.fails(
        &[
            "dead",
            "redrive",
            "--fingerprint",
            &http_print,
            "--rate",
            "0/s",
        ],
        2,
        "rate",
    );
    // Rates too slow to mean anything once panicked (1e-300) or wrote a run_at no
    // read could decode (1e-15, two jobs 31 million years apart): refused by name,
    // nothing written, every read still fine.
    for rate in ["1e-300", "1e-15", "1e-15/s", "NaN", "inf", "1e400"] {
        for dry in [true, false] {
            let mut args = vec!["dead", "redrive", "--all", "--rate", rate];
            if dry {
                args.push("--dry-run");
            }
            cli.fails(&args, 2, "rate");
        }
    }
    assert_eq!(
        cli.ok_json(&["dead", "list", "--limit", "1000", "--json"])
            .as_array()
            .unwrap()
            .len(),
        212
    );
    assert!(cli
        .ok_json(&["dead", "history", "--json"])
        .as_array()
        .unwrap()
        .is_empty());

    // Dry run first: how many, and nothing changes.
    let dry = cli.ok_json(&[
        "dead",
        "redrive",
        "--fingerprint",
        &http_print,
        "--rate",
        "20/s",
        "--dry-run",
        "--json",
    ]);
    assert_eq!(dry["count"], 200);
    assert_eq!(dry["dry_run"], true);
    assert!(cli
        .ok(&[
            "dead",
            "redrive",
            "--fingerprint",
            &http_print,
            "--rate",
            "20/s",
            "--dry-run"
        ])
        .contains("would redrive 200"));
    assert!(cli
        .ok_json(&["dead", "history", "--json"])
        .as_array()
        .unwrap()
        .is_empty());

    // The redrive, at 20/s.
    let done = cli.ok_json(&[
        "dead",
        "redrive",
        "--fingerprint",
        &http_print,
        "--rate",
        "20/s",
        "--actor",
        "pager",
        "--note",
        "provider recovered",
        "--json",
    ]);
    assert_eq!(done["count"], 200);
    let mut redriven = store
        .job_list(JobListParams {
            filter: JobFilter {
                kind: Some("send_receipt".into()),
                ..JobFilter::default()
            },
            limit: 1_000,
            ..JobListParams::default()
        })
        .await
        .unwrap();
    assert_eq!(redriven.len(), 200);
    assert!(redriven
        .iter()
        .all(|j| j.status == JobState::Ready && j.fingerprint.is_none()));
    redriven.sort_by_key(|j| j.run_at);
    let gaps: Vec<i64> = redriven
        .windows(2)
        .map(|w| (w[1].run_at - w[0].run_at).num_milliseconds())
        .collect();
    assert!(
        gaps.iter().all(|&g| g == 50),
        "20/s is one job every 50 ms: {gaps:?}"
    );
    let span = (redriven[199].run_at - redriven[0].run_at).num_milliseconds();
    assert_eq!(span, 199 * 50, "200 jobs at 20/s span about 10 s");

    // The audit.
    let history = cli.ok_json(&["dead", "history", "--json"]);
    let history = history.as_array().unwrap();
    assert_eq!(history.len(), 1);
    assert_eq!(history[0]["count"], 200);
    assert_eq!(history[0]["spacing_ms"], 50);
    assert_eq!(history[0]["actor"], "pager");
    assert_eq!(history[0]["note"], "provider recovered");
    assert_eq!(history[0]["filter"]["fingerprint"], http_print.as_str());
    let table = cli.ok(&["dead", "history"]);
    assert!(table.contains("20/s") && table.contains("pager"), "{table}");

    // The fixed provider takes them: claim and complete (the ones already due).
    let due = store
        .job_claim(JobClaimParams {
            queue: "emails".into(),
            worker: "worker-2".into(),
            limit: 1_000,
            lease: Duration::from_secs(60),
            reclaim: true,
            now: Some(redriven[199].run_at),
        })
        .await
        .unwrap();
    assert_eq!(due.len(), 200);
    store
        .job_complete(JobCompleteParams {
            kept: Vec::new(),
            leases: due
                .iter()
                .map(|j| LeaseRef {
                    id: j.id,
                    lease_token: j.lease_token.unwrap(),
                })
                .collect(),
            now: None,
        })
        .await
        .unwrap();
    let stats = cli.ok_json(&["stats", "--json", "--window", "1h"]);
    let emails = &stats.as_array().unwrap()[0];
    assert_eq!(emails["dead"], 12);
    assert_eq!(emails["completed_last_interval"], 200);
    assert_eq!(emails["failed_last_interval"], 212);
    assert_eq!(emails["interval_secs"], 3600.0);
    assert!(cli.ok(&["stats"]).contains("COMPLETED"));

    // Export the rest as JSON Lines: one line per dead job.
    let dir = tempfile::tempdir().unwrap();
    let file: PathBuf = dir.path().join("dead.jsonl");
    cli.ok(&["dead", "export", "--output", file.to_str().unwrap()]);
    let text = std::fs::read_to_string(&file).unwrap();
    assert_eq!(text.lines().count(), 12);
    for line in text.lines() {
        let job: Value = serde_json::from_str(line).unwrap();
        assert_eq!(job["status"], "dead");
        assert_eq!(job["fingerprint"], crash_print.as_str());
    }
    assert_eq!(
        cli.ok(&["dead", "export", "--kind", "render_receipt"])
            .lines()
            .count(),
        12
    );

    // Purge what can never succeed.
    let purge_dry = cli.ok_json(&[
        "dead",
        "purge",
        "--fingerprint",
        &crash_print,
        "--dry-run",
        "--json",
    ]);
    assert_eq!(purge_dry["count"], 12);
    let purged = cli.ok_json(&[
        "dead",
        "purge",
        "--fingerprint",
        &crash_print,
        "--yes",
        "--json",
    ]);
    assert_eq!(purged["count"], 12);
    assert!(cli
        .ok_json(&["dead", "fingerprints", "--json"])
        .as_array()
        .unwrap()
        .is_empty());

    // stats --watch on a pipe: one JSON line per refresh; Ctrl-C ends it with exit 0.
    let mut child = Command::new(env!("CARGO_BIN_EXE_revenant"))
        .args(["stats", "--watch", "100ms", "--json"])
        .env("REVENANT_DATABASE_URL", &cli.url)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1_500));
    let status = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while child.try_wait().unwrap().is_none() {
        assert!(
            std::time::Instant::now() < deadline,
            "stats --watch ignored Ctrl-C"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<&str> = std::str::from_utf8(&out.stdout).unwrap().lines().collect();
    assert!(lines.len() >= 2, "refreshed: {lines:?}");
    for line in lines {
        let snapshot: Value = serde_json::from_str(line).unwrap();
        assert_eq!(snapshot[0]["queue"], "emails");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_triages_redrives_exports_and_purges_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    the_operator_story(format!(
        "sqlite://{}",
        dir.path().join("revenant.db").display()
    ))
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_triages_redrives_exports_and_purges_on_postgres() {
    use sqlx::{Connection, Executor, PgConnection};
    let Ok(server) = std::env::var("REVENANT_TEST_DATABASE_URL") else {
        eprintln!("REVENANT_TEST_DATABASE_URL is not set: the PostgreSQL run of the operator story was NOT exercised");
        return;
    };
    // A fresh database: the CLI uses the default schema, so isolate one level up.
    let name = format!(
        "rv_cli_{}_{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos()
    );
    let mut admin = PgConnection::connect(&server)
        .await
        .expect("connect to the test server");
    admin
        .execute(format!("CREATE DATABASE {name}").as_str())
        .await
        .unwrap();
    let base = server
        .rsplit_once('/')
        .map_or(server.as_str(), |(base, _)| base);
    the_operator_story(format!("{base}/{name}")).await;
    admin
        .execute(format!("DROP DATABASE {name} WITH (FORCE)").as_str())
        .await
        .unwrap();
}
