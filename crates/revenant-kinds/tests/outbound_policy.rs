//! The `http` kind's outbound policy, tried as a producer with a produce-only token
//! would: every way of writing "the worker's own host" or an internal network is
//! refused as permanent, and nothing reaches the loopback server standing in for an
//! internal service. Only loopback is ever a target: no test uses the network.

mod attempt;
// Shared with http_kind.rs, which uses the parts these tests do not.
#[allow(dead_code)]
mod loopback;

use std::time::Duration;

use revenant_core::Outcome;
use revenant_kinds::HttpHandler;
use serde_json::json;

use attempt::{context, message, run};
use loopback::{Reply, Server};

const LONG: Duration = Duration::from_secs(60);

/// The internal service the attacker is after: it answers 404 with a secret in the
/// body, which would land in the job's error history if the request got through.
async fn internal_service() -> Server {
    Server::start(|_| Reply::status(404).body("aws_secret_access_key=hunter2")).await
}

fn port(server: &Server) -> u16 {
    server
        .url("/")
        .rsplit(':')
        .next()
        .and_then(|tail| tail.trim_end_matches('/').parse().ok())
        .expect("the test server's URL ends with its port")
}

async fn send(handler: &HttpHandler, url: &str) -> Outcome {
    run(
        handler,
        context(1, 1, LONG),
        json!({ "method": "GET", "url": url }),
    )
    .await
}

fn assert_refused(outcome: &Outcome, url: &str, what: &str) {
    let Outcome::Permanent { message } = outcome else {
        panic!("{url}: expected a permanent refusal, got {outcome:?}");
    };
    assert!(
        message.starts_with("http: destination ")
            && message.contains("refused by the outbound policy"),
        "{url}: {message}"
    );
    assert!(
        message.contains(what),
        "{url}: expected {what:?} in {message}"
    );
    assert!(message.contains("--allow-net"), "{url}: {message}");
    assert!(
        !message.contains("hunter2"),
        "{url}: the answer leaked: {message}"
    );
}

#[tokio::test]
async fn every_spelling_of_the_workers_own_host_is_refused_and_nothing_is_sent() {
    let server = internal_service().await;
    let port = port(&server);
    let handler = HttpHandler::new().unwrap();
    let urls = [
        format!("http://127.0.0.1:{port}/"),
        format!("http://127.1.2.3:{port}/"),
        format!("http://localhost:{port}/"),
        format!("http://LOCALHOST:{port}/"),
        format!("http://[::1]:{port}/"),
        format!("http://[::ffff:127.0.0.1]:{port}/"),
        format!("http://[::ffff:7f00:1]:{port}/"),
        // The URL parser reads these as 127.0.0.1, so they are IP literals too.
        format!("http://2130706433:{port}/"),
        format!("http://0177.0.0.1:{port}/"),
        format!("http://0x7f.1:{port}/"),
        format!("https://127.0.0.1:{port}/"),
        format!("http://0.0.0.0:{port}/"),
        format!("http://[::]:{port}/"),
    ];
    for url in &urls {
        let outcome = send(&handler, url).await;
        let what = if url.contains("0.0.0.0") || url.contains("[::]") {
            "unspecified"
        } else {
            "loopback"
        };
        assert_refused(&outcome, url, what);
    }
    assert!(
        server.received().is_empty(),
        "requests got through: {:?}",
        server.received()
    );
}

