//! `revenant demo --hang`: a provider that hangs beside one that answers in 50 ms, in
//! one queue's slots, in real time.
//!
//! Two fake providers listen on loopback: `healthy` answers every request after 50 ms
//! (a real provider's time, so the healthy jobs' time is the protections' doing and
//! not the machine's noise);
//! `hanging` accepts the connection, reads the request and answers nothing until it is
//! told to recover. One queue of 10 slots gets 200 `http` jobs for each, interleaved,
//! each request with a 5 s timeout. Three runs, each on its own queue and dependency
//! keys (so the runs share no breaker):
//!
//! 1. **alone**: the 200 healthy jobs without the others: the time to beat;
//! 2. **before**: beside the hanging ones, protected as before the bulkhead (breaker,
//!    retry budget; no bulkhead, no slow-call counting): every slot waits out a
//!    timeout until the breaker has seen enough failures;
//! 3. **with**: the same, protected as `revenant work` protects by default (or as the
//!    protection flags say), then the hanging provider recovers and its backlog is
//!    delivered, paced by its rate limit (50 a second unless `--rate-limit` says).
//!
//! Measured: when the last healthy job was delivered (its provider's 200th answer),
//! the most requests the hanging provider held at once (the slots it took), dead
//! jobs, and the recovery. `revenant_sim::hang` predicts the first two for each run
//! with the run's own policies and start time; it takes three machine costs from this
//! invocation, never from the run it predicts: a claim and its permit call, and the
//! permit call alone, timed on the store before the runs; and what an attempt adds to
//! the provider's 50 ms on average, found on the run alone
//! ([`revenant_sim::hang::calibrate`]). The model lets that overhead vary from one
//! attempt to the next and plays fifteen seeds ([`revenant_sim::hang::predict_typical`]):
//! attempts that all took the same time would lock into the fetcher's claim cadence,
//! which no real run does. The second table gives each
//! figure measured, predicted and their difference. Exit 0 when the goals hold (the
//! model's accuracy is a figure, not a goal of the exit code).

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use revenant::dependency::{DependencyPolicies, DependencyPolicy, RateLimit};
use revenant::store::{
    DependencyAcquireParams, DependencyListParams, JobClaimParams, LeaseRef, PermitRequest,
    QueueStatsParams,
};
use revenant::{Client, DependencyConfig, NewJob, PolicySet, RetryPolicy, Store};
use revenant_kinds::HttpHandler;
use revenant_sim::hang::{calibrate, predict_typical, HangPrediction, HangScenario};
use serde::Serialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::error::CliError;

/// The queue's slots.
const SLOTS: usize = 10;
/// Jobs per provider.
const JOBS: u32 = 200;
/// The requests' timeout.
const TIMEOUT: Duration = Duration::from_secs(5);
/// How long the healthy provider takes to answer. Real providers take tens of
/// milliseconds (a TLS round trip and some work); one that answered at once would make
/// the healthy jobs' time a fraction of a second of machine overhead and scheduler
/// noise, which no model predicts and which varies by half from run to run on a busy
/// machine.
const SERVICE: Duration = Duration::from_millis(50);
/// The hanging provider's rate limit after recovery, unless the flags set one.
const RECOVERY_RATE: f64 = 50.0;
/// How long any phase may take before the demo gives up.
const PHASE_DEADLINE: Duration = Duration::from_secs(180);

/// A fake provider on loopback.
#[derive(Clone)]
struct FakeProvider {
    port: u16,
    state: Arc<ProviderState>,
}

#[derive(Default)]
struct ProviderState {
    /// How long each answer takes (while not hanging).
    service: Duration,
    /// Hold requests unanswered.
    hanging: AtomicBool,
    /// Told when `hanging` is cleared.
    recovered: tokio::sync::Notify,
    /// 200s sent.
    answered: AtomicU64,
    /// Requests held unanswered now, and the most at once.
    held: AtomicI64,
    peak_held: AtomicI64,
    /// When each 200 went.
    answers: Mutex<Vec<Instant>>,
}

