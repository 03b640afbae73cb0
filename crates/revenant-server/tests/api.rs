//! The API end to end over real HTTP on a loopback port, on SQLite and PostgreSQL:
//! producers enqueue, remote workers claim, heartbeat, complete, fail and snooze under
//! fenced leases, operators triage, redrive and purge dead letters, pause queues and
//! hold, close and release dependency breakers.

mod support;

use std::time::Duration;

use reqwest::{Method, StatusCode};
use revenant::dependency::{DependencyPolicy, RateLimit};
use revenant::store::{DependencyAcquireParams, LeaseRef, Permit, PermitRequest};
use revenant::{Jitter, LeaseToken, PolicyScope, RetryPolicy};
use revenant_server::{Scope, ServerConfig, Token, Tokens};
use serde_json::{json, Value};
use support::{eventually, ids, Backend, TestServer};

const CREATED: StatusCode = StatusCode::CREATED;
const OK: StatusCode = StatusCode::OK;
const BAD: StatusCode = StatusCode::BAD_REQUEST;
const CONFLICT: StatusCode = StatusCode::CONFLICT;
const NOT_FOUND: StatusCode = StatusCode::NOT_FOUND;

on_both_backends!(
    enqueue_one_and_many_and_read_them_back,
    a_batch_with_one_bad_job_writes_none,
    a_remote_worker_claims_heartbeats_and_completes,
    a_late_completion_after_the_lease_was_reclaimed_is_lease_lost,
    transient_failures_retry_and_permanent_ones_are_dead,
    snooze_gives_the_attempt_back,
    fingerprints_redrive_and_purge,
    pause_stops_claims_and_resume_restarts_them,
    cancel_stops_a_job_and_its_worker_loses_the_lease,
    queue_numbers_history_stats_and_metrics_agree,
    a_claim_waits_for_a_job_when_asked,
    dependencies_are_listed_held_open_closed_and_released,
    closing_a_breaker_releases_its_parked_jobs,
    dependency_routes_need_the_admin_scope,
    a_remote_workers_dead_letter_is_counted_and_logged_with_its_job_id,
    a_paced_redrive_with_a_rate_out_of_range_is_refused_and_changes_nothing,
    policy_routes_refuse_bad_scopes_and_policies_that_cannot_work,
    // These two store policies: they pass once the backends implement policy_set
    // (the store branch); until then the default store answers Unsupported.
    a_stored_policy_sets_the_budget_and_backoff_of_remote_workers_jobs,
    policies_are_stored_listed_and_removed_over_http,
);

async fn server(backend: Backend) -> Option<TestServer> {
    TestServer::start(backend).await
}

/// Enqueues `n` jobs of `kind` in `queue`; returns their ids.
async fn enqueue(s: &TestServer, queue: &str, kind: &str, n: usize) -> Vec<i64> {
    let jobs: Vec<Value> = (0..n)
        .map(|i| json!({"queue": queue, "kind": kind, "payload": {"n": i}}))
        .collect();
    ids(&s.post("/v1/jobs", json!({ "jobs": jobs }), CREATED).await)
}

/// Claims up to `limit` jobs of `queue` as `worker`.
async fn claim(s: &TestServer, queue: &str, worker: &str, limit: u32) -> Vec<Value> {
    let answer = s
        .post(
            "/v1/claims",
            json!({"queue": queue, "worker": worker, "limit": limit, "lease": "30s"}),
            OK,
        )
        .await;
    answer["jobs"].as_array().expect("jobs").clone()
}

fn token(job: &Value) -> i64 {
    job["lease_token"].as_i64().expect("a lease token")
}

async fn enqueue_one_and_many_and_read_them_back(backend: Backend) {
    let Some(s) = server(backend).await else {
        return;
    };
    let one = s
        .post(
            "/v1/jobs",
            json!({
                "queue": "emails", "kind": "send_receipt", "payload": {"order": 42},
                "priority": 5, "delay": "10m", "max_attempts": 3, "group": "customer-7",
                "unique_key": "receipt-42", "correlation_id": "req-abc"
            }),
            CREATED,
        )
        .await;
    assert_eq!(one["jobs"][0]["inserted"], true);
    let id = one["jobs"][0]["id"].as_i64().unwrap();

    // The unique key returns the first job.
    let again = s
        .post(
            "/v1/jobs",
            json!({"queue": "emails", "kind": "send_receipt", "unique_key": "receipt-42"}),
            CREATED,
        )
        .await;
    assert_eq!(again["jobs"][0], json!({"id": id, "inserted": false}));

    let many = enqueue(&s, "emails", "send_receipt", 3).await;
    assert_eq!(many.len(), 3);
    assert!(many.iter().all(|m| *m > id));

    let job = s.get(&format!("/v1/jobs/{id}")).await;
    assert_eq!(job["state"], "ready");
    assert_eq!(job["attempt"], 0);
    assert_eq!(job["max_attempts"], 3);
    assert_eq!(job["priority"], 5);
    assert_eq!(job["payload"], json!({"order": 42}));
    assert_eq!(job["group_key"], "customer-7");
    assert_eq!(job["correlation_id"], "req-abc");
    assert_eq!(job["errors"], json!([]));
    assert!(
        job.get("lease_token").is_none(),
        "the lease token is the worker's"
    );
    let created =
        chrono::DateTime::parse_from_rfc3339(job["created_at"].as_str().unwrap()).unwrap();
    let run_at = chrono::DateTime::parse_from_rfc3339(job["run_at"].as_str().unwrap()).unwrap();
    assert_eq!((run_at - created).num_seconds(), 600);

    // The default budget is the policy's (12); the payload defaults to {}.
    let bare = s.get(&format!("/v1/jobs/{}", many[0])).await;
    assert_eq!(bare["max_attempts"], 12);
    let plain = s
        .post("/v1/jobs", json!({"queue": "emails", "kind": "k"}), CREATED)
        .await;
    let plain = s.get(&format!("/v1/jobs/{}", ids(&plain)[0])).await;
    assert_eq!(plain["payload"], json!({}));

    let listed = s.get("/v1/jobs?queue=emails&state=ready&limit=2").await;
    assert_eq!(listed["jobs"].as_array().unwrap().len(), 2);
    let next = listed["next_before"].as_i64().expect("a next page");
    let rest = s.get(&format!("/v1/jobs?queue=emails&before={next}")).await;
    assert_eq!(rest["jobs"].as_array().unwrap().len(), 3);
    assert_eq!(rest["next_before"], Value::Null);
    let by_group = s.get("/v1/jobs?group=customer-7").await;
    assert_eq!(ids(&by_group), vec![id]);
    s.get_err("/v1/jobs/999999", StatusCode::NOT_FOUND, "not_found")
        .await;
    s.finish().await;
}