#[tokio::test]
async fn internal_networks_and_the_metadata_endpoint_are_refused_before_connecting() {
    let handler = HttpHandler::new().unwrap();
    let cases = [
        ("http://169.254.169.254/latest/meta-data/iam/", "link-local"),
        ("http://[fd00:ec2::254]/latest/meta-data/", "unique-local"),
        ("http://10.0.0.1/admin", "private (RFC 1918)"),
        ("http://172.16.5.4/", "private (RFC 1918)"),
        ("http://192.168.1.1/", "private (RFC 1918)"),
        ("http://100.64.0.1/", "CGNAT"),
        ("http://[::ffff:169.254.169.254]/", "link-local"),
        ("http://[::ffff:10.0.0.1]/", "private (RFC 1918)"),
        ("http://[2002:a00:1::]/", "private (RFC 1918)"),
        ("http://[fe80::1]/", "link-local"),
        ("http://224.0.0.1/", "multicast"),
        ("http://255.255.255.255/", "broadcast"),
    ];
    for (url, what) in cases {
        let started = std::time::Instant::now();
        let outcome = send(&handler, url).await;
        assert_refused(&outcome, url, what);
        // Refused by the check, not after a connection attempt timed out.
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "{url}: {:?}",
            started.elapsed()
        );
    }
}

#[tokio::test]
async fn the_refusal_names_the_address_the_range_and_the_flag_that_allows_it() {
    let handler = HttpHandler::new().unwrap();
    let outcome = send(&handler, "http://127.0.0.1:9/hook?token=secret").await;
    assert_eq!(
        message(&outcome),
        "http: destination 127.0.0.1 is loopback (127.0.0.0/8); refused by the outbound policy (allow it with --allow-net 127.0.0.1/32) [GET http://127.0.0.1:9/hook]"
    );
    let outcome = send(&handler, "http://localhost:9/").await;
    assert!(
        message(&outcome).starts_with("http: destination localhost ("),
        "{outcome:?}"
    );
    assert!(
        message(&outcome).contains("or --allow-net localhost"),
        "{outcome:?}"
    );
}

#[tokio::test]
async fn an_allowed_cidr_lets_its_addresses_through_and_nothing_else() {
    let server = Server::start(|_| Reply::status(200)).await;
    let port = port(&server);
    let handler = HttpHandler::builder()
        .allow_net("127.0.0.0/8")
        .unwrap()
        .build()
        .unwrap();
    for url in [
        format!("http://127.0.0.1:{port}/literal"),
        format!("http://2130706433:{port}/decimal"),
        // localhost resolves to 127.0.0.1 (allowed) and often ::1 (still refused,
        // dropped by the resolver): the request goes to 127.0.0.1.
        format!("http://localhost:{port}/name"),
    ] {
        let outcome = send(&handler, &url).await;
        assert_eq!(outcome, Outcome::Success, "{url}");
    }
    let paths: Vec<String> = server.received().into_iter().map(|r| r.path).collect();
    assert_eq!(paths, ["/literal", "/decimal", "/name"]);

    let outcome = send(&handler, "http://169.254.169.254/").await;
    assert_refused(&outcome, "169.254.169.254", "link-local");
    let outcome = send(&handler, &format!("http://[::1]:{port}/")).await;
    assert_refused(&outcome, "[::1]", "loopback");
}

#[tokio::test]
async fn an_allowed_host_name_lets_every_address_it_resolves_to_through() {
    let server = Server::start(|_| Reply::status(200)).await;
    let port = port(&server);
    let handler = HttpHandler::builder()
        .allow_net("localhost")
        .unwrap()
        .build()
        .unwrap();
    let outcome = send(&handler, &format!("http://localhost:{port}/by-name")).await;
    assert_eq!(outcome, Outcome::Success);
    assert_eq!(server.received().len(), 1);
    // Allowing the name does not allow its address written as a literal.
    let outcome = send(&handler, &format!("http://127.0.0.1:{port}/literal")).await;
    assert_refused(&outcome, "127.0.0.1", "loopback");
    assert_eq!(server.received().len(), 1);
}

#[test]
fn bad_allow_entries_are_refused_when_the_handler_is_built() {
    for spec in [
        "10.0.0.0/40",
        "http://hooks.internal/",
        "hooks.internal:443",
        "not a host",
    ] {
        let err = HttpHandler::builder().allow_net(spec).unwrap_err();
        assert!(
            err.to_string().contains(&format!("{:?}", spec.trim())),
            "{err}"
        );
    }
}
