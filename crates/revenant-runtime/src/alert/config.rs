//! The alert rules file: TOML, read once at start, refused whole if any key is unknown
//! or any value cannot work.
//!
//! ```toml
//! interval = "15s"          # how often the worker evaluates (default 15s)
//! repeat_interval = "1h"    # re-send a still-firing alert this often (default 1h)
//!
//! [default]                 # every queue not listed below
//! dead_above = 100          # more than 100 dead jobs
//! oldest_due_above = "10m"  # the oldest due job waited more than 10 minutes
//! no_workers = true         # jobs are due but no worker serving the queue is alive
//! dead_per_hour_above = 50  # more than 50 jobs died in the last hour
//!
//! [queues.payments]
//! critical = true           # every alert of this queue is critical; dead above 0
//! oldest_due_above = "2m"
//!
//! [webhook]
//! url = "https://hooks.slack.com/services/..."
//! headers = { Authorization = "Bearer ..." }
//! timeout = "5s"            # default 5s
//! ```

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use revenant_core::duration;
use revenant_core::names;

/// A rules file that cannot be used. Every variant names the file's key at fault.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AlertConfigError {
    /// The file could not be read.
    #[error("cannot read the alerts file {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The file is not valid TOML.
    #[error("the alerts file is not valid TOML: {0}")]
    Syntax(#[source] toml::de::Error),
    /// A key is unknown, or its value cannot work.
    #[error("alerts file, key `{key}`: {message}")]
    Key {
        /// The key's dotted path (`queues.emails.oldest_due_above`).
        key: String,
        /// What is wrong.
        message: String,
    },
}

impl AlertConfigError {
    fn key(key: impl Into<String>, message: impl Into<String>) -> Self {
        AlertConfigError::Key {
            key: key.into(),
            message: message.into(),
        }
    }
}

/// The rules one queue (or `[default]`) sets. `None` means "not set here": a queue
/// takes each setting it leaves out from `[default]`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QueueRules {
    /// Every alert of this queue is critical (else warning), and the dead threshold
    /// is 0 unless the queue sets its own `dead_above`. Default false.
    pub critical: Option<bool>,
    /// Alert when more than this many jobs are dead.
    pub dead_above: Option<u64>,
    /// Alert when the oldest due job has waited longer than this.
    pub oldest_due_above: Option<Duration>,
    /// Alert when jobs are due but no worker serving the queue is alive. Not checked
    /// for a paused queue (its jobs wait on purpose).
    pub no_workers: Option<bool>,
    /// Alert when more than this many jobs died in the last hour.
    pub dead_per_hour_above: Option<u64>,
}

/// The rules that apply to one queue, once `[default]` and the queue's own table are
/// merged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EffectiveRules {
    /// Critical queue: every alert critical.
    pub critical: bool,
    /// Dead count threshold, if checked.
    pub dead_above: Option<u64>,
    /// Oldest due job's age limit, if checked.
    pub oldest_due_above: Option<Duration>,
    /// Whether "jobs due, no worker alive" is checked.
    pub no_workers: bool,
    /// Dead-per-hour threshold, if checked.
    pub dead_per_hour_above: Option<u64>,
}

/// Where alerts are posted besides the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookConfig {
    /// An `http://` or `https://` URL. Slack, Mattermost, Rocket.Chat and Discord's
    /// Slack-compatible endpoint accept the payload's `text` field as the message.
    pub url: String,
    /// Extra request headers (an `Authorization` token, say).
    pub headers: BTreeMap<String, String>,
    /// How long one post may take. Default 5 s, so a hung receiver delays the next
    /// alert by little; a post that fails is sent again at the next evaluation.
    pub timeout: Duration,
}

/// The whole rules file. See the [module docs](self) for the format.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AlertConfig {
    /// How often the worker evaluates the rules. Default 15 s: about the scrape
    /// interval Prometheus users expect, and one cheap stats query per interval.
    pub interval: Duration,
    /// A still-firing alert is sent again after this long. Default 1 h: one incident
    /// is one message, with a reminder each hour that it is not over.
    pub repeat_interval: Duration,
    /// Rules for every queue not listed in `queues`, and the settings a listed queue
    /// leaves out.
    pub default: QueueRules,
    /// Rules per queue.
    pub queues: BTreeMap<String, QueueRules>,
    /// The webhook, if any. Without one, alerts go to the log only.
    pub webhook: Option<WebhookConfig>,
}

