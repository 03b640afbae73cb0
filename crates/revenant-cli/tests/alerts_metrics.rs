//! Alerts and metrics as an operator meets them: a real `revenant work` process on a
//! real SQLite file, a webhook receiver on loopback, `revenant check` exit codes, and
//! `/metrics` beside `revenant stats --json`.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

struct Db {
    dir: tempfile::TempDir,
    url: String,
}

impl Db {
    fn new() -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let url = format!("sqlite://{}", dir.path().join("revenant.db").display());
        Db { dir, url }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_revenant"));
        command
            .args(args)
            .env("REVENANT_DATABASE_URL", &self.url)
            .env_remove("REVENANT_LOG")
            .env_remove("REVENANT_ALERTS");
        command
    }

    fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().expect("run revenant")
    }

    fn ok_json(&self, args: &[&str]) -> Value {
        let out = self.run(args);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).expect("JSON")
    }

    fn exit_code(&self, args: &[&str]) -> i32 {
        let out = self.run(args);
        out.status.code().expect("an exit code")
    }

    /// Starts `revenant work` with `args`; returns the child and its stderr lines as
    /// they come.
    fn worker(&self, args: &[&str]) -> Worker {
        let mut child = self
            .command(&[&["work"], args].concat())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start revenant work");
        let lines = Arc::new(Mutex::new(Vec::<String>::new()));
        let stderr = child.stderr.take().unwrap();
        let sink = lines.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                sink.lock().unwrap().push(line);
            }
        });
        Worker { child, lines }
    }
}

struct Worker {
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
}

