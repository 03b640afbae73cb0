//! The raw-SQL ceiling: revenant's own tables (created by revenant's migrations, so the
//! same columns, indexes and constraints), driven by bare statements with no library
//! around them: one `UPDATE ... WHERE id IN (SELECT ... LIMIT n [FOR UPDATE SKIP
//! LOCKED]) RETURNING` to claim `--concurrency` jobs, one `UPDATE` to complete them,
//! each its own transaction, in a loop on one connection. The statements are the
//! `.sql` files beside this one.
//!
//! No handler, no heartbeat, no error history, no group rule, no paused-queue check,
//! no expired-lease reclaim, no wake-ups: the least a claim-and-complete queue must do.
//!
//! `--complete` (PostgreSQL) measures what keeping completed jobs costs: the completion
//! keeps the row as `completed` (revenant's, the default), deletes it (a queue that
//! keeps nothing), or moves it to an insert-only table of finished jobs.

use std::str::FromStr;
use std::time::{Duration, Instant};

use serde_json::json;
use sqlx::postgres::PgPoolOptions;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::Row;

use crate::protocol::{self, Io, Progress};
use crate::{Args, CompleteBy};

type Error = Box<dyn std::error::Error + Send + Sync>;

const KIND: &str = "noop";

mod pg {
    pub const ENQUEUE_ONE: &str = include_str!("postgres/enqueue_one.sql");
    pub const ENQUEUE_MANY: &str = include_str!("postgres/enqueue_many.sql");
    pub const CLAIM: &str = include_str!("postgres/claim.sql");
    pub const COMPLETE: &str = include_str!("postgres/complete.sql");
    pub const COMPLETE_DELETE: &str = include_str!("postgres/complete_delete.sql");
    pub const COMPLETE_MOVE: &str = include_str!("postgres/complete_move.sql");
    pub const JOBS_DONE: &str = include_str!("postgres/jobs_done.sql");
}

mod lite {
    pub const ENQUEUE_ONE: &str = include_str!("sqlite/enqueue_one.sql");
    pub const ENQUEUE_MANY: &str = include_str!("sqlite/enqueue_many.sql");
    pub const CLAIM: &str = include_str!("sqlite/claim.sql");
    pub const COMPLETE: &str = include_str!("sqlite/complete.sql");
}

/// One connection to the database (also the revenant driver's, for its count queries).
pub enum Conn {
    Pg(sqlx::PgPool),
    Sqlite(sqlx::SqlitePool),
}

/// One connection to `url`, with revenant's tables in place.
async fn open(args: &Args) -> Result<Conn, Error> {
    // Setup only: revenant's migrations create the tables the statements run on.
    drop(revenant::connect(&args.url).await?);
    connect(&args.url).await
}

/// One bare connection to `url`, no migrations.
pub async fn connect(url: &str) -> Result<Conn, Error> {
    match revenant::Backend::from_url(url)? {
        revenant::Backend::Postgres => Ok(Conn::Pg(
            PgPoolOptions::new().max_connections(1).connect(url).await?,
        )),
        revenant::Backend::Sqlite => {
            // The same settings as revenant's SQLite store: WAL, synchronous = FULL.
            let options = SqliteConnectOptions::from_str(url)?
                .journal_mode(SqliteJournalMode::Wal)
                .synchronous(SqliteSynchronous::Full)
                .busy_timeout(Duration::from_secs(5));
            Ok(Conn::Sqlite(
                SqlitePoolOptions::new()
                    .max_connections(1)
                    .connect_with(options)
                    .await?,
            ))
        }
    }
}

/// `ANALYZE` on a PostgreSQL database (nothing on SQLite): what the harness runs after
/// every bulk enqueue, for the drivers that enqueue and drain in one task (W2).
pub async fn analyze(url: &str) -> Result<(), Error> {
    if revenant::Backend::from_url(url)? == revenant::Backend::Postgres {
        let pool = PgPoolOptions::new().max_connections(1).connect(url).await?;
        sqlx::query("ANALYZE").execute(&pool).await?;
        pool.close().await;
    }
    Ok(())
}

