//! The fake email provider: an HTTP server on loopback that plays the story's
//! provider. It answers 503 while the scenario's outage lasts (in simulated time), 503
//! to requests over its rate limit (50 a second in the story), 422 for the one
//! restaurant whose name its template cannot render (until the template is "fixed"),
//! and 200 otherwise.
//!
//! Its rate limit is a token bucket, as most APIs enforce "N requests a second": N
//! tokens a second, at most a second's worth saved up ([`BURST_SECONDS`]). A
//! stampede is refused; the few milliseconds by which a busy machine bunches evenly
//! paced requests (up to a simulated half second at 30x) are not. The summary reports the
//! raw count of every simulated second beside it.
//!
//! It is also the demo's witness: it counts every request per simulated second (fresh
//! or retry, from the `X-Revenant-Attempt` header the `http` kind sends), drops
//! duplicates by `Idempotency-Key` (answering 200 again, as real providers do), and
//! counts accepted deliveries per receipt, so the demo can check that every receipt
//! was delivered exactly once.
//!
//! Its 503s carry no `Retry-After`: the header counts in whole real seconds, which the
//! time scale cannot shrink, and the simulator's default scenario sends none either.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::{Json, Router};
use serde::{Deserialize, Serialize};

use super::scenario::{Scenario, SimClock};

/// The restaurant whose name breaks the provider's receipt template.
pub const POISON_RESTAURANT: &str = "Chez {{Mamie";

/// A receipt, as the provider receives it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Receipt {
    /// The receipt's number, from 0.
    pub receipt: u64,
    /// Who it goes to.
    pub email: String,
    /// The restaurant the order was from.
    pub restaurant: String,
    /// The order's total, in cents.
    pub total_cents: u64,
}

/// What the provider saw in one simulated second.
#[derive(Debug, Clone, Copy, Default)]
pub struct SecondCounts {
    /// First attempts.
    pub fresh: u64,
    /// Retries.
    pub retries: u64,
    /// Deliveries accepted.
    pub accepted: u64,
    /// Requests the worker sent in this second (by their `X-Demo-Sent-At`), however
    /// late they reached the provider.
    pub sent: u64,
}

/// How much of its rate the provider's limit lets pile up, in seconds of it: with
/// 50 a second, up to 50 at once after a quiet second, 50 a second after that.
pub const BURST_SECONDS: f64 = 1.0;

/// The provider's rate limit: a token bucket in simulated time.
#[derive(Debug, Default, Clone)]
pub struct Bucket {
    tokens: f64,
    at: Option<f64>,
}

impl Bucket {
    /// Takes a token for a request at `at` (simulated seconds); false when none is
    /// left. Starts full. No limit: always true.
    fn take(&mut self, limit: Option<f64>, at: f64) -> bool {
        let Some(limit) = limit else {
            return true;
        };
        let capacity = (limit * BURST_SECONDS).max(1.0);
        let tokens = match self.at {
            None => capacity,
            Some(last) => (self.tokens + (at - last).max(0.0) * limit).min(capacity),
        };
        self.at = Some(at);
        if tokens >= 1.0 {
            self.tokens = tokens - 1.0;
            true
        } else {
            self.tokens = tokens;
            false
        }
    }
}

/// Everything the provider counted.
#[derive(Debug, Default, Clone)]
pub struct Ledger {
    /// Per simulated second since the start.
    pub seconds: Vec<SecondCounts>,
    /// Accepted deliveries per receipt number.
    pub accepted: HashMap<u64, u32>,
    /// When each receipt was first accepted (simulated seconds).
    pub accepted_at: HashMap<u64, f64>,
    /// Requests refused by the provider's rate limit.
    pub over_limit: u64,
    bucket: Bucket,
    /// Requests per receipt number (every answer).
    pub requests: HashMap<u64, u32>,
    /// Idempotency keys of accepted deliveries.
    keys: HashSet<String>,
    /// Requests whose key had already been accepted: answered 200, not delivered again.
    pub duplicates: u64,
    /// Requests without an `Idempotency-Key` (refused with 400; the `http` kind always
    /// sends one).
    pub missing_keys: u64,
    /// When the last delivery that followed a failure was accepted (simulated secs).
    pub last_retry_accepted_at: Option<f64>,
    /// Requests answered 503, 422, 200.
    pub answered_503: u64,
    /// See above.
    pub answered_422: u64,
    /// See above.
    pub answered_200: u64,
}

impl Ledger {
    fn second(&mut self, at: f64) -> &mut SecondCounts {
        let index = at.max(0.0) as usize;
        if self.seconds.len() <= index {
            self.seconds.resize(index + 1, SecondCounts::default());
        }
        &mut self.seconds[index]
    }

    /// Provider requests in the simulated seconds `[from, to)`.
    pub fn requests_between(&self, from: usize, to: usize) -> u64 {
        self.seconds
            .iter()
            .skip(from)
            .take(to.saturating_sub(from))
            .map(|s| s.fresh + s.retries)
            .sum()
    }

