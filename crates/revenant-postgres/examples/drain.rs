//! Store-level drain throughput: bulk-enqueue N no-op jobs, then drain them with P
//! independent stores (separate pools, as separate processes would have), each looping
//! claim(batch) → complete(batch). No runtime, no handlers: the ceiling the worker
//! runtime can reach on this database.
//!
//! ```text
//! cargo run --release -p revenant-postgres --example drain -- [jobs] [stores] [batch]
//! ```
//!
//! Uses `REVENANT_TEST_DATABASE_URL`, `DATABASE_URL` or the local default, in a fresh
//! schema that is dropped at the end.

use std::time::{Duration, Instant};

use revenant_core::store::{JobClaimParams, JobCompleteParams, JobEnqueueParams, LeaseRef};
use revenant_core::{NewJob, Store};
use revenant_postgres::PgStore;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| a.parse())
        .collect::<Result<_, _>>()?;
    let jobs = args.first().copied().unwrap_or(100_000);
    let stores = args.get(1).copied().unwrap_or(1);
    let batch = args.get(2).copied().unwrap_or(100);
    let url = std::env::var("REVENANT_TEST_DATABASE_URL")
        .or_else(|_| std::env::var("DATABASE_URL"))
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_string());
    let schema = format!("rv_bench_{}", std::process::id());
    let store = PgStore::connect_with_schema(&url, &schema).await?;

    let started = Instant::now();
    for chunk in (0..jobs).collect::<Vec<_>>().chunks(1000) {
        store
            .job_enqueue(JobEnqueueParams {
                jobs: chunk
                    .iter()
                    .map(|i| NewJob::new("bench", "noop", serde_json::json!({ "i": i })))
                    .collect(),
                default_max_attempts: 3,
                now: None,
            })
            .await?;
    }
    let enqueue = started.elapsed();

    let started = Instant::now();
    let mut tasks = Vec::new();
    for s in 0..stores {
        let store = PgStore::connect_with_schema(&url, &schema).await?;
        tasks.push(tokio::spawn(async move {
            let mut done = 0_usize;
            loop {
                let claimed = store
                    .job_claim(JobClaimParams {
                        queue: "bench".into(),
                        worker: format!("bench-{s}"),
                        limit: u32::try_from(batch).unwrap_or(u32::MAX),
                        lease: Duration::from_secs(60),
                        reclaim: true,
                        now: None,
                    })
                    .await
                    .expect("claim");
                if claimed.is_empty() {
                    return done;
                }
                let leases = claimed
                    .iter()
                    .map(|j| LeaseRef {
                        id: j.id,
                        lease_token: j.lease_token.expect("token"),
                    })
                    .collect();
                store
                    .job_complete(JobCompleteParams {
                        leases,
                        kept: Vec::new(),
                        now: None,
                    })
                    .await
                    .expect("complete");
                done += claimed.len();
            }
        }));
    }
    let mut completed = 0;
    for task in tasks {
        completed += task.await?;
    }
    let drain = started.elapsed();
    println!(
        "jobs={jobs} stores={stores} batch={batch}: enqueue {:.0}/s (batches of 1000), drain {:.0}/s ({completed} completed)",
        jobs as f64 / enqueue.as_secs_f64(),
        completed as f64 / drain.as_secs_f64()
    );
    sqlx::query(&format!("DROP SCHEMA \"{schema}\" CASCADE"))
        .execute(store.pool())
        .await?;
    Ok(())
}
