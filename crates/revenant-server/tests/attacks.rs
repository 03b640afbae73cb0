//! The holes an attacker probed, each tried again: a web page reaching a server
//! without tokens (cross-site posts, DNS rebinding), tokens reaching every queue, and
//! refusals that were not JSON. Over real HTTP, on both backends.

mod support;

use std::collections::BTreeMap;
use std::collections::BTreeSet;

use reqwest::{Method, StatusCode};
use revenant_server::queue_rules::{QueueRule, QueueRules};
use revenant_server::{Scope, ServerConfig, Token, Tokens};
use serde_json::{json, Value};
use support::{Backend, TestServer};

const ADMIN: &str = "admin-0123456789abcdef";
const MAILER_WORK: &str = "mailer-work-0123456789abcdef";
const MAILER_PRODUCE: &str = "mailer-produce-0123456789abcdef";
const PRODUCER: &str = "producer-0123456789abcdef";
const WORKER: &str = "worker-0123456789abcdef";

on_both_backends!(
    a_web_page_cannot_reach_a_server_without_tokens,
    body_less_routes_refuse_bodies_and_every_refusal_is_json,
    a_queue_limited_work_token_claims_settles_and_names_workers_only_in_its_queues,
    a_queue_limited_produce_token_enqueues_only_into_its_queues,
    queue_rules_refuse_kinds_whoever_enqueues,
);

async fn json_of(response: reqwest::Response) -> (StatusCode, Value) {
    let status = response.status();
    let is_json = response
        .headers()
        .get("content-type")
        .is_some_and(|v| v.to_str().unwrap().starts_with("application/json"));
    let text = response.text().await.unwrap();
    assert!(is_json, "{status} is not JSON: {text:?}");
    (status, serde_json::from_str(&text).expect("a JSON body"))
}

fn assert_refused(answer: &(StatusCode, Value), status: StatusCode, code: &str, field: &str) {
    assert_eq!(answer.0, status, "{}", answer.1);
    assert_eq!(answer.1["error"]["code"], code, "{}", answer.1);
    assert_eq!(answer.1["error"]["field"], field, "{}", answer.1);
}

async fn paused(s: &TestServer, token: Option<&str>, queue: &str) -> bool {
    let (_, queues) = s.call_as(token, Method::GET, "/v1/queues", None).await;
    queues["queues"]
        .as_array()
        .unwrap()
        .iter()
        .any(|q| q["name"] == queue && q["paused"] == true)
}

