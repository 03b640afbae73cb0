//! Tokens and scopes, the body limit, and JSON answers for everything the router
//! itself refuses (unknown paths, wrong methods), over real HTTP.

mod support;

use reqwest::{Method, StatusCode};
use revenant::alert::AlertConfig;
use revenant_server::{Scope, ServerConfig, Token, Tokens};
use serde_json::{json, Value};
use support::{Backend, TestServer};

const PRODUCER: &str = "producer-0123456789abcdef";
const WORKER: &str = "worker-0123456789abcdef";
const ADMIN: &str = "admin-0123456789abcdef";
const SCRAPER: &str = "scraper-0123456789abcdef";

on_both_backends!(
    requests_need_a_token_with_the_routes_scope,
    the_redrive_audit_names_the_token,
    alerts_evaluate_the_configured_rules,
);

fn tokens() -> Tokens {
    Tokens::new(vec![
        Token::new("billing", PRODUCER, vec![Scope::Produce]),
        Token::new("fleet", WORKER, vec![Scope::Work]),
        Token::new("ops", ADMIN, vec![Scope::Admin]),
        Token::new("prometheus", SCRAPER, vec![Scope::Metrics]),
    ])
}

async fn secured(backend: Backend) -> Option<TestServer> {
    TestServer::with_config(
        backend,
        ServerConfig {
            tokens: tokens(),
            ..ServerConfig::default()
        },
    )
    .await
}