async fn a_batch_with_one_bad_job_writes_none(backend: Backend) {
    let Some(s) = server(backend).await else {
        return;
    };
    let good = json!({"queue": "emails", "kind": "k"});
    let tomorrow = (chrono::Utc::now() + chrono::Duration::days(1)).to_rfc3339();
    for (bad, field) in [
        (
            json!({"queue": "emails", "kind": "k", "priority": 5000}),
            "jobs[1].priority",
        ),
        (json!({"queue": "", "kind": "k"}), "jobs[1].queue"),
        (
            json!({"queue": "emails", "kind": "has space"}),
            "jobs[1].kind",
        ),
        (
            json!({"queue": "emails", "kind": "k", "colour": "red"}),
            "jobs[1].colour",
        ),
        (
            json!({"queue": "emails", "kind": "k", "delay": "-5s"}),
            "jobs[1].delay",
        ),
        (
            json!({"queue": "emails", "kind": "k", "delay": "5"}),
            "jobs[1].delay",
        ),
        (
            json!({"queue": "emails", "kind": "k", "delay": "400d"}),
            "jobs[1].delay",
        ),
        (
            json!({"queue": "emails", "kind": "k", "delay": "1s", "run_at": tomorrow}),
            "jobs[1].delay",
        ),
        (
            json!({"queue": "emails", "kind": "k", "run_at": "yesterday"}),
            "jobs[1].run_at",
        ),
        (
            json!({"queue": "emails", "kind": "k", "run_at": "9999-01-01T00:00:00Z"}),
            "jobs[1].run_at",
        ),
        (
            json!({"queue": "emails", "kind": "k", "max_attempts": 0}),
            "jobs[1].max_attempts",
        ),
        (
            json!({"queue": "emails", "kind": "k", "max_attempts": 1e10}),
            "jobs[1].max_attempts",
        ),
        (
            json!({"queue": "emails", "kind": "k", "unique_key": ""}),
            "jobs[1].unique_key",
        ),
        (
            json!({"queue": "emails", "kind": "k", "group": "a", "group_key": "b"}),
            "jobs[1].group",
        ),
        (json!({"queue": "emails"}), "jobs[1].kind"),
        (json!("a string"), "jobs[1]"),
    ] {
        let error = s
            .post_err(
                "/v1/jobs",
                json!({"jobs": [good.clone(), bad.clone()]}),
                BAD,
                "invalid_field",
            )
            .await;
        assert_eq!(error["field"], field, "{bad}: {error}");
        assert!(
            error["message"].as_str().unwrap().contains(field),
            "{error}"
        );
    }
    // A NUL character cannot be stored by PostgreSQL: refused on every backend alike.
    let error = s
        .post_err(
            "/v1/jobs",
            json!({"queue": "q", "kind": "k", "payload": {"name": "a\u{0}b"}}),
            BAD,
            "invalid_field",
        )
        .await;
    assert_eq!(error["field"], "payload");
    // A payload over 1 MiB, alone.
    let big = "x".repeat(1024 * 1024 + 1);
    let error = s
        .post_err(
            "/v1/jobs",
            json!({"queue": "q", "kind": "k", "payload": big}),
            BAD,
            "invalid_field",
        )
        .await;
    assert_eq!(error["field"], "payload");
    for body in [json!({"jobs": []}), json!([1, 2]), json!(null)] {
        s.post_err("/v1/jobs", body, BAD, "invalid_field").await;
    }
    // Not JSON, or not said to be JSON.
    let response = s
        .raw(Method::POST, "/v1/jobs")
        .header("content-type", "application/json")
        .body("{\"queue\": ")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), BAD);
    assert_eq!(
        response.json::<Value>().await.unwrap()["error"]["code"],
        "invalid_json"
    );
    let response = s
        .raw(Method::POST, "/v1/jobs")
        .header("content-type", "text/plain")
        .body(good.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE);
    assert_eq!(
        response.json::<Value>().await.unwrap()["error"]["code"],
        "unsupported_media_type"
    );
    let response = s
        .raw(Method::POST, "/v1/jobs")
        .header("content-type", "application/json")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), BAD);
    assert_eq!(
        response.json::<Value>().await.unwrap()["error"]["code"],
        "invalid_json"
    );

    // Nothing of any of those was written.
    assert_eq!(s.get("/v1/jobs").await["jobs"], json!([]));
    assert_eq!(s.get("/v1/queues").await["queues"], json!([]));
    s.finish().await;
}

