//! The Grafana dashboard (`docs/grafana/revenant.json`) queries only metrics that exist:
//! a real `revenant serve` and a real `revenant work --metrics-addr` on one SQLite file,
//! a job that dies, then every PromQL expression of the dashboard (and of its template
//! variables) checked against the metric names the two scrapes show. Also: a first
//! scrape is never empty (`revenant_build_info`, the counters at zero).

mod support;

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::Value;
use support::Db;

/// A child process killed when dropped, with its standard error lines.
struct Process {
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl Process {
    fn start(db: &Db, args: &[&str]) -> Process {
        let mut child = db
            .command(args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start revenant");
        let stderr = child.stderr.take().expect("stderr");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        Process { child, lines }
    }

    /// The first `host:port` after `marker` in a standard error line (30 s at most).
    fn address_after(&self, marker: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(30);
        while let Ok(line) = self
            .lines
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
        {
            if let Some(rest) = line.split(marker).nth(1) {
                let addr = rest.split(['/', ' ']).next().expect("an address");
                return addr.to_string();
            }
        }
        panic!("no line with {marker:?} within 30 s");
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `GET /metrics` from `addr`: the body.
fn scrape(addr: &str) -> String {
    let mut stream = TcpStream::connect(addr).expect("connect to /metrics");
    write!(
        stream,
        "GET /metrics HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).expect("read /metrics");
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    response
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_string())
        .unwrap_or_default()
}

/// The sample names of an exposition (`revenant_job_run_seconds_bucket`, ...).
fn sample_names(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter(|line| !line.starts_with('#') && !line.trim().is_empty())
        .filter_map(|line| line.split(['{', ' ']).next())
        .map(str::to_string)
        .collect()
}

/// Every `revenant_*` name in a PromQL expression.
fn metric_names(expr: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = expr;
    while let Some(at) = rest.find("revenant_") {
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        names.push(tail[..end].to_string());
        rest = &tail[end..];
    }
    names
}

/// Every PromQL expression of the dashboard: panel targets and template variables.
fn expressions(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (key, item) in map {
                match (key.as_str(), item) {
                    ("expr" | "definition" | "query", Value::String(text)) => {
                        out.push(text.clone());
                    }
                    _ => expressions(item, out),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|item| expressions(item, out)),
        _ => {}
    }
}

fn dashboard() -> Value {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/grafana/revenant.json"
    );
    let text = std::fs::read_to_string(path).expect("docs/grafana/revenant.json");
    serde_json::from_str(&text).expect("the dashboard is JSON")
}

#[test]
fn every_dashboard_query_names_metrics_a_real_scrape_shows() {
    let db = Db::new();
    db.ok_json(&["enqueue", "-q", "q", "-k", "nobody_handles_this", "--json"]);
    let server = Process::start(&db, &["serve", "--listen", "127.0.0.1:0"]);
    let server_addr = server.address_after("listening on http://");
    let worker = Process::start(
        &db,
        &[
            "work",
            "-q",
            "q",
            "--metrics-addr",
            "127.0.0.1:0",
            "--metrics-interval",
            "100ms",
        ],
    );
    let worker_addr = worker.address_after("metrics: http://");

    // Before any job is settled, neither scrape is empty.
    let first = scrape(&server_addr);
    assert!(
        first.contains("revenant_build_info{version=\"") && first.contains("backend=\"sqlite\"} 1"),
        "{first}"
    );
    assert!(
        first.contains(
            "revenant_http_requests_total{route=\"/v1/jobs\",method=\"POST\",status=\"2xx\"} 0"
        ),
        "{first}"
    );

    // The job dies (no handler for its kind); wait until the worker counted it.
    let deadline = Instant::now() + Duration::from_secs(60);
    let worker_text = loop {
        let text = scrape(&worker_addr);
        if text.contains("revenant_dead_letters_total{queue=\"q\",kind=\"nobody_handles_this\"") {
            break text;
        }
        assert!(
            Instant::now() < deadline,
            "no dead letter counted in 60 s:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    // The worker's counters for the kinds it handles were there at zero.
    assert!(
        worker_text.contains(
            "revenant_dead_letters_total{queue=\"q\",kind=\"http\",reason=\"permanent\"} 0"
        ),
        "{worker_text}"
    );
    assert!(
        worker_text.contains("revenant_build_info{"),
        "{worker_text}"
    );
    // The server's second scrape has the first one's request in its histogram.
    let server_text = scrape(&server_addr);
    assert!(
        server_text.contains(
            "revenant_http_requests_total{route=\"/metrics\",method=\"GET\",status=\"2xx\"} 1"
        ),
        "{server_text}"
    );

    let mut shown = sample_names(&server_text);
    shown.extend(sample_names(&worker_text));
    let mut exprs = Vec::new();
    expressions(&dashboard(), &mut exprs);
    let named: Vec<(String, String)> = exprs
        .iter()
        .flat_map(|expr| {
            metric_names(expr)
                .into_iter()
                .map(move |n| (n, expr.clone()))
        })
        .collect();
    assert!(
        named.len() >= 10,
        "the dashboard queries too little: {exprs:?}"
    );
    for (name, expr) in &named {
        assert!(
            shown.contains(name),
            "{name} (in {expr:?}) is not in a scrape of revenant serve and revenant work: {shown:?}"
        );
    }
}

#[test]
fn metric_names_are_read_from_promql() {
    assert_eq!(
        metric_names("histogram_quantile(0.95, sum by (le) (rate(revenant_job_run_seconds_bucket{queue=~\"$queue\"}[$__rate_interval]))) / revenant_x"),
        vec!["revenant_job_run_seconds_bucket", "revenant_x"]
    );
    assert!(metric_names("up").is_empty());
}
