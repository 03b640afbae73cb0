//! `revenant serve`: the HTTP API (and the dashboard) on the same database URL as
//! every other command. See docs/api.md.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use revenant::{InputError, MigrateMode};
use revenant_server::config::{self, ConfigError, DEFAULT_MAX_BODY};
use revenant_server::{ServerConfig, Tokens};

use crate::error::CliError;

/// `revenant serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// The address to listen on. Without tokens it must be a loopback address
    /// (127.0.0.1, `[::1]`); port 0 picks a free port (the address is printed).
    #[arg(long, env = "REVENANT_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: String,
    /// The server's config file (TOML): `[[tokens]]` with their scopes and queues,
    /// `[queues.NAME]` kinds, and `alerts`, a rules file. See docs/api.md.
    #[arg(long, env = "REVENANT_SERVER_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Alert rules for GET /v1/alerts (TOML, as `revenant work --alerts`; see
    /// docs/alerts.md). Overrides the config file's `alerts`.
    #[arg(long, env = "REVENANT_ALERTS", value_name = "FILE")]
    pub alerts: Option<PathBuf>,
    /// The largest request body accepted: bytes, or 512KiB, 4MiB... (default 4MiB).
    #[arg(long, value_name = "SIZE")]
    pub max_body: Option<String>,
}

/// Tokens also come from this variable: `NAME:SCOPE[,SCOPE...][@QUEUE[,QUEUE...]]:TOKEN`,
/// separated by spaces or new lines. Not a flag: flags show in `ps`.
const TOKENS_VAR: &str = "REVENANT_TOKENS";

/// Runs the server until SIGTERM or Ctrl-C, then lets requests in flight finish.
/// Every configuration problem is refused before the store is opened: exit 2.
pub async fn run(url: &str, migrate: MigrateMode, args: ServeArgs) -> Result<ExitCode, CliError> {
    let addr: SocketAddr = args.listen.trim().parse().map_err(|_| {
        InputError::new(
            "--listen",
            format!(
                "{:?} is not an address like 127.0.0.1:8080 or [::1]:8080",
                args.listen
            ),
        )
    })?;
    let server_config = configure(addr, &args).map_err(config_error)?;
    let store = revenant::connect_with(url, migrate).await?;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|err| CliError::Failed(format!("cannot listen on {addr}: {err}")))?;
    let bound = listener.local_addr()?;
    let tokens = server_config.tokens.len();
    eprintln!(
        "revenant serve: listening on http://{bound} ({} store {}; {}); stop with Ctrl-C or SIGTERM",
        store.backend(),
        revenant::redact(url),
        if tokens == 0 {
            "no tokens: every route is open to this machine".to_string()
        } else {
            format!("{tokens} token(s)")
        },
    );
    let app = revenant_server::router(store, server_config);
    revenant_server::serve(listener, app, shutdown_signal())
        .await
        .map_err(|err| CliError::Failed(format!("the server stopped: {err}")))?;
    eprintln!("revenant serve: stopped");
    Ok(ExitCode::SUCCESS)
}

fn configure(addr: SocketAddr, args: &ServeArgs) -> Result<ServerConfig, ConfigError> {
    let file = match &args.config {
        Some(path) => config::load_file(path)?,
        None => config::FileSettings::default(),
    };
    let from_env = match std::env::var(TOKENS_VAR) {
        Ok(value) => config::parse_env_tokens(&value)?,
        Err(std::env::VarError::NotPresent) => Vec::new(),
        Err(std::env::VarError::NotUnicode(_)) => {
            return Err(ConfigError::Token {
                source_name: TOKENS_VAR.into(),
                index: 1,
                name: String::new(),
                message: "is not valid UTF-8".into(),
            })
        }
    };
    let tokens: Tokens = config::combine(vec![file.tokens, from_env])?;
    config::check_listen(addr, &tokens)?;
    let alerts = match args.alerts.as_ref().or(file.alerts.as_ref()) {
        Some(path) => Some(config::load_alerts(path)?),
        None => None,
    };
    let max_body = match &args.max_body {
        Some(size) => config::parse_size(size)?,
        None => DEFAULT_MAX_BODY,
    };
    Ok(ServerConfig {
        tokens,
        alerts,
        max_body,
        queue_rules: file.queue_rules,
    })
}

/// A configuration problem is bad input: exit 2, the message naming it.
fn config_error(err: ConfigError) -> CliError {
    let field = match &err {
        ConfigError::OpenBeyondLoopback { .. } => "--listen",
        ConfigError::MaxBody(_) => "--max-body",
        ConfigError::Alerts(_) => "--alerts",
        ConfigError::Token { .. } => "tokens",
        _ => "--config",
    };
    InputError::new(field, err.to_string()).into()
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {}
        _ = term => {}
    }
}
