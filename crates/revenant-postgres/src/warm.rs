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
//! **Each statement where it ran before.** Of the kept connections, a statement takes
//! the one put back last among those that have run it, and the one put back last only
//! when none has. A worker's statements come in pairs and threes at once (a claim
//! beside a batch's completions and its failures), so taking the top one sent each
//! statement to each kept connection in turn, and a statement's first run on a
//! connection costs more than the next ones: sqlx prepares it there, and the server
//! process plans the function it calls (the first call of job_fail_v3 on a connection
//! took 7.5 ms, the next ones 0.3 to 0.4; by hand). In W2's failing drain on
//! PostgreSQL (50,000 jobs, 30% of attempts failing, by hand) the failures' writes took
//! 50 ms of statement time in all instead of 77 (`pg_stat_statements`, one run each),
//! and in 7 pairs alternated the drain ran at 54,463 jobs/s against 53,125 (medians;
//! 51,892 to 57,057 against 52,959 to 53,936), the clean drain at 70,467 against
//! 69,695, within its noise.
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
use sqlx::{Execute, PgConnection, PgPool, Postgres};
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
    /// The statements it has run ([`Ran`]).
    ran: Ran,
}

/// The statements a connection has run, each by the address of its text: a store's
/// statements are rendered once and live as long as the store, so an address names
/// one statement (a text at an address reused would only mislead the choice of a
/// connection, never what runs on it). A connection that has run a statement has it prepared, and the
/// server process has planned what it calls (its functions' plans are kept per
/// process: a first call of job_fail_v3 took 7.5 ms, the next ones 0.3 to 0.4, by
/// hand).
#[derive(Default)]
struct Ran(Vec<usize>);

impl Ran {
    fn has(&self, sql: &str) -> bool {
        self.0.contains(&(sql.as_ptr() as usize))
    }

    fn add(&mut self, sql: &str) {
        if !self.has(sql) {
            self.0.push(sql.as_ptr() as usize);
        }
    }
}

/// A connection lent by [`Warm`]: back to it when dropped, if its statement answered.
struct Lent<'a> {
    conn: Option<PoolConnection<Postgres>>,
    taken: Instant,
    ran: Ran,
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
        let sql = query.sql();
        let mut lent = self.lend(sql).await?;
        let row = query.fetch_one(lent.conn()).await?;
        lent.answered(sql);
        Ok(row)
    }

    /// Runs `query` and returns its row, if any.
    pub(crate) async fn fetch_optional(
        &self,
        query: Query<'_, Postgres, PgArguments>,
    ) -> Result<Option<PgRow>, sqlx::Error> {
        let sql = query.sql();
        let mut lent = self.lend(sql).await?;
        let row = query.fetch_optional(lent.conn()).await?;
        lent.answered(sql);
        Ok(row)
    }

    /// Runs `query` and returns its rows.
    pub(crate) async fn fetch_all(
        &self,
        query: Query<'_, Postgres, PgArguments>,
    ) -> Result<Vec<PgRow>, sqlx::Error> {
        let sql = query.sql();
        let mut lent = self.lend(sql).await?;
        let rows = query.fetch_all(lent.conn()).await?;
        lent.answered(sql);
        Ok(rows)
    }

    /// How many connections are kept now.
    #[cfg(test)]
    pub(crate) fn kept(&self) -> usize {
        lock(&self.kept).len()
    }

    /// The connection put back last of those that have run `sql`, else the one put
    /// back last, else one from the pool.
    async fn lend(&self, sql: &str) -> Result<Lent<'_>, sqlx::Error> {
        let now = Instant::now();
        let (kept, stale) = {
            let mut kept = lock(&self.kept);
            // The newest is on top: when it waited too long, they all did.
            let stale = if kept.last().is_some_and(|k| now - k.back >= IDLE) {
                std::mem::take(&mut *kept)
            } else {
                Vec::new()
            };
            let at = kept.iter().rposition(|k| k.ran.has(sql));
            let lent = match at {
                Some(at) => Some(kept.remove(at)),
                None => kept.pop(),
            };
            (lent, stale)
        };
        // Back to the pool, outside the lock.
        drop(stale);
        let (conn, taken, ran) = match kept {
            Some(kept) => (kept.conn, kept.taken, kept.ran),
            None => (self.pool.acquire().await?, now, Ran::default()),
        };
        Ok(Lent {
            conn: Some(conn),
            taken,
            ran,
            answered: false,
            warm: self,
        })
    }

    /// Keeps `conn` if it may be kept; else it goes back to the pool.
    fn put_back(&self, conn: PoolConnection<Postgres>, taken: Instant, ran: Ran) {
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
                    ran,
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

    /// `sql` answered on this connection: it is kept, and has run `sql`.
    fn answered(&mut self, sql: &str) {
        self.answered = true;
        self.ran.add(sql);
    }
}

impl Drop for Lent<'_> {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take() {
            if self.answered {
                self.warm
                    .put_back(conn, self.taken, std::mem::take(&mut self.ran));
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

    /// Two statements that ran at once, each on a connection of its own, go on running
    /// each on its own when they come one after the other: the connection put back
    /// last is not the one the next statement takes if another has run it before. A
    /// statement neither has run takes the one put back last.
    #[tokio::test]
    async fn a_statement_runs_on_a_connection_that_ran_it_before() {
        static CLAIM: &str = "SELECT pg_backend_pid() AS claim, pg_sleep(0.05)::text";
        static WRITE: &str = "SELECT pg_backend_pid() AS write";
        static OTHER: &str = "SELECT pg_backend_pid() AS other";
        let Some(pool) = pool(4).await else { return };
        let warm = Warm::new(pool.clone());
        let pid = |row: PgRow| row.get::<i32, _>(0);
        let (claim, write) = tokio::join!(
            warm.fetch_one(sqlx::query(CLAIM)),
            warm.fetch_one(sqlx::query(WRITE)),
        );
        let (claim, write) = (pid(claim.unwrap()), pid(write.unwrap()));
        assert_ne!(claim, write, "at once, on two connections");
        assert_eq!(warm.kept(), 2);
        for _ in 0..3 {
            let row = warm.fetch_one(sqlx::query(CLAIM)).await.unwrap();
            assert_eq!(pid(row), claim);
            let row = warm.fetch_one(sqlx::query(WRITE)).await.unwrap();
            assert_eq!(pid(row), write);
        }
        let row = warm.fetch_one(sqlx::query(OTHER)).await.unwrap();
        assert_eq!(pid(row), write, "the connection put back last");
        assert_eq!(pool.size(), 2, "no other connection was opened");
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