async fn a_remote_worker_claims_heartbeats_and_completes(backend: Backend) {
    let Some(s) = server(backend).await else {
        return;
    };
    let enqueued = enqueue(&s, "emails", "send", 3).await;
    let jobs = claim(&s, "emails", "py-worker-1", 2).await;
    assert_eq!(jobs.len(), 2);
    for job in &jobs {
        assert_eq!(job["attempt"], 1);
        assert_eq!(job["queue"], "emails");
        assert!(token(job) > 0 && token(job) < (1_i64 << 53));
        assert!(job["lease_expires_at"].is_string());
    }
    let (a, b) = (&jobs[0], &jobs[1]);
    let a_id = a["id"].as_i64().unwrap();
    let b_id = b["id"].as_i64().unwrap();
    assert!(enqueued.contains(&a_id) && enqueued.contains(&b_id));

    let beat = s
        .post(
            &format!("/v1/jobs/{a_id}/heartbeat"),
            json!({"lease_token": token(a), "lease": 120_000}),
            OK,
        )
        .await;
    assert_eq!(beat, json!({"id": a_id, "result": "applied"}));
    let running = s.get(&format!("/v1/jobs/{a_id}")).await;
    assert_eq!(running["state"], "running");
    assert_eq!(running["worker"], "py-worker-1");

    s.post(
        &format!("/v1/jobs/{a_id}/complete"),
        json!({"lease_token": token(a)}),
        OK,
    )
    .await;
    assert_eq!(
        s.get(&format!("/v1/jobs/{a_id}")).await["state"],
        "completed"
    );
    // A second completion, a heartbeat after it, a wrong token: the lease is gone.
    for (path, body) in [
        (
            format!("/v1/jobs/{a_id}/complete"),
            json!({"lease_token": token(a)}),
        ),
        (
            format!("/v1/jobs/{a_id}/heartbeat"),
            json!({"lease_token": token(a)}),
        ),
        (
            format!("/v1/jobs/{b_id}/complete"),
            json!({"lease_token": token(b) + 1}),
        ),
        (
            "/v1/jobs/999999/complete".to_string(),
            json!({"lease_token": 1}),
        ),
    ] {
        s.post_err(&path, body, CONFLICT, "lease_lost").await;
    }
    assert_eq!(s.get(&format!("/v1/jobs/{b_id}")).await["state"], "running");

    // The remote worker is in the registry and counts as alive for its queue.
    let workers = s.get("/v1/workers").await;
    let me = workers["workers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["worker"] == "py-worker-1")
        .expect("the remote worker is registered")
        .clone();
    assert_eq!(me["alive"], true);
    assert_eq!(me["queues"], json!(["emails"]));
    assert_eq!(me["host"], "127.0.0.1");
    claim(&s, "sms", "py-worker-1", 1).await;
    let workers = s.get("/v1/workers").await;
    assert_eq!(workers["workers"][0]["queues"], json!(["emails", "sms"]));
    let queues = s.get("/v1/queues").await;
    let emails = &queues["queues"][0];
    assert_eq!(emails["name"], "emails");
    assert_eq!(emails["workers_alive"], 1);
    assert_eq!(emails["running"], 1);
    assert_eq!(emails["depth"], 1);

    // Bad claims name the field.
    for (body, field) in [
        (json!({"queue": "emails"}), "worker"),
        (json!({"queue": "bad queue", "worker": "w"}), "queue"),
        (
            json!({"queue": "emails", "worker": "w", "limit": 0}),
            "limit",
        ),
        (
            json!({"queue": "emails", "worker": "w", "limit": 101}),
            "limit",
        ),
        (
            json!({"queue": "emails", "worker": "w", "lease": "500ms"}),
            "lease",
        ),
        (
            json!({"queue": "emails", "worker": "w", "lease": "2h"}),
            "lease",
        ),
        (
            json!({"queue": "emails", "worker": "w", "wait": "31s"}),
            "wait",
        ),
        (
            json!({"queue": "emails", "worker": "w", "wait": true}),
            "wait",
        ),
        (json!({"queue": "emails", "worker": ""}), "worker"),
    ] {
        let error = s
            .post_err("/v1/claims", body.clone(), BAD, "invalid_field")
            .await;
        assert_eq!(error["field"], field, "{body}: {error}");
    }
    s.post_err(
        &format!("/v1/jobs/{b_id}/heartbeat"),
        json!({"lease_token": token(b), "lease": "0s"}),
        BAD,
        "invalid_field",
    )
    .await;
    s.post_err(
        &format!("/v1/jobs/{b_id}/heartbeat"),
        json!({"lease_token": "abc"}),
        BAD,
        "invalid_field",
    )
    .await;
    s.post_err(
        "/v1/jobs/abc/complete",
        json!({"lease_token": 1}),
        BAD,
        "invalid_field",
    )
    .await;
    s.post_err(
        "/v1/jobs/0/complete",
        json!({"lease_token": 1}),
        BAD,
        "invalid_field",
    )
    .await;
    s.finish().await;
}

async fn a_late_completion_after_the_lease_was_reclaimed_is_lease_lost(backend: Backend) {
    let Some(s) = server(backend).await else {
        return;
    };
    let id = enqueue(&s, "emails", "send", 1).await[0];
    // Worker A claims with the shortest lease and stalls past it.
    let a = s
        .post(
            "/v1/claims",
            json!({"queue": "emails", "worker": "stalled", "lease": "1s"}),
            OK,
        )
        .await["jobs"][0]
        .clone();
    assert_eq!(a["id"], id);
    // Worker B polls until the lease has expired by the store's clock and reclaims.
    let b = eventually(Duration::from_secs(10), "the reclaim", || async {
        let jobs = claim(&s, "emails", "rescuer", 1).await;
        jobs.into_iter().next()
    })
    .await;
    assert_eq!(b["id"], id);
    assert_eq!(b["attempt"], 2);
    assert_ne!(token(&b), token(&a));

    // A's late calls change nothing, each answered lease_lost.
    for action in ["complete", "heartbeat"] {
        let error = s
            .post_err(
                &format!("/v1/jobs/{id}/{action}"),
                json!({"lease_token": token(&a)}),
                CONFLICT,
                "lease_lost",
            )
            .await;
        assert!(
            error["message"].as_str().unwrap().contains("lease"),
            "{error}"
        );
    }
    s.post_err(
        &format!("/v1/jobs/{id}/fail"),
        json!({"lease_token": token(&a), "class": "permanent", "message": "late"}),
        CONFLICT,
        "lease_lost",
    )
    .await;
    s.post_err(
        &format!("/v1/jobs/{id}/snooze"),
        json!({"lease_token": token(&a), "delay": "1m"}),
        CONFLICT,
        "lease_lost",
    )
    .await;
    let job = s.get(&format!("/v1/jobs/{id}")).await;
    assert_eq!(job["state"], "running");
    assert_eq!(job["worker"], "rescuer");
    // The lost attempt is in the history.
    assert_eq!(job["errors"][0]["class"], "lease_expired");
    assert_eq!(job["errors"][0]["attempt"], 1);

    // B's completion is the one that counts.
    s.post(
        &format!("/v1/jobs/{id}/complete"),
        json!({"lease_token": token(&b)}),
        OK,
    )
    .await;
    assert_eq!(s.get(&format!("/v1/jobs/{id}")).await["state"], "completed");
    s.finish().await;
}

async fn transient_failures_retry_and_permanent_ones_are_dead(backend: Backend) {
    let Some(s) = server(backend).await else {
        return;
    };
    enqueue(&s, "emails", "send", 1).await;
    let job = claim(&s, "emails", "w", 1).await.remove(0);
    let id = job["id"].as_i64().unwrap();
    let failed = s
        .post(
            &format!("/v1/jobs/{id}/fail"),
            json!({"lease_token": token(&job), "class": "transient",
                   "message": "HTTP 503 from provider", "retry_after": "2m"}),
            OK,
        )
        .await;
    // Retry-After is a floor under the backoff (10 s base): the next try in 2 minutes.
    assert_eq!(
        failed,
        json!({"id": id, "result": "applied", "state": "ready", "retry_in": "2m", "dead_reason": null})
    );
    let retrying = s.get(&format!("/v1/jobs/{id}")).await;
    assert_eq!(retrying["state"], "ready");
    assert_eq!(retrying["attempt"], 1);
    assert_eq!(retrying["errors"][0]["class"], "transient");
    assert_eq!(retrying["errors"][0]["message"], "HTTP 503 from provider");
    assert_eq!(retrying["errors"][0]["worker"], "w");
    assert_eq!(s.get("/v1/queues").await["queues"][0]["retrying"], 1);

    // A permanent failure is dead at once, with its reason and fingerprint.
    enqueue(&s, "receipts", "render", 1).await;
    let poison = claim(&s, "receipts", "w", 1).await.remove(0);
    let poison_id = poison["id"].as_i64().unwrap();
    let bad_fails = [
        (
            json!({"lease_token": token(&poison), "class": "permanent", "message": "  "}),
            "message",
        ),
        (
            json!({"lease_token": token(&poison), "class": "permanent", "message": "x", "retry_after": "1s"}),
            "retry_after",
        ),
        (
            json!({"lease_token": token(&poison), "class": "maybe", "message": "x"}),
            "class",
        ),
        (
            json!({"lease_token": token(&poison), "message": "x"}),
            "class",
        ),
        (
            json!({"lease_token": token(&poison), "class": "transient", "message": "x", "retry_after": "400d"}),
            "retry_after",
        ),
    ];
    for (body, field) in bad_fails {
        let error = s
            .post_err(
                &format!("/v1/jobs/{poison_id}/fail"),
                body.clone(),
                BAD,
                "invalid_field",
            )
            .await;
        assert_eq!(error["field"], field, "{body}: {error}");
    }
    // A NUL in the message is shown, not refused: the failure is never lost over it.
    let dead = s
        .post(
            &format!("/v1/jobs/{poison_id}/fail"),
            json!({"lease_token": token(&poison), "class": "permanent",
                   "message": "template crashed on restaurant 'Zürich'\u{0}"}),
            OK,
        )
        .await;
    assert_eq!(dead["state"], "dead");
    assert_eq!(dead["dead_reason"], "permanent");
    let shown = s.get(&format!("/v1/dead/{poison_id}")).await;
    assert_eq!(shown["dead_reason"], "permanent");
    assert_eq!(shown["fingerprint"].as_str().map(str::len), Some(12));
    assert_eq!(shown["last_error"]["class"], "permanent");
    assert_eq!(
        shown["last_error"]["message"],
        "template crashed on restaurant 'Zürich'\\0"
    );
    s.get_err(
        &format!("/v1/dead/{id}"),
        StatusCode::NOT_FOUND,
        "not_found",
    )
    .await;

    // A transient failure of the last attempt is dead too: attempts exhausted.
    let last = s
        .post(
            "/v1/jobs",
            json!({"queue": "once", "kind": "k", "max_attempts": 1}),
            CREATED,
        )
        .await;
    let last_id = ids(&last)[0];
    let job = claim(&s, "once", "w", 1).await.remove(0);
    let answer = s
        .post(
            &format!("/v1/jobs/{last_id}/fail"),
            json!({"lease_token": token(&job), "class": "transient", "message": "timeout"}),
            OK,
        )
        .await;
    assert_eq!(answer["state"], "dead");
    assert_eq!(answer["dead_reason"], "attempts_exhausted");
    let dead_list = s.get("/v1/dead").await;
    let mut dead_ids = ids(&dead_list);
    dead_ids.sort_unstable();
    assert_eq!(dead_ids, vec![poison_id, last_id]);
    assert_eq!(
        ids(&s.get("/v1/dead?reason=permanent").await),
        vec![poison_id]
    );
    s.get_err("/v1/dead?reason=sad", BAD, "invalid_field").await;
    s.finish().await;
}

async fn snooze_gives_the_attempt_back(backend: Backend) {
    let Some(s) = server(backend).await else {
        return;
    };
    let id = enqueue(&s, "emails", "send", 1).await[0];
    let job = claim(&s, "emails", "w", 1).await.remove(0);
    s.post_err(
        &format!("/v1/jobs/{id}/snooze"),
        json!({"lease_token": token(&job)}),
        BAD,
        "invalid_field",
    )
    .await;
    s.post(
        &format!("/v1/jobs/{id}/snooze"),
        json!({"lease_token": token(&job), "delay": "1h"}),
        OK,
    )
    .await;
    let snoozed = s.get(&format!("/v1/jobs/{id}")).await;
    assert_eq!(snoozed["state"], "ready");
    assert_eq!(snoozed["attempt"], 0);
    assert_eq!(snoozed["errors"], json!([]));
    assert!(
        claim(&s, "emails", "w", 1).await.is_empty(),
        "not due for an hour"
    );
    s.finish().await;
}

/// Kills `messages.len()` jobs of `queue` through the API, each with its message.
async fn kill(s: &TestServer, queue: &str, messages: &[String]) -> Vec<i64> {
    enqueue(s, queue, "send", messages.len()).await;
    let jobs = claim(s, queue, "w", messages.len() as u32).await;
    assert_eq!(jobs.len(), messages.len());
    let mut ids = Vec::new();
    for (job, message) in jobs.iter().zip(messages) {
        let id = job["id"].as_i64().unwrap();
        s.post(
            &format!("/v1/jobs/{id}/fail"),
            json!({"lease_token": token(job), "class": "permanent", "message": message}),
            OK,
        )
        .await;
        ids.push(id);
    }
    ids
}

async fn fingerprints_redrive_and_purge(backend: Backend) {
    let Some(s) = server(backend).await else {
        return;
    };
    let outage: Vec<String> = (0..6)
        .map(|i| format!("HTTP 503 from provider after {}ms", 90 + i * 7))
        .collect();
    let crash: Vec<String> = ["Zürich", "Bern"]
        .iter()
        .map(|name| format!("template crashed on restaurant '{name}'"))
        .collect();
    let outage_ids = kill(&s, "emails", &outage).await;
    let crash_ids = kill(&s, "emails", &crash).await;

    let groups = s.get("/v1/dead/fingerprints?queue=emails").await;
    let groups = groups["fingerprints"].as_array().unwrap();
    assert_eq!(groups.len(), 2, "{groups:?}");
    assert_eq!(groups[0]["count"], 6);
    assert_eq!(groups[1]["count"], 2);
    assert_eq!(groups[0]["kind"], "send");
    assert_eq!(groups[0]["queue"], "emails");
    assert!(groups[0]["sample_error"]
        .as_str()
        .unwrap()
        .starts_with("HTTP 503"));
    let outage_print = groups[0]["fingerprint"].as_str().unwrap().to_string();
    let crash_print = groups[1]["fingerprint"].as_str().unwrap().to_string();
    let by_print = s.get(&format!("/v1/dead?fingerprint={outage_print}")).await;
    assert_eq!(ids(&by_print).len(), 6);
    s.get_err("/v1/dead?fingerprint=xyz", BAD, "invalid_field")
        .await;

    // An unscoped redrive or purge is refused unless it says "all".
    for path in ["/v1/dead/redrive", "/v1/dead/purge"] {
        let error = s.post_err(path, json!({}), BAD, "invalid_field").await;
        assert_eq!(error["field"], "all");
    }
    s.post_err(
        "/v1/dead/redrive",
        json!({"queue": "emails", "rate": "fast"}),
        BAD,
        "invalid_field",
    )
    .await;
    s.post_err(
        "/v1/dead/purge",
        json!({"queue": "emails", "rate": "1/s"}),
        BAD,
        "invalid_field",
    )
    .await;

    // A dry run counts and changes nothing.
    let dry = s
        .post(
            "/v1/dead/redrive",
            json!({"fingerprint": outage_print, "dry_run": true, "rate": "10/s"}),
            OK,
        )
        .await;
    assert_eq!(dry["count"], 6);
    assert_eq!(dry["dry_run"], true);
    assert_eq!(dry["rate_per_sec"], 10.0);
    assert_eq!(ids(&s.get("/v1/dead").await).len(), 8);

    // The real one, paced at 10/s: run_at 100 ms apart, fresh attempts, history kept.
    let done = s
        .post(
            "/v1/dead/redrive",
            json!({"fingerprint": outage_print, "rate": "10/s", "note": "provider is back"}),
            OK,
        )
        .await;
    assert_eq!(done["count"], 6);
    assert_eq!(done["dry_run"], false);
    let mut redriven: Vec<i64> = done["ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_i64().unwrap())
        .collect();
    redriven.sort_unstable();
    let mut expected = outage_ids.clone();
    expected.sort_unstable();
    assert_eq!(redriven, expected);
    let mut run_ats = Vec::new();
    for id in &outage_ids {
        let job = s.get(&format!("/v1/jobs/{id}")).await;
        assert_eq!(job["state"], "ready");
        assert_eq!(job["attempt"], 0);
        assert_eq!(job["redrives"], 1);
        assert_eq!(job["errors"].as_array().unwrap().len(), 1);
        run_ats
            .push(chrono::DateTime::parse_from_rfc3339(job["run_at"].as_str().unwrap()).unwrap());
    }
    run_ats.sort_unstable();
    let span = run_ats[5] - run_ats[0];
    assert_eq!(span.num_milliseconds(), 500, "six jobs at 10/s span 500 ms");
    let audit = s.get("/v1/dead/history").await;
    assert_eq!(audit["redrives"][0]["count"], 6);
    assert_eq!(audit["redrives"][0]["spacing_ms"], 100);
    assert_eq!(audit["redrives"][0]["actor"], "http");
    assert_eq!(audit["redrives"][0]["note"], "provider is back");

    // Purge: a dry run lists, the real one deletes only what the filter names.
    let dry = s
        .post(
            "/v1/dead/purge",
            json!({"fingerprint": crash_print, "dry_run": true}),
            OK,
        )
        .await;
    assert_eq!(dry["count"], 2);
    let mut listed: Vec<i64> = dry["ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_i64().unwrap())
        .collect();
    listed.sort_unstable();
    assert_eq!(listed, crash_ids);
    let purged = s
        .post("/v1/dead/purge", json!({"ids": [crash_ids[0]]}), OK)
        .await;
    assert_eq!(
        purged,
        json!({"count": 1, "dry_run": false, "at_least": false})
    );
    s.get_err(
        &format!("/v1/jobs/{}", crash_ids[0]),
        StatusCode::NOT_FOUND,
        "not_found",
    )
    .await;
    let all = s.post("/v1/dead/purge", json!({"all": true}), OK).await;
    assert_eq!(all["count"], 1);
    assert_eq!(s.get("/v1/dead").await["jobs"], json!([]));
    // The redriven jobs were not dead, so not purged.
    assert_eq!(
        s.get(&format!("/v1/jobs/{}", outage_ids[0])).await["state"],
        "ready"
    );
    s.finish().await;
}

async fn pause_stops_claims_and_resume_restarts_them(backend: Backend) {
    let Some(s) = server(backend).await else {
        return;
    };
    let id = enqueue(&s, "emails", "send", 1).await[0];
    let paused = s.post("/v1/queues/emails/pause", json!({}), OK).await;
    assert_eq!(paused, json!({"queue": "emails", "paused": true}));
    assert!(claim(&s, "emails", "w", 1).await.is_empty());
    assert_eq!(s.get("/v1/queues").await["queues"][0]["paused"], true);
    // Enqueues are still accepted while paused.
    enqueue(&s, "emails", "send", 1).await;
    let resumed = s.post("/v1/queues/emails/resume", json!({}), OK).await;
    assert_eq!(resumed["paused"], false);
    assert_eq!(claim(&s, "emails", "w", 1).await[0]["id"], id);
    let error = s
        .post_err(
            "/v1/queues/bad%20name/pause",
            json!({}),
            BAD,
            "invalid_field",
        )
        .await;
    assert_eq!(error["field"], "name");
    s.finish().await;
}

async fn cancel_stops_a_job_and_its_worker_loses_the_lease(backend: Backend) {
    let Some(s) = server(backend).await else {
        return;
    };
    let ids = enqueue(&s, "emails", "send", 2).await;
    let job = claim(&s, "emails", "w", 1).await.remove(0);
    let running = job["id"].as_i64().unwrap();
    let ready = *ids.iter().find(|id| **id != running).unwrap();
    let answer = s
        .post(
            &format!("/v1/jobs/{running}/cancel"),
            json!({"reason": "customer left"}),
            OK,
        )
        .await;
    assert_eq!(answer, json!({"id": running, "state": "cancelled"}));
    s.post_err(
        &format!("/v1/jobs/{running}/heartbeat"),
        json!({"lease_token": token(&job)}),
        CONFLICT,
        "lease_lost",
    )
    .await;
    // A body that is not an object is refused, not read as a struct's fields (the
    // API fuzz run found `[]` accepted).
    let error = s
        .post_err(
            &format!("/v1/jobs/{ready}/cancel"),
            json!([]),
            BAD,
            "invalid_field",
        )
        .await;
    assert_eq!(error["field"], "body");
    // The body is optional (the content type is not, without tokens).
    let response = s
        .raw(Method::POST, &format!("/v1/jobs/{ready}/cancel"))
        .header("content-type", "application/json")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), OK);
    s.post_err(
        &format!("/v1/jobs/{ready}/cancel"),
        json!({}),
        CONFLICT,
        "conflict",
    )
    .await;
    s.post_err(
        "/v1/jobs/999999/cancel",
        json!({}),
        StatusCode::NOT_FOUND,
        "not_found",
    )
    .await;
    s.finish().await;
}

async fn queue_numbers_history_stats_and_metrics_agree(backend: Backend) {
    let Some(s) = server(backend).await else {
        return;
    };
    enqueue(&s, "emails", "send", 3).await;
    kill(&s, "emails", &["boom".to_string()]).await;
    let queues = s.get("/v1/queues").await;
    let emails = &queues["queues"][0];
    assert_eq!(emails["depth"], 3);
    assert_eq!(emails["dead"], 1);
    assert!(emails["oldest_due_age"].as_i64().unwrap() >= 0);

    let history = s.get("/v1/queues/emails/history?minutes=5").await;
    let points = history["points"].as_array().unwrap();
    assert_eq!(points.len(), 6);
    assert_eq!(history["step"], "1m");
    let now = points.last().unwrap();
    assert_eq!(now["depth"], 3);
    assert_eq!(now["dead"], 1);
    assert_eq!(points[0]["depth"], 0, "nothing existed five minutes ago");
    s.get_err("/v1/queues/emails/history?minutes=0", BAD, "invalid_field")
        .await;
    s.get_err("/v1/queues/emails/history?minutes=x", BAD, "invalid_field")
        .await;
    s.get_err("/v1/queues/emails/history?hours=1", BAD, "invalid_field")
        .await;

    let stats = s.get("/v1/stats").await;
    assert_eq!(stats[0]["queue"], "emails");
    assert_eq!(stats[0]["ready"], 3);
    assert_eq!(stats[0]["dead"], 1);
    assert_eq!(s.get("/v1/stats?queue=none").await, json!([]));

    let response = s.raw(Method::GET, "/metrics").send().await.unwrap();
    assert_eq!(response.status(), OK);
    let text = response.text().await.unwrap();
    assert!(
        text.contains("revenant_queue_ready_jobs{queue=\"emails\"} 3"),
        "{text}"
    );
    assert!(
        text.contains("revenant_queue_dead_jobs{queue=\"emails\"} 1"),
        "{text}"
    );

    let alerts = s.get("/v1/alerts").await;
    assert_eq!(
        alerts,
        json!({"configured": false, "status": "ok", "rules": [], "firing": []})
    );
    let ready = s.get("/readyz").await;
    assert_eq!(ready["status"], "ready");
    s.finish().await;
}

async fn a_claim_waits_for_a_job_when_asked(backend: Backend) {
    let Some(s) = server(backend).await else {
        return;
    };
    let waiting = async {
        s.post(
            "/v1/claims",
            json!({"queue": "emails", "worker": "w", "wait": "10s"}),
            OK,
        )
        .await
    };
    let producing = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        enqueue(&s, "emails", "send", 1).await[0]
    };
    let started = std::time::Instant::now();
    let (answer, id) = tokio::join!(waiting, producing);
    assert_eq!(ids(&answer), vec![id]);
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the wait ended at the enqueue"
    );
    // With nothing to claim, the wait runs out and the list is empty.
    let started = std::time::Instant::now();
    let empty = s
        .post(
            "/v1/claims",
            json!({"queue": "none", "worker": "w", "wait": 300}),
            OK,
        )
        .await;
    assert_eq!(empty["jobs"], json!([]));
    assert!(started.elapsed() >= Duration::from_millis(300));
    s.finish().await;
}

