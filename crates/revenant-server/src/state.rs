//! What every handler shares. The server keeps no state of its own between requests
//! beyond its own counters: everything else lives in the store, so several servers can
//! run against one PostgreSQL.

use std::sync::Arc;

use revenant::alert::AlertConfig;
use revenant::{Client, Store};

use crate::auth::Tokens;
use crate::config::DEFAULT_MAX_BODY;
use crate::counters::Counters;
use crate::queue_rules::QueueRules;

/// How the server is set up. Build one with [`ServerConfig::default`] and the fields.
///
/// There is no retry policy here: a job's attempt budget and backoff come from the
/// policies stored in the database for its queue and kind (`PUT /v1/policies/{scope}`,
/// `revenant policy set`), so the server, the CLI and the workers resolve the same one.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// The tokens accepted. Empty: every route is open (loopback only: see
    /// [`crate::check_listen`]).
    pub tokens: Tokens,
    /// The alert rules `GET /v1/alerts` evaluates; `None`: no rules, nothing firing.
    pub alerts: Option<AlertConfig>,
    /// The largest request body accepted, in bytes. Default 4 MiB.
    pub max_body: usize,
    /// The kinds `POST /v1/jobs` accepts per queue (the config file's
    /// `[queues.NAME]`). Default: every kind everywhere.
    pub queue_rules: QueueRules,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            tokens: Tokens::default(),
            alerts: None,
            max_body: DEFAULT_MAX_BODY,
            queue_rules: QueueRules::default(),
        }
    }
}

/// The handlers' state: the client every operation goes through, the alert rules and
/// the server's own counters. Cheap to clone.
#[derive(Clone)]
pub struct AppState {
    /// The one door to the store: enqueue, cancel, settle, redrive, purge, pause,
    /// breakers, policies.
    pub client: Client,
    /// The alert rules, if any.
    pub alerts: Option<Arc<AlertConfig>>,
    /// The counters of the attempts remote workers settled here, for `/metrics`.
    pub counters: Arc<Counters>,
    /// The kinds each queue accepts through the API.
    pub queue_rules: Arc<QueueRules>,
}

impl AppState {
    /// The store under the client, for reads the client does not wrap and for the
    /// calls that are not a user-level workflow (a claim, a heartbeat).
    pub fn store(&self) -> &Arc<dyn Store> {
        self.client.store()
    }
}