/// Default evaluation interval.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(15);
/// Default repeat interval.
pub const DEFAULT_REPEAT_INTERVAL: Duration = Duration::from_secs(3600);
/// Default webhook timeout.
pub const DEFAULT_WEBHOOK_TIMEOUT: Duration = Duration::from_secs(5);

impl Default for AlertConfig {
    /// No rules, no webhook, default intervals.
    fn default() -> Self {
        AlertConfig {
            interval: DEFAULT_INTERVAL,
            repeat_interval: DEFAULT_REPEAT_INTERVAL,
            default: QueueRules::default(),
            queues: BTreeMap::new(),
            webhook: None,
        }
    }
}

impl AlertConfig {
    /// The rules `revenant check` uses when no file is given: for every queue, a
    /// warning when any job is dead, when the oldest due job waited over 5 minutes,
    /// and when jobs are due with no worker alive. No queue is critical: only the
    /// operator knows which ones are.
    pub fn builtin() -> Self {
        AlertConfig {
            default: QueueRules {
                critical: None,
                dead_above: Some(0),
                oldest_due_above: Some(Duration::from_secs(300)),
                no_workers: Some(true),
                dead_per_hour_above: None,
            },
            ..AlertConfig::default()
        }
    }

    /// Reads and checks a rules file.
    pub fn load(path: &Path) -> Result<Self, AlertConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| AlertConfigError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Self::from_toml(&text)
    }

    /// Parses and checks the text of a rules file.
    ///
    /// ```
    /// use revenant_runtime::alert::AlertConfig;
    /// let config = AlertConfig::from_toml("[queues.payments]\ncritical = true\n").unwrap();
    /// assert_eq!(config.rules_for("payments").dead_above, Some(0));
    /// let err = AlertConfig::from_toml("[default]\ndead_abov = 3\n").unwrap_err();
    /// assert!(err.to_string().contains("default.dead_abov"));
    /// ```
    pub fn from_toml(text: &str) -> Result<Self, AlertConfigError> {
        let table: toml::Table = text.parse().map_err(AlertConfigError::Syntax)?;
        let mut config = AlertConfig::default();
        for (key, value) in &table {
            match key.as_str() {
                "interval" => config.interval = positive_duration(key, value)?,
                "repeat_interval" => config.repeat_interval = positive_duration(key, value)?,
                "default" => config.default = queue_rules("default", value)?,
                "queues" => {
                    let queues = value.as_table().ok_or_else(|| {
                        AlertConfigError::key(key, "must be a table of queues: [queues.NAME]")
                    })?;
                    for (queue, rules) in queues {
                        let path = format!("queues.{queue}");
                        names::validate_name("queue", queue)
                            .map_err(|err| AlertConfigError::key(&path, err.message))?;
                        config
                            .queues
                            .insert(queue.clone(), queue_rules(&path, rules)?);
                    }
                }
                "webhook" => config.webhook = Some(webhook(value)?),
                _ => {
                    return Err(AlertConfigError::key(
                        key,
                        "unknown key; expected interval, repeat_interval, [default], \
                         [queues.NAME] or [webhook]",
                    ))
                }
            }
        }
        Ok(config)
    }

    /// The rules for `queue`: its own table over `[default]`. A critical queue's dead
    /// threshold is its own `dead_above`, else 0 (`[default]`'s is not inherited:
    /// "critical" means one dead job is an incident).
    pub fn rules_for(&self, queue: &str) -> EffectiveRules {
        let own = self.queues.get(queue);
        let pick = |f: fn(&QueueRules) -> Option<u64>| own.and_then(f).or(f(&self.default));
        let critical = own
            .and_then(|r| r.critical)
            .or(self.default.critical)
            .unwrap_or(false);
        let dead_above = if critical {
            Some(own.and_then(|r| r.dead_above).unwrap_or(0))
        } else {
            pick(|r| r.dead_above)
        };
        EffectiveRules {
            critical,
            dead_above,
            oldest_due_above: own
                .and_then(|r| r.oldest_due_above)
                .or(self.default.oldest_due_above),
            no_workers: own
                .and_then(|r| r.no_workers)
                .or(self.default.no_workers)
                .unwrap_or(false),
            dead_per_hour_above: pick(|r| r.dead_per_hour_above),
        }
    }
}

