//! A full disk under SQLite (RELIABILITY.md test 25): the database on a small tmpfs
//! (8 MB), with 2 MB of it taken by a ballast file, while a worker process drains the
//! queue and the test enqueues batches of jobs with 2 KB payloads until the disk is
//! full. Every enqueue refused must say why (the store's error names the full disk, and
//! is retryable: `StoreError::Unavailable`, which the API answers with 503 and JSON)
//! and write nothing; every acknowledged enqueue must survive; `PRAGMA integrity_check`
//! must be ok; and once the ballast is removed, work resumes by itself: the worker,
//! which retried its writes the whole time, drains the queue, and enqueues succeed.
//!
//! Needs root (it mounts the tmpfs, and unmounts it when done, failed or not). Without
//! the permission the test is skipped loudly, or fails under `CI=true`.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use revenant::store::JobEnqueueParams;
use revenant::NewJob;
use revenant_torture::behaviour::Plan;
use revenant_torture::fleet;
use revenant_torture::ledger::{now_micros, Event};
use revenant_torture::worker::KIND;
use sqlx::{Connection, SqliteConnection};
use support::*;

const QUEUE: &str = "torture";

/// A tmpfs mounted for the test; unmounted on drop (lazily if something still holds a
/// file open on it).
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(dir: &Path, size: &str) -> Result<Tmpfs, String> {
        std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .output()
            .map_err(|e| format!("cannot run mount: {e}"))?;
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).trim().to_string());
        }
        Ok(Tmpfs(dir.to_path_buf()))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let unmounted = Command::new("umount")
            .arg(&self.0)
            .status()
            .is_ok_and(|s| s.success());
        if !unmounted {
            let _ = Command::new("umount").arg("-l").arg(&self.0).status();
        }
    }
}

async fn integrity_check(path: &Path) -> String {
    let mut conn = SqliteConnection::connect(&format!("sqlite://{}", path.display()))
        .await
        .expect("open the database file");
    let answer: String = sqlx::query_scalar("PRAGMA integrity_check")
        .fetch_one(&mut conn)
        .await
        .expect("integrity_check");
    let _ = conn.close().await;
    answer
}

fn batch(n: usize, pad: &str) -> JobEnqueueParams {
    JobEnqueueParams {
        jobs: (0..n)
            .map(|i| {
                NewJob::new(QUEUE, KIND, serde_json::json!({ "n": i, "pad": pad }))
                    .with_max_attempts(3)
            })
            .collect(),
        default_max_attempts: 3,
        now: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_refuses_enqueues_clearly_loses_nothing_and_work_resumes_when_space_returns() {
    let mut db = Db::new(Backend::Sqlite).await.expect("sqlite");
    let small = db.dir.path().join("small");
    let tmpfs = match Tmpfs::mount(&small, "8m") {
        Ok(tmpfs) => tmpfs,
        Err(why) => {
            let message = format!("cannot mount a tmpfs for the full-disk test: {why}");
            if in_ci() {
                panic!("{message} (CI=true: it must run; run the tests as root)");
            }
            eprintln!("\n!!!!!!!! SKIPPING the full-disk test: {message}\n");
            return;
        }
    };
    let path = small.join("torture.db");
    db.sqlite_at(&path);
    let ballast = small.join("ballast");
    std::fs::write(&ballast, vec![0u8; 2 << 20]).expect("write the ballast");

    let plan = Plan::new(25, "succeed:9,transient:1");
    let mut fleet = Fleet::new(&db, QUEUE, plan).await;
    fleet.spec.concurrency = 4;
    let mut workers = fleet.spawn(1);
    let pad = "x".repeat(2_000);
    let mut acked = 0;
    let mut refusals = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    let record = |ids: Vec<i64>| {
        fleet
            .driver
            .record(&Event::Enqueued {
                ids,
                max_attempts: 3,
                unique_keys: Vec::new(),
                t: now_micros(),
            })
            .expect("the driver's ledger (not on the small disk)");
    };
    // Fill the disk: a few refusals in a row, each writing nothing.
    while refusals.len() < 3 {
        assert!(
            Instant::now() < deadline,
            "8 MB never filled ({acked} jobs acknowledged)"
        );
        let before = fleet::all_jobs(fleet.store.as_ref(), QUEUE)
            .await
            .map(|jobs| jobs.len());
        match fleet.store.job_enqueue(batch(50, &pad)).await {
            Ok(done) => {
                acked += done.len();
                record(done.iter().map(|e| e.id).collect());
                refusals.clear();
            }
            Err(err) => {
                let after = fleet::all_jobs(fleet.store.as_ref(), QUEUE)
                    .await
                    .map(|jobs| jobs.len());
                if let (Ok(before), Ok(after)) = (before, after) {
                    assert_eq!(before, after, "a refused batch wrote rows: {err}");
                }
                refusals.push(err);
            }
        }
    }
    for err in &refusals {
        assert!(
            err.is_retryable() && err.to_string().contains("full"),
            "a full disk must be named, and retryable: {err}"
        );
    }
    assert_alive(&mut workers, "while the disk was full");
    let full_at = fleet::finished(fleet.store.as_ref(), QUEUE)
        .await
        .unwrap_or(0);

    // Space comes back: enqueues succeed again, the worker drains the queue.
    std::fs::remove_file(&ballast).expect("remove the ballast");
    let freed = Instant::now();
    let mut refused_after = 0;
    loop {
        match fleet.store.job_enqueue(batch(10, "")).await {
            Ok(done) => {
                acked += done.len();
                record(done.iter().map(|e| e.id).collect());
                break;
            }
            Err(err) => {
                refused_after += 1;
                assert!(
                    freed.elapsed() < Duration::from_secs(30),
                    "enqueues still refused 30 s after space came back: {err}"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    let resumed_in = freed.elapsed();
    fleet
        .wait_finished(acked, Duration::from_secs(scale(120, 600)), &workers)
        .await;
    assert_alive(&mut workers, "after space came back");
    stop_all(&mut workers).await;

    let (report, _) = fleet.check().await;
    let rows = fleet::all_jobs(fleet.store.as_ref(), QUEUE)
        .await
        .expect("read the jobs")
        .len();
    let integrity = integrity_check(&path).await;
    let measured = format!(
        "8 MB tmpfs filled with {acked} jobs acknowledged ({full_at} finished when it filled); \
         refused with \"{}\"; {rows} rows, one per acknowledged job; integrity_check {integrity}; \
         enqueues accepted again {:.0?} after space came back ({refused_after} refused \
         meanwhile), every job finished",
        refusals[0], resumed_in
    );
    summary(Summary {
        test: "25 full disk",
        backend: "sqlite",
        jobs: acked,
        faults: refusals.len(),
        fault_kind: "enqueues refused on a full disk",
        report: &report,
        measured: measured.clone(),
    });
    eprintln!("{measured}\n{report}");
    assert_eq!(integrity, "ok");
    assert_eq!(rows, acked, "{measured}");
    assert!(report.is_safe(), "{report}");
    drop(fleet);
    drop(tmpfs);
}