    /// Deliveries accepted in all.
    pub fn delivered(&self) -> u64 {
        self.accepted.values().map(|&n| u64::from(n)).sum()
    }
}

struct Shared {
    clock: SimClock,
    outage: (f64, f64),
    limit: Option<f64>,
    template_fixed: AtomicBool,
    ledger: Mutex<Ledger>,
}

/// The running provider.
pub struct Provider {
    shared: Arc<Shared>,
    addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Provider {
    /// Starts the provider on `127.0.0.1:0`.
    pub async fn start(scenario: &Scenario, clock: SimClock) -> std::io::Result<Provider> {
        let shared = Arc::new(Shared {
            clock,
            outage: (scenario.outage_start_secs, scenario.outage_end_secs()),
            limit: scenario.provider_limit,
            template_fixed: AtomicBool::new(false),
            ledger: Mutex::new(Ledger::default()),
        });
        let app = Router::new()
            .route("/v1/receipts", post(send))
            .with_state(shared.clone());
        // The provider runs on its own thread with its own runtime, as a service of
        // its own would: what it counts per simulated second is when requests reach
        // it, and a worker task that hogs the demo's runtime for a few milliseconds
        // (60x makes that a tenth of a simulated second) must not hold requests back
        // and hand them over in one burst.
        let listener = std::net::TcpListener::bind(("127.0.0.1", 0))?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let thread = std::thread::Builder::new()
            .name("demo-provider".into())
            .spawn(move || {
                runtime.block_on(async move {
                    let Ok(listener) = tokio::net::TcpListener::from_std(listener) else {
                        return;
                    };
                    let _ = axum::serve(listener, app)
                        .with_graceful_shutdown(async {
                            let _ = stopped.await;
                        })
                        .await;
                });
            })?;
        Ok(Provider {
            shared,
            addr,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// The URL receipts are posted to.
    pub fn url(&self) -> String {
        format!("http://{}/v1/receipts", self.addr)
    }

    /// A copy of what the provider has counted so far.
    pub fn ledger(&self) -> Ledger {
        self.lock().clone()
    }

    /// Runs `f` on the ledger without copying it.
    pub fn with_ledger<T>(&self, f: impl FnOnce(&Ledger) -> T) -> T {
        f(&self.lock())
    }

    /// The template now renders every restaurant's name.
    pub fn fix_template(&self) {
        self.shared.template_fixed.store(true, Ordering::SeqCst);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Ledger> {
        self.shared
            .ledger
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Drop for Provider {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        // Not joined: a keep-alive connection could hold the graceful shutdown; the
        // thread ends with it, or with the process.
        drop(self.thread.take());
    }
}

async fn send(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    Json(receipt): Json<Receipt>,
) -> (StatusCode, String) {
    let at = shared.clock.now();
    let attempt: u32 = headers
        .get("x-revenant-attempt")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    let key = headers
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);

    let sent_at: Option<f64> = headers
        .get(super::stamped::SENT_AT)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok());

    let mut ledger = shared
        .ledger
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some(sent_at) = sent_at {
        ledger.second(sent_at).sent += 1;
    }
    let second = ledger.second(at);
    if attempt <= 1 {
        second.fresh += 1;
    } else {
        second.retries += 1;
    }
    *ledger.requests.entry(receipt.receipt).or_default() += 1;

    if at >= shared.outage.0 && at < shared.outage.1 {
        ledger.answered_503 += 1;
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "503 service unavailable: mail relay overloaded".to_string(),
        );
    }
    if !ledger.bucket.take(shared.limit, at) {
        ledger.over_limit += 1;
        ledger.answered_503 += 1;
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "503 service unavailable: over the rate limit".to_string(),
        );
    }
    if receipt.restaurant == POISON_RESTAURANT && !shared.template_fixed.load(Ordering::SeqCst) {
        ledger.answered_422 += 1;
        return (
            StatusCode::UNPROCESSABLE_ENTITY,
            format!(
                "template \"receipt\" failed to render: unclosed tag \"{{{{\" in restaurant name {:?}",
                receipt.restaurant
            ),
        );
    }
    let Some(key) = key else {
        ledger.missing_keys += 1;
        return (
            StatusCode::BAD_REQUEST,
            "Idempotency-Key header required".to_string(),
        );
    };
    ledger.answered_200 += 1;
    if !ledger.keys.insert(key) {
        ledger.duplicates += 1;
        return (StatusCode::OK, "duplicate: already delivered".to_string());
    }
    *ledger.accepted.entry(receipt.receipt).or_default() += 1;
    ledger.accepted_at.entry(receipt.receipt).or_insert(at);
    ledger.second(at).accepted += 1;
    if attempt > 1 {
        let last = ledger.last_retry_accepted_at.get_or_insert(at);
        *last = last.max(at);
    }
    (StatusCode::OK, "queued for delivery".to_string())
}
