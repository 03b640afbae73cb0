//! A worker's statements on the connections that ran its last ones.
//!
//! sqlx's pool hands out its idle connections oldest first, and takes a connection
//! back only after pinging it, in a task of its own. A worker's claims and batch
//! writes follow each other within a millisecond, so each found the connection it had
//! just used still on its way back, and took another: a drain's statements went round
//! every connection the pool had opened (four to ten), each server process running a
//! claim or a write now and then, its caches cold, a process to wake each time, and a
//! ping's round trip on top. [`Warm`] keeps the connections that just answered one of
//! these statements and hands out the one used last first, with no ping: a drain runs
//! on as many server processes as it has statements in flight (a claim and a write,
//! two). By hand, a drain of 100,000 no-op jobs with 64 slots (`--profile tuned`, 5
//! pairs): 52,580 jobs/s before, 62,783 after (medians), the claims' statement time
//! 13.6 to 14.5 µs a job before and 12.6 to 12.9 after (`pg_stat_statements`).
//! docs/benchmarks.md, "Performance work". A release once also spawned an empty task,
//! as the pool's ping had, because that hid a stall of the runtime's timers behind a
//! handler blocking its thread; the runtime now prevents the stall itself
//! (revenant-runtime's `nudge`), and the same drain without the task, 5 pairs
//! alternated with the build that had it: 62,244 jobs/s against 59,539 (medians).
//!
//! Used for the statements a worker sends over and over (the claims, the batch writes,
//! the heartbeats); everything else takes its connection from the pool as before. A
//! connection goes back to the pool, which pings it or closes it, instead of staying
//! here:
//! - when its statement did not end with an answer: an error, or a future dropped in
//!   the middle of a statement (a cancelled claim), after which what the connection
//!   would read next is unknown;
//! - past [`KEEP`] kept connections, or half of the pool's size, so that the rest of
//!   the store, and an application sharing its pool, always have the other half;
//! - when it has waited here [`IDLE`] unused: the server or a proxy may have dropped
//!   it, and a worker with nothing to do gives its connections back;
//! - when it was taken from the pool longer ago than the pool's `max_lifetime`, which
//!   the pool applies when it comes back;
//! - when the pool is closed: `PgPool::close` waits for every connection to come back,
//!   so a task of the store's gives the kept ones back as soon as it is called
//!   (`store.pool().close().await` returns as it did).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use sqlx::pool::PoolConnection;
use sqlx::postgres::{PgArguments, PgRow};
use sqlx::query::Query;
use sqlx::{PgConnection, PgPool, Postgres};
use tokio::sync::oneshot;
use tokio::time::Instant;

/// The most connections kept. A worker has one claim in flight per queue and up to
/// three batch writes; four keep a worker of a few queues warm.
pub(crate) const KEEP: usize = 4;

/// A kept connection unused this long goes back to the pool (the pool's own threshold
/// for pinging a connection before handing it out, `PING_IF_IDLE_FOR` in store.rs).
pub(crate) const IDLE: Duration = Duration::from_secs(1);

/// The connections kept for a store's hot statements, the one used last on top.
pub(crate) struct Warm {
    pool: PgPool,
    /// Shared with the task that empties it when the pool is closed.
    kept: Arc<Mutex<Vec<Kept>>>,
    /// How many may be kept: [`KEEP`], at most half of the pool's size.
    keep: usize,
    /// The pool's `max_lifetime`.
    lifetime: Option<Duration>,
    /// Dropped with this, which ends the task that waits for the pool's closing.
    _watch: oneshot::Sender<()>,
}

struct Kept {
    conn: PoolConnection<Postgres>,
    /// When it came from the pool.
    taken: Instant,
    /// When it was last put back here.
    back: Instant,
}

/// A connection lent by [`Warm`]: back to it when dropped, if its statement answered.
struct Lent<'a> {
    conn: Option<PoolConnection<Postgres>>,
    taken: Instant,
    answered: bool,
    warm: &'a Warm,
}

