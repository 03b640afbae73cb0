//! `revenant breaker` as an operator uses it, and the dependencies in `revenant stats`
//! and `revenant metrics`: a breaker opened by hand ahead of a planned outage parks
//! the jobs a worker claims for it (their attempts given back), `list` shows it, and
//! `close` releases them. Exit codes: 0, 2 for a bad key.

use std::process::{Command, Output};
use std::sync::Arc;
use std::time::Duration;

use revenant::dependency::{DependencyPolicy, WaitReason};
use revenant::store::{
    DependencyAcquireParams, JobClaimParams, JobEnqueueParams, JobGetParams, LeaseRef,
    PermitRequest,
};
use revenant::{JobState, NewJob, Store};
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
}

/// Enqueues `n` jobs, claims them as a worker would and asks for permits for
/// `email-provider`: what a worker protecting dependencies does with claimed jobs.
async fn claim_and_ask(store: &Arc<dyn Store>, n: usize) -> Vec<i64> {
    claim_and_ask_with(store, n, DependencyPolicy::default()).await
}

async fn claim_and_ask_with(
    store: &Arc<dyn Store>,
    n: usize,
    policy: DependencyPolicy,
) -> Vec<i64> {
    store
        .job_enqueue(JobEnqueueParams {
            jobs: (0..n)
                .map(|i| NewJob::new("emails", "send_receipt", serde_json::json!({ "n": i })))
                .collect(),
            default_max_attempts: 3,
            now: None,
        })
        .await
        .unwrap();
    let claimed = store
        .job_claim(JobClaimParams {
            queue: "emails".into(),
            worker: "w1".into(),
            limit: n as u32,
            lease: Duration::from_secs(60),
            reclaim: true,
            now: None,
        })
        .await
        .unwrap();
    assert_eq!(claimed.len(), n);
    store
        .dependency_acquire(DependencyAcquireParams {
            dependency: "email-provider".into(),
            policy,
            worker: "w1".into(),
            lease: Duration::from_secs(60),
            requests: claimed
                .iter()
                .map(|job| PermitRequest {
                    lease: LeaseRef {
                        id: job.id,
                        lease_token: job.lease_token.unwrap(),
                    },
                    retry_delay: Duration::from_secs(10),
                })
                .collect(),
            local_free: None,
            now: None,
        })
        .await
        .unwrap();
    claimed.iter().map(|job| job.id).collect()
}

