//! `revenant work` against a producer who controls job payloads: the built-in kinds
//! refuse what the operator did not open, and flags that cannot work stop the worker
//! at start, naming the flag.

use std::io::Read;
use std::net::TcpListener;
use std::process::Stdio;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use serde_json::Value;

mod support;

use support::{Db, Worker};

fn worker(db: &Db, extra: &[&str]) -> Worker {
    let args = [&["work", "-q", "q", "--no-breaker"], extra].concat();
    Worker(
        db.command(&args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start revenant work"),
    )
}

/// A loopback listener standing in for a service on the worker's host: it counts the
/// connections it accepts and answers each with a secret.
fn internal_service() -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(AtomicUsize::new(0));
    let count = seen.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { break };
            count.fetch_add(1, Ordering::SeqCst);
            let mut buf = [0u8; 4096];
            let _ = stream.read(&mut buf);
            use std::io::Write;
            let _ = stream.write_all(
                b"HTTP/1.1 404 Not Found\r\ncontent-length: 12\r\nconnection: close\r\n\r\nsecret=42 ok",
            );
        }
    });
    (format!("http://{addr}"), seen)
}

#[test]
fn an_http_job_to_the_workers_loopback_dies_permanent_and_sends_nothing() {
    let db = Db::new();
    let (base, seen) = internal_service();
    let id = db.enqueue(
        "http",
        serde_json::json!({ "url": format!("{base}/admin") }),
    );
    let localhost = db.enqueue(
        "http",
        serde_json::json!({ "url": format!("{}/admin", base.replace("127.0.0.1", "localhost")) }),
    );
    let _worker = worker(&db, &[]);
    for id in [id, localhost] {
        let job = db.wait_finished(&id);
        assert_eq!(job["status"], "dead", "{job}");
        assert_eq!(job["dead_reason"], "permanent", "{job}");
        let error = job["last_error"].to_string();
        assert!(error.contains("refused by the outbound policy"), "{job}");
        assert!(error.contains("--allow-net 127.0.0.1/32"), "{job}");
        assert!(!error.contains("secret"), "{job}");
    }
    assert_eq!(
        seen.load(Ordering::SeqCst),
        0,
        "a request reached the service"
    );
}

#[test]
fn allow_net_opens_the_destination_it_names() {
    let db = Db::new();
    let (base, seen) = internal_service();
    let id = db.enqueue("http", serde_json::json!({ "url": format!("{base}/hook") }));
    let _worker = worker(&db, &["--allow-net", "127.0.0.1/32"]);
    let job = db.wait_finished(&id);
    // The service answers 404: permanent, but from the service this time.
    assert_eq!(job["status"], "dead", "{job}");
    assert!(job["last_error"].to_string().contains("HTTP 404"), "{job}");
    assert_eq!(seen.load(Ordering::SeqCst), 1);
}

#[test]
fn an_exec_job_cannot_set_ld_preload_or_a_cwd_the_worker_did_not_allow() {
    let db = Db::new();
    let marker = db.dir.path().join("ran");
    let touch = |extra: Value| {
        let mut payload = serde_json::json!({ "command": "touch", "args": [marker] });
        payload
            .as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        db.enqueue("exec", payload)
    };
    let preload = touch(serde_json::json!({ "env": { "LD_PRELOAD": "/tmp/evil.so" } }));
    let path = touch(serde_json::json!({ "env": { "PATH": "/tmp" } }));
    let cwd = touch(serde_json::json!({ "cwd": "/" }));
    let _worker = worker(&db, &["--allow-exec", "touch", "--allow-exec-env", "LANG"]);
    for (id, field) in [
        (preload, "env.LD_PRELOAD"),
        (path, "env.PATH"),
        (cwd, "cwd"),
    ] {
        let job = db.wait_finished(&id);
        assert_eq!(job["dead_reason"], "permanent", "{job}");
        assert!(
            job["last_error"]
                .to_string()
                .contains(&format!("exec payload: {field}:")),
            "{job}"
        );
    }
    assert!(!marker.exists(), "a refused job ran");
}

#[test]
fn allow_flags_that_cannot_work_stop_the_worker_at_start_naming_the_flag() {
    let db = Db::new();
    let dir = db.dir.path().to_str().unwrap().to_string();
    let cases: [(&[&str], &str); 6] = [
        (&["--allow-net", "10.0.0.0/33"], "--allow-net"),
        (&["--allow-net", "http://hooks.internal/"], "--allow-net"),
        (
            &["--allow-exec", "revenant-test-no-such-command"],
            "--allow-exec",
        ),
        (&["--allow-exec", &dir], "--allow-exec"),
        (
            &["--allow-exec", "true", "--allow-exec-env", "LD_PRELOAD"],
            "--allow-exec-env",
        ),
        (
            &["--allow-exec", "true", "--allow-exec-cwd", "/no/such/dir"],
            "--allow-exec-cwd",
        ),
    ];
    for (flags, named) in cases {
        let args = [&["work", "-q", "q"], flags].concat();
        db.fails(&args, 2, named);
    }
    // The exec settings mean nothing without a command to run.
    db.fails(
        &["work", "-q", "q", "--allow-exec-env", "LANG"],
        2,
        "--allow-exec",
    );
}
