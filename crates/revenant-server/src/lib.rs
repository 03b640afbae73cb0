//! revenant's HTTP API: what `revenant serve` runs.
//!
//! - producers enqueue jobs (`POST /v1/jobs`), one or a batch, all or nothing;
//! - remote workers, in any language, claim jobs with a lease and settle each attempt
//!   (heartbeat, complete, fail, snooze), every call fenced on the lease token exactly
//!   as the library's are: a stale worker's call changes nothing and answers 409
//!   `lease_lost`;
//! - operators read jobs, triage and redrive dead letters, pause queues, hold open,
//!   close or release dependency breakers, and read the four numbers, the
//!   dependencies' breakers, rate limits and retry budgets, the alert rules' state and
//!   the worker registry;
//! - `/metrics` (Prometheus), `/healthz`, `/readyz`, `/openapi.json`, and the web
//!   dashboard at `/`.
//!
//! The server is stateless: everything is in the store, so several can run against one
//! PostgreSQL behind a load balancer. Authentication is by bearer tokens with scopes
//! ([`auth`]), which may be limited to queues; without tokens the server must listen on
//! loopback ([`check_listen`]) and answers only this machine's programs, not the web
//! pages its browser shows ([`loopback`]).
//! Every error is JSON with a stable code ([`error`]); bad input is never a 500 and
//! never a partial write.
//!
//! ```no_run
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! use revenant_server::{router, ServerConfig};
//!
//! let store = revenant::connect("sqlite://revenant.db").await?;
//! let app = router(store, ServerConfig::default());
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
//! revenant_server::serve(listener, app, std::future::pending()).await?;
//! # Ok(()) }
//! ```
//!
//! The routes and their shapes are in `openapi.json` (served at `/openapi.json`); a
//! test keeps it equal to [`ROUTES`]. `docs/api.md` is the guide.

pub mod auth;
pub mod config;
pub mod connection;
pub mod counters;
pub mod dashboard;
pub mod error;
pub mod extract;
mod http_metrics;
pub mod input;
mod log;
pub mod loopback;
pub mod queue_rules;
mod routes;
pub mod state;
pub mod views;

pub use auth::{Scope, Token, Tokens};
pub use config::{check_listen, ConfigError};
pub use connection::serve;
pub use error::{ApiError, ErrorCode};
pub use routes::{router, Route, Verb, ROUTES};
pub use state::{AppState, ServerConfig};

/// The OpenAPI document, as kept in the repository and served at `/openapi.json`.
pub const OPENAPI_JSON: &str = include_str!("../openapi.json");
