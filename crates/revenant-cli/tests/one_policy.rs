//! One stored policy, every door, every kind of worker: a job enqueued from library
//! code, from `revenant enqueue` and from `POST /v1/jobs`, failed by an in-process
//! worker or by a remote worker over HTTP, gets the same attempt budget, the same
//! backoff between attempts and the same dead reason.
//!
//! The policy (3 attempts, 1 s doubling, no jitter) is stored once through the client,
//! as `revenant policy set` does; nothing else in the test names it.

use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use revenant::store::JobFilter;
use revenant::{
    Backoff, Client, Jitter, Job, JobContext, JobError, JobState, NewJob, PolicyScope, RetryPolicy,
    Store,
};
use revenant_server::ServerConfig;
use serde_json::{json, Value};

const KIND: &str = "flaky";

fn policy() -> RetryPolicy {
    RetryPolicy::builder()
        .max_attempts(3)
        .backoff(Backoff::new(Duration::from_secs(1), 2.0, Duration::from_secs(60)).unwrap())
        .jitter(Jitter::None)
        .build()
        .unwrap()
}

/// Enqueues one job of [`KIND`] on `queue` through each door; returns the three ids.
async fn enqueue_through_every_door(
    url: &str,
    client: &Client,
    http: &reqwest::Client,
    base: &str,
    queue: &str,
) -> Vec<i64> {
    let library = client
        .enqueue(NewJob::new(queue, KIND, json!({"door": "library"})))
        .await
        .expect("library enqueue")
        .id;
    let out = Command::new(env!("CARGO_BIN_EXE_revenant"))
        .args([
            "--database-url",
            url,
            "enqueue",
            "--queue",
            queue,
            "--kind",
            KIND,
            "--payload",
            r#"{"door":"cli"}"#,
            "--json",
        ])
        .output()
        .expect("run revenant enqueue");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let cli: Value = serde_json::from_slice(&out.stdout).expect("enqueue --json");
    let answer: Value = http
        .post(format!("{base}/v1/jobs"))
        .json(&json!({"queue": queue, "kind": KIND, "payload": {"door": "http"}}))
        .send()
        .await
        .expect("POST /v1/jobs")
        .json()
        .await
        .expect("a JSON answer");
    vec![
        library,
        cli["id"].as_i64().expect("cli id"),
        answer["jobs"][0]["id"].as_i64().expect("http id"),
    ]
}

/// A remote worker over HTTP that fails every attempt of `queue` as transient, until
/// `jobs` of them are dead (or a generous deadline passes).
async fn remote_worker(http: reqwest::Client, base: String, store: Arc<dyn Store>, jobs: usize) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while dead_count(&*store, "remote").await < jobs {
        assert!(
            Instant::now() < deadline,
            "the remote worker's jobs did not all die in 60 s"
        );
        let claimed: Value = http
            .post(format!("{base}/v1/claims"))
            .json(&json!({"queue": "remote", "worker": "remote-1", "limit": 10, "wait": "2s"}))
            .send()
            .await
            .expect("claim")
            .json()
            .await
            .expect("claim answer");
        for job in claimed["jobs"].as_array().expect("jobs") {
            let answer = http
                .post(format!("{base}/v1/jobs/{}/fail", job["id"]))
                .json(&json!({
                    "lease_token": job["lease_token"],
                    "class": "transient",
                    "message": "provider down",
                }))
                .send()
                .await
                .expect("fail");
            assert!(
                answer.status().is_success(),
                "fail answered {}",
                answer.status()
            );
        }
    }
}

async fn dead_count(store: &dyn Store, queue: &str) -> usize {
    store
        .job_list(revenant::store::JobListParams {
            filter: JobFilter {
                queue: Some(queue.into()),
                statuses: Some(vec![JobState::Dead]),
                ..JobFilter::default()
            },
            before_id: None,
            limit: 100,
        })
        .await
        .expect("list")
        .len()
}

