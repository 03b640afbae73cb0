//! `revenant serve` cut off from its database (RELIABILITY.md test 24): the server's
//! router (what `revenant serve` runs) on a loopback port, over a PostgreSQL store whose
//! connections go through the fault proxy, black-holed mid-run (no reset: no call fails,
//! none answers). Each store call a request makes fails within the pool's acquire
//! timeout (an idle connection's ping is part of it; 5 s by default, 2 s here), so a
//! request fails within that many timeouts (an enqueue makes two: the policy snapshot's
//! refresh, whose failure keeps the last snapshot, then the insert) with 503 and a JSON
//! error `store_unavailable`; `/readyz` says the same; `/healthz` still answers (it never
//! touches the store, so a supervisor does not restart the server for an outage); and
//! when the partition heals the server recovers by itself: `/readyz` is ready again
//! and enqueues are accepted, with nothing written by the requests refused meanwhile.
//!
//! PostgreSQL only: SQLite has no network between the server and its database.

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use revenant::postgres::{PgStore, PgStoreOptions};
use revenant::Store;
use revenant_server::{router, ServerConfig};
use revenant_torture::fleet;
use revenant_torture::proxy::{FaultProxy, Mode};
use serde_json::{json, Value};
use support::*;

struct Api {
    base: String,
    client: reqwest::Client,
}

impl Api {
    /// Sends a request; returns the status, the JSON body and how long it took.
    async fn call(&self, get: bool, path: &str, body: Value) -> (StatusCode, Value, Duration) {
        let started = Instant::now();
        let url = format!("{}{path}", self.base);
        let request = if get {
            self.client.get(url)
        } else {
            self.client.post(url).json(&body)
        };
        let response = request.send().await.expect("the server answers");
        let status = response.status();
        let text = response.text().await.expect("read the body");
        let json = serde_json::from_str(&text)
            .unwrap_or_else(|_| panic!("{path} answered {status} without JSON: {text:?}"));
        (status, json, started.elapsed())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revenant_serve_cut_off_from_its_database_answers_503_fast_and_recovers_alone() {
    let Some(db) = Db::new(Backend::Postgres).await else {
        return;
    };
    let proxy = FaultProxy::for_url(&db.url)
        .await
        .expect("start the fault proxy");
    let options = PgStoreOptions {
        schema: db.schema.clone().expect("a schema"),
        acquire_timeout: Duration::from_secs(2),
        ..PgStoreOptions::default()
    };
    let acquire = options.acquire_timeout;
    let store: Arc<dyn Store> = Arc::new(
        PgStore::connect_with(&proxy.url(&db.url), options)
            .await
            .expect("connect through the proxy"),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind a loopback port");
    let api = Api {
        base: format!("http://{}", listener.local_addr().unwrap()),
        // Far above the bound asserted: a hung request is reported, not waited on.
        client: reqwest::Client::builder()
            .timeout(Duration::from_secs(120))
            .build()
            .unwrap(),
    };
    let server = tokio::spawn(async move {
        revenant_server::serve(
            listener,
            router(store, ServerConfig::default()),
            std::future::pending(),
        )
        .await
        .expect("serve");
    });
    let job = json!({ "queue": "partition", "kind": "noop", "payload": {} });
    let (status, ready, _) = api.call(true, "/readyz", Value::Null).await;
    assert_eq!(status, StatusCode::OK, "{ready}");
    let (status, body, _) = api.call(false, "/v1/jobs", job.clone()).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");

    proxy.set(Mode::Blackhole);
    // The bound: two acquire timeouts, and slack for a busy machine.
    let bound = acquire * 2 + Duration::from_secs(5);
    let mut refusals = Vec::new();
    for (get, path, body) in [
        (true, "/readyz", Value::Null),
        (false, "/v1/jobs", job.clone()),
        (true, "/v1/queues", Value::Null),
    ] {
        let (status, body, took) = api.call(get, path, body).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{path}: {body}");
        assert_eq!(body["error"]["code"], "store_unavailable", "{path}: {body}");
        assert!(
            took <= bound,
            "{path} took {took:?} (bound {bound:?}): {body}"
        );
        refusals.push((path, took, body["error"]["message"].clone()));
    }
    let (status, body, _) = api.call(true, "/healthz", Value::Null).await;
    assert_eq!(
        status,
        StatusCode::OK,
        "liveness never touches the store: {body}"
    );

    proxy.set(Mode::Pass);
    let healed = Instant::now();
    let mut not_ready = 0;
    loop {
        let (status, body, _) = api.call(true, "/readyz", Value::Null).await;
        if status == StatusCode::OK {
            break;
        }
        not_ready += 1;
        assert!(
            healed.elapsed() < Duration::from_secs(60),
            "not ready 60 s after the heal: {body}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let ready_in = healed.elapsed();
    let (status, body, _) = api.call(false, "/v1/jobs", job.clone()).await;
    assert_eq!(status, StatusCode::CREATED, "after the heal: {body}");
    // One job before, one after: the refused enqueue wrote nothing.
    let direct = db.store().await;
    let rows = fleet::all_jobs(direct.as_ref(), "partition").await.unwrap();
    assert_eq!(rows.len(), 2, "{rows:#?}");

    let slowest = refusals.iter().map(|(_, took, _)| *took).max().unwrap();
    let measured = format!(
        "black-holed: {} routes answered 503 store_unavailable in at most {slowest:.1?} \
         (acquire timeout {acquire:?}; \"{}\"); /healthz 200 throughout; ready again \
         {ready_in:.1?} after the heal ({not_ready} not-ready answers meanwhile); the \
         refused enqueue wrote nothing",
        refusals.len(),
        refusals[0].2.as_str().unwrap_or_default()
    );
    summary(Summary {
        test: "24 revenant serve cut off",
        backend: "postgres",
        jobs: rows.len(),
        faults: 1,
        fault_kind: "black-holed server connections",
        report: &Default::default(),
        measured: measured.clone(),
    });
    eprintln!("{measured}");
    server.abort();
    drop(proxy);
    db.cleanup().await;
}