async fn a_web_page_cannot_reach_a_server_without_tokens(backend: Backend) {
    let Some(s) = TestServer::start(backend).await else {
        return;
    };
    let port = s.base.rsplit(':').next().unwrap().to_string();

    // DNS rebinding: evil.example resolves to 127.0.0.1, the browser sends its name.
    for path in ["/v1/queues", "/", "/openapi.json", "/no/such/route"] {
        let answer = json_of(
            s.raw(Method::GET, path)
                .header("host", format!("evil.example:{port}"))
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_refused(
            &answer,
            StatusCode::MISDIRECTED_REQUEST,
            "misdirected_request",
            "Host",
        );
    }
    let answer = json_of(
        s.raw(Method::POST, "/v1/queues/emails/pause")
            .header("host", format!("rebound.evil.example:{port}"))
            .header("content-type", "application/json")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(answer.0, StatusCode::MISDIRECTED_REQUEST);
    // localhost, with any port, is this machine.
    let response = s
        .raw(Method::GET, "/v1/queues")
        .header("host", format!("localhost:{port}"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);

    // A cross-site form post, and the CORS-simple content types, with no body or one.
    for (content_type, body) in [
        (None, ""),
        (Some("application/x-www-form-urlencoded"), "x=1"),
        (Some("multipart/form-data; boundary=b"), "--b--"),
        (Some("text/plain"), "{}"),
    ] {
        for path in [
            "/v1/queues/emails/pause",
            "/v1/dependencies/smtp/open",
            "/v1/jobs/1/cancel",
            "/v1/jobs",
        ] {
            let mut request = s.raw(Method::POST, path).body(body);
            if let Some(ct) = content_type {
                request = request.header("content-type", ct);
            }
            let answer = json_of(request.send().await.unwrap()).await;
            assert_refused(
                &answer,
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_media_type",
                "Content-Type",
            );
        }
    }
    // A fetch from another site's page: the browser names it in Origin.
    for origin in [
        "http://evil.example",
        "null",
        &format!("http://127.0.0.1:{}", port.parse::<u16>().unwrap() ^ 1),
    ] {
        let answer = json_of(
            s.raw(Method::POST, "/v1/queues/emails/pause")
                .header("content-type", "application/json")
                .header("origin", origin)
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_refused(&answer, StatusCode::FORBIDDEN, "forbidden", "Origin");
    }
    assert!(!paused(&s, None, "emails").await, "nothing was paused");
    let (_, jobs) = s.call(Method::GET, "/v1/jobs", None).await;
    assert_eq!(jobs["jobs"], json!([]), "nothing was enqueued");
    let (_, deps) = s.call(Method::GET, "/v1/dependencies", None).await;
    assert_eq!(deps["dependencies"], json!([]), "no breaker was opened");

    // The dashboard's own requests: same origin, JSON, `{}` as the body.
    let response = s
        .raw(Method::POST, "/v1/queues/emails/pause")
        .header("content-type", "application/json")
        .header("origin", &s.base)
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert!(paused(&s, None, "emails").await);
    s.finish().await;
}

async fn body_less_routes_refuse_bodies_and_every_refusal_is_json(backend: Backend) {
    let Some(mut s) = TestServer::with_config(
        backend,
        ServerConfig {
            tokens: Tokens::new(vec![Token::new("ops", ADMIN, vec![Scope::Admin])]),
            max_body: 64 * 1024,
            ..ServerConfig::default()
        },
    )
    .await
    else {
        return;
    };
    s.token = Some(ADMIN.into());
    // With a token, a body-less call without a content type works as it always did.
    let response = s
        .raw(Method::POST, "/v1/queues/emails/pause")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    for body in ["{}", " { } ", ""] {
        let response = s
            .raw(Method::POST, "/v1/queues/emails/resume")
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK, "{body:?}");
    }
    for (method, path) in [
        (Method::POST, "/v1/queues/emails/pause"),
        (Method::POST, "/v1/dependencies/smtp/close"),
        (Method::DELETE, "/v1/policies/queue:emails"),
    ] {
        for body in [r#"{"paused": false}"#, "[]", "null", "1", "{} {}"] {
            let answer = json_of(
                s.raw(method.clone(), path)
                    .header("content-type", "application/json")
                    .body(body)
                    .send()
                    .await
                    .unwrap(),
            )
            .await;
            assert_refused(&answer, StatusCode::BAD_REQUEST, "invalid_field", "body");
        }
    }
    // A body over the limit to a pause route (it was 20 MB, and read as nothing):
    // refused, not ignored. (Small enough to be sent whole before the answer.)
    let big = vec![b' '; 100 * 1024];
    let answer = json_of(
        s.raw(Method::POST, "/v1/queues/emails/pause")
            .header("content-type", "application/json")
            .body(big)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(answer.0, StatusCode::PAYLOAD_TOO_LARGE, "{}", answer.1);
    assert_eq!(answer.1["error"]["code"], "payload_too_large");
    assert!(!paused(&s, Some(ADMIN), "emails").await);

    // A 1 MB Authorization header, and too many headers: JSON 431s.
    let huge = format!("Bearer {}", "A".repeat(1024 * 1024));
    let answer = json_of(
        s.raw(Method::GET, "/v1/queues")
            .header("authorization", huge)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_refused(
        &answer,
        StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
        "headers_too_large",
        "authorization",
    );
    let mut many = s.raw(Method::GET, "/v1/queues");
    for i in 0..150 {
        many = many.header(format!("x-h{i}"), "1");
    }
    let answer = json_of(many.send().await.unwrap()).await;
    assert_eq!(answer.0, StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE);
    assert_eq!(answer.1["error"]["code"], "headers_too_large");

    // A rejection the framework makes by itself (a dashboard path that is not UTF-8)
    // comes in the same shape.
    let answer = json_of(s.raw(Method::GET, "/ui/%FF").send().await.unwrap()).await;
    assert_eq!(answer.0, StatusCode::BAD_REQUEST, "{}", answer.1);
    assert_eq!(answer.1["error"]["code"], "bad_request", "{}", answer.1);

    // A repeated query parameter is named.
    for (path, field) in [
        ("/v1/jobs?limit=1&limit=2", "limit"),
        ("/v1/jobs?queue=a&state=ready&queue=b", "queue"),
    ] {
        let (status, body) = s.call(Method::GET, path, None).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{path}: {body}");
        assert_eq!(body["error"]["field"], field, "{path}: {body}");
    }
    s.finish().await;
}

fn limited_tokens() -> Tokens {
    Tokens::new(vec![
        Token::new("ops", ADMIN, vec![Scope::Admin]),
        Token::new("mailer-work", MAILER_WORK, vec![Scope::Work]).limited_to(["emails".into()]),
        Token::new("mailer-produce", MAILER_PRODUCE, vec![Scope::Produce])
            .limited_to(["emails".into(), "sms".into()]),
        Token::new("billing", PRODUCER, vec![Scope::Produce]),
        Token::new("fleet", WORKER, vec![Scope::Work]),
    ])
}

async fn limited(backend: Backend, queue_rules: QueueRules) -> Option<TestServer> {
    TestServer::with_config(
        backend,
        ServerConfig {
            tokens: limited_tokens(),
            queue_rules,
            ..ServerConfig::default()
        },
    )
    .await
}

async fn a_queue_limited_work_token_claims_settles_and_names_workers_only_in_its_queues(
    backend: Backend,
) {
    let Some(s) = limited(backend, QueueRules::default()).await else {
        return;
    };
    let secret = "Authorization: Bearer sk_live_payments_key";
    let (code, _) = s
        .call_as(
            Some(ADMIN),
            Method::POST,
            "/v1/jobs",
            Some(json!({"jobs": [
                {"queue": "billing", "kind": "http", "payload": {"headers": {"auth": secret}}},
                {"queue": "billing", "kind": "charge", "payload": {"card": secret}},
                {"queue": "emails", "kind": "send"},
            ]})),
        )
        .await;
    assert_eq!(code, StatusCode::CREATED);

    // Claiming from another queue: 403 naming queue, the worker not registered.
    let (status, body) = s
        .call_as(
            Some(MAILER_WORK),
            Method::POST,
            "/v1/claims",
            Some(json!({"queue": "billing", "worker": "payments-1", "limit": 10})),
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_eq!(body["error"]["field"], "queue");
    assert!(!body.to_string().contains("sk_live"), "{body}");
    let (_, workers) = s
        .call_as(Some(ADMIN), Method::GET, "/v1/workers", None)
        .await;
    assert_eq!(workers["workers"], json!([]), "{workers}");

    // The billing fleet claims its job; the mailer token tries to settle it with the
    // very lease token (leaked, or guessed): every call answers as for no job.
    let (_, claimed) = s
        .call_as(
            Some(WORKER),
            Method::POST,
            "/v1/claims",
            Some(json!({"queue": "billing", "worker": "payments-1"})),
        )
        .await;
    let job = &claimed["jobs"][0];
    let (id, lease) = (job["id"].as_i64().unwrap(), job["lease_token"].clone());
    for (action, body) in [
        ("heartbeat", json!({"lease_token": lease})),
        ("snooze", json!({"lease_token": lease, "delay": "1h"})),
        (
            "fail",
            json!({"lease_token": lease, "class": "permanent", "message": "x"}),
        ),
        ("complete", json!({"lease_token": lease})),
    ] {
        let (status, answer) = s
            .call_as(
                Some(MAILER_WORK),
                Method::POST,
                &format!("/v1/jobs/{id}/{action}"),
                Some(body.clone()),
            )
            .await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{action}: {answer}");
        assert!(!answer.to_string().contains("sk_live"), "{answer}");
        assert!(!answer.to_string().contains("billing"), "{answer}");
        // The same answer as for an id that does not exist.
        let (status, missing) = s
            .call_as(
                Some(MAILER_WORK),
                Method::POST,
                &format!("/v1/jobs/999999/{action}"),
                Some(body),
            )
            .await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{action}: {missing}");
        assert_eq!(
            answer["error"]["message"]
                .as_str()
                .unwrap()
                .replace(&id.to_string(), "ID"),
            missing["error"]["message"]
                .as_str()
                .unwrap()
                .replace("999999", "ID"),
        );
    }
    let (_, shown) = s
        .call_as(Some(ADMIN), Method::GET, &format!("/v1/jobs/{id}"), None)
        .await;
    assert_eq!(shown["state"], "running", "untouched: {shown}");
    let (status, _) = s
        .call_as(
            Some(WORKER),
            Method::POST,
            &format!("/v1/jobs/{id}/complete"),
            Some(json!({"lease_token": lease})),
        )
        .await;
    assert_eq!(
        status,
        StatusCode::OK,
        "its own worker still holds the lease"
    );

    // In its own queue it works, and the workers it names are its own.
    for name in ["w1", "payments-1", "mailer-work/w1"] {
        let (status, answer) = s
            .call_as(
                Some(MAILER_WORK),
                Method::POST,
                "/v1/claims",
                Some(json!({"queue": "emails", "worker": name})),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{answer}");
    }
    let (_, workers) = s
        .call_as(Some(ADMIN), Method::GET, "/v1/workers", None)
        .await;
    let names: BTreeSet<&str> = workers["workers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["worker"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        BTreeSet::from(["payments-1", "mailer-work/w1", "mailer-work/payments-1"]),
        "an unlimited token's worker keeps its name; a limited one's are prefixed"
    );
    let (_, jobs) = s
        .call_as(Some(ADMIN), Method::GET, "/v1/jobs?queue=emails", None)
        .await;
    let email = &jobs["jobs"][0];
    assert_eq!(email["state"], "running");
    s.finish().await;
}

async fn a_queue_limited_produce_token_enqueues_only_into_its_queues(backend: Backend) {
    let Some(s) = limited(backend, QueueRules::default()).await else {
        return;
    };
    let post = |body: Value| s.call_as(Some(MAILER_PRODUCE), Method::POST, "/v1/jobs", Some(body));
    let (status, body) = post(json!({"queue": "billing", "kind": "exec"})).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_eq!(body["error"]["field"], "queue");
    let (status, body) = post(json!({"jobs": [
        {"queue": "emails", "kind": "send"},
        {"queue": "sms", "kind": "send"},
        {"queue": "emails-eu", "kind": "send"},
    ]}))
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_eq!(body["error"]["field"], "jobs[2].queue");
    let (_, jobs) = s.call_as(Some(ADMIN), Method::GET, "/v1/jobs", None).await;
    assert_eq!(jobs["jobs"], json!([]), "a refused batch wrote nothing");

    let (status, _) = post(json!({"jobs": [
        {"queue": "emails", "kind": "send"},
        {"queue": "sms", "kind": "send"},
    ]}))
    .await;
    assert_eq!(status, StatusCode::CREATED);
    // Unlimited tokens are as they were.
    let (status, _) = s
        .call_as(
            Some(PRODUCER),
            Method::POST,
            "/v1/jobs",
            Some(json!({"queue": "billing", "kind": "exec"})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    s.finish().await;
}

async fn queue_rules_refuse_kinds_whoever_enqueues(backend: Backend) {
    let rules = QueueRules::new(BTreeMap::from([
        (
            "*".to_string(),
            QueueRule {
                kinds: None,
                deny_kinds: BTreeSet::from(["exec".to_string(), "http".to_string()]),
            },
        ),
        (
            "emails".to_string(),
            QueueRule {
                kinds: Some(BTreeSet::from(["send".to_string()])),
                deny_kinds: BTreeSet::new(),
            },
        ),
    ]));
    let Some(s) = limited(backend, rules).await else {
        return;
    };
    for (token, body, field) in [
        (
            PRODUCER,
            json!({"queue": "reports", "kind": "exec"}),
            "kind",
        ),
        (ADMIN, json!({"queue": "reports", "kind": "http"}), "kind"),
        (
            MAILER_PRODUCE,
            json!({"jobs": [{"queue": "emails", "kind": "send"}, {"queue": "emails", "kind": "render"}]}),
            "jobs[1].kind",
        ),
        (
            PRODUCER,
            json!({"jobs": [{"queue": "reports", "kind": "build"}, {"queue": "emails", "kind": "exec"}]}),
            "jobs[1].kind",
        ),
    ] {
        let (status, answer) = s
            .call_as(Some(token), Method::POST, "/v1/jobs", Some(body.clone()))
            .await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{body}: {answer}");
        assert_eq!(answer["error"]["field"], field, "{body}: {answer}");
    }
    let (_, jobs) = s.call_as(Some(ADMIN), Method::GET, "/v1/jobs", None).await;
    assert_eq!(jobs["jobs"], json!([]), "nothing was written");
    for body in [
        json!({"queue": "emails", "kind": "send"}),
        json!({"queue": "reports", "kind": "build"}),
    ] {
        let (status, answer) = s
            .call_as(Some(PRODUCER), Method::POST, "/v1/jobs", Some(body))
            .await;
        assert_eq!(status, StatusCode::CREATED, "{answer}");
    }
    s.finish().await;
}
