//! Two `revenant work` processes on one database share one bulkhead for the dependency
//! their `http` jobs call: a loopback fake dependency that holds every request until
//! the test lets it answer, and counts the requests it holds at once.
//!
//! With `--bulkhead-shared KEY=3` (and no per-worker limit), never more than three
//! requests are in flight across both processes, though they have twelve slots
//! between them and twelve jobs; the jobs turned back spend no attempt; when the
//! dependency answers, every job completes with one attempt each.

mod support;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use axum::Router;
use support::{Db, Worker};

const KEY: &str = "held-dependency";
const JOBS: usize = 12;
const LIMIT: usize = 3;

struct Dependency {
    answer: AtomicBool,
    held: AtomicUsize,
    most: AtomicUsize,
    answered: AtomicUsize,
}

async fn answer(State(dep): State<Arc<Dependency>>) -> StatusCode {
    let now = dep.held.fetch_add(1, Ordering::SeqCst) + 1;
    dep.most.fetch_max(now, Ordering::SeqCst);
    while !dep.answer.load(Ordering::SeqCst) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    dep.held.fetch_sub(1, Ordering::SeqCst);
    dep.answered.fetch_add(1, Ordering::SeqCst);
    StatusCode::OK
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shared_bulkhead_holds_across_two_worker_processes() {
    let db = Db::new();
    let dependency = Arc::new(Dependency {
        answer: AtomicBool::new(false),
        held: AtomicUsize::new(0),
        most: AtomicUsize::new(0),
        answered: AtomicUsize::new(0),
    });
    let app = Router::new()
        .route("/hook", post(answer))
        .with_state(dependency.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let hook = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    let ids: Vec<String> = (0..JOBS)
        .map(|i| {
            db.enqueue(
                "http",
                serde_json::json!({"url": hook, "body": {"n": i}, "dependency": KEY, "timeout": "60s"}),
            )
        })
        .collect();
    let shared = format!("{KEY}={LIMIT}");
    let _workers: Vec<Worker> = (0..2)
        .map(|i| {
            Worker(
                db.command(&[
                    "work",
                    "-q",
                    "q=6",
                    "--allow-net",
                    "127.0.0.1/32",
                    "--worker-id",
                    &format!("bulkhead-{i}"),
                    "--bulkhead-share",
                    "1",
                    "--bulkhead-shared",
                    &shared,
                    "--bulkhead-wait",
                    "100ms",
                    "--grace",
                    "1s",
                ])
                .env("REVENANT_LOG", "warn")
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .expect("start revenant work"),
            )
        })
        .collect();

    // The limit fills up, and the other jobs keep being claimed and turned back.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let list = db.ok_json(&["breaker", "list", "--json"]);
        let bulkhead = &list[0]["bulkhead"];
        if dependency.held.load(Ordering::SeqCst) == LIMIT
            && bulkhead["turned_back"].as_u64().unwrap_or(0) >= 10
        {
            assert_eq!(bulkhead["in_flight"], LIMIT, "{list}");
            assert_eq!(bulkhead["shared_limit"], LIMIT, "{list}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the bulkhead never filled: {} held, {list}",
            dependency.held.load(Ordering::SeqCst)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let waiting = db.ok_json(&["jobs", "list", "--status", "ready", "--json"]);
    for job in waiting.as_array().expect("a list") {
        assert_eq!(
            job["attempts"], 0,
            "a turned-back job spends no attempt: {job}"
        );
    }

    dependency.answer.store(true, Ordering::SeqCst);
    for id in &ids {
        let job = db.wait_finished(id);
        assert_eq!(job["status"], "completed", "{job}");
        assert_eq!(job["attempts"], 1, "one attempt each: {job}");
    }
    let most = dependency.most.load(Ordering::SeqCst);
    assert!(
        most <= LIMIT,
        "{most} requests at once across both workers, limit {LIMIT}"
    );
    assert_eq!(dependency.answered.load(Ordering::SeqCst), JOBS);
}