/// The keys of a `{"dependencies": [...]}` answer, in its order.
fn keys(answer: &Value) -> Vec<String> {
    answer["dependencies"]
        .as_array()
        .unwrap_or_else(|| panic!("no dependencies in {answer}"))
        .iter()
        .map(|d| d["dependency"].as_str().expect("a key").to_string())
        .collect()
}

/// `GET /metrics` as text.
async fn metrics(s: &TestServer) -> String {
    let response = s.raw(Method::GET, "/metrics").send().await.unwrap();
    assert_eq!(response.status(), OK);
    response.text().await.unwrap()
}

async fn dependencies_are_listed_held_open_closed_and_released(backend: Backend) {
    let Some(s) = server(backend).await else {
        return;
    };
    assert_eq!(s.get("/v1/dependencies").await, json!({"dependencies": []}));
    let error = s
        .get_err("/v1/dependencies/email-provider", NOT_FOUND, "not_found")
        .await;
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("email-provider"),
        "{error}"
    );

    // Held open before its first job: created, open, held, no probe planned.
    let held = s
        .post("/v1/dependencies/email-provider/open", json!({}), OK)
        .await;
    assert_eq!(held["dependency"], "email-provider");
    assert_eq!(held["breaker"], "open");
    assert_eq!(held["held_open"], true);
    assert_eq!(held["probe_at"], Value::Null);
    assert_eq!(held["probe"], Value::Null);
    assert_eq!(held["trips"], 1);
    assert!(held["opened_at"].is_string(), "{held}");
    assert_eq!(
        held["waiting"],
        json!({"breaker": 0, "rate_limit": 0, "retry_budget": 0})
    );
    for field in ["window_secs", "failure_share", "threshold", "min_requests"] {
        assert!(held["answers"][field].is_number(), "{field}: {held}");
    }
    // Opening twice changes nothing more.
    let again = s
        .post("/v1/dependencies/email-provider/open", json!({}), OK)
        .await;
    assert_eq!(again["trips"], 1);
    assert_eq!(again["held_open"], true);

    // Any text without control characters is a key: a host, spaces, a slash, accents.
    s.post("/v1/dependencies/api.mail.example/open", json!({}), OK)
        .await;
    let odd = s
        .post(
            "/v1/dependencies/z%C3%BCrich%20smtp%2Feu/open",
            json!({}),
            OK,
        )
        .await;
    assert_eq!(odd["dependency"], "zürich smtp/eu");
    let listed = s.get("/v1/dependencies").await;
    assert_eq!(
        keys(&listed),
        vec!["api.mail.example", "email-provider", "zürich smtp/eu"]
    );
    let one = s.get("/v1/dependencies/email-provider").await;
    assert_eq!(one["breaker"], "open");
    assert_eq!(one["held_open"], true);
    assert_eq!(
        s.get("/v1/dependencies/z%C3%BCrich%20smtp%2Feu").await["dependency"],
        "zürich smtp/eu"
    );

    // The gauges follow, as `revenant metrics` prints them.
    let text = metrics(&s).await;
    for line in [
        "revenant_dependency_breaker_state{dependency=\"email-provider\"} 2",
        "revenant_dependency_held_open{dependency=\"email-provider\"} 1",
        "revenant_dependency_breaker_trips{dependency=\"email-provider\"} 1",
        "revenant_dependency_waiting_jobs{dependency=\"email-provider\",reason=\"breaker\"} 0",
    ] {
        assert!(text.contains(line), "{line} not in\n{text}");
    }

    // Close: closed now, the hold gone.
    let closed = s
        .post("/v1/dependencies/email-provider/close", json!({}), OK)
        .await;
    assert_eq!(closed["breaker"], "closed");
    assert_eq!(closed["held_open"], false);
    assert_eq!(closed["probe_at"], Value::Null);
    assert_eq!(
        s.get("/v1/dependencies/email-provider").await["breaker"],
        "closed"
    );
    assert!(metrics(&s)
        .await
        .contains("revenant_dependency_breaker_state{dependency=\"email-provider\"} 0"));
    // Auto on a closed breaker: nothing to release, it stays closed.
    let auto = s
        .post("/v1/dependencies/email-provider/auto", json!({}), OK)
        .await;
    assert_eq!(auto["breaker"], "closed");
    assert_eq!(auto["held_open"], false);

    // Auto on a held breaker: still open, no longer held, a probe due at once.
    let released = s
        .post("/v1/dependencies/api.mail.example/auto", json!({}), OK)
        .await;
    assert_eq!(released["breaker"], "open");
    assert_eq!(released["held_open"], false);
    let probe_at = chrono::DateTime::parse_from_rfc3339(
        released["probe_at"].as_str().expect("a probe is due"),
    )
    .unwrap();
    assert!(
        probe_at <= chrono::Utc::now() + chrono::Duration::seconds(1),
        "{released}"
    );

    // A bad key names the field; nothing is created.
    let long = "k".repeat(256);
    for key in ["bad%0Akey", "tab%09", "del%7F", long.as_str()] {
        let error = s
            .get_err(&format!("/v1/dependencies/{key}"), BAD, "invalid_field")
            .await;
        assert_eq!(error["field"], "key", "{key}: {error}");
        for action in ["open", "close", "auto"] {
            let error = s
                .post_err(
                    &format!("/v1/dependencies/{key}/{action}"),
                    json!({}),
                    BAD,
                    "invalid_field",
                )
                .await;
            assert_eq!(error["field"], "key", "{key}/{action}: {error}");
            assert!(
                error["message"].as_str().unwrap().starts_with("key: "),
                "{error}"
            );
        }
    }
    // 255 bytes is the longest key.
    let longest = "k".repeat(255);
    s.post(&format!("/v1/dependencies/{longest}/open"), json!({}), OK)
        .await;
    assert_eq!(keys(&s.get("/v1/dependencies").await).len(), 4);
    // Unknown actions and methods are the router's JSON refusals.
    s.post_err(
        "/v1/dependencies/email-provider/reset",
        json!({}),
        NOT_FOUND,
        "not_found",
    )
    .await;
    let (status, answer) = s
        .call(Method::POST, "/v1/dependencies/email-provider", None)
        .await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED, "{answer}");
    s.finish().await;
}