/// The batched ceiling's claim size: hundreds per statement, whatever the slots (the
/// shape of a fetcher with a local queue, graphile-worker's `localQueue.size: 500`).
pub const BATCH_CLAIM: usize = 500;

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// `enqueue`: `--jobs` rows, one statement per `--batch`.
pub async fn enqueue(args: &Args) -> Result<serde_json::Value, Error> {
    let conn = open(args).await?;
    let deadline = args.deadline();
    let mut progress = Progress::new(args.jobs as u64);
    let batch = args.batch.max(1);
    let started = Instant::now();
    let mut done = 0;
    while done < args.jobs && tokio::time::Instant::now() < deadline {
        let n = batch.min(args.jobs - done);
        match (&conn, n) {
            (Conn::Pg(pool), 1) => {
                sqlx::query(pg::ENQUEUE_ONE)
                    .bind(&args.queue)
                    .bind(KIND)
                    .bind("{}")
                    .bind(3_i32)
                    .execute(pool)
                    .await?;
            }
            (Conn::Pg(pool), n) => {
                sqlx::query(pg::ENQUEUE_MANY)
                    .bind(&args.queue)
                    .bind(KIND)
                    .bind(vec!["{}"; n])
                    .bind(3_i32)
                    .execute(pool)
                    .await?;
            }
            (Conn::Sqlite(pool), 1) => {
                sqlx::query(lite::ENQUEUE_ONE)
                    .bind(&args.queue)
                    .bind(KIND)
                    .bind("{}")
                    .bind(3_i64)
                    .bind(now_ms())
                    .execute(pool)
                    .await?;
            }
            (Conn::Sqlite(pool), n) => {
                sqlx::query(lite::ENQUEUE_MANY)
                    .bind(&args.queue)
                    .bind(KIND)
                    .bind(serde_json::to_string(&vec![json!({}); n])?)
                    .bind(3_i64)
                    .bind(now_ms())
                    .execute(pool)
                    .await?;
            }
        }
        done += n;
        progress.tick(done as u64);
    }
    let seconds = started.elapsed().as_secs_f64();
    Ok(json!({
        "enqueued": done,
        "seconds": seconds,
        "per_sec": done as f64 / seconds,
        "partial": done < args.jobs,
    }))
}

/// `drain`: claim up to `--concurrency` (the batched ceiling: at least [`BATCH_CLAIM`]),
/// complete what was claimed in one statement, until a claim comes back empty.
pub async fn drain(args: &Args, batched: bool) -> Result<serde_json::Value, Error> {
    let conn = open(args).await?;
    let complete = match (&conn, args.complete) {
        (Conn::Pg(_), CompleteBy::Update) => pg::COMPLETE,
        (Conn::Pg(_), CompleteBy::Delete) => pg::COMPLETE_DELETE,
        (Conn::Pg(pool), CompleteBy::Move) => {
            sqlx::raw_sql(pg::JOBS_DONE).execute(pool).await?;
            pg::COMPLETE_MOVE
        }
        (Conn::Sqlite(_), CompleteBy::Update) => lite::COMPLETE,
        (Conn::Sqlite(_), other) => {
            return Err(format!(
                "--complete {} is measured on PostgreSQL only",
                other.as_str()
            )
            .into());
        }
    };
    let deadline = args.deadline();
    let mut progress = Progress::new(args.jobs as u64);
    let worker = format!("ceiling-{}", std::process::id());
    let claim = if batched {
        args.concurrency.max(BATCH_CLAIM)
    } else {
        args.concurrency.max(1)
    };
    let limit = i64::try_from(claim).unwrap_or(i64::MAX);
    let io = Io::now();
    let started_at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_secs_f64();
    let started = Instant::now();
    let mut done = 0_u64;
    while tokio::time::Instant::now() < deadline {
        let claimed = match &conn {
            Conn::Pg(pool) => {
                let rows = sqlx::query(pg::CLAIM)
                    .bind(&args.queue)
                    .bind(&worker)
                    .bind(limit)
                    .fetch_all(pool)
                    .await?;
                let (ids, tokens): (Vec<i64>, Vec<i64>) = rows
                    .iter()
                    .map(|r| (r.get::<i64, _>(0), r.get::<i64, _>(1)))
                    .unzip();
                if !ids.is_empty() {
                    sqlx::query(complete)
                        .bind(&ids)
                        .bind(&tokens)
                        .execute(pool)
                        .await?;
                }
                ids.len()
            }
            Conn::Sqlite(pool) => {
                let now = now_ms();
                let rows = sqlx::query(lite::CLAIM)
                    .bind(&args.queue)
                    .bind(&worker)
                    .bind(limit)
                    .bind(now)
                    .bind(now + 60_000)
                    .fetch_all(pool)
                    .await?;
                let pairs: Vec<(i64, i64)> = rows
                    .iter()
                    .map(|r| (r.get::<i64, _>(0), r.get::<i64, _>(1)))
                    .collect();
                if !pairs.is_empty() {
                    sqlx::query(complete)
                        .bind(serde_json::to_string(&pairs)?)
                        .bind(now_ms())
                        .execute(pool)
                        .await?;
                }
                pairs.len()
            }
        };
        if claimed == 0 {
            break;
        }
        done += claimed as u64;
        progress.tick(done);
    }
    let seconds = started.elapsed().as_secs_f64();
    Ok(protocol::merge(
        json!({
            "completed": done,
            "seconds": seconds,
            "per_sec": done as f64 / seconds,
            "started_at": started_at,
            "ended_at": started_at + seconds,
            "partial": done < args.jobs as u64,
            "polls": 0,
            "settings": {
                "claim_per_statement": claim,
                "complete_per_statement": claim,
                "complete": args.complete.as_str(),
                "allocator": crate::ALLOCATOR_NAME,
            },
        }),
        Io::now().since(io),
    ))
}
