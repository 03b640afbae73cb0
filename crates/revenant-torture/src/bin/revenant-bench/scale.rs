//! `scale` (W5): revenant with a big table, then under steady load for a long time.
//!
//! 1. **Baseline**: `--baseline-jobs` jobs enqueued in bulk and drained, on a table that
//!    holds nothing else: the drain rate the big drain is compared with.
//! 2. **Big drain**: `--scheduled` jobs scheduled a week ahead and `--jobs` due jobs,
//!    enqueued in bulk into the same queue, then the due ones drained. The scheduled
//!    jobs stay in the table (and in the claim index) for the rest of the task.
//! 3. **Steady load**: for `--steady-seconds`, jobs arrive open-loop at `--steady-rate`
//!    (default: half the baseline drain), one enqueue call every 10 ms carrying the
//!    jobs due by then, on a store (a pool) of its own; the worker that drained the
//!    backlog runs them. A call that fails is counted, not fatal. Each job carries
//!    the time just before its enqueue call; the handler records its start minus that
//!    (the pickup latency), by the `--window-seconds` window it was enqueued in. At
//!    each window's end the task samples the jobs table: its size, its indexes' size,
//!    live and dead tuples and autovacuum runs (PostgreSQL), file and free pages
//!    (SQLite); and what else the machine did in the window: the server's checkpoints
//!    (PostgreSQL), and how busy the machine's CPUs were and how long they waited on
//!    I/O (Linux's `/proc/stat`; the whole machine, the server and the harness
//!    included). A window whose pickup stalls with the CPUs idle is waiting on
//!    something else than work (the disk, a lock): these say which. Completed jobs are
//!    kept (the runtime's retention is 24 h), so the table grows by every job of the
//!    load.
//!
//! With `--hold-snapshot-seconds`, a transaction of the harness's takes a snapshot a
//! third of the way into the load and holds it that long (BENCHMARKS.md's "one
//! transaction held open"): on PostgreSQL no vacuum can remove a row version that
//! snapshot may see, so dead tuples pile up in the table and the claim index until it
//! ends; on SQLite the open reader keeps checkpoints from getting past it.
//!
//! The figures: the drain rates and their ratio (issue 19's goal: at least 0.8), the
//! pickup p50/p99/max of every window, and the p99 of the first and the last sixth of
//! the load (5 minutes each of 30) and their ratio (goal: at most 1.25).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use revenant::runtime::JobContext;
use revenant::store::JobEnqueueParams;
use revenant::{NewJob, Store};
use serde_json::json;

use crate::ceiling::Conn;
use crate::driver::{self, micros, Counter, Running, KIND, POLL};
use crate::protocol::{self, Progress};
use crate::Args;

type Error = Box<dyn std::error::Error + Send + Sync>;

/// How far ahead the scheduled jobs are: past the end of any run.
const SCHEDULED_AHEAD: Duration = Duration::from_secs(7 * 24 * 3600);
/// The steady load's producer sends one enqueue call per tick.
const TICK: Duration = Duration::from_millis(10);

/// Pickup latencies (ms) by the window their job was enqueued in.
struct Windows {
    start_us: u64,
    window_us: u64,
    samples: Mutex<Vec<Vec<f32>>>,
}

impl Windows {
    /// Records one pickup. A job of the load's last tick can be sent just after the
    /// load's end; it counts in the last window.
    fn record(&self, enqueued_us: u64, started_us: u64) {
        let index = (enqueued_us.saturating_sub(self.start_us) / self.window_us) as usize;
        let ms = started_us.saturating_sub(enqueued_us) as f32 / 1000.0;
        if let Ok(mut samples) = self.samples.lock() {
            let last = samples.len().saturating_sub(1);
            if let Some(window) = samples.get_mut(index.min(last)) {
                window.push(ms);
            }
        }
    }

    fn started(&self) -> u64 {
        self.samples
            .lock()
            .map(|s| s.iter().map(|w| w.len() as u64).sum())
            .unwrap_or(0)
    }
}

/// The jobs table's size and health, sampled on the harness's own connection, with
/// the machine's CPU time since the previous sample.
struct Tables {
    conn: Conn,
    /// The CPU time at the previous sample.
    cpu: Option<CpuTimes>,
}

impl Tables {
    fn new(conn: Conn) -> Tables {
        Tables {
            conn,
            cpu: CpuTimes::read(),
        }
    }