async fn closing_a_breaker_releases_its_parked_jobs(backend: Backend) {
    let Some(s) = server(backend).await else {
        return;
    };
    let enqueued = enqueue(&s, "emails", "send_receipt", 3).await;
    s.post("/v1/dependencies/email-provider/open", json!({}), OK)
        .await;
    // A worker protecting the dependency claims the jobs and asks for permits, as
    // `revenant work` does between a claim and the handler: the held breaker parks
    // them, attempts given back.
    let claimed = claim(&s, "emails", "breaker-worker", 3).await;
    assert_eq!(claimed.len(), 3);
    let policy =
        DependencyPolicy::default().with_rate_limit(RateLimit::per_second(20.0).with_burst(2));
    let permits = s
        .store
        .dependency_acquire(DependencyAcquireParams {
            dependency: "email-provider".into(),
            policy,
            worker: "breaker-worker".into(),
            lease: Duration::from_secs(30),
            requests: claimed
                .iter()
                .map(|job| PermitRequest {
                    lease: LeaseRef {
                        id: job["id"].as_i64().unwrap(),
                        lease_token: LeaseToken(token(job)),
                    },
                    retry_delay: Duration::from_secs(10),
                })
                .collect(),
            local_free: None,
            now: None,
        })
        .await
        .expect("acquire");
    assert!(
        permits
            .permits
            .iter()
            .all(|p| matches!(p, Permit::Wait { .. })),
        "{permits:?}"
    );

    let parked = s.get("/v1/dependencies/email-provider").await;
    assert_eq!(
        parked["waiting"],
        json!({"breaker": 3, "rate_limit": 0, "retry_budget": 0})
    );
    // The worker's policy is stored with the key: the rate limit and budget show.
    assert_eq!(parked["rate_limit"]["per_second"], 20.0);
    assert_eq!(parked["rate_limit"]["burst"], 2);
    assert!(parked["rate_limit"]["tokens"].is_number(), "{parked}");
    assert!(parked["retry_budget"]["ratio"].is_number(), "{parked}");
    assert!(parked["retry_budget"]["allowed"].is_number(), "{parked}");
    assert!(metrics(&s).await.contains(
        "revenant_dependency_waiting_jobs{dependency=\"email-provider\",reason=\"breaker\"} 3"
    ));
    // Parked jobs are ready again, an hour ahead, their attempt given back.
    for id in &enqueued {
        let job = s.get(&format!("/v1/jobs/{id}")).await;
        assert_eq!(job["state"], "ready");
        assert_eq!(job["attempt"], 0);
    }
    assert!(claim(&s, "emails", "w", 3).await.is_empty(), "parked");

    // Close: the parked jobs are released on the rate limit's turns (20/s: all three
    // within a few hundred milliseconds).
    let closed = s
        .post("/v1/dependencies/email-provider/close", json!({}), OK)
        .await;
    assert_eq!(closed["breaker"], "closed");
    assert_eq!(closed["held_open"], false);
    assert_eq!(closed["waiting"]["breaker"], 0);
    let mut taken: Vec<i64> = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while taken.len() < 3 {
        assert!(
            std::time::Instant::now() < deadline,
            "only {taken:?} released"
        );
        let jobs = s
            .post(
                "/v1/claims",
                json!({"queue": "emails", "worker": "w", "limit": 3}),
                OK,
            )
            .await;
        taken.extend(ids(&jobs));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    taken.sort_unstable();
    let mut expected = enqueued.clone();
    expected.sort_unstable();
    assert_eq!(taken, expected);
    s.finish().await;
}

async fn dependency_routes_need_the_admin_scope(backend: Backend) {
    const PRODUCER: &str = "producer-0123456789abcdef";
    const ADMIN: &str = "admin-0123456789abcdef";
    const SCRAPER: &str = "scraper-0123456789abcdef";
    let Some(mut s) = TestServer::with_config(
        backend,
        ServerConfig {
            tokens: Tokens::new(vec![
                Token::new("billing", PRODUCER, vec![Scope::Produce]),
                Token::new("ops", ADMIN, vec![Scope::Admin]),
                Token::new("prometheus", SCRAPER, vec![Scope::Metrics]),
            ]),
            ..ServerConfig::default()
        },
    )
    .await
    else {
        return;
    };
    for (method, path) in [
        (Method::GET, "/v1/dependencies"),
        (Method::GET, "/v1/dependencies/email-provider"),
        (Method::POST, "/v1/dependencies/email-provider/open"),
        (Method::POST, "/v1/dependencies/email-provider/close"),
        (Method::POST, "/v1/dependencies/email-provider/auto"),
    ] {
        for token in [PRODUCER, SCRAPER] {
            let (status, answer) = s.call_as(Some(token), method.clone(), path, None).await;
            assert_eq!(status, StatusCode::FORBIDDEN, "{method} {path}: {answer}");
            assert_eq!(answer["error"]["code"], "forbidden");
            assert!(
                answer["error"]["message"]
                    .as_str()
                    .unwrap()
                    .contains("admin"),
                "{answer}"
            );
        }
        let (status, answer) = s.call_as(None, method.clone(), path, None).await;
        assert_eq!(
            status,
            StatusCode::UNAUTHORIZED,
            "{method} {path}: {answer}"
        );
    }
    s.token = Some(ADMIN.to_string());
    assert_eq!(
        s.get("/v1/dependencies").await,
        json!({"dependencies": []}),
        "a refused open wrote nothing"
    );
    s.post("/v1/dependencies/email-provider/open", json!({}), OK)
        .await;
    // The scraper reads the breaker's gauge.
    s.token = Some(SCRAPER.to_string());
    let text = metrics(&s).await;
    assert!(
        text.contains("revenant_dependency_breaker_state{dependency=\"email-provider\"} 2"),
        "{text}"
    );
    s.finish().await;
}

/// Everything logged in this test binary, from the first call on: the servers run in
/// this process, so their events land here.
fn captured_log() -> &'static std::sync::Mutex<Vec<u8>> {
    use std::sync::{Mutex, OnceLock};
    static LOG: OnceLock<&'static Mutex<Vec<u8>>> = OnceLock::new();
    LOG.get_or_init(|| {
        let log: &'static Mutex<Vec<u8>> = Box::leak(Box::new(Mutex::new(Vec::new())));
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_max_level(tracing::Level::INFO)
            .with_writer(move || LogWriter(log))
            .finish();
        // Another test may have set it first; then this one records nothing and the
        // assertion on the log says so.
        let _ = tracing::subscriber::set_global_default(subscriber);
        log
    })
}

