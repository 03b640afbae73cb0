//! Four `revenant work` processes on one PostgreSQL database share one breaker and one
//! rate limit for the dependency their `http` jobs call: a loopback fake dependency
//! that records every request's start and end.
//!
//! - While the dependency is down (every request waits 300 ms, then 503) and new jobs
//!   keep coming (ten a second), after the breaker has opened and the requests
//!   already on their way have ended, never more than one request is in flight across
//!   the four processes: one probe at a time, one every cool-down.
//! - When it is back, the probe closes the breaker and the parked jobs are released at
//!   the shared rate limit (20 a second, burst 1), though each process alone could send
//!   far more: no five seconds of the dependency's clock see more than the rate allows
//!   in six, plus the burst. The store hands out the turns; a request reaches the
//!   dependency at its turn or later, never earlier, so on a busy machine requests
//!   held back by the scheduler arrive bunched: one second may see more than 21 (23
//!   was seen with both cores kept busy), five cannot see more than six seconds' worth
//!   unless a process stalled for over a second. The busiest whole second is printed.
//!
//! The CLI keeps its tables in the `revenant` schema, so the test isolates itself with
//! a fresh database (as `tests/dead.rs` does), dropped at the end. The server is
//! `REVENANT_TEST_DATABASE_URL`; without one the test says so and stops, except under
//! `CI=true`, where a missing PostgreSQL fails it.

use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use axum::Router;
use revenant::dependency::BreakerState;
use revenant::store::{DependencyListParams, JobEnqueueParams, QueueStatsParams};
use revenant::{NewJob, Store};
use sqlx::{Connection, Executor, PgConnection};

const KEY: &str = "fake-dependency";
/// Jobs enqueued before the workers start; ten more arrive every second while the
/// dependency is down.
const JOBS: usize = 150;
const RATE: u32 = 20;
const DOWN_LATENCY: Duration = Duration::from_millis(300);

fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

/// One request as the dependency saw it, in seconds since the dependency started.
#[derive(Debug, Clone, Copy)]
struct Seen {
    start: f64,
    end: f64,
    ok: bool,
}

struct Dependency {
    up: AtomicBool,
    started: Instant,
    seen: Mutex<Vec<Seen>>,
}

async fn answer(State(dep): State<Arc<Dependency>>) -> StatusCode {
    let start = dep.started.elapsed().as_secs_f64();
    let up = dep.up.load(Ordering::SeqCst);
    if !up {
        tokio::time::sleep(DOWN_LATENCY).await;
    }
    let end = dep.started.elapsed().as_secs_f64();
    dep.seen.lock().unwrap().push(Seen { start, end, ok: up });
    if up {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    }
}

/// The most requests in flight at once among those that started at or after `from`.
fn max_in_flight(seen: &[Seen], from: f64) -> usize {
    let mut edges: Vec<(f64, i32)> = Vec::new();
    for s in seen.iter().filter(|s| s.start >= from) {
        edges.push((s.start, 1));
        edges.push((s.end, -1));
    }
    // Ends before starts at the same instant: a request that ends as another begins
    // did not overlap it.
    edges.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    let (mut now, mut most) = (0, 0);
    for (_, step) in edges {
        now += step;
        most = most.max(now);
    }
    most as usize
}

struct Workers(Vec<Child>);