impl Warm {
    /// Keeps connections of `pool`. Spawns a task (the caller is on a Tokio runtime) that
    /// gives them back when the pool is closed, and ends when this is dropped.
    pub(crate) fn new(pool: PgPool) -> Warm {
        let keep = KEEP.min(pool.options().get_max_connections() as usize / 2);
        let lifetime = pool.options().get_max_lifetime();
        let kept = Arc::new(Mutex::new(Vec::new()));
        let (watch, dropped) = oneshot::channel::<()>();
        let closed = pool.close_event();
        let emptied = Arc::clone(&kept);
        tokio::spawn(async move {
            tokio::select! {
                () = closed => {
                    // The pool marks itself closed before it says so: a connection put
                    // back after this sees it closed (put_back, under the same lock).
                    let back: Vec<Kept> = std::mem::take(&mut *lock(&emptied));
                    drop(back);
                }
                _ = dropped => {}
            }
        });
        Warm {
            pool,
            kept,
            keep,
            lifetime,
            _watch: watch,
        }
    }

    /// Runs `query` and returns its one row.
    pub(crate) async fn fetch_one(
        &self,
        query: Query<'_, Postgres, PgArguments>,
    ) -> Result<PgRow, sqlx::Error> {
        let mut lent = self.lend().await?;
        let row = query.fetch_one(lent.conn()).await?;
        lent.answered = true;
        Ok(row)
    }

    /// Runs `query` and returns its row, if any.
    pub(crate) async fn fetch_optional(
        &self,
        query: Query<'_, Postgres, PgArguments>,
    ) -> Result<Option<PgRow>, sqlx::Error> {
        let mut lent = self.lend().await?;
        let row = query.fetch_optional(lent.conn()).await?;
        lent.answered = true;
        Ok(row)
    }

    /// Runs `query` and returns its rows.
    pub(crate) async fn fetch_all(
        &self,
        query: Query<'_, Postgres, PgArguments>,
    ) -> Result<Vec<PgRow>, sqlx::Error> {
        let mut lent = self.lend().await?;
        let rows = query.fetch_all(lent.conn()).await?;
        lent.answered = true;
        Ok(rows)
    }

    /// How many connections are kept now.
    #[cfg(test)]
    pub(crate) fn kept(&self) -> usize {
        lock(&self.kept).len()
    }

    /// The connection put back last, or one from the pool.
    async fn lend(&self) -> Result<Lent<'_>, sqlx::Error> {
        let now = Instant::now();
        let (kept, stale) = {
            let mut kept = lock(&self.kept);
            // The newest is on top: when it waited too long, they all did.
            let stale = if kept.last().is_some_and(|k| now - k.back >= IDLE) {
                std::mem::take(&mut *kept)
            } else {
                Vec::new()
            };
            (kept.pop(), stale)
        };
        // Back to the pool, outside the lock.
        drop(stale);
        let (conn, taken) = match kept {
            Some(kept) => (kept.conn, kept.taken),
            None => (self.pool.acquire().await?, now),
        };
        Ok(Lent {
            conn: Some(conn),
            taken,
            answered: false,
            warm: self,
        })
    }

    /// Keeps `conn` if it may be kept; else it goes back to the pool.
    fn put_back(&self, conn: PoolConnection<Postgres>, taken: Instant) {
        let now = Instant::now();
        if self.lifetime.is_some_and(|life| now - taken >= life) {
            return;
        }
        let (refused, stale) = {
            let mut kept = lock(&self.kept);
            // The oldest are at the bottom: those that waited too long go back.
            let fresh = kept.partition_point(|k| now - k.back >= IDLE);
            let stale: Vec<Kept> = kept.drain(..fresh).collect();
            let refused = if kept.len() < self.keep && !self.pool.is_closed() {
                kept.push(Kept {
                    conn,
                    taken,
                    back: now,
                });
                None
            } else {
                Some(conn)
            };
            (refused, stale)
        };
        drop(refused);
        drop(stale);
    }
}

/// The kept connections, whatever a panic elsewhere left in them (a `Vec` of
/// connections is valid in any state).
fn lock(kept: &Mutex<Vec<Kept>>) -> std::sync::MutexGuard<'_, Vec<Kept>> {
    kept.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Lent<'_> {
    fn conn(&mut self) -> &mut PgConnection {
        self.conn.as_mut().expect("a lent connection until dropped")
    }
}

impl Drop for Lent<'_> {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take() {
            if self.answered {
                self.warm.put_back(conn, self.taken);
            }
            // Otherwise dropped here: sqlx's pool pings it before taking it back.
        }
    }
}

