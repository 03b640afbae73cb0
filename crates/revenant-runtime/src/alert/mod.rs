//! Alerts on the four numbers: too many dead jobs (any, for a critical queue), a due
//! job waiting too long, jobs due with no worker alive, too many jobs dying per hour.
//!
//! - [`config`]: the TOML rules file ([`AlertConfig`]);
//! - [`evaluate`](mod@evaluate): the pure function from (rules, stats, now, what was
//!   already said) to the messages to send, with a repeat interval so one incident is
//!   one message;
//! - [`notify`]: the log and the webhook.
//!
//! The worker evaluates the rules in its maintenance loop when given a config
//! ([`crate::WorkerBuilder::alerts`]); `revenant check` evaluates them once,
//! for cron. Every worker given a rules file evaluates it, over every queue in the
//! store: give it to one worker (or to `revenant check`) to get one message per
//! incident, not one per worker.

pub mod config;
pub mod evaluate;
pub mod notify;

#[cfg(test)]
mod tests;

pub use config::{AlertConfig, AlertConfigError, EffectiveRules, QueueRules, WebhookConfig};
pub use evaluate::{
    breaches, evaluate, worst, AlertEvent, AlertState, AlertStatus, Breach, Rule, Severity,
};
pub use notify::{webhook_payload, Notifier, NotifyError};