impl Worker {
    /// Waits for a stderr line starting with `prefix`; returns the rest of it.
    fn line_after(&mut self, prefix: &str) -> String {
        wait_until(&format!("the worker to print {prefix:?}"), || {
            self.lines
                .lock()
                .unwrap()
                .iter()
                .find_map(|l| l.strip_prefix(prefix).map(str::to_string))
        })
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Polls `probe` every 50 ms until it gives a value; panics after 30 s.
fn wait_until<T>(what: &str, mut probe: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(value) = probe() {
            return value;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A webhook receiver on loopback: answers 200 to every POST and keeps the bodies.
struct Receiver {
    url: String,
    bodies: Arc<Mutex<Vec<Value>>>,
}

impl Receiver {
    fn start() -> Self {
        Self::failing_first(0)
    }

    /// A receiver that answers 500 to its first `failures` requests.
    fn failing_first(failures: usize) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the receiver");
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        let bodies = Arc::new(Mutex::new(Vec::new()));
        let sink = bodies.clone();
        std::thread::spawn(move || {
            for (n, stream) in listener.incoming().enumerate() {
                let Ok(stream) = stream else { continue };
                if let Some(body) = read_request(stream, n >= failures) {
                    sink.lock().unwrap().push(body);
                }
            }
        });
        Receiver { url, bodies }
    }

    fn bodies(&self) -> Vec<Value> {
        self.bodies.lock().unwrap().clone()
    }
}

/// Reads one HTTP/1.1 request, answers 200 (or 500 unless `ok`) and closes; returns
/// its JSON body.
fn read_request(mut stream: TcpStream, ok: bool) -> Option<Value> {
    let mut reader = BufReader::new(stream.try_clone().ok()?);
    let mut length = 0usize;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).ok()? == 0 {
            return None;
        }
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(':') {
            if name.eq_ignore_ascii_case("content-length") {
                length = value.trim().parse().ok()?;
            }
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).ok()?;
    let status = if ok {
        "200 OK"
    } else {
        "500 Internal Server Error"
    };
    let _ = write!(
        stream,
        "HTTP/1.1 {status}\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok"
    );
    serde_json::from_slice(&body).ok()
}

/// `GET /metrics` from `addr`, as text.
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
}

/// The value of `name{queue="<queue>"}` in an exposition, if present.
fn gauge(text: &str, name: &str, queue: &str) -> Option<f64> {
    let prefix = format!("{name}{{queue=\"{queue}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .map(|v| v.trim().parse().expect("a number"))
}

fn write(path: &Path, text: &str) {
    std::fs::write(path, text).expect("write a file");
}

/// An exec job that fails permanently (exit 1) until `flag` exists.
fn enqueue_until_fixed(db: &Db, queue: &str, flag: &Path) -> i64 {
    let payload = serde_json::json!({
        "command": "sh",
        "args": ["-c", format!("test -e '{}'", flag.display())],
    });
    db.ok_json(&[
        "enqueue",
        "--queue",
        queue,
        "--kind",
        "exec",
        "--payload",
        &payload.to_string(),
        "--json",
    ])["id"]
        .as_i64()
        .expect("id")
}

#[test]
fn a_critical_queue_alerts_once_resolves_after_the_redrive_and_check_follows() {
    let db = Db::new();
    let receiver = Receiver::start();
    let rules = db.path("alerts.toml");
    write(
        &rules,
        &format!(
            "interval = \"100ms\"\n[queues.payments]\ncritical = true\n[webhook]\nurl = \"{}\"\n",
            receiver.url
        ),
    );
    let rules = rules.to_str().unwrap();
    let flag = db.path("fixed");
    let mut worker = db.worker(&["-q", "payments", "--allow-exec", "sh", "--alerts", rules]);
    worker.line_after("alerts: ");
    assert_eq!(
        db.exit_code(&["check", "--alerts", rules]),
        0,
        "nothing dead yet"
    );

    let id = enqueue_until_fixed(&db, "payments", &flag);
    let first = wait_until("the firing message", || receiver.bodies().first().cloned());
    assert_eq!(first["state"], "firing");
    assert_eq!(first["severity"], "critical");
    assert_eq!(first["queue"], "payments");
    assert_eq!(first["rule"], "dead_above");
    assert_eq!(first["value"], 1);
    assert_eq!(first["threshold"], 0);
    assert_eq!(
        first["text"],
        "[CRITICAL] revenant: queue payments: 1 dead job (alert above 0)"
    );
    assert_eq!(db.exit_code(&["check", "--alerts", rules]), 2, "critical");

    // Twenty evaluations later (100 ms apart), still one message: not a flood.
    // (A wait for something not to happen can only be a wait.)
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(receiver.bodies().len(), 1, "{:?}", receiver.bodies());

    write(&flag, "");
    db.ok_json(&["dead", "redrive", &id.to_string(), "--json"]);
    let resolved = wait_until("the resolved message", || receiver.bodies().get(1).cloned());
    assert_eq!(resolved["state"], "resolved");
    assert_eq!(resolved["queue"], "payments");
    assert_eq!(resolved["rule"], "dead_above");
    assert_eq!(resolved["value"], 0);
    assert!(resolved["text"].as_str().unwrap().starts_with("[RESOLVED]"));
    wait_until("the redriven job to complete", || {
        let job = db.ok_json(&["jobs", "show", &id.to_string(), "--json"]);
        (job["status"] == "completed").then_some(())
    });
    assert_eq!(
        db.exit_code(&["check", "--alerts", rules]),
        0,
        "OK after the redrive"
    );
    assert_eq!(receiver.bodies().len(), 2);
}

#[test]
fn check_exits_1_on_warnings_and_3_when_it_cannot_run() {
    let db = Db::new();
    // Built-in rules: due jobs with no worker alive is a warning.
    db.ok_json(&["enqueue", "-q", "emails", "-k", "x", "--json"]);
    let out = db.run(&["check", "--json"]);
    assert_eq!(out.status.code(), Some(1));
    let report: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(report["status"], "warning");
    assert_eq!(report["alerts"][0]["rule"], "no_workers");

    let rules = db.path("bad.toml");
    write(&rules, "[queues.emails]\noldest_due_abov = \"5m\"\n");
    let out = db.run(&["check", "--alerts", rules.to_str().unwrap()]);
    assert_eq!(
        out.status.code(),
        Some(3),
        "a bad rules file is unknown, not critical"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("queues.emails.oldest_due_abov"), "{stderr}");
    assert_eq!(db.exit_code(&["check", "--no-such-flag"]), 3, "bad usage");
    assert_eq!(
        db.exit_code(&["check", "--alerts", "/no/such/file.toml"]),
        3
    );
    assert_eq!(db.exit_code(&["check", "--help"]), 0);
}

#[test]
fn metrics_served_by_a_worker_match_stats_json() {
    let db = Db::new();
    // A stable state: `later` is paused with three jobs waiting, `payments` has one
    // job that dies at once (no handler for its kind).
    for _ in 0..3 {
        db.ok_json(&["enqueue", "-q", "later", "-k", "http", "--json"]);
    }
    db.ok_json(&["queues", "pause", "later", "--json"]);
    db.ok_json(&[
        "enqueue",
        "-q",
        "payments",
        "-k",
        "nobody_handles_this",
        "--json",
    ]);

    let mut worker = db.worker(&[
        "-q",
        "later",
        "-q",
        "payments",
        "--metrics-addr",
        "127.0.0.1:0",
        "--metrics-interval",
        "100ms",
    ]);
    let url = worker.line_after("metrics: ");
    let addr = url
        .strip_prefix("http://")
        .and_then(|rest| rest.strip_suffix("/metrics"))
        .expect("http://ADDR/metrics")
        .to_string();
    let text = wait_until("the gauges to show the dead job", || {
        let text = scrape(&addr);
        (gauge(&text, "revenant_queue_dead_jobs", "payments") == Some(1.0)).then_some(text)
    });
    let stats = db.ok_json(&["stats", "--json"]);
    let stats = stats.as_array().expect("one object per queue");
    for queue in ["later", "payments"] {
        let q = stats
            .iter()
            .find(|q| q["queue"] == queue)
            .expect("the queue in stats");
        for (field, metric) in [
            ("ready", "revenant_queue_ready_jobs"),
            ("dead", "revenant_queue_dead_jobs"),
            ("running", "revenant_queue_running_jobs"),
            ("workers_alive", "revenant_queue_workers_alive"),
        ] {
            assert_eq!(
                gauge(&text, metric, queue),
                q[field].as_f64(),
                "{metric} for {queue} against stats' {field}\n{text}"
            );
        }
    }
    assert_eq!(
        gauge(&text, "revenant_queue_ready_jobs", "later"),
        Some(3.0)
    );
    assert_eq!(
        gauge(&text, "revenant_queue_workers_alive", "later"),
        Some(1.0)
    );
    assert_eq!(gauge(&text, "revenant_queue_paused", "later"), Some(1.0));
    // The runtime counted the dead letter as it happened.
    assert!(
        text.contains(
            "revenant_dead_letters_total{queue=\"payments\",kind=\"nobody_handles_this\",reason=\"unknown_kind\"} 1"
        ),
        "{text}"
    );
    assert!(
        text.contains("# TYPE revenant_job_run_seconds histogram"),
        "{text}"
    );

    // `revenant metrics` prints the same gauges from the store, without a worker.
    let out = db.run(&["metrics"]);
    assert_eq!(out.status.code(), Some(0));
    let once = String::from_utf8(out.stdout).unwrap();
    assert_eq!(
        gauge(&once, "revenant_queue_dead_jobs", "payments"),
        Some(1.0)
    );
    assert_eq!(
        gauge(&once, "revenant_queue_ready_jobs", "later"),
        Some(3.0)
    );
}

#[test]
fn the_metrics_endpoint_refuses_a_public_address_unless_told() {
    let db = Db::new();
    let out = db.run(&["work", "-q", "q", "--metrics-addr", "0.0.0.0:0"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--metrics-public"), "{stderr}");
}

#[test]
fn a_webhook_that_fails_gets_the_alert_again_at_the_next_evaluation() {
    let db = Db::new();
    let receiver = Receiver::failing_first(2);
    let rules = db.path("alerts.toml");
    write(
        &rules,
        &format!(
            "interval = \"100ms\"\n[default]\ndead_above = 0\n[webhook]\nurl = \"{}\"\n",
            receiver.url
        ),
    );
    db.ok_json(&[
        "enqueue",
        "-q",
        "emails",
        "-k",
        "nobody_handles_this",
        "--json",
    ]);
    let mut worker = db.worker(&["-q", "emails", "--alerts", rules.to_str().unwrap()]);
    worker.line_after("alerts: ");
    // Two posts answered 500, then the third gets through: the same firing message.
    let bodies = wait_until("three posts", || {
        let bodies = receiver.bodies();
        (bodies.len() >= 3).then_some(bodies)
    });
    for body in &bodies[..3] {
        assert_eq!(body["state"], "firing");
        assert_eq!(body["severity"], "warning");
        assert_eq!(body["repeat"], false);
    }
    assert_eq!(bodies[0]["since"], bodies[2]["since"], "one incident");
    assert!(
        worker.child.try_wait().unwrap().is_none(),
        "the worker lives on"
    );
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(receiver.bodies().len(), 3, "delivered: no more posts");
}