struct LogWriter(&'static std::sync::Mutex<Vec<u8>>);

impl std::io::Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

async fn a_remote_workers_dead_letter_is_counted_and_logged_with_its_job_id(backend: Backend) {
    let log = captured_log();
    let Some(s) = server(backend).await else {
        return;
    };
    // A queue of this test's own: the log is shared by every test in the binary.
    let queue = format!("dlq-counted-{backend:?}").to_lowercase();
    let id = kill(&s, &queue, &["HTTP 400: bad address".to_string()]).await[0];
    let text = metrics(&s).await;
    let counter = format!(
        "revenant_dead_letters_total{{queue=\"{queue}\",kind=\"send\",reason=\"permanent\"}} 1"
    );
    assert!(text.contains(&counter), "no {counter} in\n{text}");
    assert!(
        text.contains(&format!(
            "revenant_job_attempts_total{{queue=\"{queue}\",kind=\"send\",outcome=\"dead\",class=\"permanent\"}} 1"
        )),
        "{text}"
    );
    // The queue gauges are still there, each family once.
    assert!(
        text.contains(&format!("revenant_queue_dead_jobs{{queue=\"{queue}\"}} 1")),
        "{text}"
    );
    assert_eq!(
        text.matches("# TYPE revenant_dead_letters_total").count(),
        1,
        "{text}"
    );

    let logged = String::from_utf8_lossy(&log.lock().unwrap()).into_owned();
    let line = logged
        .lines()
        .find(|line| line.contains("job dead-lettered") && line.contains(&format!("queue={queue}")))
        .unwrap_or_else(|| panic!("no dead-letter event for {queue} in the log:\n{logged}"));
    assert!(line.contains("ERROR"), "{line}");
    assert!(line.contains(&format!("job_id={id}")), "{line}");
    assert!(line.contains("dead_reason=permanent"), "{line}");
    s.finish().await;
}

async fn a_paced_redrive_with_a_rate_out_of_range_is_refused_and_changes_nothing(backend: Backend) {
    let Some(s) = server(backend).await else {
        return;
    };
    let id = kill(&s, "emails", &["HTTP 503".to_string()]).await[0];
    for rate in [
        json!(1e-15),
        json!("1e-15/s"),
        json!(0),
        json!("fast"),
        json!(1e6),
        json!([]),
    ] {
        for dry_run in [false, true] {
            let error = s
                .post_err(
                    "/v1/dead/redrive",
                    json!({"ids": [id], "rate": rate, "dry_run": dry_run}),
                    BAD,
                    "invalid_field",
                )
                .await;
            assert_eq!(error["field"], "rate", "{rate}: {error}");
        }
    }
    assert_eq!(s.get(&format!("/v1/jobs/{id}")).await["state"], "dead");
    assert_eq!(s.get("/v1/dead/history").await["redrives"], json!([]));
    // The slowest and the fastest rates are taken.
    let done = s
        .post("/v1/dead/redrive", json!({"ids": [id], "rate": "1/h"}), OK)
        .await;
    assert_eq!(done["count"], 1);
    assert_eq!(done["rate_per_sec"], json!(1.0 / 3600.0));
    s.finish().await;
}

/// A policy as `PUT /v1/policies/{scope}` takes it.
fn policy_body(max_attempts: u32, base: &str) -> Value {
    json!({
        "max_attempts": max_attempts,
        "backoff": {"base": base, "multiplier": 2.0, "cap": "1h"},
        "jitter": {"kind": "none"},
        "attempt_timeout": "30s",
        "lease": "60s",
        "heartbeat": "20s",
    })
}

async fn put(s: &TestServer, path: &str, body: Value) -> (StatusCode, Value) {
    s.call(Method::PUT, path, Some(body)).await
}

async fn policy_routes_refuse_bad_scopes_and_policies_that_cannot_work(backend: Backend) {
    let Some(s) = server(backend).await else {
        return;
    };
    let listed = s.get("/v1/policies").await;
    assert_eq!(listed["stored"], json!([]));
    assert_eq!(
        listed["default"],
        serde_json::to_value(RetryPolicy::default()).unwrap()
    );
    for scope in ["emails", "queue:", "team:emails", "Default", "kind:a%20b"] {
        let (status, answer) =
            put(&s, &format!("/v1/policies/{scope}"), policy_body(3, "1s")).await;
        assert_eq!(status, BAD, "{scope}: {answer}");
        assert_eq!(answer["error"]["field"], "scope", "{scope}: {answer}");
    }
    let mut no_heartbeat = policy_body(3, "1s");
    no_heartbeat.as_object_mut().unwrap().remove("heartbeat");
    let mut slow = policy_body(3, "1s");
    slow["attempt_timeout"] = json!("2m");
    for (body, field) in [
        (policy_body(0, "1s"), "max_attempts"),
        (policy_body(1001, "1s"), "max_attempts"),
        (policy_body(3, "2h"), "backoff"),
        (policy_body(3, "soon"), "backoff.base"),
        (slow, "attempt_timeout"),
        (no_heartbeat, "heartbeat"),
    ] {
        let (status, answer) = put(&s, "/v1/policies/queue:emails", body.clone()).await;
        assert_eq!(status, BAD, "{body}: {answer}");
        assert_eq!(answer["error"]["code"], "invalid_field", "{answer}");
        let named = answer["error"]["field"].as_str().unwrap_or_default();
        assert!(
            named.starts_with(field),
            "{body}: field {named}, not {field}"
        );
    }
    let (status, answer) = s.call(Method::DELETE, "/v1/policies/queue:", None).await;
    assert_eq!(status, BAD, "{answer}");
    assert_eq!(
        s.get("/v1/policies").await["stored"],
        json!([]),
        "nothing stored"
    );
    s.finish().await;
}

async fn a_stored_policy_sets_the_budget_and_backoff_of_remote_workers_jobs(backend: Backend) {
    let Some(s) = server(backend).await else {
        return;
    };
    // Stored through the library's client before the server read any policy, as
    // `revenant policy set` would: the server resolves it at its next enqueue.
    let policy = RetryPolicy::builder()
        .max_attempts(2)
        .backoff(revenant::Backoff {
            base: Duration::from_secs(1),
            multiplier: 2.0,
            cap: Duration::from_secs(60),
        })
        .jitter(Jitter::None)
        .build()
        .unwrap();
    revenant::Client::new(s.store.clone())
        .set_policy(PolicyScope::Kind("flaky".into()), policy)
        .await
        .expect("store the policy (needs the store branch's policy_set)");
    let ids = ids(&s
        .post(
            "/v1/jobs",
            json!({"jobs": [{"queue": "emails", "kind": "flaky"}, {"queue": "emails", "kind": "steady"}]}),
            CREATED,
        )
        .await);
    assert_eq!(
        s.get(&format!("/v1/jobs/{}", ids[0])).await["max_attempts"],
        2
    );
    assert_eq!(
        s.get(&format!("/v1/jobs/{}", ids[1])).await["max_attempts"],
        12
    );
    // The backoff is the stored one: 1 s after the first failure (no jitter), and the
    // second failure spends the budget of 2.
    for (attempt, state, retry_in, dead_reason) in [
        (1, "ready", json!("1s"), Value::Null),
        (2, "dead", Value::Null, json!("attempts_exhausted")),
    ] {
        let job = eventually(
            Duration::from_secs(10),
            "the flaky job to be due",
            || async {
                claim(&s, "emails", "w", 2)
                    .await
                    .into_iter()
                    .find(|job| job["id"] == ids[0])
            },
        )
        .await;
        let answer = s
            .post(
                &format!("/v1/jobs/{}/fail", ids[0]),
                json!({"lease_token": token(&job), "class": "transient", "message": "flaky"}),
                OK,
            )
            .await;
        assert_eq!(answer["state"], state, "attempt {attempt}: {answer}");
        assert_eq!(answer["retry_in"], retry_in, "attempt {attempt}: {answer}");
        assert_eq!(
            answer["dead_reason"], dead_reason,
            "attempt {attempt}: {answer}"
        );
    }
    s.finish().await;
}

async fn policies_are_stored_listed_and_removed_over_http(backend: Backend) {
    let Some(s) = server(backend).await else {
        return;
    };
    let (status, stored) = put(&s, "/v1/policies/queue:emails", policy_body(3, "2s")).await;
    assert_eq!(status, OK, "{stored}");
    assert_eq!(stored["scope"], "queue:emails");
    assert_eq!(stored["policy"]["max_attempts"], 3);
    let (status, _) = put(&s, "/v1/policies/default", policy_body(5, "1s")).await;
    assert_eq!(status, OK);
    let listed = s.get("/v1/policies").await;
    let scopes: Vec<&str> = listed["stored"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["scope"].as_str().unwrap())
        .collect();
    assert_eq!(scopes, ["default", "queue:emails"], "{listed}");
    assert_eq!(listed["default"]["max_attempts"], 5);
    // At once in this server: the next enqueue takes the queue's budget.
    let id = enqueue(&s, "emails", "send", 1).await[0];
    assert_eq!(s.get(&format!("/v1/jobs/{id}")).await["max_attempts"], 3);
    let id = enqueue(&s, "other", "send", 1).await[0];
    assert_eq!(s.get(&format!("/v1/jobs/{id}")).await["max_attempts"], 5);

    let (status, removed) = s
        .call(Method::DELETE, "/v1/policies/queue:emails", None)
        .await;
    assert_eq!(status, OK, "{removed}");
    assert_eq!(removed, json!({"scope": "queue:emails", "removed": true}));
    let (status, again) = s
        .call(Method::DELETE, "/v1/policies/queue:emails", None)
        .await;
    assert_eq!(status, NOT_FOUND, "{again}");
    let id = enqueue(&s, "emails", "send", 1).await[0];
    assert_eq!(s.get(&format!("/v1/jobs/{id}")).await["max_attempts"], 5);
    s.finish().await;
}
