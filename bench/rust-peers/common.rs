//! What every Rust peer driver shares: the task it is given (one JSON argument), the
//! progress lines and the one JSON line of figures it prints (the protocol of
//! `bench/README.md`), and the W2 failure pattern, the same in every language.

#![allow(dead_code)] // Each driver uses its own part of it.

use std::io::Write;
use std::time::{Duration, Instant};

use serde::Deserialize;

/// Every Rust driver of a measured run allocates with jemalloc, revenant's included, so
/// that the comparison is of queues, not of allocators (`bench/README.md`, "The
/// allocator"). Reported in the drains' settings.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// The settings a drain reports beside its figures: the allocator (the queue's own
/// settings are its defaults; `bench/README.md` says which).
pub fn settings() -> serde_json::Value {
    serde_json::json!({ "allocator": "jemalloc" })
}

/// The task, as the harness passes it (one JSON argument).
#[derive(Debug, Clone, Deserialize)]
pub struct Task {
    /// `enqueue`, `drain`, `failures` or `latency`.
    pub task: String,
    /// A PostgreSQL URL or a SQLite file path.
    pub url: String,
    #[serde(default = "default_queue")]
    pub queue: String,
    #[serde(default)]
    pub jobs: u64,
    #[serde(default = "one")]
    pub batch: u64,
    #[serde(default = "one")]
    pub concurrency: u64,
    pub time_limit: f64,
    #[serde(default)]
    pub fail_percent: u64,
    #[serde(default)]
    pub poison_every: u64,
    #[serde(default = "five")]
    pub max_attempts: u64,
    #[serde(default)]
    pub rates: Vec<f64>,
    #[serde(default)]
    pub seconds: f64,
}

fn default_queue() -> String {
    "bench".into()
}
fn one() -> u64 {
    1
}
fn five() -> u64 {
    5
}

impl Task {
    /// Reads the task from the first argument.
    pub fn from_args() -> Task {
        let arg = std::env::args().nth(1).unwrap_or_default();
        match serde_json::from_str(&arg) {
            Ok(task) => task,
            Err(err) => {
                eprintln!("usage: driver '<task JSON>' ({err})");
                std::process::exit(2);
            }
        }
    }

    pub fn deadline(&self) -> Instant {
        Instant::now() + Duration::from_secs_f64(self.time_limit.max(0.1))
    }

    pub fn is_poison(&self, i: u64) -> bool {
        self.poison_every > 0 && i % self.poison_every == 0
    }

    /// Whether attempt `attempt` (1-based) of job `i` fails (W2).
    pub fn attempt_fails(&self, i: u64, attempt: u64) -> bool {
        attempt_fails(
            i,
            attempt,
            self.fail_percent,
            self.poison_every,
            self.max_attempts,
        )
    }

    pub fn expected_dead(&self) -> u64 {
        (0..self.jobs).filter(|&i| self.is_poison(i)).count() as u64
    }
}

/// Poison jobs fail every attempt; the others fail in `fail_percent` of attempts (a hash
/// of (i, attempt), so every system sees the same pattern), never on the last allowed
/// attempt, so only the poison jobs can end dead.
pub fn attempt_fails(i: u64, attempt: u64, fail_percent: u64, poison_every: u64, max: u64) -> bool {
    if poison_every > 0 && i % poison_every == 0 {
        return true;
    }
    attempt < max && splitmix(i.wrapping_mul(31).wrapping_add(attempt)) % 100 < fail_percent
}

fn splitmix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// `@progress DONE TOTAL` on stderr, at most four a second.
pub struct Progress {
    total: u64,
    last: Option<Instant>,
}

impl Progress {
    pub fn new(total: u64) -> Self {
        Progress { total, last: None }
    }

    pub fn tick(&mut self, done: u64) {
        if self
            .last
            .is_some_and(|l| l.elapsed() < Duration::from_millis(250))
        {
            return;
        }
        self.last = Some(Instant::now());
        eprintln!("@progress {done} {}", self.total);
        let _ = std::io::stderr().flush();
    }
}