impl FakeProvider {
    async fn start(hanging: bool, service: Duration) -> std::io::Result<FakeProvider> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let state = Arc::new(ProviderState {
            service,
            ..ProviderState::default()
        });
        state.hanging.store(hanging, Ordering::SeqCst);
        let s = state.clone();
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                tokio::spawn(serve(socket, s.clone()));
            }
        });
        Ok(FakeProvider { port, state })
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/deliver", self.port)
    }

    fn recover(&self) {
        self.state.hanging.store(false, Ordering::SeqCst);
        self.state.recovered.notify_waiters();
    }

    fn answered(&self) -> u64 {
        self.state.answered.load(Ordering::SeqCst)
    }

    fn peak_held(&self) -> i64 {
        self.state.peak_held.load(Ordering::SeqCst)
    }

    /// The most 200s in any one second since `from`.
    fn peak_per_second(&self, from: Instant) -> usize {
        let answers = self.state.answers.lock().unwrap_or_else(|p| p.into_inner());
        let times: Vec<Instant> = answers.iter().copied().filter(|t| *t >= from).collect();
        let mut best = 0;
        for (i, start) in times.iter().enumerate() {
            let n = times[i..]
                .iter()
                .take_while(|t| t.duration_since(*start) < Duration::from_secs(1))
                .count();
            best = best.max(n);
        }
        best
    }
}

/// Serves one connection: request after request (keep-alive), each answered `200`
/// at once, or held while the provider hangs. A held request whose client gives up
/// (closes the connection) is dropped.
async fn serve(mut socket: TcpStream, state: Arc<ProviderState>) {
    let mut buf: Vec<u8> = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        // One request: the head, then the body its Content-Length announces.
        let head_end = loop {
            if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break at + 4;
            }
            match socket.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        };
        let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
        let length: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        while buf.len() < head_end + length {
            match socket.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
        buf.drain(..head_end + length);
        let held = state.hanging.load(Ordering::SeqCst);
        if held {
            let now = state.held.fetch_add(1, Ordering::SeqCst) + 1;
            state.peak_held.fetch_max(now, Ordering::SeqCst);
            let recovered = state.recovered.notified();
            tokio::pin!(recovered);
            recovered.as_mut().enable();
            let gone = if state.hanging.load(Ordering::SeqCst) {
                tokio::select! {
                    _ = &mut recovered => false,
                    // The client gave up (its timeout): the connection closes.
                    read = socket.read(&mut chunk) => matches!(read, Ok(0) | Err(_)),
                }
            } else {
                false
            };
            state.held.fetch_sub(1, Ordering::SeqCst);
            if gone {
                return;
            }
        }
        if !held && !state.service.is_zero() {
            tokio::time::sleep(state.service).await;
        }
        let answer =
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}";
        if socket.write_all(answer).await.is_err() {
            return;
        }
        state.answered.fetch_add(1, Ordering::SeqCst);
        if !held {
            // Requests sent before the recovery and answered by it were not paced by
            // the recovery: only the others count for its busiest second.
            state
                .answers
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(Instant::now());
        }
    }
}

/// One run's figures.
#[derive(Debug, Clone, Serialize)]
pub struct RunFigures {
    /// When the jobs were enqueued, microseconds since the Unix epoch (the breaker's
    /// windows are aligned to it; the model starts there too).
    pub started_unix_us: i64,
    /// When the last healthy job was delivered, seconds from the enqueue.
    pub healthy_secs: f64,
    /// The most requests the hanging provider held at once.
    pub hanging_peak_slots: i64,
    /// Dead jobs in the run's queue when it ended.
    pub dead: i64,
    /// Times the hanging dependency's breaker opened.
    pub breaker_trips: u64,
    /// Jobs turned back at the hanging dependency's bulkhead.
    pub turned_back: u64,
    /// After the hanging provider recovered: seconds until its backlog was delivered.
    pub recovery_secs: Option<f64>,
    /// After it recovered: the most requests sent after the recovery that it answered
    /// in any one second (the few held across the recovery, answered by it, are not
    /// counted: they were sent before).
    pub recovery_peak_per_sec: Option<usize>,
}

