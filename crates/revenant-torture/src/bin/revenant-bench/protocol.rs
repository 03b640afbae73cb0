//! What a benchmark driver says to the harness: `@progress DONE TOTAL` lines on stderr
//! while it runs (at most four a second), and one JSON object on stdout at the end.
//! Every driver of `bench/`, in any language, speaks the same.

use std::io::Write;
use std::time::{Duration, Instant};

/// Prints progress lines, at most one per 250 ms.
pub struct Progress {
    total: u64,
    last: Option<Instant>,
}

impl Progress {
    pub fn new(total: u64) -> Self {
        Progress { total, last: None }
    }

    /// Reports `done` if the last report is old enough.
    pub fn tick(&mut self, done: u64) {
        if self
            .last
            .is_some_and(|last| last.elapsed() < Duration::from_millis(250))
        {
            return;
        }
        self.last = Some(Instant::now());
        eprintln!("@progress {done} {}", self.total);
        let _ = std::io::stderr().flush();
    }
}

/// Prints the figures, one JSON line.
pub fn result(figures: &serde_json::Value) {
    println!("{figures}");
    let _ = std::io::stdout().flush();
}

/// This process's I/O counters (`/proc/self/io`): bytes passed to write calls
/// (`wchar`) and bytes sent to the storage layer (`write_bytes`). Zeros where the file
/// does not exist.
#[derive(Debug, Clone, Copy, Default)]
pub struct Io {
    pub wchar: u64,
    pub write_bytes: u64,
}

impl Io {
    pub fn now() -> Io {
        let text = std::fs::read_to_string("/proc/self/io").unwrap_or_default();
        let field = |name: &str| {
            text.lines()
                .find_map(|line| line.strip_prefix(name))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0)
        };
        Io {
            wchar: field("wchar:"),
            write_bytes: field("write_bytes:"),
        }
    }

    /// The bytes written since `earlier`, as JSON fields.
    pub fn since(self, earlier: Io) -> serde_json::Value {
        serde_json::json!({
            "io_wchar": self.wchar.saturating_sub(earlier.wchar),
            "io_write_bytes": self.write_bytes.saturating_sub(earlier.write_bytes),
        })
    }
}

/// Merges two JSON objects (fields of `extra` win).
pub fn merge(mut base: serde_json::Value, extra: serde_json::Value) -> serde_json::Value {
    if let (Some(base), serde_json::Value::Object(extra)) = (base.as_object_mut(), extra) {
        base.extend(extra);
    }
    base
}

/// p-th percentile (0..=100) of sorted values, nearest rank; 0 when empty.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}