/// The figures, one JSON line on stdout.
pub fn result(figures: serde_json::Value) {
    println!("{figures}");
    let _ = std::io::stdout().flush();
}

pub fn unix_seconds() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// `wchar` and `write_bytes` of `/proc/self/io`.
pub fn io() -> (u64, u64) {
    let text = std::fs::read_to_string("/proc/self/io").unwrap_or_default();
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    };
    (field("wchar:"), field("write_bytes:"))
}

pub fn io_since(before: (u64, u64)) -> serde_json::Value {
    let now = io();
    serde_json::json!({
        "io_wchar": now.0.saturating_sub(before.0),
        "io_write_bytes": now.1.saturating_sub(before.1),
    })
}

/// Nearest-rank percentile of sorted values.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// How often a drain looks at its counts, but near its end.
const POLL: Duration = Duration::from_millis(50);
/// From this long after the last start...
const QUIET: Duration = Duration::from_millis(5);
/// ...to this long after it, a drain looks every [`END_POLL`].
const QUIET_END: Duration = Duration::from_millis(100);
const END_POLL: Duration = Duration::from_millis(2);

/// When a job last started in this process. A drain looks at its counts every 2 ms
/// from 5 ms to 100 ms after the last start, else every 50 ms ([`LastStart::look_now`]):
/// a drain's last jobs finish a few milliseconds after the last one starts, and at
/// 50 ms a drain of 0.4 s would be measured up to 12% long, and W2's clean drains of
/// 5,000 jobs (0.12 to 0.21 s on revenant) up to a third long, while the ceilings,
/// which know when their loop ends, are not. Past 100 ms a pause in starts is a
/// retry's backoff, not the end, polled at 50 ms again. revenant's driver and the Node
/// and Python drivers do the same.
#[derive(Debug, Default)]
pub struct LastStart(std::sync::atomic::AtomicU64);

impl LastStart {
    /// A job started now.
    pub fn mark(&self) {
        self.0
            .store(micros() + 1, std::sync::atomic::Ordering::Relaxed);
    }

    /// Whether a drain that last looked at its counts `since_look` ago looks again now:
    /// every [`END_POLL`] from [`QUIET`] to [`QUIET_END`] after the last start, else
    /// every [`POLL`] (before any start, while jobs keep starting, and in a longer
    /// pause).
    fn look_now(&self, since_look: Duration) -> bool {
        let last = self.0.load(std::sync::atomic::Ordering::Relaxed);
        let since_start = Duration::from_micros(micros().saturating_sub(last.saturating_sub(1)));
        let near_end = last != 0 && (QUIET..QUIET_END).contains(&since_start);
        since_look >= POLL || (near_end && since_look >= END_POLL)
    }
}

/// The pause between a drain's looks at its counts (see [`LastStart`]).
pub async fn poll_pause(starts: &LastStart) {
    let polled = Instant::now();
    loop {
        tokio::time::sleep(END_POLL).await;
        if starts.look_now(polled.elapsed()) {
            return;
        }
    }
}

/// Microseconds since the first call: W3's clock, shared by producer and handler.
pub fn micros() -> u64 {
    static BASE: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    BASE.get_or_init(Instant::now).elapsed().as_micros() as u64
}

pub fn merge(mut a: serde_json::Value, b: serde_json::Value) -> serde_json::Value {
    if let (Some(a), serde_json::Value::Object(b)) = (a.as_object_mut(), b) {
        a.extend(b);
    }
    a
}

/// Summary of one rate of W3.
pub fn latency_summary(
    rate: f64,
    jobs: u64,
    arrivals_secs: f64,
    mut ms: Vec<f64>,
) -> serde_json::Value {
    ms.sort_by(f64::total_cmp);
    serde_json::json!({
        "rate": rate,
        "jobs": jobs,
        "started": ms.len(),
        "achieved_rate": jobs as f64 / arrivals_secs.max(1e-9),
        "p50_ms": percentile(&ms, 50.0),
        "p99_ms": percentile(&ms, 99.0),
        "max_ms": ms.last().copied().unwrap_or(0.0),
    })
}