/// The agreement: every job dead of `attempts_exhausted` after 3 attempts, its retries
/// 1 s then 2 s after each failure (no jitter), whoever enqueued or ran it.
fn assert_the_policy_held(job: &Job) {
    let door = &job.payload["door"];
    assert_eq!(job.status, JobState::Dead, "{door}: {job:?}");
    assert_eq!(
        job.dead_reason,
        Some(revenant::DeadReason::AttemptsExhausted),
        "{door}"
    );
    assert_eq!(job.attempts, 3, "{door}");
    assert_eq!(job.max_attempts, 3, "{door}");
    let mut at: Vec<_> = job.errors.iter().map(|e| e.at).collect();
    at.sort();
    assert_eq!(at.len(), 3, "{door}: one failure per attempt");
    for (i, pair) in at.windows(2).enumerate() {
        let gap = (pair[1] - pair[0]).num_milliseconds();
        let backoff = 1000 << i;
        // At least the backoff; at most the backoff and a generous allowance for a
        // busy machine's claim latency.
        assert!(
            (backoff..backoff + 8_000).contains(&gap),
            "{door}: failure {} came {gap} ms after the one before, expected the {backoff} ms backoff",
            i + 2
        );
    }
}

async fn every_door_and_worker_agree(url: String) {
    let store = revenant::connect(&url).await.expect("connect");
    let client = Client::new(store.clone());
    client
        .set_policy(PolicyScope::Kind(KIND.into()), policy())
        .await
        .expect("store the policy");

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let app = revenant_server::router(store.clone(), ServerConfig::default());
    let server = tokio::spawn(revenant_server::serve(
        listener,
        app,
        std::future::pending(),
    ));
    let http = reqwest::Client::new();

    let local = enqueue_through_every_door(&url, &client, &http, &base, "local").await;
    let remote = enqueue_through_every_door(&url, &client, &http, &base, "remote").await;

    // The in-process worker: a handler that always fails as transient.
    let worker = Client::new(store.clone())
        .worker()
        .queue("local", 4)
        .handler_fn(KIND, |_ctx: JobContext, _payload: Value| async move {
            Err::<(), _>(JobError::retry("provider down"))
        })
        .poll_interval(Duration::from_millis(100))
        .build()
        .expect("a worker");
    let watched = store.clone();
    let local_worker = tokio::spawn(worker.run_until(async move {
        let deadline = Instant::now() + Duration::from_secs(60);
        while dead_count(&*watched, "local").await < 3 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }));
    remote_worker(http.clone(), base.clone(), store.clone(), 3).await;
    local_worker
        .await
        .unwrap()
        .expect("the worker stops cleanly");

    for id in local.iter().chain(&remote) {
        let job = client.job(*id).await.unwrap().expect("the job");
        assert_the_policy_held(&job);
    }
    server.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_door_and_every_worker_agree_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    every_door_and_worker_agree(format!(
        "sqlite://{}",
        dir.path().join("revenant.db").display()
    ))
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_door_and_every_worker_agree_on_postgres() {
    use sqlx::{Connection, Executor, PgConnection};
    let server = match std::env::var("REVENANT_TEST_DATABASE_URL") {
        Ok(url) => url,
        Err(_) if std::env::var("CI").is_ok_and(|v| v == "true") => {
            panic!("REVENANT_TEST_DATABASE_URL is not set (CI=true: PostgreSQL tests fail instead of skipping)")
        }
        Err(_) => {
            eprintln!(
                "REVENANT_TEST_DATABASE_URL is not set: the PostgreSQL run was NOT exercised"
            );
            return;
        }
    };
    // A fresh database: the CLI uses the default schema, so isolate one level up.
    let name = format!(
        "rv_doors_{}_{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos()
    );
    let mut admin = PgConnection::connect(&server).await.expect("connect");
    admin
        .execute(format!("CREATE DATABASE {name}").as_str())
        .await
        .unwrap();
    let base = server.rsplit_once('/').map_or(server.as_str(), |(b, _)| b);
    every_door_and_worker_agree(format!("{base}/{name}")).await;
    admin
        .execute(format!("DROP DATABASE {name} WITH (FORCE)").as_str())
        .await
        .unwrap();
}
