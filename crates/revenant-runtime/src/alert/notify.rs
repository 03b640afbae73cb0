//! Where alert messages go: the log, always, and the webhook, when one is configured.

use std::time::Duration;

use serde_json::{json, Value};

use crate::alert::config::{AlertConfig, WebhookConfig};
use crate::alert::evaluate::{AlertEvent, AlertStatus, Severity};

/// Why a webhook post failed. The message is kept for the log; the alert is sent
/// again at the next evaluation.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NotifyError {
    /// The request could not be made or timed out.
    #[error("webhook request failed: {0}")]
    Request(#[source] reqwest::Error),
    /// The receiver answered with a status other than 2xx.
    #[error("webhook answered HTTP {status}: {body}")]
    Status {
        /// The HTTP status.
        status: u16,
        /// The start of the answer's body.
        body: String,
    },
}

/// Sends alert messages to the log and the webhook.
#[derive(Debug, Clone)]
pub struct Notifier {
    webhook: Option<(WebhookConfig, reqwest::Client)>,
}

impl Notifier {
    /// A notifier for `config`'s webhook (none: log only).
    pub fn new(config: &AlertConfig) -> Result<Self, reqwest::Error> {
        let webhook = match &config.webhook {
            Some(webhook) => {
                let client = reqwest::Client::builder()
                    .timeout(webhook.timeout)
                    .connect_timeout(webhook.timeout.min(Duration::from_secs(5)))
                    .user_agent(concat!("revenant/", env!("CARGO_PKG_VERSION")))
                    .build()?;
                Some((webhook.clone(), client))
            }
            None => None,
        };
        Ok(Notifier { webhook })
    }

    /// Whether a webhook is configured.
    pub fn has_webhook(&self) -> bool {
        self.webhook.is_some()
    }

    /// Writes the event to the log: `error` for critical alerts, `warn` for warnings
    /// and for resolved ones (so the default `warn` filter shows how it ended); with `queue`, `rule`, `severity`, `state`, `value`,
    /// `threshold` and `since` as fields.
    pub fn log(&self, event: &AlertEvent) {
        let text = event.text();
        let (queue, rule, severity, state) = (
            event.queue.as_str(),
            event.rule.as_str(),
            event.severity.as_str(),
            event.state.as_str(),
        );
        let since = event.since.to_rfc3339();
        match (event.state, event.severity) {
            (AlertStatus::Resolved, _) => tracing::warn!(
                alert = true,
                queue,
                rule,
                severity,
                state,
                value = event.value,
                threshold = event.threshold,
                since,
                "{text}"
            ),
            (AlertStatus::Firing, Severity::Warning) => tracing::warn!(
                alert = true,
                queue,
                rule,
                severity,
                state,
                value = event.value,
                threshold = event.threshold,
                since,
                repeat = event.repeat,
                "{text}"
            ),
            (AlertStatus::Firing, Severity::Critical) => tracing::error!(
                alert = true,
                queue,
                rule,
                severity,
                state,
                value = event.value,
                threshold = event.threshold,
                since,
                repeat = event.repeat,
                "{text}"
            ),
        }
    }

    /// Posts the event to the webhook, if there is one. Any 2xx answer is success.
    pub async fn post(&self, event: &AlertEvent) -> Result<(), NotifyError> {
        let Some((webhook, client)) = &self.webhook else {
            return Ok(());
        };
        let mut request = client.post(&webhook.url).json(&payload(event));
        for (name, value) in &webhook.headers {
            request = request.header(name, value);
        }
        let response = request.send().await.map_err(NotifyError::Request)?;
        let status = response.status();
        if status.is_success() {
            return Ok(());
        }
        let body = response.text().await.unwrap_or_default();
        Err(NotifyError::Status {
            status: status.as_u16(),
            body: body.chars().take(200).collect(),
        })
    }
}

/// The webhook's JSON body: `text` for chat webhooks (Slack, Mattermost, ...), and
/// the same facts as fields for machines.
///
/// ```
/// # use revenant_runtime::alert::{AlertEvent, AlertStatus, Rule, Severity, webhook_payload};
/// let at = chrono::Utc::now();
/// let event = AlertEvent {
///     queue: "payments".into(), rule: Rule::DeadAbove, severity: Severity::Critical,
///     state: AlertStatus::Firing, value: 1.0, threshold: 0.0, at, since: at, repeat: false,
/// };
/// let body = webhook_payload(&event);
/// assert_eq!(body["text"], "[CRITICAL] revenant: queue payments: 1 dead job (alert above 0)");
/// assert_eq!(body["value"], 1);
/// assert_eq!(body["state"], "firing");
/// ```
pub fn webhook_payload(event: &AlertEvent) -> Value {
    payload(event)
}

fn payload(event: &AlertEvent) -> Value {
    json!({
        "text": event.text(),
        "source": "revenant",
        "queue": event.queue,
        "rule": event.rule,
        "severity": event.severity,
        "state": event.state,
        "value": number(event.value),
        "threshold": number(event.threshold),
        "at": event.at,
        "since": event.since,
        "repeat": event.repeat,
    })
}

/// Counts as integers (`1`, not `1.0`), so receivers that compare them as such work.
fn number(value: f64) -> Value {
    if value.fract() == 0.0 && value.abs() < 9.0e15 {
        json!(value as i64)
    } else {
        json!(value)
    }
}