impl Drop for Workers {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

async fn wait_for<T>(what: &str, within: Duration, mut probe: impl AsyncFnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + within;
    loop {
        if let Some(value) = probe().await {
            return value;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_worker_processes_send_one_probe_at_a_time_and_keep_the_rate_limit_together() {
    let Ok(server) = std::env::var("REVENANT_TEST_DATABASE_URL") else {
        let message = "REVENANT_TEST_DATABASE_URL is not set: the multi-process breaker test was NOT exercised";
        assert!(
            !in_ci(),
            "{message} (CI=true: PostgreSQL tests fail instead of skipping)"
        );
        eprintln!("\n!!!!!!!! {message}\n");
        return;
    };
    let mut admin = match PgConnection::connect(&server).await {
        Ok(conn) => conn,
        Err(err) => {
            let message = format!("PostgreSQL test server {server} does not answer: {err}");
            assert!(
                !in_ci(),
                "{message} (CI=true: PostgreSQL tests fail instead of skipping)"
            );
            eprintln!("\n!!!!!!!! SKIPPING: {message}\n");
            return;
        }
    };
    let name = format!(
        "rv_breaker_{}_{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos()
    );
    admin
        .execute(format!("CREATE DATABASE {name}").as_str())
        .await
        .unwrap();
    let base = server
        .rsplit_once('/')
        .map_or(server.as_str(), |(base, _)| base);
    let url = format!("{base}/{name}");

    let dependency = Arc::new(Dependency {
        up: AtomicBool::new(false),
        started: Instant::now(),
        seen: Mutex::new(Vec::new()),
    });
    let app = Router::new()
        .route("/hook", post(answer))
        .with_state(dependency.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let hook = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });

    let store: Arc<dyn Store> = revenant::connect(&url).await.unwrap();
    let enqueue = |n: usize| {
        let (store, hook) = (store.clone(), hook.clone());
        async move {
            store
                .job_enqueue(JobEnqueueParams {
                    jobs: (0..n)
                        .map(|i| {
                            NewJob::new(
                                "hooks",
                                "http",
                                serde_json::json!({
                                    "url": hook,
                                    "body": { "n": i },
                                    "dependency": KEY,
                                    "timeout": "5s",
                                }),
                            )
                        })
                        .collect(),
                    default_max_attempts: 50,
                    now: None,
                })
                .await
                .unwrap();
        }
    };
    enqueue(JOBS).await;
    let mut total = JOBS;

    let rate = RATE.to_string();
    let rate_limit = format!("{KEY}={rate}");
    // The fleet's backoff, stored once where all four workers read it.
    let set = Command::new(env!("CARGO_BIN_EXE_revenant"))
        .args([
            "--database-url",
            &url,
            "policy",
            "set",
            "--default",
            "--attempts",
            "50",
            "--base",
            "200ms",
            "--cap",
            "1s",
        ])
        .output()
        .expect("run revenant policy set");
    assert!(
        set.status.success(),
        "policy set: {}",
        String::from_utf8_lossy(&set.stderr)
    );
    let workers = Workers(
        (0..4)
            .map(|i| {
                Command::new(env!("CARGO_BIN_EXE_revenant"))
                    .args([
                        "--database-url",
                        &url,
                        "work",
                        "-q",
                        "hooks=20",
                        // The provider is on loopback, which the http kind refuses
                        // unless told.
                        "--allow-net",
                        "127.0.0.1/32",
                        "--worker-id",
                        &format!("fleet-{i}"),
                        "--breaker-window",
                        "2s",
                        "--breaker-min-requests",
                        "5",
                        "--breaker-cooldown",
                        "500ms",
                        "--breaker-max-cooldown",
                        "1s",
                        "--rate-limit",
                        &rate_limit,
                        "--retry-budget",
                        "0",
                        "--grace",
                        "2s",
                    ])
                    .env("REVENANT_LOG", "warn")
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .expect("start revenant work")
            })
            .collect(),
    );

    // The breaker opens on the first failures.
    let opened_at = wait_for("the breaker to open", Duration::from_secs(30), async || {
        let states = store
            .dependency_list(DependencyListParams {
                dependency: Some(KEY.to_string()),
                now: None,
            })
            .await
            .ok()?;
        let state = states.first()?;
        (state.breaker != BreakerState::Closed).then(|| dependency.started.elapsed().as_secs_f64())
    })
    .await;
    // Down for six more seconds, jobs still arriving: cool-downs of 0.5 s, then 1 s.
    for _ in 0..30 {
        tokio::time::sleep(Duration::from_millis(200)).await;
        enqueue(2).await;
        total += 2;
    }
    let down: Vec<Seen> = dependency.seen.lock().unwrap().clone();
    // Requests already admitted when it opened may start up to the rate limit's
    // max_wait (1 s) later and last 300 ms: past that, only probes.
    let settled = opened_at + 1.5;
    let probes = down.iter().filter(|s| s.start >= settled).count();
    let in_flight = max_in_flight(&down, settled);
    eprintln!(
        "down: {} requests, the breaker opened at {opened_at:.2} s; after {settled:.2} s {probes} probes, at most {in_flight} in flight",
        down.len()
    );
    assert!(probes >= 3, "a probe every cool-down: {probes}");
    assert_eq!(in_flight, 1, "one probe at a time across four processes");
    assert!(
        down.len() < total / 2,
        "the breaker held most jobs back: {} requests for {total} jobs",
        down.len()
    );

    // Back up: the probe closes the breaker and the parked jobs drain at the rate.
    let up_at = dependency.started.elapsed().as_secs_f64();
    dependency.up.store(true, Ordering::SeqCst);
    wait_for(
        "every job to complete",
        Duration::from_secs(90),
        async || {
            let stats = store
                .queue_stats(QueueStatsParams {
                    queue: Some("hooks".into()),
                    ..QueueStatsParams::default()
                })
                .await
                .ok()?;
            (stats.first()?.completed as usize == total).then_some(())
        },
    )
    .await;
    let all: Vec<Seen> = dependency.seen.lock().unwrap().clone();
    let served: Vec<f64> = all.iter().filter(|s| s.ok).map(|s| s.start).collect();
    assert!(
        served.len() >= total,
        "every job delivered: {}",
        served.len()
    );
    let mut per_second = std::collections::BTreeMap::new();
    for start in &served {
        *per_second.entry(start.floor() as i64).or_insert(0) += 1;
    }
    let busiest = per_second.values().copied().max().unwrap_or(0);
    // Sliding one-second windows, for the report.
    let mut sorted = served.clone();
    sorted.sort_by(f64::total_cmp);
    let sliding = (0..sorted.len())
        .map(|i| {
            sorted[i..]
                .iter()
                .take_while(|&&t| t < sorted[i] + 1.0)
                .count()
        })
        .max()
        .unwrap_or(0);
    let window = |secs: f64| {
        (0..sorted.len())
            .map(|i| {
                sorted[i..]
                    .iter()
                    .take_while(|&&t| t < sorted[i] + secs)
                    .count()
            })
            .max()
            .unwrap_or(0)
    };
    let busiest_five = window(5.0);
    let drained = sorted.last().copied().unwrap_or(up_at) - up_at;
    eprintln!(
        "up: {} requests in {drained:.1} s, per second {per_second:?}; busiest whole second {busiest}, busiest sliding second {sliding}, busiest five seconds {busiest_five}",
        served.len()
    );
    assert!(
        busiest_five <= RATE as usize * 6 + 1,
        "the rate limit holds across four processes: {busiest_five} in five seconds \
         (busiest whole second {busiest})"
    );
    assert!(
        drained >= (total as f64 - 1.0) / f64::from(RATE) - 1.0,
        "paced, not stampeded: {drained:.1} s for {total} jobs"
    );

    drop(workers);
    drop(store);
    admin
        .execute(format!("DROP DATABASE {name} WITH (FORCE)").as_str())
        .await
        .unwrap();
}