/// One figure, measured beside predicted.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Figure {
    /// As the run measured it.
    pub measured: f64,
    /// As the model predicted it.
    pub predicted: f64,
    /// `(predicted - measured) / measured`: above 0, the model says slower or more.
    pub error: f64,
    /// `|error| <= 10%`.
    pub within_ten_percent: bool,
}

impl Figure {
    fn new(measured: f64, predicted: f64) -> Figure {
        let error = (predicted - measured) / measured.abs().max(1e-9);
        Figure {
            measured,
            predicted,
            error,
            within_ten_percent: error.abs() <= 0.10,
        }
    }
}

/// Predicted beside measured.
#[derive(Debug, Clone, Serialize)]
pub struct Compared {
    /// The run.
    pub measured: RunFigures,
    /// The model's prediction for it.
    pub predicted: HangPrediction,
    /// The healthy jobs' delivery time, seconds.
    pub healthy_secs: Figure,
    /// The most slots the hanging dependency held.
    pub hanging_slots: Figure,
}

/// The whole demo's figures.
#[derive(Debug, Serialize)]
pub struct HangSummary {
    /// The backend the runs used (`sqlite` or `postgres`).
    pub backend: String,
    /// How long the healthy provider takes to answer, seconds.
    pub service_secs: f64,
    /// What one claim and its permit call cost on this store, seconds, as timed
    /// before the runs.
    pub claim_secs: f64,
    /// What the permit call alone costs, seconds (a held job's start waits for it).
    pub permit_secs: f64,
    /// What the machine adds to each healthy attempt on average, seconds, as the
    /// model finds it from the run alone ([`revenant_sim::hang::calibrate`]).
    pub overhead_secs: f64,
    /// The healthy jobs alone.
    pub alone: RunFigures,
    /// Beside the hanging ones, protected as before the bulkhead.
    pub before: Compared,
    /// Beside the hanging ones, with the bulkhead and slow calls.
    pub with: Compared,
    /// The hanging dependency's rate limit after recovery, a second.
    pub recovery_rate: f64,
    /// The goals: healthy at most 2x alone plus the breaker's first window (10 s);
    /// hanging at most its limit; none dead; the backlog delivered within the rate
    /// limit; the model within 10% of the measured time.
    pub goals: Goals,
    /// How long the demo took, seconds.
    pub wall_secs: f64,
}

/// The goals, checked.
#[derive(Debug, Serialize)]
pub struct Goals {
    /// The healthy jobs beside the hang took at most twice their time alone plus the
    /// breaker's first window.
    pub healthy_at_most_twice_alone_plus_window: bool,
    /// The hanging dependency held at most its bulkhead limit.
    pub hanging_held_at_most_its_limit: bool,
    /// No job dead-lettered by the hang.
    pub none_dead: bool,
    /// The recovered backlog was delivered, never faster than its rate limit (one
    /// second's burst of slack).
    pub backlog_delivered_at_its_rate: bool,
    /// The model within 10% of the measured healthy time and slots held, in the run
    /// with the bulkhead.
    pub simulator_within_ten_percent: bool,
}