impl Drop for Warm {
    fn drop(&mut self) {
        let kept = std::mem::take(&mut *lock(&self.kept));
        if tokio::runtime::Handle::try_current().is_ok() {
            // Back to the pool, each in a task of sqlx's.
            return;
        }
        // A store dropped after its runtime: sqlx would spawn a task for each
        // connection going back and panic for want of a runtime. The process is
        // ending; their sockets close with it.
        for kept in kept {
            std::mem::forget(kept.conn);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sqlx::postgres::PgPoolOptions;
    use sqlx::Row;

    /// A pool of `max` connections on the test server (see the crate's docs, Tests);
    /// None, said loudly, when there is none and this is not CI.
    async fn pool(max: u32) -> Option<PgPool> {
        let url = std::env::var("REVENANT_TEST_DATABASE_URL")
            .or_else(|_| std::env::var("DATABASE_URL"))
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_string());
        match PgPoolOptions::new()
            .max_connections(max)
            .connect(&url)
            .await
        {
            Ok(pool) => Some(pool),
            Err(err) if std::env::var("CI").is_ok_and(|v| v == "true" || v == "1") => {
                panic!("no PostgreSQL at the test URL under CI: {err}")
            }
            Err(err) => {
                eprintln!("SKIPPED: no PostgreSQL at the test URL ({err})");
                None
            }
        }
    }

    async fn backend(warm: &Warm) -> i32 {
        let row = warm
            .fetch_one(sqlx::query("SELECT pg_backend_pid()"))
            .await
            .unwrap();
        row.get(0)
    }

    /// The statement after one that answered runs on the same connection, with no
    /// other connection opened; one that failed, or was dropped before its answer,
    /// leaves nothing kept (the pool takes the connection back and pings it).
    #[tokio::test]
    async fn the_next_statement_runs_where_the_last_one_answered() {
        let Some(pool) = pool(4).await else { return };
        let warm = Warm::new(pool.clone());
        let first = backend(&warm).await;
        for _ in 0..10 {
            assert_eq!(backend(&warm).await, first);
        }
        assert_eq!(warm.kept(), 1);
        assert_eq!(pool.size(), 1, "one connection served all of them");

        let failed = warm.fetch_one(sqlx::query("SELECT 1 / 0")).await;
        assert!(failed.is_err());
        assert_eq!(
            warm.kept(),
            0,
            "a connection whose statement failed is not kept"
        );

        backend(&warm).await;
        assert_eq!(warm.kept(), 1);
        let dropped = tokio::time::timeout(
            Duration::from_millis(50),
            warm.fetch_one(sqlx::query("SELECT pg_sleep(0.5)")),
        )
        .await;
        assert!(dropped.is_err(), "the sleep outlasted its timeout");
        assert_eq!(
            warm.kept(),
            0,
            "a connection dropped mid-statement is not kept"
        );
        // The pool's own connections still answer (the dropped one once its sleep ends).
        backend(&warm).await;
    }

    /// Closing the pool does not wait for the kept connections: they go back to it.
    #[tokio::test]
    async fn closing_the_pool_takes_the_kept_connections_back() {
        let Some(pool) = pool(4).await else { return };
        let warm = Warm::new(pool.clone());
        backend(&warm).await;
        assert_eq!(warm.kept(), 1);
        tokio::time::timeout(Duration::from_secs(30), pool.close())
            .await
            .expect("the pool closed with a connection kept warm");
        assert_eq!(warm.kept(), 0);
        assert!(warm.fetch_one(sqlx::query("SELECT 1")).await.is_err());
        assert_eq!(warm.kept(), 0, "nothing is kept from a closed pool");
    }

    /// At most half of the pool is kept, so the rest of the store always has the other
    /// half; connections past that go back to the pool.
    #[tokio::test]
    async fn at_most_half_the_pool_is_kept() {
        let Some(four) = pool(4).await else { return };
        let warm = Warm::new(four.clone());
        let (a, b, c) = tokio::join!(
            warm.fetch_one(sqlx::query("SELECT pg_sleep(0.05)")),
            warm.fetch_one(sqlx::query("SELECT pg_sleep(0.05)")),
            warm.fetch_one(sqlx::query("SELECT pg_sleep(0.05)")),
        );
        assert!(a.is_ok() && b.is_ok() && c.is_ok());
        assert_eq!(
            four.size(),
            3,
            "three statements at once, on three connections"
        );
        assert_eq!(warm.kept(), 2, "half of a pool of four");
        let none = Warm::new(pool(1).await.expect("the server answered just now"));
        backend(&none).await;
        assert_eq!(none.kept(), 0, "a pool of one keeps nothing back");
    }
}
