//! The ledger: what happened, recorded outside the queue.
//!
//! A ledger is a directory of append-only JSON-lines files, one per process
//! (`<role>-<pid>.jsonl`). Each [`Event`] is one line, written with one `write` call on
//! a file opened with `O_APPEND` and no user-space buffer, so a `kill -9` loses at
//! most the line being written, and [`read_dir`] skips a torn last line.
//!
//! Times are microseconds since the Unix epoch on the machine's clock: every process
//! of a run shares it, so times from different files compare. A process whose clock is
//! skewed on purpose (libfaketime, RELIABILITY.md test 10) is told its skew
//! ([`set_clock_offset_micros`]) and writes machine time all the same.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

/// How far this process's clock is ahead of the machine's, in microseconds.
static CLOCK_OFFSET: AtomicI64 = AtomicI64::new(0);

/// Tells the ledger that this process's clock runs `offset` microseconds ahead of the
/// machine's (negative: behind), so [`now_micros`] subtracts it.
pub fn set_clock_offset_micros(offset: i64) {
    CLOCK_OFFSET.store(offset, Ordering::Relaxed);
}

/// Microseconds since the Unix epoch on this process's own clock, skew included.
pub fn raw_now_micros() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}

/// Microseconds since the Unix epoch on the machine's clock, now.
pub fn now_micros() -> i64 {
    raw_now_micros().saturating_sub(CLOCK_OFFSET.load(Ordering::Relaxed))
}

/// Which store call an [`Event::Ack`] records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AckOp {
    /// `job_complete`.
    Complete,
    /// `job_fail` (retry or dead).
    Fail,
    /// `job_release` (shutdown: attempt given back).
    Release,
    /// `job_snooze`.
    Snooze,
    /// `job_heartbeat`.
    Heartbeat,
}

/// What a fenced call answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AckResult {
    /// The transition was made.
    Applied,
    /// The lease was no longer ours; nothing changed.
    LeaseLost,
    /// The call failed (the runtime retries it; a later line records the retry).
    Error,
}

/// How a handler run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunResult {
    /// Returned `Ok(())`.
    Ok,
    /// Returned a retryable error.
    Transient,
    /// Returned a permanent error.
    Permanent,
}

/// Why a handler run stopped without returning.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopCause {
    /// It panicked.
    Panicked,
    /// Its future was dropped before it returned.
    Dropped,
}

/// One ledger line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "ev")]
pub enum Event {
    /// A process opened its ledger file.
    Process {
        /// The process.
        pid: u32,
        /// Its role (`worker`, `driver`).
        role: String,
        /// The worker id, for workers.
        worker: Option<String>,
        /// When.
        t: i64,
        /// When, on the process's own clock (differs from `t` only under a skew).
        #[serde(default)]
        t_raw: i64,
    },
    /// An enqueue about to be sent: jobs `first..first + count` of this producer (their
    /// payloads carry `n` and `pid`). If the process dies before the matching
    /// `enqueued` line, the call may or may not have committed.
    Enqueuing {
        /// The producing process.
        pid: u32,
        /// The first job's number.
        first: usize,
        /// How many.
        count: usize,
        /// When the call started.
        t: i64,
    },
    /// An enqueue the store acknowledged: these jobs exist.
    Enqueued {
        /// Their ids (a unique key held by an earlier job gives that job's id).
        ids: Vec<i64>,
        /// Their `max_attempts`.
        max_attempts: i32,
        /// Their unique keys, one per id, when they had them.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        unique_keys: Vec<String>,
        /// When the store answered.
        t: i64,
    },
    /// A job the store handed to this process: one attempt and its lease.
    Claimed {
        /// The job.
        job: i64,
        /// The attempt the claim counted.
        attempt: i32,
        /// The lease token.
        token: i64,
        /// The claiming process.
        pid: u32,
        /// When the claim call started.
        t0: i64,
        /// When it returned.
        t: i64,
        /// The job's `run_at` as claimed, on the database's clock (µs).
        #[serde(default)]
        run_at: i64,
        /// The claim's time on the database's clock (`attempted_at`, µs).
        #[serde(default)]
        db_t: i64,
        /// The lease's expiry the claim set, on the database's clock (µs).
        #[serde(default)]
        lease_until: i64,
    },
    /// A handler run started.
    Start {
        /// The job.
        job: i64,
        /// The attempt.
        attempt: i32,
        /// The process.
        pid: u32,
        /// The lease length the worker's policy gives, in milliseconds.
        lease_ms: u64,
        /// When.
        t: i64,
    },
    /// A handler run returned (a run that panicked or was dropped has a
    /// [`Event::Stopped`] line instead; a run killed with its process has neither).
    End {
        /// The job.
        job: i64,
        /// The attempt.
        attempt: i32,
        /// The process.
        pid: u32,
        /// How it ended.
        result: RunResult,
        /// When.
        t: i64,
    },
    /// A handler run that did not return: it panicked, or the runtime dropped its
    /// future (attempt timeout, lost lease, shutdown). Written by a guard the run
    /// holds, as it unwinds or is dropped, so the run's end is in the ledger even when
    /// the ack that followed it is not (its process killed between the store's answer
    /// and the ack's line).
    Stopped {
        /// The job.
        job: i64,
        /// The attempt.
        attempt: i32,
        /// The process.
        pid: u32,
        /// Why.
        cause: StopCause,
        /// When.
        t: i64,
    },
    /// A fenced call on one lease and its answer.
    Ack {
        /// The call.
        op: AckOp,
        /// The job.
        job: i64,
        /// The lease token it carried.
        token: i64,
        /// The answer.
        result: AckResult,
        /// The process.
        pid: u32,
        /// When the call started.
        t0: i64,
        /// When it returned.
        t: i64,
    },
}

