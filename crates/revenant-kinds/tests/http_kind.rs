//! The `http` kind against a loopback server: each answer class, `Retry-After` in both
//! forms, timeouts, a refused connection, the idempotency headers, the body excerpt.
//!
//! The handler here allows 127.0.0.1/32, as an operator would to reach a provider on
//! the worker's own host; `outbound_policy.rs` tests what the default refuses.

mod attempt;
mod loopback;

use std::time::{Duration, SystemTime};

use revenant_core::Outcome;
use revenant_kinds::HttpHandler;
use serde_json::json;

use attempt::{context, message, run};
use loopback::{dead_port, Reply, Server};

const LONG: Duration = Duration::from_secs(60);

/// The provider of these tests: `/status/<code>` answers that status with a body
/// naming it; other paths are set up by each test.
async fn provider() -> Server {
    Server::start(|request| {
        let code: u16 = request
            .path
            .strip_prefix("/status/")
            .and_then(|c| c.parse().ok())
            .unwrap_or(500);
        let reply = Reply::status(code).body(format!("provider says {code}"));
        if (300..400).contains(&code) {
            reply.header("location", "https://elsewhere.invalid/new-hook")
        } else {
            reply
        }
    })
    .await
}

/// A handler whose outbound policy allows the loopback test server, and nothing else
/// internal.
fn loopback_handler() -> HttpHandler {
    HttpHandler::builder()
        .allow_net("127.0.0.1/32")
        .unwrap()
        .build()
        .unwrap()
}

async fn deliver(url: &str) -> Outcome {
    let handler = loopback_handler();
    run(
        &handler,
        context(1, 1, LONG),
        json!({ "method": "POST", "url": url, "body": { "order": 42 } }),
    )
    .await
}

#[tokio::test]
async fn each_status_class_gets_its_outcome() {
    let server = provider().await;
    let cases: [(u16, &str); 11] = [
        (200, "success"),
        (201, "success"),
        (301, "permanent"),
        (400, "permanent"),
        (404, "permanent"),
        (422, "permanent"),
        (429, "retry"),
        (500, "retry"),
        (502, "retry"),
        (503, "retry"),
        (504, "retry"),
    ];
    for (code, expected) in cases {
        let outcome = deliver(&server.url(&format!("/status/{code}"))).await;
        assert_eq!(outcome.label(), expected, "status {code}: {outcome:?}");
        if expected != "success" {
            assert!(
                message(&outcome).starts_with(&format!("HTTP {code} ")),
                "status {code}: {outcome:?}"
            );
        }
    }
    assert_eq!(server.received().len(), cases.len());
}

#[tokio::test]
async fn a_redirect_is_not_followed_and_says_where_it_points() {
    let server = provider().await;
    let outcome = deliver(&server.url("/status/301")).await;
    let Outcome::Permanent { message } = &outcome else {
        panic!("expected permanent, got {outcome:?}");
    };
    assert!(
        message.contains("redirects to https://elsewhere.invalid/new-hook"),
        "{message}"
    );
    assert_eq!(server.received().len(), 1, "the redirect was followed");
}

#[tokio::test]
async fn retry_after_in_seconds_reaches_the_policy_as_retry_after() {
    let server =
        Server::start(|_| Reply::status(503).header("retry-after", "120").body("down")).await;
    let outcome = deliver(&server.url("/hook")).await;
    assert_eq!(
        outcome,
        Outcome::RetryAfter {
            message: format!(
                "HTTP 503 Service Unavailable from POST {}: down",
                server.url("/hook")
            ),
            after: Duration::from_secs(120),
        }
    );
}

#[tokio::test]
async fn retry_after_as_an_http_date_is_relative_to_now() {
    let server = Server::start(|_| {
        let at = httpdate::fmt_http_date(SystemTime::now() + Duration::from_secs(90));
        Reply::status(429).header("retry-after", &at)
    })
    .await;
    let outcome = deliver(&server.url("/hook")).await;
    let Outcome::RetryAfter { after, .. } = outcome else {
        panic!("expected retry_after, got {outcome:?}");
    };
    // HTTP dates have whole seconds: the delay lands within a second or two of 90 s.
    assert!(
        (Duration::from_secs(87)..=Duration::from_secs(90)).contains(&after),
        "{after:?}"
    );
}

#[tokio::test]
async fn retry_after_with_a_date_in_the_past_retries_without_extra_delay() {
    let server = Server::start(|_| {
        let at = httpdate::fmt_http_date(SystemTime::now() - Duration::from_secs(3600));
        Reply::status(503).header("retry-after", &at)
    })
    .await;
    let outcome = deliver(&server.url("/hook")).await;
    assert!(
        matches!(outcome, Outcome::RetryAfter { after, .. } if after == Duration::ZERO),
        "{outcome:?}"
    );
}

#[tokio::test]
async fn an_unreadable_retry_after_falls_back_to_the_backoff() {
    let server = Server::start(|_| Reply::status(503).header("retry-after", "soon")).await;
    let outcome = deliver(&server.url("/hook")).await;
    assert!(matches!(outcome, Outcome::Retry { .. }), "{outcome:?}");
    assert!(message(&outcome).contains("unreadable Retry-After"));
}

#[tokio::test]
async fn a_slow_server_times_out_as_a_transient_failure() {
    let server = Server::start(|_| Reply::status(200).delay(Duration::from_secs(10))).await;
    let handler = loopback_handler();
    let started = std::time::Instant::now();
    let outcome = run(
        &handler,
        context(1, 1, LONG),
        json!({ "url": server.url("/slow"), "timeout": "300ms" }),
    )
    .await;
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    assert!(matches!(outcome, Outcome::Retry { .. }), "{outcome:?}");
    assert!(
        message(&outcome).contains("timed out after 300ms"),
        "{outcome:?}"
    );
}