    async fn sample(&mut self) -> Result<serde_json::Value, Error> {
        let table = self.table().await?;
        let now = CpuTimes::read();
        let before = std::mem::replace(&mut self.cpu, now);
        let Some((busy, iowait)) = now.zip(before).and_then(|(now, before)| now.since(before))
        else {
            return Ok(table);
        };
        let cpu = json!({ "cpu_busy_pct": busy, "cpu_iowait_pct": iowait });
        Ok(protocol::merge(table, cpu))
    }

    /// The server's checkpoints so far, timed and requested (PostgreSQL 17 moved them
    /// from `pg_stat_bgwriter` to `pg_stat_checkpointer`); `None` when neither answers.
    async fn checkpoints(pool: &sqlx::PgPool) -> Option<i64> {
        for query in [
            "SELECT checkpoints_timed + checkpoints_req FROM pg_stat_bgwriter",
            "SELECT num_timed + num_requested FROM pg_stat_checkpointer",
        ] {
            if let Ok(n) = sqlx::query_scalar::<_, i64>(query).fetch_one(pool).await {
                return Some(n);
            }
        }
        None
    }

    async fn table(&self) -> Result<serde_json::Value, Error> {
        match &self.conn {
            Conn::Pg(pool) => {
                let row: (i64, i64, i64, i64, i64, i64, i64, i64) = sqlx::query_as(
                    "SELECT pg_relation_size(s.relid), pg_indexes_size(s.relid),
                            pg_total_relation_size(s.relid), s.n_live_tup, s.n_dead_tup,
                            s.autovacuum_count, s.autoanalyze_count, s.vacuum_count
                     FROM pg_stat_user_tables s
                     WHERE s.relid = 'revenant.jobs'::regclass",
                )
                .fetch_one(pool)
                .await?;
                Ok(json!({
                    "table_bytes": row.0,
                    "index_bytes": row.1,
                    "total_bytes": row.2,
                    "live_tuples": row.3,
                    "dead_tuples": row.4,
                    "autovacuums": row.5,
                    "autoanalyzes": row.6,
                    // The passes revenant's maintenance ran (`job_vacuum`).
                    "vacuums": row.7,
                    "checkpoints": Self::checkpoints(pool).await,
                }))
            }
            Conn::Sqlite(pool) => {
                let row: (i64, i64) = sqlx::query_as(
                    "SELECT p.page_count * s.page_size, f.freelist_count * s.page_size
                     FROM pragma_page_count() p, pragma_page_size() s, pragma_freelist_count() f",
                )
                .fetch_one(pool)
                .await?;
                Ok(json!({ "file_bytes": row.0, "free_bytes": row.1 }))
            }
        }
    }
}

/// The machine's CPU time so far (Linux's `/proc/stat`, in clock ticks): in all, and
/// idle or waiting on I/O.
#[derive(Debug, Clone, Copy)]
struct CpuTimes {
    total: u64,
    idle: u64,
    iowait: u64,
}

impl CpuTimes {
    /// `None` where there is no `/proc/stat`.
    fn read() -> Option<CpuTimes> {
        let stat = std::fs::read_to_string("/proc/stat").ok()?;
        // cpu user nice system idle iowait irq softirq steal (guest time is counted in
        // user and nice already).
        let ticks: Vec<u64> = stat
            .lines()
            .next()?
            .split_whitespace()
            .skip(1)
            .take(8)
            .map(|t| t.parse().ok())
            .collect::<Option<_>>()?;
        Some(CpuTimes {
            total: ticks.iter().sum(),
            idle: *ticks.get(3)?,
            iowait: *ticks.get(4)?,
        })
    }

    /// The shares (%) of the CPU time since `before` that were busy and that waited
    /// on I/O; `None` when no tick passed.
    fn since(self, before: CpuTimes) -> Option<(f64, f64)> {
        let total = self.total.checked_sub(before.total).filter(|&t| t > 0)? as f64;
        let idle = self.idle.saturating_sub(before.idle) as f64;
        let iowait = self.iowait.saturating_sub(before.iowait) as f64;
        let pct = |ticks: f64| (1000.0 * ticks / total).round() / 10.0;
        Some((pct(total - idle - iowait), pct(iowait)))
    }
}

