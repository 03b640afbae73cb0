//! Which kinds each queue accepts through `POST /v1/jobs`: the config file's
//! `[queues.NAME]` tables.
//!
//! ```toml
//! [queues.emails]
//! kinds = ["send_receipt", "send_reset"]   # only these; absent: any kind
//!
//! [queues."*"]                             # every queue, on top of its own table
//! deny_kinds = ["exec", "http"]            # never these
//! ```
//!
//! A job is accepted when its queue's `kinds` (if given) lists its kind and neither
//! its queue's nor `"*"`'s `deny_kinds` does. The rules bind every token that
//! enqueues through the server, `admin` included: they say what the queue's workers
//! are meant to run, which does not depend on who asks. The library, the CLI and
//! workers are not bound: they hold the database URL, which reaches everything anyway.
//! Without a table, a queue accepts every kind, as before.
//!
//! The built-in `exec` and `http` kinds are the reason: a job of either makes a
//! worker that has them registered run a command or send a request. A producer that
//! should enqueue receipts should not be able to enqueue those.

use std::collections::{BTreeMap, BTreeSet};

use crate::error::{ApiError, ErrorCode};

/// The `[queues."*"]` table's name: rules for every queue. Not a valid queue name.
pub const EVERY_QUEUE: &str = "*";

/// One queue's rules.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QueueRule {
    /// The only kinds accepted; `None`: any.
    pub kinds: Option<BTreeSet<String>>,
    /// Kinds refused.
    pub deny_kinds: BTreeSet<String>,
}

/// Every queue's rules, by queue name ([`EVERY_QUEUE`] for all). Empty: every kind
/// accepted everywhere.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QueueRules {
    rules: BTreeMap<String, QueueRule>,
}

impl QueueRules {
    /// These rules.
    pub fn new(rules: BTreeMap<String, QueueRule>) -> Self {
        QueueRules { rules }
    }

    /// No rule at all.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// 403 `forbidden` naming `field` (`kind`, `jobs[2].kind`) unless `queue` accepts
    /// `kind`.
    pub fn check(&self, field: &str, queue: &str, kind: &str) -> Result<(), ApiError> {
        let refuse = |why: String| Err(ApiError::at(ErrorCode::Forbidden, field, why));
        for (name, rule) in [
            (queue, self.rules.get(queue)),
            (EVERY_QUEUE, self.rules.get(EVERY_QUEUE)),
        ] {
            let Some(rule) = rule else { continue };
            if rule.deny_kinds.contains(kind) {
                return refuse(format!(
                    "kind {kind:?} is refused in queue {queue:?} by this server's \
                     [queues.{name:?}] deny_kinds"
                ));
            }
            if let Some(kinds) = &rule.kinds {
                if !kinds.contains(kind) {
                    return refuse(format!(
                        "queue {queue:?} accepts only the kinds {} ([queues.{name:?}] kinds); \
                         not {kind:?}",
                        kinds
                            .iter()
                            .map(String::as_str)
                            .collect::<Vec<_>>()
                            .join(", ")
                    ));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn kinds_allow_and_deny_kinds_refuse_per_queue_and_for_every_queue() {
        let rules = QueueRules::new(BTreeMap::from([
            (
                "emails".to_string(),
                QueueRule {
                    kinds: Some(set(&["send", "http"])),
                    deny_kinds: BTreeSet::new(),
                },
            ),
            (
                EVERY_QUEUE.to_string(),
                QueueRule {
                    kinds: None,
                    deny_kinds: set(&["exec", "http"]),
                },
            ),
        ]));
        assert!(rules.check("kind", "emails", "send").is_ok());
        assert!(rules.check("kind", "reports", "build").is_ok());
        for (queue, kind) in [
            ("emails", "build"),
            ("emails", "http"),
            ("emails", "exec"),
            ("reports", "exec"),
        ] {
            let err = rules.check("jobs[1].kind", queue, kind).unwrap_err();
            assert_eq!(err.code, ErrorCode::Forbidden, "{queue} {kind}");
            assert_eq!(err.field.as_deref(), Some("jobs[1].kind"));
        }
        assert!(QueueRules::default().check("kind", "q", "exec").is_ok());
    }
}