#[tokio::test]
async fn the_attempt_deadline_bounds_a_longer_request_timeout() {
    let server = Server::start(|_| Reply::status(200).delay(Duration::from_secs(10))).await;
    let handler = loopback_handler();
    let started = std::time::Instant::now();
    let outcome = run(
        &handler,
        context(1, 1, Duration::from_millis(300)),
        json!({ "url": server.url("/slow"), "timeout": "1m" }),
    )
    .await;
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    assert!(matches!(outcome, Outcome::Retry { .. }), "{outcome:?}");
}

#[tokio::test]
async fn cancellation_cuts_the_request_short() {
    let server = Server::start(|_| Reply::status(200).delay(Duration::from_secs(10))).await;
    let handler = loopback_handler();
    let ctx = context(1, 1, LONG);
    let token = ctx.cancellation().clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        token.cancel();
    });
    let started = std::time::Instant::now();
    let outcome = run(&handler, ctx, json!({ "url": server.url("/slow") })).await;
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    assert!(message(&outcome).contains("cancelled"), "{outcome:?}");
    assert!(matches!(outcome, Outcome::Retry { .. }), "{outcome:?}");
}

#[tokio::test]
async fn a_refused_connection_is_transient() {
    let addr = dead_port().await;
    let outcome = deliver(&format!("http://{addr}/hook")).await;
    assert!(matches!(outcome, Outcome::Retry { .. }), "{outcome:?}");
    let text = message(&outcome).to_ascii_lowercase();
    assert!(text.contains("refused"), "{text}");
}

#[tokio::test]
async fn the_receiver_gets_the_idempotency_headers_and_the_body() {
    let server = Server::start(|_| Reply::status(204)).await;
    let handler = loopback_handler();
    let outcome = run(
        &handler,
        context(4242, 3, LONG),
        json!({
            "method": "put",
            "url": server.url("/hooks/receipt?token=secret"),
            "headers": { "Authorization": "Bearer abc" },
            "body": { "order": 42 },
        }),
    )
    .await;
    assert_eq!(outcome, Outcome::Success);
    let received = server.received();
    let [request] = received.as_slice() else {
        panic!("expected one request, got {received:?}");
    };
    assert_eq!(request.method, "PUT");
    assert_eq!(request.path, "/hooks/receipt?token=secret");
    assert_eq!(request.header("idempotency-key"), Some("revenant-4242"));
    assert_eq!(request.header("x-revenant-job-id"), Some("4242"));
    assert_eq!(request.header("x-revenant-attempt"), Some("3"));
    assert_eq!(request.header("authorization"), Some("Bearer abc"));
    assert_eq!(request.header("content-type"), Some("application/json"));
    assert_eq!(request.body, br#"{"order":42}"#);
}

#[tokio::test]
async fn an_idempotency_key_in_the_payload_wins_over_the_job_id() {
    let server = Server::start(|_| Reply::status(200)).await;
    let handler = loopback_handler();
    let outcome = run(
        &handler,
        context(7, 1, LONG),
        json!({ "url": server.url("/"), "headers": { "Idempotency-Key": "order-42" } }),
    )
    .await;
    assert_eq!(outcome, Outcome::Success);
    let request = &server.received()[0];
    assert_eq!(request.header("idempotency-key"), Some("order-42"));
    assert_eq!(request.header("x-revenant-job-id"), Some("7"));
}

#[tokio::test]
async fn the_error_carries_the_start_of_the_body_cut_on_a_character() {
    // 1000 × "é" (2 bytes each): the 512-byte cap lands between two characters'
    // bytes only if the cut is careless.
    let body = format!("template failed: {}", "é".repeat(1000));
    let server = Server::start(move |_| Reply::status(422).body(body.clone())).await;
    let outcome = deliver(&server.url("/hook?api_key=secret")).await;
    let Outcome::Permanent { message } = &outcome else {
        panic!("expected permanent, got {outcome:?}");
    };
    assert!(
        message.starts_with(&format!(
            "HTTP 422 Unprocessable Entity from POST {}: template failed: éé",
            server.url("/hook")
        )),
        "{message}"
    );
    assert!(message.ends_with("é…"), "{message}");
    assert!(
        !message.contains("secret"),
        "the query string leaked: {message}"
    );
    assert!(message.len() < 512 + 100, "{} bytes", message.len());
}

#[tokio::test]
async fn a_bad_payload_is_permanent_and_names_the_field() {
    let handler = HttpHandler::new().unwrap();
    let cases = [
        (
            json!({ "url": "ftp://127.0.0.1/file" }),
            "http payload: url:",
        ),
        (json!({ "url": "::nope::" }), "http payload: url:"),
        (
            json!({ "url": "http://127.0.0.1/", "method": "BREW" }),
            "http payload: method:",
        ),
        (
            json!({ "url": "http://127.0.0.1/", "headers": { "bad name": "x" } }),
            "http payload: headers.bad name:",
        ),
        (
            json!({ "url": "http://127.0.0.1/", "timeout": "10" }),
            "http payload: timeout:",
        ),
    ];
    for (payload, prefix) in cases {
        let outcome = run(&handler, context(1, 1, LONG), payload.clone()).await;
        assert!(
            matches!(outcome, Outcome::Permanent { .. }),
            "{payload}: {outcome:?}"
        );
        assert!(
            message(&outcome).starts_with(prefix),
            "{payload}: {outcome:?}"
        );
    }
    let outcome = run(
        &handler,
        context(1, 1, LONG),
        json!({ "url": "http://127.0.0.1/", "timout": "1s" }),
    )
    .await;
    assert!(
        matches!(outcome, Outcome::DecodeError { .. }),
        "{outcome:?}"
    );
}