/// Holds a snapshot open for `hold` from `at`, on a connection of its own.
async fn hold_snapshot(url: String, at: tokio::time::Instant, hold: Duration) -> Result<(), Error> {
    let conn = crate::ceiling::connect(&url).await?;
    tokio::time::sleep_until(at).await;
    match &conn {
        Conn::Pg(pool) => {
            let mut tx = pool.begin().await?;
            sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                .execute(&mut *tx)
                .await?;
            sqlx::query("SELECT count(*) FROM revenant.queues")
                .execute(&mut *tx)
                .await?;
            tokio::time::sleep(hold).await;
            tx.rollback().await?;
        }
        Conn::Sqlite(pool) => {
            let mut tx = pool.begin().await?;
            sqlx::query("SELECT count(*) FROM queues")
                .execute(&mut *tx)
                .await?;
            tokio::time::sleep(hold).await;
            tx.rollback().await?;
        }
    }
    Ok(())
}

/// Enqueues `jobs` jobs, `--batch` per call, each made by `job(i)`; returns jobs/s.
async fn enqueue(
    store: &dyn Store,
    args: &Args,
    jobs: usize,
    job: impl Fn(usize) -> NewJob,
    progress: &mut Progress,
    done_before: u64,
) -> Result<f64, Error> {
    let started = Instant::now();
    let batch = args.batch.max(1);
    let mut done = 0;
    while done < jobs {
        let n = batch.min(jobs - done);
        store
            .job_enqueue(JobEnqueueParams {
                jobs: (done..done + n).map(&job).collect(),
                default_max_attempts: 3,
                now: None,
            })
            .await?;
        done += n;
        progress.tick(done_before + done as u64);
    }
    Ok(jobs as f64 / started.elapsed().as_secs_f64().max(1e-9))
}

/// Waits until no job of the queue is due and unfinished (or the deadline); returns
/// whether it got there and the seconds since `started`.
async fn wait_drained(
    counter: &Counter,
    args: &Args,
    handled: &AtomicU64,
    progress: &mut Progress,
    done_before: u64,
    started: Instant,
    deadline: tokio::time::Instant,
) -> Result<(bool, f64), Error> {
    loop {
        let left = counter.any_due_left(&args.queue).await?;
        progress.tick(done_before + handled.load(Ordering::Relaxed));
        if !left {
            return Ok((true, started.elapsed().as_secs_f64()));
        }
        if tokio::time::Instant::now() >= deadline {
            return Ok((false, started.elapsed().as_secs_f64()));
        }
        tokio::time::sleep(POLL).await;
    }
}

/// p-th percentile of unsorted values.
fn percentile(values: &mut [f32], p: f64) -> f64 {
    values.sort_by(f32::total_cmp);
    let sorted: Vec<f64> = values.iter().map(|&v| f64::from(v)).collect();
    protocol::percentile(&sorted, p)
}