/// Runs the three runs against `store` and prints the table (or JSON).
pub async fn run(
    store: Arc<dyn Store>,
    backend: &str,
    policies: DependencyPolicies,
    json: bool,
) -> Result<HangSummary, CliError> {
    let began = Instant::now();
    let say = |text: &str| {
        if json {
            eprintln!("{text}");
        } else {
            println!("{text}");
        }
    };
    let tag = format!(
        "{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis())
    );
    let with_policy = policies.default.clone();
    let before_policy = DependencyPolicy {
        bulkhead: None,
        breaker: with_policy
            .breaker
            .map(|b| revenant::dependency::BreakerPolicy {
                slow_call: None,
                ..b
            }),
        ..with_policy.clone()
    };
    let recovery_rate = with_policy
        .rate_limit
        .map_or(RECOVERY_RATE, |r| r.per_second);
    let limit = with_policy.bulkhead.map(|b| i64::from(b.limit_for(SLOTS)));
    say(&format!(
        "revenant demo --hang on {backend}: {JOBS} jobs for a provider that answers in {} ms, {JOBS} for one that hangs, one queue of {SLOTS} slots, requests time out after {}s",
        SERVICE.as_millis(),
        TIMEOUT.as_secs()
    ));

    // A first run pays for the store's and the HTTP client's first connections and
    // caches; the time to beat should not.
    one_run_sized(
        &store,
        &tag,
        "warm-up",
        &with_policy,
        recovery_rate,
        false,
        false,
        20,
    )
    .await?;
    let (claim_secs, permit_secs) = claim_cost(&store, &tag, &with_policy).await?;
    say("1/3 the healthy jobs alone ...");
    let alone = one_run(
        &store,
        &tag,
        "alone",
        &with_policy,
        recovery_rate,
        false,
        false,
    )
    .await?;
    say(&format!("    delivered in {:.2}s", alone.healthy_secs));
    say("2/3 beside the hanging ones, protected as before (breaker and budget; no bulkhead, no slow calls) ...");
    let before = one_run(
        &store,
        &tag,
        "before",
        &before_policy,
        recovery_rate,
        true,
        false,
    )
    .await?;
    say(&format!(
        "    delivered in {:.2}s; the hanging provider held {} requests at once",
        before.healthy_secs, before.hanging_peak_slots
    ));
    say("3/3 beside the hanging ones, with the bulkhead and slow calls; then the hanging provider recovers ...");
    let with = one_run(
        &store,
        &tag,
        "with",
        &with_policy,
        recovery_rate,
        true,
        true,
    )
    .await?;
    say(&format!(
        "    delivered in {:.2}s; the hanging provider held {} requests at once; its backlog delivered {:.1}s after it recovered",
        with.healthy_secs,
        with.hanging_peak_slots,
        with.recovery_secs.unwrap_or(f64::NAN)
    ));

    // The model plays each run with the run's own policies and start time; what
    // the machine adds to each attempt is found on the run alone, the only thing the
    // model takes from a measurement.
    let scenario = |policy: &DependencyPolicy, hanging: u32, start_us: i64| HangScenario {
        start_us,
        claim_secs,
        permit_secs,
        overhead_varies: true,
        ..HangScenario::demo(
            JOBS,
            hanging,
            SERVICE.as_secs_f64(),
            policy.clone(),
            hanging_policy(policy, recovery_rate),
        )
    };
    let overhead_secs = calibrate(
        &scenario(&with_policy, 0, alone.started_unix_us),
        alone.healthy_secs,
    );
    let compare = |measured: RunFigures, policy: &DependencyPolicy| {
        let predicted = predict_typical(&HangScenario {
            overhead_secs,
            ..scenario(policy, JOBS, measured.started_unix_us)
        });
        Compared {
            healthy_secs: Figure::new(measured.healthy_secs, predicted.healthy_done_secs),
            hanging_slots: Figure::new(
                measured.hanging_peak_slots as f64,
                f64::from(predicted.hanging_peak_slots),
            ),
            measured,
            predicted,
        }
    };
    let before = compare(before, &before_policy);
    let with = compare(with, &with_policy);
    let window = with_policy.breaker.map_or(10.0, |b| b.window.as_secs_f64());
    let goals = Goals {
        healthy_at_most_twice_alone_plus_window: with.measured.healthy_secs
            <= 2.0 * alone.healthy_secs + window,
        hanging_held_at_most_its_limit: limit.is_none_or(|l| with.measured.hanging_peak_slots <= l),
        none_dead: before.measured.dead == 0 && with.measured.dead == 0,
        backlog_delivered_at_its_rate: with.measured.recovery_secs.is_some()
            && with
                .measured
                .recovery_peak_per_sec
                .is_some_and(|p| p as f64 <= recovery_rate + 1.0),
        simulator_within_ten_percent: with.healthy_secs.within_ten_percent
            && with.hanging_slots.within_ten_percent,
    };
    let summary = HangSummary {
        backend: backend.to_string(),
        service_secs: SERVICE.as_secs_f64(),
        claim_secs,
        permit_secs,
        overhead_secs,
        alone,
        before,
        with,
        recovery_rate,
        goals,
        wall_secs: began.elapsed().as_secs_f64(),
    };
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&summary)
                .map_err(|err| CliError::Failed(err.to_string()))?
        );
    } else {
        print!("{}", table(&summary, limit));
    }
    Ok(summary)
}

