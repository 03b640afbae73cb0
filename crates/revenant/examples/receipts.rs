//! Receipts through a flaky fake email provider, showing each outcome:
//! success, retry (503), retry-after (429), permanent (a template that crashes on one
//! restaurant's name), snooze, cancel, panic, timeout, an undecodable payload and an
//! unknown kind.
//!
//! `cargo run -p revenant --example receipts`

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use revenant::store::JobFilter;
use revenant::{
    Backoff, Client, Jitter, JobContext, JobError, NewJob, PolicyScope, ResultExt, RetryPolicy,
};
use serde::Deserialize;

#[derive(Deserialize)]
struct Receipt {
    order: u64,
    restaurant: String,
    /// What the fake provider does with this one.
    scenario: String,
}

/// A provider that fails the way real ones do.
struct FlakyProvider {
    calls: AtomicU32,
}

#[derive(Debug)]
enum ProviderError {
    Unavailable,
    RateLimited(Duration),
}

impl std::fmt::Display for ProviderError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ProviderError::Unavailable => write!(f, "503 Service Unavailable"),
            ProviderError::RateLimited(d) => write!(f, "429 Too Many Requests, retry after {d:?}"),
        }
    }
}
impl std::error::Error for ProviderError {}

impl FlakyProvider {
    async fn send(&self, receipt: &Receipt, attempt: i32) -> Result<(), ProviderError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        match receipt.scenario.as_str() {
            "flaky" if attempt < 3 => Err(ProviderError::Unavailable),
            "rate_limited" if attempt == 1 => {
                Err(ProviderError::RateLimited(Duration::from_millis(200)))
            }
            "slow" => {
                tokio::time::sleep(Duration::from_secs(60)).await;
                Ok(())
            }
            _ => Ok(()),
        }
    }
}

async fn send_receipt(
    ctx: JobContext,
    receipt: Receipt,
    provider: Arc<FlakyProvider>,
) -> Result<(), JobError> {
    match receipt.scenario.as_str() {
        "refunded" => {
            return Err(JobError::cancel(
                "order refunded before the receipt went out",
            ))
        }
        "not_yet" => {
            // The restaurant is closed: try again later without spending an attempt.
            // (A snooze gives the attempt back, so the attempt count cannot tell a
            // first run from a later one; a real handler asks the world instead.)
            static SNOOZED: std::sync::atomic::AtomicBool =
                std::sync::atomic::AtomicBool::new(false);
            if !SNOOZED.swap(true, Ordering::SeqCst) {
                return Err(JobError::snooze(Duration::from_millis(100)));
            }
        }
        "crash" => panic!("template engine crashed on order {}", receipt.order),
        _ => {}
    }
    if receipt.restaurant.contains('Ü') {
        // A template that can never render this name: retrying will not help.
        return Err(JobError::permanent(format!(
            "template cannot render restaurant {:?}",
            receipt.restaurant
        )));
    }
    match ctx
        .timeout(
            Duration::from_secs(1),
            provider.send(&receipt, ctx.attempt()),
        )
        .await?
    {
        Err(ProviderError::RateLimited(after)) => {
            Err(ProviderError::RateLimited(after)).retry_after(after)
        }
        other => other.retry(), // 503 and friends: back off and try again
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_target(false)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let dir = tempfile::tempdir()?;
    let url = format!("sqlite://{}", dir.path().join("receipts.db").display());
    let client = Client::connect(&url).await?;

    let policy = RetryPolicy::builder()
        .max_attempts(4)
        .backoff(Backoff::new(
            Duration::from_millis(100),
            2.0,
            Duration::from_secs(1),
        )?)
        .jitter(Jitter::Equal)
        .lease(Duration::from_secs(3))
        .attempt_timeout(Duration::from_secs(2))
        .build()?;
    let receipt = |order: u64, restaurant: &str, scenario: &str| {
        NewJob::new(
            "emails",
            "send_receipt",
            serde_json::json!({ "order": order, "restaurant": restaurant, "scenario": scenario }),
        )
        .with_correlation_id(format!("order-{order}"))
    };
    let jobs = vec![
        receipt(1, "Chez Paul", "ok"),
        receipt(2, "Chez Paul", "flaky"),
        receipt(3, "Chez Paul", "rate_limited"),
        receipt(4, "Café Ünï", "ok"),
        receipt(5, "Chez Paul", "not_yet"),
        receipt(6, "Chez Paul", "refunded"),
        receipt(7, "Chez Paul", "crash"),
        receipt(8, "Chez Paul", "slow"),
        NewJob::new(
            "emails",
            "send_receipt",
            serde_json::json!({ "order": "nine" }),
        ),
        NewJob::new("emails", "send_invoice", serde_json::json!({})),
    ];
    // Stored once: every door and every worker of this database reads it.
    client.set_policy(PolicyScope::Default, policy).await?;
    client.enqueue_many(jobs).await?;

    let provider = Arc::new(FlakyProvider {
        calls: AtomicU32::new(0),
    });
    let worker = client
        .worker()
        .queue("emails", 4)
        .poll_interval(Duration::from_millis(50))
        .shutdown_grace(Duration::from_secs(1))
        .handler_fn("send_receipt", move |ctx: JobContext, receipt: Receipt| {
            send_receipt(ctx, receipt, provider.clone())
        })
        .build()?;
    let shutdown = worker.shutdown_handle();
    let running = tokio::spawn(worker.run());

    // Wait (polling, with a deadline) until every receipt has an answer.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let jobs = client.jobs(JobFilter::default(), None, 100).await?;
        if jobs.iter().all(|j| j.status.is_terminal()) || tokio::time::Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    shutdown.shutdown();
    running.await??;

    println!(
        "\n{:<4} {:<10} {:<9} {:<20} last error",
        "id", "status", "attempts", "dead reason"
    );
    for id in 1..=10 {
        let Some(job) = client.job(id).await? else {
            continue;
        };
        println!(
            "{:<4} {:<10} {:<9} {:<20} {}",
            job.id,
            job.status.to_string(),
            format!("{}/{}", job.attempts, job.max_attempts),
            job.dead_reason.map(|r| r.to_string()).unwrap_or_default(),
            job.last_error
                .map(|e| format!("[{}] {}", e.class, e.message))
                .unwrap_or_default()
        );
    }
    Ok(())
}