fn queue_rules(path: &str, value: &toml::Value) -> Result<QueueRules, AlertConfigError> {
    let table = value
        .as_table()
        .ok_or_else(|| AlertConfigError::key(path, "must be a table"))?;
    let mut rules = QueueRules::default();
    for (key, value) in table {
        let full = format!("{path}.{key}");
        match key.as_str() {
            "critical" => rules.critical = Some(boolean(&full, value)?),
            "dead_above" => rules.dead_above = Some(count(&full, value)?),
            "oldest_due_above" => rules.oldest_due_above = Some(positive_duration(&full, value)?),
            "no_workers" => rules.no_workers = Some(boolean(&full, value)?),
            "dead_per_hour_above" => rules.dead_per_hour_above = Some(count(&full, value)?),
            _ => {
                return Err(AlertConfigError::key(
                    full,
                    "unknown key; expected critical, dead_above, oldest_due_above, \
                     no_workers or dead_per_hour_above",
                ))
            }
        }
    }
    Ok(rules)
}

fn webhook(value: &toml::Value) -> Result<WebhookConfig, AlertConfigError> {
    let table = value
        .as_table()
        .ok_or_else(|| AlertConfigError::key("webhook", "must be a table: [webhook]"))?;
    let mut url = None;
    let mut headers = BTreeMap::new();
    let mut timeout = DEFAULT_WEBHOOK_TIMEOUT;
    for (key, value) in table {
        let full = format!("webhook.{key}");
        match key.as_str() {
            "url" => {
                let text = string(&full, value)?;
                let parsed = reqwest::Url::parse(text)
                    .map_err(|err| AlertConfigError::key(&full, format!("{text:?}: {err}")))?;
                if !matches!(parsed.scheme(), "http" | "https") {
                    return Err(AlertConfigError::key(
                        &full,
                        "must be an http:// or https:// URL",
                    ));
                }
                url = Some(text.to_string());
            }
            "headers" => {
                let entries = value
                    .as_table()
                    .ok_or_else(|| AlertConfigError::key(&full, "must be a table of strings"))?;
                for (name, value) in entries {
                    let full = format!("webhook.headers.{name}");
                    let text = string(&full, value)?;
                    reqwest::header::HeaderName::from_bytes(name.as_bytes())
                        .map_err(|_| AlertConfigError::key(&full, "is not a valid header name"))?;
                    reqwest::header::HeaderValue::from_str(text)
                        .map_err(|_| AlertConfigError::key(&full, "is not a valid header value"))?;
                    headers.insert(name.clone(), text.to_string());
                }
            }
            "timeout" => timeout = positive_duration(&full, value)?,
            _ => {
                return Err(AlertConfigError::key(
                    full,
                    "unknown key; expected url, headers or timeout",
                ))
            }
        }
    }
    let url = url.ok_or_else(|| AlertConfigError::key("webhook.url", "is required"))?;
    Ok(WebhookConfig {
        url,
        headers,
        timeout,
    })
}

fn string<'a>(key: &str, value: &'a toml::Value) -> Result<&'a str, AlertConfigError> {
    value
        .as_str()
        .ok_or_else(|| AlertConfigError::key(key, format!("must be a string, not {value}")))
}

fn boolean(key: &str, value: &toml::Value) -> Result<bool, AlertConfigError> {
    value
        .as_bool()
        .ok_or_else(|| AlertConfigError::key(key, format!("must be true or false, not {value}")))
}

fn count(key: &str, value: &toml::Value) -> Result<u64, AlertConfigError> {
    value
        .as_integer()
        .and_then(|n| u64::try_from(n).ok())
        .ok_or_else(|| {
            AlertConfigError::key(
                key,
                format!("must be a whole number, 0 or more, not {value}"),
            )
        })
}

