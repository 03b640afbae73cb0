//! A real server on a loopback port over a fresh store, and a small client.
//!
//! SQLite: a temporary file per test. PostgreSQL: a fresh schema per test on
//! `REVENANT_TEST_DATABASE_URL` (else `DATABASE_URL`, else the local default server),
//! dropped when the test ends normally. Under `CI=true` a PostgreSQL server that does
//! not answer fails the test; elsewhere the test is skipped with a loud message.

#![allow(dead_code)] // Each test file uses part of this module.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use reqwest::{Method, StatusCode};
use revenant::postgres::{PgStore, PgStoreOptions};
use revenant::sqlite::SqliteStore;
use revenant::Store;
use revenant_server::{router, ServerConfig};
use serde_json::Value;
use sqlx::{Connection, PgConnection};

/// The backends the tests run on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// A temporary SQLite file.
    Sqlite,
    /// A fresh PostgreSQL schema.
    Postgres,
}

/// Emits one `#[tokio::test]` per backend for each scenario function (an
/// `async fn(Backend)` in the calling file): `sqlite::name` and `postgres::name`.
#[macro_export]
macro_rules! on_both_backends {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name(super::support::Backend::Sqlite).await;
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name(super::support::Backend::Postgres).await;
                }
            )*
        }
    };
}

fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

fn pg_url() -> String {
    std::env::var("REVENANT_TEST_DATABASE_URL")
        .or_else(|_| std::env::var("DATABASE_URL"))
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_string())
}

/// What a server under test runs on; cleans up when dropped.
enum Holder {
    Sqlite(tempfile::TempDir),
    Postgres { url: String, schema: String },
}

/// A server on a loopback port.
pub struct TestServer {
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    /// The store the server runs on, for staging and checking behind its back.
    pub store: Arc<dyn Store>,
    client: reqwest::Client,
    /// The token sent by [`TestServer::call`]; `None`: no Authorization header.
    pub token: Option<String>,
    task: tokio::task::JoinHandle<()>,
    holder: Option<Holder>,
}

impl TestServer {
    /// A server with the default config, or `None` when PostgreSQL is unavailable
    /// outside CI.
    pub async fn start(backend: Backend) -> Option<TestServer> {
        TestServer::with_config(backend, ServerConfig::default()).await
    }

    /// A server with this config.
    pub async fn with_config(backend: Backend, config: ServerConfig) -> Option<TestServer> {
        let (store, holder): (Arc<dyn Store>, Holder) = match backend {
            Backend::Sqlite => {
                let dir = tempfile::tempdir().expect("temp dir");
                let store = SqliteStore::open(&dir.path().join("api.db"))
                    .await
                    .expect("open sqlite");
                (Arc::new(store), Holder::Sqlite(dir))
            }
            Backend::Postgres => {
                let url = pg_url();
                if let Err(err) = PgConnection::connect(&url).await {
                    let message = format!(
                        "PostgreSQL test server {url} does not answer: {err}. Run `eval \"$(scripts/ensure-postgres.sh)\"` or set REVENANT_TEST_DATABASE_URL."
                    );
                    if in_ci() {
                        panic!("{message} (CI=true: PostgreSQL tests fail instead of skipping)");
                    }
                    eprintln!("\n!!!!!!!! SKIPPING PostgreSQL test: {message}\n");
                    return None;
                }
                let secs = SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs());
                let schema = format!("rv_test_{secs}_{:016x}", rand::random::<u64>());
                let store = PgStore::connect_with(
                    &url,
                    PgStoreOptions {
                        schema: schema.clone(),
                        ..PgStoreOptions::default()
                    },
                )
                .await
                .expect("connect to the test database");
                (Arc::new(store), Holder::Postgres { url, schema })
            }
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind a loopback port");
        let base = format!("http://{}", listener.local_addr().expect("bound address"));
        let app = router(Arc::clone(&store), config);
        let task = tokio::spawn(async move {
            revenant_server::serve(listener, app, std::future::pending())
                .await
                .expect("serve");
        });
        Some(TestServer {
            base,
            store,
            client: reqwest::Client::new(),
            token: None,
            task,
            holder: Some(holder),
        })
    }

    /// Sends a request with a JSON body (or none) and the current token; returns the
    /// status and the body as JSON (`Value::Null` for an empty or non-JSON body).
    pub async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        self.call_as(self.token.as_deref(), method, path, body)
            .await
    }

    /// [`TestServer::call`] with this token.
    pub async fn call_as(
        &self,
        token: Option<&str>,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        let mut request = self
            .client
            .request(method.clone(), format!("{}{path}", self.base));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        match body {
            Some(body) => request = request.json(&body),
            // As every client of a server without tokens must (crate::loopback): a
            // change is sent as JSON even with no body.
            None if method != Method::GET => {
                request = request.header("content-type", "application/json");
            }
            None => {}
        }
        let response = request.send().await.expect("send");
        let status = response.status();
        let text = response.text().await.expect("read the body");
        let json = serde_json::from_str(&text).unwrap_or(Value::Null);
        if status.is_server_error() {
            panic!("{method} {path} answered {status}: {text}");
        }
        (status, json)
    }

    /// A raw request, for bodies that are not JSON.
    pub fn raw(&self, method: Method, path: &str) -> reqwest::RequestBuilder {
        let request = self.client.request(method, format!("{}{path}", self.base));
        match &self.token {
            Some(token) => request.bearer_auth(token),
            None => request,
        }
    }

    /// GET, expecting 200.
    pub async fn get(&self, path: &str) -> Value {
        let (status, body) = self.call(Method::GET, path, None).await;
        assert_eq!(status, StatusCode::OK, "GET {path}: {body}");
        body
    }

    /// POST, expecting `expected`.
    pub async fn post(&self, path: &str, body: Value, expected: StatusCode) -> Value {
        let (status, answer) = self.call(Method::POST, path, Some(body.clone())).await;
        assert_eq!(status, expected, "POST {path} {body}: {answer}");
        answer
    }

    /// POST, expecting an error with this status and code; returns the error object.
    pub async fn post_err(&self, path: &str, body: Value, status: StatusCode, code: &str) -> Value {
        let answer = self.post(path, body, status).await;
        assert_eq!(answer["error"]["code"], code, "POST {path}: {answer}");
        assert!(
            answer["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty()),
            "{answer}"
        );
        answer["error"].clone()
    }

    /// GET, expecting an error with this status and code.
    pub async fn get_err(&self, path: &str, status: StatusCode, code: &str) -> Value {
        let (got, answer) = self.call(Method::GET, path, None).await;
        assert_eq!(got, status, "GET {path}: {answer}");
        assert_eq!(answer["error"]["code"], code, "GET {path}: {answer}");
        answer["error"].clone()
    }

    /// Stops the server and drops the test's schema (PostgreSQL).
    pub async fn finish(mut self) {
        self.task.abort();
        if let Some(Holder::Postgres { url, schema }) = self.holder.take() {
            drop(self.store);
            if let Ok(mut conn) = PgConnection::connect(&url).await {
                let _ = sqlx::raw_sql(&format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"))
                    .execute(&mut conn)
                    .await;
            }
        }
    }
}

/// Polls `check` every 20 ms until it returns `Some`, failing after `within`.
pub async fn eventually<T, F, Fut>(within: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + within;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The ids of a `{"jobs": [...]}` answer.
pub fn ids(answer: &Value) -> Vec<i64> {
    answer["jobs"]
        .as_array()
        .unwrap_or_else(|| panic!("no jobs in {answer}"))
        .iter()
        .map(|job| job["id"].as_i64().expect("an id"))
        .collect()
}