/// The bulkhead's numbers, as `breaker list` (table and JSON) and `metrics` show
/// them: the attempts in flight, the limit, the jobs turned back, the slow-call share.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn breaker_list_shows_in_flight_attempts_their_limit_and_the_slow_share() {
    use revenant::dependency::Bulkhead;
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("revenant.db").display());
    let cli = Cli { url: url.clone() };
    let store = revenant::connect(&url).await.unwrap();
    let policy = DependencyPolicy::default().with_bulkhead(Bulkhead {
        shared: Some(2),
        ..Bulkhead::default()
    });
    let ids = claim_and_ask_with(&store, 3, policy).await;
    let turned_back = store
        .job_get(JobGetParams { id: ids[2] })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(turned_back.status, JobState::Ready);
    assert_eq!(turned_back.attempts, 0, "no attempt spent at the limit");

    let list = cli.ok_json(&["breaker", "list", "--json"]);
    let bulkhead = &list[0]["bulkhead"];
    assert_eq!(bulkhead["in_flight"], 2, "{list}");
    assert_eq!(bulkhead["shared_limit"], 2, "{list}");
    assert_eq!(bulkhead["per_worker_share"], 0.5, "{list}");
    assert_eq!(bulkhead["turned_back"], 1, "{list}");
    assert_eq!(list[0]["answers"]["slow_share"], 0.0, "{list}");
    assert_eq!(list[0]["answers"]["slow_threshold"], 0.5, "{list}");
    assert_eq!(list[0]["answers"]["slow_call_secs"], 5.0, "{list}");
    let table = cli.ok(&["breaker", "list"]);
    assert!(
        table.contains("IN FLIGHT") && table.contains("SLOW"),
        "{table}"
    );
    assert!(table.contains("2 of 2, 1 turned back"), "{table}");
    assert!(table.contains("0% over 5s"), "{table}");
    let metrics = cli.ok(&["metrics"]);
    for line in [
        r#"revenant_dependency_in_flight{dependency="email-provider"} 2"#,
        r#"revenant_dependency_in_flight_limit{dependency="email-provider"} 2"#,
        r#"revenant_dependency_bulkhead_turned_back{dependency="email-provider"} 1"#,
        r#"revenant_dependency_slow_share{dependency="email-provider"} 0"#,
    ] {
        assert!(metrics.contains(line), "{line} missing from:\n{metrics}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_opens_a_breaker_before_an_outage_and_closes_it_after() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("revenant.db").display());
    let cli = Cli { url: url.clone() };

    assert!(cli.ok(&["breaker", "list"]).contains("no dependencies yet"));
    let opened = cli.ok_json(&["breaker", "open", "email-provider", "--json"]);
    assert_eq!(opened["dependency"], "email-provider");
    assert_eq!(opened["breaker"], "open");
    assert_eq!(opened["held_open"], true);
    assert!(cli
        .ok(&["breaker", "open", "email-provider"])
        .contains("held open"));

    // A worker claims three jobs of it: all parked, attempts given back.
    let store = revenant::connect(&url).await.unwrap();
    let ids = claim_and_ask(&store, 3).await;
    for &id in &ids {
        let job = store.job_get(JobGetParams { id }).await.unwrap().unwrap();
        assert_eq!(job.status, JobState::Ready);
        assert_eq!(job.attempts, 0);
        assert_eq!(job.dependency_wait, Some(WaitReason::Breaker));
    }

    let list = cli.ok_json(&["breaker", "list", "--json"]);
    assert_eq!(list[0]["dependency"], "email-provider");
    assert_eq!(list[0]["waiting"]["breaker"], 3);
    let table = cli.ok(&["breaker", "list"]);
    assert!(table.contains("open (held)"), "{table}");
    assert!(table.contains("3 breaker"), "{table}");
    // `revenant stats` shows it under the queues; `--json` stays the queues alone.
    let stats = cli.ok(&["stats"]);
    assert!(
        stats.contains("DEPENDENCY") && stats.contains("email-provider"),
        "{stats}"
    );
    let stats = cli.ok_json(&["stats", "--json"]);
    assert_eq!(stats[0]["queue"], "emails");
    // And the gauges.
    let metrics = cli.ok(&["metrics"]);
    assert!(
        metrics.contains(r#"revenant_dependency_breaker_state{dependency="email-provider"} 2"#),
        "{metrics}"
    );
    assert!(
        metrics.contains(
            r#"revenant_dependency_waiting_jobs{dependency="email-provider",reason="breaker"} 3"#
        ),
        "{metrics}"
    );

    let closed = cli.ok(&["breaker", "close", "email-provider"]);
    assert!(closed.contains("3 parked jobs released"), "{closed}");
    let list = cli.ok_json(&["breaker", "list", "email-provider", "--json"]);
    assert_eq!(list[0]["breaker"], "closed");
    assert_eq!(list[0]["held_open"], false);
    assert_eq!(list[0]["waiting"]["breaker"], 0);
    for &id in &ids {
        let job = store.job_get(JobGetParams { id }).await.unwrap().unwrap();
        assert_eq!(job.dependency_wait, None, "released");
        assert!(job.run_at <= chrono::Utc::now(), "due now");
    }
    let auto = cli.ok_json(&["breaker", "auto", "email-provider", "--json"]);
    assert_eq!(auto["breaker"], "closed");
}

#[test]
fn a_bad_key_is_refused_with_exit_code_2() {
    let dir = tempfile::tempdir().unwrap();
    let cli = Cli {
        url: format!("sqlite://{}", dir.path().join("revenant.db").display()),
    };
    for args in [
        &["breaker", "open", ""][..],
        &["breaker", "list", "bad\tkey"][..],
    ] {
        let out = cli.run(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("dependency"),
            "{args:?}"
        );
    }
}
