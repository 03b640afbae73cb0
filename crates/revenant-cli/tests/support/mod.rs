//! What the `revenant work` tests share: a throwaway SQLite database the binary runs
//! against, and worker processes that stop with the test.

// Each test file uses a different part of this module.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// A SQLite file in a temporary directory, and the `revenant` binary pointed at it.
pub struct Db {
    pub dir: tempfile::TempDir,
    pub url: String,
}

impl Db {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let path: PathBuf = dir.path().join("revenant.db");
        Db {
            url: format!("sqlite://{}", path.display()),
            dir,
        }
    }

    /// `revenant ARGS` against this database, not yet started.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_revenant"));
        command
            .args(args)
            .env("REVENANT_DATABASE_URL", &self.url)
            .env_remove("REVENANT_LOG");
        command
    }

    pub fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().expect("run revenant")
    }

    /// Standard output of a command that must succeed.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).expect("utf-8 output")
    }

    pub fn ok_json(&self, args: &[&str]) -> Value {
        let text = self.ok(args);
        serde_json::from_str(&text)
            .unwrap_or_else(|err| panic!("{args:?} printed no JSON ({err}): {text}"))
    }

    /// A command that must exit `code` with `mentions` in its standard error.
    pub fn fails(&self, args: &[&str], code: i32, mentions: &str) {
        let out = self.run(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{args:?}: {stderr}");
        assert!(
            stderr.contains(mentions),
            "{args:?}: stderr should mention {mentions:?}: {stderr}"
        );
    }

    /// Enqueues one job of `kind` on queue `q`; returns its id as printed.
    pub fn enqueue(&self, kind: &str, payload: Value) -> String {
        let job = self.ok_json(&[
            "enqueue",
            "--queue",
            "q",
            "--kind",
            kind,
            "--payload",
            &payload.to_string(),
            "--json",
        ]);
        job["id"].to_string()
    }

    /// Polls `jobs show` until the job is finished, or panics after a generous bound.
    pub fn wait_finished(&self, id: &str) -> Value {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let job = self.ok_json(&["jobs", "show", id, "--json"]);
            if matches!(
                job["status"].as_str(),
                Some("dead" | "completed" | "cancelled")
            ) {
                return job;
            }
            assert!(
                Instant::now() < deadline,
                "job {id} still {} after 60 s: {job}",
                job["status"]
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Db {
    /// `revenant work` on queue `q` with the breaker off and loopback allowed as an
    /// `http` destination (so `127.0.0.1:9` stays a refused connection, transient, not a
    /// destination the outbound policy refuses, permanent); output discarded.
    pub fn loopback_worker(&self) -> Worker {
        Worker(
            self.command(&[
                "work",
                "-q",
                "q",
                "--no-breaker",
                "--allow-net",
                "127.0.0.1/32",
            ])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start revenant work"),
        )
    }
}

/// A `revenant work` process, killed when dropped (the test's checks are done by then;
/// leases it held do not matter to a throwaway database).
pub struct Worker(pub Child);

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A running `revenant serve`, killed when dropped.
pub struct Server {
    pub child: Child,
    pub base: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `revenant serve` on port 0 of `listen_ip` and reads the bound address from
/// its banner.
pub fn serve(db: &Path, listen_ip: &str, tokens: &str) -> Server {
    let mut child = Command::new(env!("CARGO_BIN_EXE_revenant"));
    child
        .env_remove("REVENANT_SERVER_CONFIG")
        .env_remove("REVENANT_ALERTS")
        .env_remove("REVENANT_LISTEN")
        .env_remove("REVENANT_LOG");
    let mut child = child
        .arg("--database-url")
        .arg(format!("sqlite://{}", db.display()))
        .args(["serve", "--listen", &format!("{listen_ip}:0")])
        .env("REVENANT_TOKENS", tokens)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start revenant serve");
    let stderr = child.stderr.take().expect("stderr");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let line = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("revenant serve printed its banner");
    let addr = line
        .split("listening on http://")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("no address in {line:?}"));
    let port = addr.rsplit(':').next().expect("a port");
    Server {
        child,
        base: format!("http://127.0.0.1:{port}"),
    }
}