async fn status(
    s: &TestServer,
    token: Option<&str>,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> (StatusCode, Value) {
    s.call_as(token, method, path, body).await
}

async fn requests_need_a_token_with_the_routes_scope(backend: Backend) {
    let Some(s) = secured(backend).await else {
        return;
    };
    let job = json!({"queue": "emails", "kind": "send"});
    let claim = json!({"queue": "emails", "worker": "w"});

    // No token, a malformed header, an unknown token: 401 with a Bearer challenge.
    let response = s
        .raw(Method::POST, "/v1/jobs")
        .json(&job)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(
        response.headers()["www-authenticate"],
        "Bearer realm=\"revenant\""
    );
    assert_eq!(
        response.json::<Value>().await.unwrap()["error"]["code"],
        "unauthorized"
    );
    let response = s
        .raw(Method::GET, "/v1/queues")
        .header("authorization", format!("Basic {ADMIN}"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    let (code, body) = status(
        &s,
        Some("not-a-known-token-at-all"),
        Method::GET,
        "/v1/queues",
        None,
    )
    .await;
    assert_eq!(code, StatusCode::UNAUTHORIZED);
    assert_eq!(body["error"]["code"], "unauthorized");
    // One character off.
    let almost = format!("{}X", &ADMIN[..ADMIN.len() - 1]);
    let (code, _) = status(&s, Some(&almost), Method::GET, "/v1/queues", None).await;
    assert_eq!(code, StatusCode::UNAUTHORIZED);

    // A token of the wrong scope: 403, naming both scopes; nothing written.
    for (token, method, path, body) in [
        (PRODUCER, Method::POST, "/v1/claims", Some(claim.clone())),
        (PRODUCER, Method::GET, "/v1/queues", None),
        (WORKER, Method::POST, "/v1/jobs", Some(job.clone())),
        (
            WORKER,
            Method::POST,
            "/v1/dead/purge",
            Some(json!({"all": true})),
        ),
        (SCRAPER, Method::GET, "/v1/jobs", None),
        (PRODUCER, Method::GET, "/metrics", None),
    ] {
        let (code, answer) = status(&s, Some(token), method.clone(), path, body).await;
        assert_eq!(
            code,
            StatusCode::FORBIDDEN,
            "{method} {path} with {token}: {answer}"
        );
        assert_eq!(answer["error"]["code"], "forbidden");
        assert!(
            answer["error"]["message"]
                .as_str()
                .unwrap()
                .contains("admin"),
            "{answer}"
        );
    }
    let (_, jobs) = status(&s, Some(ADMIN), Method::GET, "/v1/jobs", None).await;
    assert_eq!(jobs["jobs"], json!([]), "a refused enqueue wrote nothing");

    // The right scope, and admin for everything.
    let (code, _) = status(
        &s,
        Some(PRODUCER),
        Method::POST,
        "/v1/jobs",
        Some(job.clone()),
    )
    .await;
    assert_eq!(code, StatusCode::CREATED);
    let (code, claimed) = status(
        &s,
        Some(WORKER),
        Method::POST,
        "/v1/claims",
        Some(claim.clone()),
    )
    .await;
    assert_eq!(code, StatusCode::OK);
    let id = claimed["jobs"][0]["id"].as_i64().unwrap();
    let lease = claimed["jobs"][0]["lease_token"].as_i64().unwrap();
    let (code, _) = status(
        &s,
        Some(WORKER),
        Method::POST,
        &format!("/v1/jobs/{id}/complete"),
        Some(json!({"lease_token": lease})),
    )
    .await;
    assert_eq!(code, StatusCode::OK);
    for (method, path, body) in [
        (Method::POST, "/v1/jobs", Some(job.clone())),
        (Method::POST, "/v1/claims", Some(claim.clone())),
        (Method::GET, "/v1/jobs", None),
        (Method::GET, "/v1/queues", None),
        (Method::GET, "/v1/workers", None),
        (Method::GET, "/v1/stats", None),
        (Method::GET, "/v1/alerts", None),
        (Method::GET, "/v1/dead/history", None),
        (Method::GET, "/metrics", None),
    ] {
        let (code, answer) = status(&s, Some(ADMIN), method.clone(), path, body).await;
        assert!(
            code.is_success(),
            "{method} {path} as admin: {code} {answer}"
        );
    }
    let response = s
        .raw(Method::GET, "/metrics")
        .bearer_auth(SCRAPER)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);

    // Open without a token: health, readiness, the document and the dashboard.
    for path in [
        "/healthz",
        "/readyz",
        "/openapi.json",
        "/",
        "/ui/index.html",
    ] {
        let response = s.raw(Method::GET, path).send().await.unwrap();
        assert_eq!(response.status(), StatusCode::OK, "{path}");
    }
    // An unknown path is 404 before any token check.
    let (code, answer) = status(&s, None, Method::GET, "/v1/nothing-here", None).await;
    assert_eq!(code, StatusCode::NOT_FOUND);
    assert_eq!(answer["error"]["code"], "not_found");
    s.finish().await;
}

async fn the_redrive_audit_names_the_token(backend: Backend) {
    let Some(mut s) = secured(backend).await else {
        return;
    };
    s.token = Some(ADMIN.to_string());
    s.post(
        "/v1/jobs",
        json!({"queue": "q", "kind": "k"}),
        StatusCode::CREATED,
    )
    .await;
    let job = s
        .post(
            "/v1/claims",
            json!({"queue": "q", "worker": "w"}),
            StatusCode::OK,
        )
        .await["jobs"][0]
        .clone();
    s.post(
        &format!("/v1/jobs/{}/fail", job["id"]),
        json!({"lease_token": job["lease_token"], "class": "permanent", "message": "boom"}),
        StatusCode::OK,
    )
    .await;
    s.post("/v1/dead/redrive", json!({"queue": "q"}), StatusCode::OK)
        .await;
    let audit = s.get("/v1/dead/history").await;
    assert_eq!(audit["redrives"][0]["actor"], "ops");
    s.finish().await;
}

async fn alerts_evaluate_the_configured_rules(backend: Backend) {
    let rules =
        AlertConfig::from_toml("[default]\ndead_above = 5\n[queues.payments]\ncritical = true\n")
            .unwrap();
    let Some(s) = TestServer::with_config(
        backend,
        ServerConfig {
            alerts: Some(rules),
            ..ServerConfig::default()
        },
    )
    .await
    else {
        return;
    };
    let quiet = s.get("/v1/alerts").await;
    assert_eq!(quiet["configured"], true);
    assert_eq!(quiet["status"], "ok");
    assert_eq!(quiet["firing"], json!([]));
    assert_eq!(
        quiet["rules"][0],
        json!({"queue": "*", "critical": false, "dead_above": 5,
        "oldest_due_above": null, "no_workers": false, "dead_per_hour_above": null})
    );
    assert_eq!(quiet["rules"][1]["queue"], "payments");
    assert_eq!(quiet["rules"][1]["dead_above"], 0);

    s.post(
        "/v1/jobs",
        json!({"queue": "payments", "kind": "charge"}),
        StatusCode::CREATED,
    )
    .await;
    let job = s
        .post(
            "/v1/claims",
            json!({"queue": "payments", "worker": "w"}),
            StatusCode::OK,
        )
        .await["jobs"][0]
        .clone();
    s.post(
        &format!("/v1/jobs/{}/fail", job["id"]),
        json!({"lease_token": job["lease_token"], "class": "permanent", "message": "card declined"}),
        StatusCode::OK,
    )
    .await;
    let firing = s.get("/v1/alerts").await;
    assert_eq!(firing["status"], "critical");
    assert_eq!(firing["firing"][0]["queue"], "payments");
    assert_eq!(firing["firing"][0]["rule"], "dead_above");
    assert_eq!(firing["firing"][0]["severity"], "critical");
    assert!(firing["firing"][0]["text"]
        .as_str()
        .unwrap()
        .contains("1 dead job"));
    s.finish().await;
}

#[tokio::test]
async fn a_body_over_the_limit_is_refused_with_json() {
    let s = TestServer::with_config(
        Backend::Sqlite,
        ServerConfig {
            max_body: 64 * 1024,
            ..ServerConfig::default()
        },
    )
    .await
    .expect("sqlite");
    let payload = "x".repeat(100 * 1024);
    let response = s
        .raw(Method::POST, "/v1/jobs")
        .json(&json!({"queue": "q", "kind": "k", "payload": payload}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "payload_too_large");
    assert!(body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("--max-body"));
    // A body without a declared length is cut at the limit too.
    let chunks: Vec<Result<Vec<u8>, std::io::Error>> = vec![
        Ok(b"{\"queue\":\"q\",\"kind\":\"k\",\"payload\":\"".to_vec()),
        Ok(vec![b'x'; 100 * 1024]),
        Ok(b"\"}".to_vec()),
    ];
    let response = s
        .raw(Method::POST, "/v1/jobs")
        .header("content-type", "application/json")
        .body(reqwest::Body::wrap_stream(futures::stream::iter(chunks)))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(s.get("/v1/jobs").await["jobs"], json!([]));
    s.finish().await;
}

#[tokio::test]
async fn the_router_answers_every_refusal_in_json() {
    let s = TestServer::start(Backend::Sqlite).await.expect("sqlite");
    for (method, path, status, code) in [
        (Method::GET, "/nope", StatusCode::NOT_FOUND, "not_found"),
        (
            Method::GET,
            "/ui/missing.css",
            StatusCode::NOT_FOUND,
            "not_found",
        ),
        (
            Method::DELETE,
            "/v1/jobs",
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
        ),
        (
            Method::PUT,
            "/v1/queues/emails/pause",
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
        ),
        (
            Method::GET,
            "/v1/jobs/abc",
            StatusCode::BAD_REQUEST,
            "invalid_field",
        ),
        (
            Method::GET,
            "/v1/jobs/99999999999999999999",
            StatusCode::BAD_REQUEST,
            "invalid_field",
        ),
        (
            Method::GET,
            "/v1/jobs?limit=0",
            StatusCode::BAD_REQUEST,
            "invalid_field",
        ),
        (
            Method::GET,
            "/v1/jobs?limit=-1",
            StatusCode::BAD_REQUEST,
            "invalid_field",
        ),
        (
            Method::GET,
            "/v1/jobs?state=sleeping",
            StatusCode::BAD_REQUEST,
            "invalid_field",
        ),
        (
            Method::GET,
            "/v1/jobs?queue=a%20b",
            StatusCode::BAD_REQUEST,
            "invalid_field",
        ),
        (
            Method::GET,
            "/v1/jobs?colour=red",
            StatusCode::BAD_REQUEST,
            "invalid_field",
        ),
        (
            Method::GET,
            "/v1/jobs?before=0",
            StatusCode::BAD_REQUEST,
            "invalid_field",
        ),
        (
            Method::GET,
            "/v1/jobs?limit=1&limit=2",
            StatusCode::BAD_REQUEST,
            "invalid_field",
        ),
        (
            Method::GET,
            "/v1/dead/fingerprints?limit=100000",
            StatusCode::BAD_REQUEST,
            "invalid_field",
        ),
        (
            Method::GET,
            "/v1/stats?queue=%FF",
            StatusCode::BAD_REQUEST,
            "invalid_field",
        ),
    ] {
        let (got, body) = s.call(method.clone(), path, None).await;
        assert_eq!(got, status, "{method} {path}: {body}");
        assert_eq!(body["error"]["code"], code, "{method} {path}: {body}");
    }
    let response = s.raw(Method::DELETE, "/v1/jobs").send().await.unwrap();
    let allow = response.headers()["allow"].to_str().unwrap().to_string();
    assert!(allow.contains("GET") && allow.contains("POST"), "{allow}");
    let dashboard = s.raw(Method::GET, "/").send().await.unwrap();
    assert!(dashboard.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/html"));
    s.finish().await;
}

/// The dashboard's pages forbid anything not from this server, framing, and sniffing,
/// and are revalidated on every load.
#[tokio::test]
async fn the_dashboard_is_served_with_a_strict_security_policy() {
    let s = TestServer::start(Backend::Sqlite).await.expect("sqlite");
    for path in ["/", "/ui/app.js", "/ui/app.css"] {
        let response = s.raw(Method::GET, path).send().await.unwrap();
        assert_eq!(response.status(), StatusCode::OK, "{path}");
        let headers = response.headers();
        let policy = headers["content-security-policy"].to_str().unwrap();
        assert!(
            policy.contains("default-src 'self'") && policy.contains("frame-ancestors 'none'"),
            "{path}: {policy}"
        );
        assert_eq!(headers["x-content-type-options"], "nosniff", "{path}");
        assert_eq!(headers["cache-control"], "no-cache", "{path}");
    }
    s.finish().await;
}
