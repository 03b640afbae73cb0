//! `POST /v1/jobs` keeps the producer's W3C trace context with each job (the
//! `traceparent` header for every job of the request, or a job's own field), refuses a
//! malformed one by name and writes nothing; and `/metrics` counts the requests by
//! route template and status class. On SQLite and PostgreSQL.

mod support;

use reqwest::{Method, StatusCode};
use revenant::store::JobGetParams;
use serde_json::{json, Value};
use support::{ids, Backend, TestServer};

const HEADER: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
const OWN: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00";

on_both_backends!(the_trace_context_comes_from_the_header_or_the_job_and_is_checked);

async fn post_with_header(s: &TestServer, traceparent: &str, body: Value) -> (StatusCode, Value) {
    let response = s
        .raw(Method::POST, "/v1/jobs")
        .header("traceparent", traceparent)
        .header("tracestate", "rojo=00f067aa0ba902b7")
        .json(&body)
        .send()
        .await
        .expect("POST /v1/jobs");
    let status = response.status();
    (status, response.json().await.expect("a JSON answer"))
}

async fn traceparent_of(s: &TestServer, id: i64) -> Option<(String, Option<String>)> {
    let job = s
        .store
        .job_get(JobGetParams { id })
        .await
        .unwrap()
        .expect("the job");
    job.trace_context.map(|t| {
        (
            t.traceparent().to_string(),
            t.tracestate().map(str::to_string),
        )
    })
}

async fn the_trace_context_comes_from_the_header_or_the_job_and_is_checked(backend: Backend) {
    let Some(s) = TestServer::start(backend).await else {
        return;
    };
    let (status, answer) = post_with_header(
        &s,
        HEADER,
        json!({"jobs": [
            {"queue": "q", "kind": "k"},
            {"queue": "q", "kind": "k", "traceparent": OWN},
        ]}),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{answer}");
    let enqueued = ids(&answer);
    assert_eq!(
        traceparent_of(&s, enqueued[0]).await,
        Some((
            HEADER.to_string(),
            Some("rojo=00f067aa0ba902b7".to_string())
        ))
    );
    assert_eq!(
        traceparent_of(&s, enqueued[1]).await,
        Some((OWN.to_string(), None))
    );
    let plain = ids(&s
        .post(
            "/v1/jobs",
            json!({"queue": "q", "kind": "k"}),
            StatusCode::CREATED,
        )
        .await);
    assert_eq!(traceparent_of(&s, plain[0]).await, None);

    // Malformed: refused by name, nothing written.
    let before = s.get("/v1/jobs?queue=q").await;
    let (status, answer) =
        post_with_header(&s, "00-nope", json!({"queue": "q", "kind": "k"})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
    assert!(
        answer.to_string().contains("traceparent header"),
        "{answer}"
    );
    let error = s
        .post_err(
            "/v1/jobs",
            json!({"jobs": [{"queue": "q", "kind": "k"}, {"queue": "q", "kind": "k", "traceparent": "00-x"}]}),
            StatusCode::BAD_REQUEST,
            "invalid_field",
        )
        .await;
    assert!(error.to_string().contains("jobs[1].traceparent"), "{error}");
    let error = s
        .post_err(
            "/v1/jobs",
            json!({"queue": "q", "kind": "k", "tracestate": "a=b"}),
            StatusCode::BAD_REQUEST,
            "invalid_field",
        )
        .await;
    assert!(error.to_string().contains("tracestate"), "{error}");
    // The header alone, too (found by the API fuzz: an over-long one was accepted).
    let response = s
        .raw(Method::POST, "/v1/jobs")
        .header("tracestate", "a".repeat(600))
        .json(&json!({"queue": "q", "kind": "k"}))
        .send()
        .await
        .expect("POST /v1/jobs");
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    let body = response.text().await.expect("the error");
    assert!(body.contains("tracestate header"), "{body}");
    assert_eq!(s.get("/v1/jobs?queue=q").await, before);

    // /metrics counted them by route template and status class.
    let response = s
        .raw(Method::GET, "/metrics")
        .send()
        .await
        .expect("GET /metrics");
    assert_eq!(response.status(), StatusCode::OK);
    let text = response.text().await.expect("the exposition");
    let count = |status: &str| -> f64 {
        let prefix = format!(
            "revenant_http_requests_total{{route=\"/v1/jobs\",method=\"POST\",status=\"{status}\"}} "
        );
        text.lines()
            .find_map(|line| line.strip_prefix(&prefix))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {prefix} in {text}"))
    };
    assert_eq!(count("2xx"), 2.0);
    assert_eq!(count("4xx"), 4.0);
    assert!(text.contains("revenant_build_info{"), "{text}");
    s.finish().await;
}
