//! revenant's built-in job kinds, so revenant is useful without writing Rust:
//!
//! - [`http`]: deliver one HTTP request ([`HttpHandler`], kind `http`); 2xx succeeds,
//!   429 and 5xx and network failures retry (honouring `Retry-After`), other 4xx and
//!   redirects are permanent;
//! - [`exec`]: run one command ([`ExecHandler`], kind `exec`); exit 0 succeeds, 75
//!   (`EX_TEMPFAIL`) and death by a signal retry, other exit codes are permanent, and a
//!   timeout stops the command's whole process group.
//!
//! [`register_builtin`] adds both to a [`WorkerBuilder`]:
//!
//! ```no_run
//! # use std::sync::Arc;
//! # fn f(store: Arc<dyn revenant_core::Store>) -> Result<(), Box<dyn std::error::Error>> {
//! use revenant_runtime::Worker;
//!
//! let worker = revenant_kinds::register_builtin(Worker::builder(store).queue("webhooks", 10))?
//!     .build()?;
//! # Ok(()) }
//! ```
//!
//! Both kinds check their payload before doing anything: a bad field is a permanent
//! failure whose message names it (`http payload: url: ...`), and an unknown field is a
//! `decode_error`. Their error messages carry what an operator needs at 3am: the status
//! and the start of the response body, or the exit code and the tail of standard error.
//!
//! Both are safe by default against a producer who controls the payload (the threat
//! model is in `docs/security.md`):
//!
//! - `http` refuses internal destinations (loopback, link-local and cloud metadata,
//!   private ranges and the like), checked on the addresses actually connected to,
//!   unless [`HttpHandler::builder`] allows them ([`OutboundPolicy`]);
//! - `exec` runs only the programs given to [`ExecHandler::allow`], each resolved to
//!   one file when the worker starts, and lets a payload set only the environment
//!   variables ([`ExecHandler::allow_env`], never `PATH`, `LD_*`, `DYLD_*`) and working
//!   directories ([`ExecHandler::allow_cwd`]) the operator allows.
//!
//! A refusal is a permanent failure naming the field or the rule, and nothing is sent
//! or run.
//!
//! Unix only: the `exec` kind needs process groups and signals.

pub mod exec;
pub mod http;

mod excerpt;

pub use exec::{ExecConfigError, ExecHandler, ExecPayload};
pub use http::{
    DestinationRefused, HttpClientError, HttpHandler, HttpHandlerBuilder, HttpPayload,
    OutboundPolicy, OutboundPolicyError,
};

use revenant_runtime::WorkerBuilder;

/// The kinds [`register_builtin`] adds, in that order.
pub const BUILTIN_KINDS: [&str; 2] = ["http", "exec"];

/// Registers the `http` and `exec` handlers, with their defaults, on `builder`: `http`
/// with the default outbound policy (internal destinations refused), `exec` with no
/// command list, no `env` and no `cwd` allowed.
///
/// A kind already registered on the builder is reported by
/// [`WorkerBuilder::build`] as a duplicate, like any other.
///
/// Fails only when the `http` kind's client cannot be built (its TLS backend failed to
/// initialise).
///
/// **Security:** both are registered safe by default: `http` refuses internal
/// destinations (see [`http::OutboundPolicy`]) and `exec` allows no command, so an
/// `exec` job is refused, naming the missing allow list. To run commands, register
/// `ExecHandler::new().allow([...])?` yourself instead of calling this.
pub fn register_builtin(builder: WorkerBuilder) -> Result<WorkerBuilder, HttpClientError> {
    Ok(builder
        .handler(HttpHandler::new()?)
        .handler(ExecHandler::new()))
}