/// The summary as Markdown tables: the goals, then the model beside each figure.
fn table(s: &HangSummary, limit: Option<i64>) -> String {
    let alone = s.alone.healthy_secs;
    let times = |c: &Compared| {
        format!(
            "{:.2}s ({:.1}x alone)",
            c.measured.healthy_secs,
            c.measured.healthy_secs / alone
        )
    };
    let mut out = String::new();
    out.push_str(&format!(
        "\n| scenario ({}, healthy provider answers in {:.0} ms; healthy alone: {alone:.2}s) | before (breaker, budget) | with bulkhead and slow calls | goal |\n| --- | --- | --- | --- |\n",
        s.backend,
        s.service_secs * 1000.0
    ));
    out.push_str(&format!(
        "| healthy dependency's delivery beside the hanging one | {} | {} | at most 2x alone + the breaker's window |\n",
        times(&s.before),
        times(&s.with)
    ));
    out.push_str(&format!(
        "| slots held by the hanging dependency | {} of {SLOTS} | {} of {SLOTS} | at most its limit ({}) |\n",
        s.before.measured.hanging_peak_slots,
        s.with.measured.hanging_peak_slots,
        limit.map_or("none".to_string(), |l| l.to_string())
    ));
    out.push_str(&format!(
        "| jobs dead-lettered by the hang | {} | {} | 0 |\n",
        s.before.measured.dead, s.with.measured.dead
    ));
    out.push_str(&format!(
        "| hanging dependency recovers: backlog delivered | - | in {:.1}s, busiest second {} | paced at its rate limit ({}/s) |\n",
        s.with.measured.recovery_secs.unwrap_or(f64::NAN),
        s.with
            .measured
            .recovery_peak_per_sec
            .map_or("-".to_string(), |p| p.to_string()),
        s.recovery_rate
    ));
    out.push_str(&format!(
        "| breaker trips / jobs turned back at the bulkhead | {} / {} | {} / {} | |\n",
        s.before.measured.breaker_trips,
        s.before.measured.turned_back,
        s.with.measured.breaker_trips,
        s.with.measured.turned_back
    ));
    out.push_str(&format!(
        "\nThe model (revenant_sim::hang): a claim costs {:.1} ms and a permit call {:.1} ms (timed before the runs), an attempt {:.1} ms more than the provider's answer on average (found on the run alone):\n\n| figure | measured | predicted | difference | within 10% |\n| --- | --- | --- | --- | --- |\n",
        s.claim_secs * 1000.0,
        s.permit_secs * 1000.0,
        s.overhead_secs * 1000.0
    ));
    let row = |name: &str, f: &Figure, unit: &str| {
        let (m, p) = if unit == "s" {
            (
                format!("{:.2}s", f.measured),
                format!("{:.2}s", f.predicted),
            )
        } else {
            (format!("{}", f.measured), format!("{}", f.predicted))
        };
        format!(
            "| {name} | {m} | {p} | {:+.0}% | {} |\n",
            f.error * 100.0,
            yes(f.within_ten_percent)
        )
    };
    out.push_str(&row(
        "healthy delivery, before",
        &s.before.healthy_secs,
        "s",
    ));
    out.push_str(&row("healthy delivery, with", &s.with.healthy_secs, "s"));
    out.push_str(&row(
        "slots held by the hanging one, before",
        &s.before.hanging_slots,
        "",
    ));
    out.push_str(&row(
        "slots held by the hanging one, with",
        &s.with.hanging_slots,
        "",
    ));
    let g = &s.goals;
    out.push_str(&format!(
        "\ngoals: healthy within 2x + window: {}; hanging within its limit: {}; none dead: {}; backlog at its rate: {}; simulator within 10% (with): {}\n",
        yes(g.healthy_at_most_twice_alone_plus_window),
        yes(g.hanging_held_at_most_its_limit),
        yes(g.none_dead),
        yes(g.backlog_delivered_at_its_rate),
        yes(g.simulator_within_ten_percent),
    ));
    out
}

fn yes(ok: bool) -> &'static str {
    if ok {
        "yes"
    } else {
        "NO"
    }
}

