//! What every handler shares. The server keeps no state of its own between requests:
//! everything lives in the store, so several servers can run against one PostgreSQL.

use std::sync::Arc;

use revenant::alert::AlertConfig;
use revenant::{RetryPolicy, Store};

use crate::auth::Tokens;
use crate::config::DEFAULT_MAX_BODY;

/// How the server is set up. Build one with [`ServerConfig::default`] and the fields.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// The tokens accepted. Empty: every route is open (loopback only: see
    /// [`crate::check_listen`]).
    pub tokens: Tokens,
    /// The alert rules `GET /v1/alerts` evaluates; `None`: no rules, nothing firing.
    pub alerts: Option<AlertConfig>,
    /// The largest request body accepted, in bytes. Default 4 MiB.
    pub max_body: usize,
    /// The backoff for transient failures reported by remote workers, and the attempt
    /// budget of jobs enqueued without `max_attempts`. Default: revenant's default
    /// policy (12 attempts, 10 s doubling to 1 h, equal jitter), as `revenant work`.
    pub policy: RetryPolicy,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            tokens: Tokens::default(),
            alerts: None,
            max_body: DEFAULT_MAX_BODY,
            policy: RetryPolicy::default(),
        }
    }
}

/// The handlers' state: the store and the settings, cheap to clone.
#[derive(Clone)]
pub struct AppState {
    /// The store.
    pub store: Arc<dyn Store>,
    /// The alert rules, if any.
    pub alerts: Option<Arc<AlertConfig>>,
    /// The retry policy.
    pub policy: Arc<RetryPolicy>,
}

impl AppState {
    /// The attempt budget of a job enqueued without `max_attempts`.
    pub fn default_max_attempts(&self) -> i32 {
        i32::try_from(self.policy.max_attempts()).unwrap_or(i32::MAX)
    }
}
