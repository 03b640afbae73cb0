//! The fake email provider: an HTTP server on loopback that plays the story's
//! provider. It answers 503 while the scenario's outage lasts (in simulated time), 422
//! for the one restaurant whose name its template cannot render (until the template
//! is "fixed"), and 200 otherwise.
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
use tokio::task::JoinHandle;

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
}

/// Everything the provider counted.
#[derive(Debug, Default, Clone)]
pub struct Ledger {
    /// Per simulated second since the start.
    pub seconds: Vec<SecondCounts>,
    /// Accepted deliveries per receipt number.
    pub accepted: HashMap<u64, u32>,
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
    template_fixed: AtomicBool,
    ledger: Mutex<Ledger>,
}

/// The running provider.
pub struct Provider {
    shared: Arc<Shared>,
    addr: SocketAddr,
    task: JoinHandle<()>,
}

impl Provider {
    /// Starts the provider on `127.0.0.1:0`.
    pub async fn start(scenario: &Scenario, clock: SimClock) -> std::io::Result<Provider> {
        let shared = Arc::new(Shared {
            clock,
            outage: (scenario.outage_start_secs, scenario.outage_end_secs()),
            template_fixed: AtomicBool::new(false),
            ledger: Mutex::new(Ledger::default()),
        });
        let app = Router::new()
            .route("/v1/receipts", post(send))
            .with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(Provider { shared, addr, task })
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
        self.task.abort();
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

    let mut ledger = shared
        .ledger
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
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
    ledger.second(at).accepted += 1;
    if attempt > 1 {
        let last = ledger.last_retry_accepted_at.get_or_insert(at);
        *last = last.max(at);
    }
    (StatusCode::OK, "queued for delivery".to_string())
}
