//! `revenant work --otlp-endpoint` against an in-process OTLP receiver: a job enqueued
//! with `--traceparent` is run, and its attempt span reaches the receiver over OTLP/HTTP
//! in the producer's trace. A malformed trace context is refused by name.

mod support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use support::{Db, Worker};

const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

/// Requests received: (path, body).
type Received = Arc<Mutex<Vec<(String, Vec<u8>)>>>;

/// A minimal OTLP/HTTP receiver on loopback: answers 200 to every POST and keeps its
/// path and body.
fn receiver() -> (String, Received) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind the receiver");
    let addr = listener.local_addr().unwrap().to_string();
    let received: Received = Arc::default();
    let sink = received.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut request_line = String::new();
            if reader.read_line(&mut request_line).is_err() {
                continue;
            }
            let path = request_line
                .split_whitespace()
                .nth(1)
                .unwrap_or("")
                .to_string();
            let mut length = 0;
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                if let Some((name, value)) = line.split_once(':') {
                    if name.eq_ignore_ascii_case("content-length") {
                        length = value.trim().parse().unwrap_or(0);
                    }
                }
            }
            let mut body = vec![0; length];
            if reader.read_exact(&mut body).is_err() {
                continue;
            }
            sink.lock().unwrap().push((path, body));
            let _ = stream.write_all(
                b"HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
            );
        }
    });
    (addr, received)
}

fn hex_bytes(hex: &str) -> Vec<u8> {
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect()
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

#[test]
fn attempt_spans_reach_an_otlp_receiver_in_the_producers_trace() {
    let db = Db::new();
    let job = db.ok_json(&[
        "enqueue",
        "-q",
        "q",
        "-k",
        "nobody_handles_this",
        "--traceparent",
        TRACEPARENT,
        "--json",
    ]);
    let id = job["id"].to_string();
    let shown = db.ok_json(&["jobs", "show", &id, "--json"]);
    assert_eq!(
        shown["trace_context"]["traceparent"], TRACEPARENT,
        "{shown}"
    );

    let (addr, received) = receiver();
    let child = db
        .command(&[
            "work",
            "-q",
            "q",
            "--otlp-endpoint",
            &format!("http://{addr}"),
        ])
        .env("OTEL_BSP_SCHEDULE_DELAY", "100")
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        .env_remove("OTEL_SDK_DISABLED")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start revenant work");
    let _worker = Worker(child);

    let trace_id = hex_bytes(TRACE_ID);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let got = received.lock().unwrap().clone();
        let span = got.iter().find(|(path, body)| {
            path == "/v1/traces" && contains(body, &trace_id) && contains(body, b"process q")
        });
        if let Some((_, body)) = span {
            // The attempt's outcome and dead reason travel with it.
            assert!(contains(body, b"revenant.outcome"));
            assert!(contains(body, b"unknown_kind"));
            assert!(contains(body, b"messaging.destination.name"));
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no attempt span of trace {TRACE_ID} reached the receiver in 60 s ({} requests)",
            got.len()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_malformed_trace_context_is_refused_by_name() {
    let db = Db::new();
    db.fails(
        &["enqueue", "-q", "q", "-k", "k", "--traceparent", "00-nope"],
        2,
        "traceparent",
    );
    db.fails(
        &[
            "enqueue",
            "-q",
            "q",
            "-k",
            "k",
            "--traceparent",
            TRACEPARENT,
            "--tracestate",
            "no value",
        ],
        2,
        "tracestate",
    );
    db.fails(
        &["work", "-q", "q", "--otlp-endpoint", "127.0.0.1:4318"],
        2,
        "otlp-endpoint",
    );
}