/// One run on a queue and keys of its own.
async fn one_run(
    store: &Arc<dyn Store>,
    tag: &str,
    name: &str,
    policy: &DependencyPolicy,
    recovery_rate: f64,
    with_hanging: bool,
    recover: bool,
) -> Result<RunFigures, CliError> {
    one_run_sized(
        store,
        tag,
        name,
        policy,
        recovery_rate,
        with_hanging,
        recover,
        JOBS,
    )
    .await
}

/// [`one_run`] with `jobs` jobs per provider.
#[allow(clippy::too_many_arguments)] // reason: one private helper, each argument named at its two call sites
async fn one_run_sized(
    store: &Arc<dyn Store>,
    tag: &str,
    name: &str,
    policy: &DependencyPolicy,
    recovery_rate: f64,
    with_hanging: bool,
    recover: bool,
    jobs_each: u32,
) -> Result<RunFigures, CliError> {
    let queue = format!("hang-demo-{name}-{tag}");
    let healthy_key = format!("healthy-{name}-{tag}");
    let hanging_key = format!("hanging-{name}-{tag}");
    let healthy = FakeProvider::start(false, SERVICE)
        .await
        .map_err(|err| CliError::Failed(format!("cannot start a fake provider: {err}")))?;
    let hanging = FakeProvider::start(true, Duration::ZERO)
        .await
        .map_err(|err| CliError::Failed(format!("cannot start a fake provider: {err}")))?;
    let policies = DependencyPolicies::new(policy.clone())
        .with_key(&hanging_key, hanging_policy(policy, recovery_rate));
    // Ten attempts from 10 s: a hang that outlives a retry or two kills nothing.
    let retry = RetryPolicy::builder()
        .attempt_timeout(Duration::from_secs(30))
        .build()
        .map_err(|err| CliError::Failed(err.to_string()))?;
    let client = Client::new(store.clone()).with_policies(PolicySet::new(retry));
    let worker = client
        .worker()
        .queue(&queue, SLOTS)
        .handler(
            HttpHandler::builder()
                .allow_net("127.0.0.1/32")
                .map_err(|err| CliError::Failed(err.to_string()))?
                .build()
                .map_err(|err| CliError::Failed(err.to_string()))?,
        )
        .dependencies(DependencyConfig::new(policies))
        .worker_id(format!("revenant-demo-hang-{name}"))
        .poll_interval(Duration::from_millis(20))
        .shutdown_grace(Duration::from_millis(500))
        .build()
        .map_err(|err| CliError::Failed(err.to_string()))?;
    let stop = worker.shutdown_handle();
    let task = tokio::spawn(worker.run_until(std::future::pending()));

    let timeout = format!("{}s", TIMEOUT.as_secs());
    let mut jobs = Vec::new();
    for _ in 0..jobs_each {
        jobs.push(NewJob::new(
            &queue,
            "http",
            serde_json::json!({"url": healthy.url(), "timeout": timeout, "dependency": healthy_key}),
        ));
        if with_hanging {
            jobs.push(NewJob::new(
                &queue,
                "http",
                serde_json::json!({"url": hanging.url(), "timeout": timeout, "dependency": hanging_key}),
            ));
        }
    }
    let started_unix_us = unix_us();
    let started = Instant::now();
    client.enqueue_many(jobs).await?;
    let deadline = started + PHASE_DEADLINE;
    while healthy.answered() < u64::from(jobs_each) {
        if Instant::now() > deadline {
            stop.shutdown();
            return Err(CliError::Failed(format!(
                "the healthy jobs were not delivered within {}s",
                PHASE_DEADLINE.as_secs()
            )));
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let healthy_secs = started.elapsed().as_secs_f64();
    let (mut recovery_secs, mut recovery_peak) = (None, None);
    if recover {
        let recovered_at = Instant::now();
        hanging.recover();
        let deadline = recovered_at + PHASE_DEADLINE;
        loop {
            let counts = counts(store.as_ref(), &queue).await?;
            if counts.0 >= i64::from(2 * jobs_each) {
                break;
            }
            if Instant::now() > deadline {
                stop.shutdown();
                return Err(CliError::Failed(format!(
                    "the hanging provider's backlog was not delivered within {}s of its recovery",
                    PHASE_DEADLINE.as_secs()
                )));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        recovery_secs = Some(recovered_at.elapsed().as_secs_f64());
        recovery_peak = Some(hanging.peak_per_second(recovered_at));
    }
    let (_, dead) = counts(store.as_ref(), &queue).await?;
    let state = store
        .dependency_list(DependencyListParams {
            dependency: Some(hanging_key.clone()),
            now: None,
        })
        .await?;
    stop.shutdown();
    // Let the hanging calls of a run that does not recover be cancelled, not waited.
    hanging.recover();
    let _ = tokio::time::timeout(Duration::from_secs(10), task).await;
    Ok(RunFigures {
        started_unix_us,
        healthy_secs,
        hanging_peak_slots: hanging.peak_held(),
        dead,
        breaker_trips: state.first().map_or(0, |s| s.trips),
        turned_back: state
            .first()
            .and_then(|s| s.bulkhead)
            .map_or(0, |b| b.turned_back),
        recovery_secs,
        recovery_peak_per_sec: recovery_peak,
    })
}

/// The hanging dependency's policy: the run's, with its rate limit for the recovery.
fn hanging_policy(policy: &DependencyPolicy, recovery_rate: f64) -> DependencyPolicy {
    DependencyPolicy {
        rate_limit: Some(RateLimit::per_second(recovery_rate)),
        ..policy.clone()
    }
}

/// What one claim of the fetcher costs before its jobs start on this store and
/// machine, seconds: a claim of five jobs and the permit call for them, timed on a
/// queue of its own (the median of twelve); and the permit call alone (its median).
/// The model's `claim_secs` and `permit_secs`.
async fn claim_cost(
    store: &Arc<dyn Store>,
    tag: &str,
    policy: &DependencyPolicy,
) -> Result<(f64, f64), CliError> {
    const BATCH: u32 = 5;
    const ROUNDS: u32 = 12;
    let queue = format!("hang-demo-claims-{tag}");
    let key = format!("claims-{tag}");
    let jobs = (0..BATCH * ROUNDS)
        .map(|_| {
            NewJob::new(
                &queue,
                "http",
                serde_json::json!({"url": "http://127.0.0.1:9/"}),
            )
        })
        .collect();
    Client::new(store.clone()).enqueue_many(jobs).await?;
    let (mut times, mut permits) = (Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        let began = Instant::now();
        let claimed = store
            .job_claim(JobClaimParams {
                queue: queue.clone(),
                worker: "revenant-demo-hang-claims".to_string(),
                limit: BATCH,
                lease: Duration::from_secs(30),
                reclaim: true,
                now: None,
            })
            .await?;
        let requests = claimed
            .iter()
            .map(|job| PermitRequest {
                lease: LeaseRef {
                    id: job.id,
                    lease_token: job.lease_token.unwrap_or(revenant::LeaseToken(0)),
                },
                retry_delay: Duration::from_secs(10),
            })
            .collect();
        let permit_began = Instant::now();
        store
            .dependency_acquire(DependencyAcquireParams {
                dependency: key.clone(),
                policy: policy.clone(),
                worker: "revenant-demo-hang-claims".to_string(),
                lease: Duration::from_secs(30),
                requests,
                local_free: Some(2),
                now: None,
            })
            .await?;
        times.push(began.elapsed().as_secs_f64());
        permits.push(permit_began.elapsed().as_secs_f64());
    }
    let median = |mut times: Vec<f64>| {
        times.sort_by(f64::total_cmp);
        times[times.len() / 2]
    };
    Ok((median(times), median(permits)))
}

/// Now, microseconds since the Unix epoch.
fn unix_us() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}

/// Completed and dead jobs of `queue`.
async fn counts(store: &dyn Store, queue: &str) -> Result<(i64, i64), CliError> {
    let stats = store
        .queue_stats(QueueStatsParams {
            queue: Some(queue.to_string()),
            ..QueueStatsParams::default()
        })
        .await?;
    Ok(stats.first().map_or((0, 0), |s| (s.completed, s.dead)))
}