/// One process's ledger file. Cheap to share behind an `Arc`; each line is one
/// `write` under a lock.
#[derive(Debug)]
pub struct LedgerWriter {
    file: Mutex<File>,
    path: PathBuf,
}

impl LedgerWriter {
    /// Creates `<dir>/<role>-<pid>.jsonl` (and `dir`), appending if it exists.
    pub fn create(dir: &Path, role: &str) -> std::io::Result<LedgerWriter> {
        std::fs::create_dir_all(dir)?;
        let path = dir.join(format!("{role}-{}.jsonl", std::process::id()));
        let file = OpenOptions::new().create(true).append(true).open(&path)?;
        Ok(LedgerWriter {
            file: Mutex::new(file),
            path,
        })
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends one event as one line, with one `write` call. An I/O error is returned;
    /// a worker treats it as fatal for the run (a ledger with holes proves nothing).
    pub fn record(&self, event: &Event) -> std::io::Result<()> {
        let mut line = serde_json::to_vec(event).map_err(std::io::Error::other)?;
        line.push(b'\n');
        let mut file = self.file.lock().unwrap_or_else(|p| p.into_inner());
        file.write_all(&line)
    }

    /// Like [`LedgerWriter::record`], but an I/O error ends the process with a message:
    /// for code paths (a wrapped store, a handler) that cannot return it.
    pub fn must(&self, event: &Event) {
        if let Err(err) = self.record(event) {
            eprintln!("ledger {}: write failed: {err}", self.path.display());
            std::process::exit(70);
        }
    }
}

/// Every event of every `*.jsonl` file in `dir`, file by file in name order, each file
/// in its own order. A last line cut short by a kill is skipped; a bad line elsewhere
/// is an error (the ledger is corrupt).
pub fn read_dir(dir: &Path) -> std::io::Result<Vec<Event>> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .filter(|p| p.metadata().is_ok_and(|m| m.is_file()))
        .collect();
    paths.sort();
    let mut events = Vec::new();
    for path in paths {
        let lines: Vec<String> = BufReader::new(File::open(&path)?)
            .lines()
            .collect::<Result<_, _>>()?;
        let last = lines.len().saturating_sub(1);
        for (i, line) in lines.iter().enumerate() {
            match serde_json::from_str::<Event>(line) {
                Ok(event) => events.push(event),
                Err(_) if i == last => {} // torn by a kill mid-write
                Err(err) => {
                    return Err(std::io::Error::other(format!(
                        "{}:{}: {err}",
                        path.display(),
                        i + 1
                    )))
                }
            }
        }
    }
    Ok(events)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_written_by_one_process_read_back_and_a_torn_last_line_is_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let writer = LedgerWriter::create(dir.path(), "worker").unwrap();
        let start = Event::Start {
            job: 1,
            attempt: 1,
            pid: 9,
            lease_ms: 1000,
            t: 5,
        };
        writer.record(&start).unwrap();
        {
            let mut file = OpenOptions::new().append(true).open(writer.path()).unwrap();
            file.write_all(b"{\"ev\":\"end\",\"jo").unwrap();
        }
        assert_eq!(read_dir(dir.path()).unwrap(), vec![start]);
    }
}