/// `scale` (W5), as the module's docs say.
pub async fn scale(args: &Args) -> Result<serde_json::Value, Error> {
    let store = driver::connect(args).await?;
    // The steady load's producer has a store (a pool) of its own, as an application's
    // producers do: its calls, when the server is slow, queue for its connections, not
    // for the worker's.
    let producer = driver::connect(args).await?;
    let counter = Counter::open(&args.url).await?;
    let mut tables = Tables::new(crate::ceiling::connect(&args.url).await?);
    let deadline = args.deadline();
    let scheduled = args.scheduled.unwrap_or(args.jobs);
    // Progress until the load: every job enqueued, then every due one run.
    let total = (2 * args.baseline_jobs + scheduled + 2 * args.jobs) as u64;
    let mut progress = Progress::new(total);
    let handled = Arc::new(AtomicU64::new(0));
    let windows_slot: Arc<Mutex<Option<Arc<Windows>>>> = Arc::new(Mutex::new(None));
    let worker = |store: Arc<dyn Store>| {
        let handled = handled.clone();
        let windows_slot = windows_slot.clone();
        driver::builder(store, args)
            .handler_fn(KIND, move |_ctx: JobContext, p: serde_json::Value| {
                let started = micros();
                handled.fetch_add(1, Ordering::Relaxed);
                if let Some(enqueued) = p["t"].as_u64() {
                    if let Some(windows) = windows_slot.lock().ok().and_then(|w| w.clone()) {
                        windows.record(enqueued, started);
                    }
                }
                async { Ok(()) }
            })
            .build()
    };

    // 1. The baseline drain.
    enqueue(
        store.as_ref(),
        args,
        args.baseline_jobs,
        |_| NewJob::new(&args.queue, KIND, json!({})),
        &mut progress,
        0,
    )
    .await?;
    crate::ceiling::analyze(&args.url).await?;
    let started = Instant::now();
    let running = Running::start(worker(store.clone())?);
    let mut done = args.baseline_jobs as u64;
    let (baseline_done, baseline_seconds) = wait_drained(
        &counter,
        args,
        &handled,
        &mut progress,
        done,
        started,
        deadline,
    )
    .await?;
    running.stop().await?;
    let baseline_rate = args.baseline_jobs as f64 / baseline_seconds.max(1e-9);
    done += args.baseline_jobs as u64;

    // 2. The big table: scheduled jobs, then due ones; the due ones drained.
    let scheduled_rate = enqueue(
        store.as_ref(),
        args,
        scheduled,
        |_| NewJob::new(&args.queue, KIND, json!({})).with_delay(SCHEDULED_AHEAD),
        &mut progress,
        done,
    )
    .await?;
    done += scheduled as u64;
    let ready_rate = enqueue(
        store.as_ref(),
        args,
        args.jobs,
        |_| NewJob::new(&args.queue, KIND, json!({})),
        &mut progress,
        done,
    )
    .await?;
    done += args.jobs as u64;
    crate::ceiling::analyze(&args.url).await?;
    let table_before_drain = tables.sample().await?;
    handled.store(0, Ordering::Relaxed);
    let started = Instant::now();
    let running = Running::start(worker(store.clone())?);
    let (drain_done, drain_seconds) = wait_drained(
        &counter,
        args,
        &handled,
        &mut progress,
        done,
        started,
        deadline,
    )
    .await?;
    let drain_rate = args.jobs as f64 / drain_seconds.max(1e-9);
    let table_after_drain = tables.sample().await?;

    // 3. Steady load on the same worker.
    let rate = args.steady_rate.unwrap_or(baseline_rate / 2.0).max(1.0);
    let window = Duration::from_secs_f64(args.window_seconds.max(1.0));
    let steady = Duration::from_secs_f64(args.steady_seconds.max(0.0));
    let window_count = (steady.as_secs_f64() / window.as_secs_f64()).ceil() as usize;
    let windows = Arc::new(Windows {
        start_us: micros(),
        window_us: window.as_micros() as u64,
        samples: Mutex::new(vec![Vec::new(); window_count]),
    });
    *windows_slot.lock().map_err(|_| "poisoned")? = Some(windows.clone());
    let expected = (rate * steady.as_secs_f64()).round() as u64;
    let mut progress = Progress::new(expected);
    let load_started = tokio::time::Instant::now();
    let hold = Duration::from_secs_f64(args.hold_snapshot_seconds.max(0.0));
    let hold_at = steady / 3;
    let holder = (!hold.is_zero()).then(|| {
        tokio::spawn(hold_snapshot(
            args.url.clone(),
            load_started + hold_at,
            hold,
        ))
    });
    let mut sent = 0_u64;
    let mut calls = Vec::new();
    let mut samples = Vec::new();
    let mut next_sample = load_started + window;
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    loop {
        let now = tick.tick().await;
        if now >= deadline {
            break;
        }
        let elapsed = now.duration_since(load_started).min(steady);
        let due = ((rate * elapsed.as_secs_f64()).round() as u64).min(expected);
        if due > sent {
            let n = due - sent;
            sent = due;
            let store = producer.clone();
            let queue = args.queue.clone();
            calls.push(tokio::spawn(async move {
                let t = micros();
                let jobs = (0..n)
                    .map(|_| NewJob::new(&queue, KIND, json!({ "t": t })))
                    .collect();
                let sent = store
                    .job_enqueue(JobEnqueueParams {
                        jobs,
                        default_max_attempts: 3,
                        now: None,
                    })
                    .await;
                (n, micros().saturating_sub(t), sent)
            }));
        }
        if now >= next_sample {
            next_sample += window;
            let table = tables
                .sample()
                .await
                .unwrap_or_else(|err| json!({ "error": err.to_string() }));
            samples.push(protocol::merge(
                json!({ "at_seconds": now.duration_since(load_started).as_secs_f64() }),
                table,
            ));
        }
        progress.tick(windows.started());
        if elapsed >= steady {
            break;
        }
    }
    // What the producer got in: a call that failed (the store refused it or gave no
    // connection in time) is counted, not fatal, and its jobs are not waited for.
    let (mut enqueued, mut failed, mut slowest_call_us) = (0_u64, 0_u64, 0_u64);
    let mut enqueue_error = None;
    for call in calls {
        let (n, took_us, sent) = call.await?;
        slowest_call_us = slowest_call_us.max(took_us);
        match sent {
            Ok(_) => enqueued += n,
            Err(err) => {
                failed += n;
                enqueue_error.get_or_insert_with(|| err.to_string());
            }
        }
    }
    if let Some(holder) = holder {
        holder.await??;
    }
    // The last jobs of the load start (or the time limit passes).
    while windows.started() < enqueued && tokio::time::Instant::now() < deadline {
        progress.tick(windows.started());
        tokio::time::sleep(POLL).await;
    }
    let started_jobs = windows.started();
    running.stop().await?;
    let table_end = tables.sample().await?;

    let mut by_window = windows.samples.lock().map_err(|_| "poisoned")?.clone();
    let edge = (window_count / 6).max(1).min(window_count);
    let mut first: Vec<f32> = by_window.iter().take(edge).flatten().copied().collect();
    let mut last: Vec<f32> = by_window
        .iter()
        .skip(window_count.saturating_sub(edge))
        .flatten()
        .copied()
        .collect();
    let (p99_first, p99_last) = (percentile(&mut first, 99.0), percentile(&mut last, 99.0));
    let rows: Vec<serde_json::Value> = by_window
        .iter_mut()
        .enumerate()
        .map(|(i, w)| {
            let jobs = w.len();
            let max = w.iter().copied().fold(0.0_f32, f32::max);
            let mut row = json!({
                "window": i,
                "jobs": jobs,
                "p50_ms": percentile(w, 50.0),
                "p99_ms": percentile(w, 99.0),
                "max_ms": max,
            });
            if let Some(table) = samples.get(i) {
                row = protocol::merge(row, json!({ "table": table }));
            }
            row
        })
        .collect();
    Ok(json!({
        "baseline": {
            "jobs": args.baseline_jobs,
            "seconds": baseline_seconds,
            "per_sec": baseline_rate,
            "partial": !baseline_done,
        },
        "enqueue": {
            "scheduled": scheduled,
            "scheduled_per_sec": scheduled_rate,
            "ready": args.jobs,
            "ready_per_sec": ready_rate,
        },
        "drain": {
            "jobs": args.jobs,
            "seconds": drain_seconds,
            "per_sec": drain_rate,
            "ratio_to_baseline": drain_rate / baseline_rate.max(1e-9),
            "partial": !drain_done,
        },
        "steady": {
            "rate": rate,
            "seconds": steady.as_secs_f64(),
            "window_seconds": window.as_secs_f64(),
            "sent": sent,
            "enqueued": enqueued,
            "enqueue_failed": failed,
            "enqueue_error": enqueue_error,
            "slowest_enqueue_call_ms": slowest_call_us as f64 / 1000.0,
            "started": started_jobs,
            "partial": started_jobs < enqueued || failed > 0,
            "edge_windows": edge,
            "snapshot_held": (!hold.is_zero()).then(|| json!({
                "from_seconds": hold_at.as_secs_f64(),
                "seconds": hold.as_secs_f64(),
            })),
            "p99_first_ms": p99_first,
            "p99_last_ms": p99_last,
            "p99_last_over_first": p99_last / p99_first.max(1e-9),
            "windows": rows,
        },
        "table_before_drain": table_before_drain,
        "table_after_drain": table_after_drain,
        "table_end": table_end,
        "settings": protocol::merge(driver::settings(args), json!({
            "producer": format!("one enqueue call every {} ms with the jobs due by then, on a pool of its own", TICK.as_millis()),
            "scheduled_ahead_days": SCHEDULED_AHEAD.as_secs() / 86_400,
        })),
    }))
}

#[cfg(test)]
mod tests {
    use super::CpuTimes;

    fn times(total: u64, idle: u64, iowait: u64) -> CpuTimes {
        CpuTimes {
            total,
            idle,
            iowait,
        }
    }

    #[test]
    fn a_window_s_cpu_shares_count_only_its_own_ticks() {
        // 200 ticks in the window: 50 idle, 30 waiting on I/O, the rest busy.
        let shares = times(1_200, 450, 130).since(times(1_000, 400, 100));
        assert_eq!(shares, Some((60.0, 15.0)));
    }

    #[test]
    fn no_tick_or_a_counter_gone_back_gives_no_shares() {
        assert_eq!(times(1_000, 400, 100).since(times(1_000, 400, 100)), None);
        assert_eq!(times(900, 400, 100).since(times(1_000, 400, 100)), None);
    }

    #[test]
    fn this_machine_s_cpu_times_read_where_there_is_a_proc_stat() {
        if std::path::Path::new("/proc/stat").exists() {
            let cpu = CpuTimes::read().expect("/proc/stat's first line");
            assert!(cpu.total >= cpu.idle + cpu.iowait, "{cpu:?}");
        }
    }
}