fn positive_duration(key: &str, value: &toml::Value) -> Result<Duration, AlertConfigError> {
    let text = value.as_str().ok_or_else(|| {
        AlertConfigError::key(
            key,
            format!("must be a duration string like \"30s\" or \"5m\", not {value}"),
        )
    })?;
    let parsed =
        duration::parse("duration", text).map_err(|err| AlertConfigError::key(key, err.message))?;
    if parsed.is_zero() {
        return Err(AlertConfigError::key(key, "must be above zero"));
    }
    Ok(parsed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_file_is_read_with_its_defaults_filled_in() {
        let config = AlertConfig::from_toml(
            r#"
            repeat_interval = "30m"
            [default]
            dead_above = 100
            oldest_due_above = "10m"
            no_workers = true
            [queues.payments]
            critical = true
            oldest_due_above = "2m"
            [queues.reports]
            dead_above = 5
            no_workers = false
            [webhook]
            url = "http://127.0.0.1:9000/hook"
            headers = { Authorization = "Bearer x" }
            "#,
        )
        .expect("valid");
        assert_eq!(config.interval, DEFAULT_INTERVAL);
        assert_eq!(config.repeat_interval, Duration::from_secs(1800));
        let payments = config.rules_for("payments");
        assert!(payments.critical);
        assert_eq!(payments.dead_above, Some(0), "critical: dead above 0");
        assert_eq!(payments.oldest_due_above, Some(Duration::from_secs(120)));
        assert!(payments.no_workers, "inherited from [default]");
        let reports = config.rules_for("reports");
        assert_eq!(reports.dead_above, Some(5));
        assert!(!reports.no_workers);
        let other = config.rules_for("anything");
        assert!(!other.critical);
        assert_eq!(other.dead_above, Some(100));
        let webhook = config.webhook.expect("webhook");
        assert_eq!(webhook.headers["Authorization"], "Bearer x");
        assert_eq!(webhook.timeout, DEFAULT_WEBHOOK_TIMEOUT);
    }

    #[test]
    fn unknown_keys_and_bad_values_are_refused_naming_the_key() {
        for (text, key) in [
            ("intervall = \"1s\"", "`intervall`"),
            ("[default]\ndead_abov = 1", "`default.dead_abov`"),
            (
                "[queues.emails]\noldest_due_above = \"5x\"",
                "`queues.emails.oldest_due_above`",
            ),
            (
                "[queues.emails]\noldest_due_above = 300",
                "`queues.emails.oldest_due_above`",
            ),
            (
                "[queues.emails]\ndead_above = -1",
                "`queues.emails.dead_above`",
            ),
            (
                "[queues.emails]\ncritical = \"yes\"",
                "`queues.emails.critical`",
            ),
            (
                "[queues.\"bad queue!\"]\ncritical = true",
                "`queues.bad queue!`",
            ),
            ("repeat_interval = \"0s\"", "`repeat_interval`"),
            ("[webhook]\nheaders = { A = \"b\" }", "`webhook.url`"),
            ("[webhook]\nurl = \"ftp://x\"", "`webhook.url`"),
            (
                "[webhook]\nurl = \"http://x\"\nmethod = \"PUT\"",
                "`webhook.method`",
            ),
            (
                "[webhook]\nurl = \"http://x\"\nheaders = { \"a b\" = \"c\" }",
                "`webhook.headers.a b`",
            ),
        ] {
            let err = AlertConfig::from_toml(text).expect_err(text).to_string();
            assert!(err.contains(key), "{text:?}: {err}");
        }
        assert!(matches!(
            AlertConfig::from_toml("[default"),
            Err(AlertConfigError::Syntax(_))
        ));
    }

    #[test]
    fn the_builtin_rules_warn_on_any_dead_job_old_jobs_and_no_workers() {
        let rules = AlertConfig::builtin().rules_for("emails");
        assert!(!rules.critical);
        assert_eq!(rules.dead_above, Some(0));
        assert_eq!(rules.oldest_due_above, Some(Duration::from_secs(300)));
        assert!(rules.no_workers);
    }
}
