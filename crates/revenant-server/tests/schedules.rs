//! Periodic job schedules over HTTP, on SQLite and PostgreSQL: stored, listed, paused,
//! resumed, run by hand and removed; bad input refused naming the field.

mod support;

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use support::{Backend, TestServer};

on_both_backends!(
    schedules_are_stored_listed_paused_run_and_removed,
    bad_schedules_are_refused_naming_the_field,
);

const OK: StatusCode = StatusCode::OK;
const BAD: StatusCode = StatusCode::BAD_REQUEST;
const NOT_FOUND: StatusCode = StatusCode::NOT_FOUND;

async fn put(s: &TestServer, path: &str, body: Value) -> (StatusCode, Value) {
    s.call(Method::PUT, path, Some(body)).await
}

fn nightly() -> Value {
    json!({
        "cron": "30 2 * * *",
        "timezone": "America/New_York",
        "misfire": "last",
        "job": {"queue": "reports", "kind": "nightly_report", "payload": {"format": "pdf"}}
    })
}

async fn schedules_are_stored_listed_paused_run_and_removed(backend: Backend) {
    let Some(s) = TestServer::start(backend).await else {
        return;
    };
    assert_eq!(s.get("/v1/schedules").await["schedules"], json!([]));
    let (status, stored) = put(&s, "/v1/schedules/nightly", nightly()).await;
    assert_eq!(status, OK, "{stored}");
    assert_eq!(stored["name"], "nightly");
    assert_eq!(stored["misfire"], "last");
    assert_eq!(stored["paused"], false);
    assert_eq!(stored["last_tick"], Value::Null);
    let next = stored["next_tick"]
        .as_str()
        .expect("a next tick")
        .to_string();
    // Stored again unchanged: the next tick does not move.
    let (_, again) = put(&s, "/v1/schedules/nightly", nightly()).await;
    assert_eq!(again["next_tick"], next.as_str());
    let listed = s.get("/v1/schedules").await;
    assert_eq!(
        listed["schedules"][0]["spec"]["job"]["payload"]["format"],
        "pdf"
    );

    let paused = s.post("/v1/schedules/nightly/pause", json!({}), OK).await;
    assert_eq!(paused["paused"], true);
    let run = s.post("/v1/schedules/nightly/run", json!({}), OK).await;
    let id = run["job"]["id"].as_i64().expect("the job's id");
    let job = s.get(&format!("/v1/jobs/{id}")).await;
    assert_eq!(job["queue"], "reports", "{job}");
    assert!(
        job["unique_key"]
            .as_str()
            .is_some_and(|key| key.starts_with("cron:nightly@run:")),
        "{job}"
    );
    let resumed = s.post("/v1/schedules/nightly/resume", json!({}), OK).await;
    assert_eq!(resumed["paused"], false);

    let (status, removed) = s.call(Method::DELETE, "/v1/schedules/nightly", None).await;
    assert_eq!(status, OK, "{removed}");
    assert_eq!(removed, json!({"name": "nightly", "removed": true}));
    for (method, path) in [
        (Method::DELETE, "/v1/schedules/nightly"),
        (Method::POST, "/v1/schedules/nightly/pause"),
        (Method::POST, "/v1/schedules/nightly/resume"),
        (Method::POST, "/v1/schedules/nightly/run"),
    ] {
        let (status, answer) = s.call(method, path, None).await;
        assert_eq!(status, NOT_FOUND, "{path}: {answer}");
        assert_eq!(answer["error"]["code"], "not_found");
    }
    s.finish().await;
}

async fn bad_schedules_are_refused_naming_the_field(backend: Backend) {
    let Some(s) = TestServer::start(backend).await else {
        return;
    };
    let with = |field: &str, value: Value| {
        let mut body = nightly();
        body[field] = value;
        body
    };
    let mut both = nightly();
    both["every"] = json!("5s");
    let mut neither = nightly();
    neither.as_object_mut().unwrap().remove("cron");
    let mut big = nightly();
    big["job"]["payload"] = json!("x".repeat(1024 * 1024 + 1));
    for (body, field) in [
        (with("cron", json!("61 * * * *")), "cron"),
        (with("timezone", json!("Mars/Base")), "timezone"),
        (with("grace", json!("0s")), "grace"),
        (both, "every"),
        (neither, "cron"),
        (big, "payload"),
        (
            json!({"every": 0, "job": {"queue": "q", "kind": "k"}}),
            "every",
        ),
    ] {
        let (status, answer) = put(&s, "/v1/schedules/x", body.clone()).await;
        assert_eq!(status, BAD, "{body}: {answer}");
        let named = answer["error"]["field"].as_str().unwrap_or_default();
        assert_eq!(named, field, "{answer}");
    }
    let (status, answer) = put(&s, "/v1/schedules/bad%20name", nightly()).await;
    assert_eq!(status, BAD, "{answer}");
    let (status, answer) = put(&s, "/v1/schedules/x", with("misfire", json!("all"))).await;
    assert_eq!(status, BAD, "{answer}");
    assert_eq!(s.get("/v1/schedules").await["schedules"], json!([]));
    s.finish().await;
}
