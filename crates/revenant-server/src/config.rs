//! The server's configuration: tokens (from a TOML file and the `REVENANT_TOKENS`
//! environment variable), alert rules, the body limit, and the rule that keeps an
//! unauthenticated server on loopback.
//!
//! The config file:
//!
//! ```toml
//! # Alert rules for GET /v1/alerts, in the format of `revenant work --alerts`
//! # (docs/alerts.md). Relative to this file. Optional.
//! alerts = "alerts.toml"
//!
//! [[tokens]]
//! name = "billing"                 # for logs and the redrive audit
//! token = "..."                    # at least 16 characters, no spaces
//! scopes = ["produce"]
//!
//! [[tokens]]
//! name = "ops"
//! token_sha256 = "9f86d0...0f00a08"  # the SHA-256 of the token, in hex, instead of it
//! scopes = ["admin"]
//!
//! [[tokens]]
//! name = "mailer"
//! token = "..."
//! scopes = ["work", "produce"]
//! queues = ["emails"]              # produce and work reach these queues only
//!
//! # The kinds POST /v1/jobs accepts per queue ("*": every queue). See queue_rules.
//! [queues."*"]
//! deny_kinds = ["exec", "http"]
//! ```
//!
//! `REVENANT_TOKENS` holds more, separated by spaces or new lines, each
//! `NAME:SCOPE[,SCOPE...][@QUEUE[,QUEUE...]]:TOKEN`:
//! `billing:produce@emails,webhooks:s3cr3t-s3cr3t-s3cr3t ops:admin:...`. (A queue
//! whose name holds `:` can only be given in the file.)

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use revenant::alert::AlertConfig;
use revenant::names;
use serde::Deserialize;

use crate::auth::{Scope, Token, Tokens};
use crate::queue_rules::{QueueRule, QueueRules, EVERY_QUEUE};

/// The shortest token accepted: 16 characters, so a token is not a password someone
/// can guess. `openssl rand -hex 32` makes a good one.
pub const MIN_TOKEN_LEN: usize = 16;

/// The longest token accepted.
pub const MAX_TOKEN_LEN: usize = 512;

/// The body limit unless `--max-body` says otherwise: 4 MiB, room for a batch of
/// several jobs or one job with the largest payload (1 MiB) accepted.
pub const DEFAULT_MAX_BODY: usize = 4 * 1024 * 1024;

/// A configuration that cannot work. Every variant says where the problem is.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The config file could not be read.
    #[error("cannot read the config file {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The config file is not valid TOML, or has an unknown key or a value of the
    /// wrong type.
    #[error("config file {path}: {message}")]
    Syntax {
        /// The file.
        path: String,
        /// What the TOML reader said, with the line.
        message: String,
    },
    /// A token (from the file or the environment) cannot be used.
    #[error("{source_name}: token {index}{name}: {message}")]
    Token {
        /// `config file PATH` or `REVENANT_TOKENS`.
        source_name: String,
        /// Which token (1-based, in the order given).
        index: usize,
        /// ` ("name")` when the name is known.
        name: String,
        /// What is wrong.
        message: String,
    },
    /// The alert rules cannot be used.
    #[error("alerts: {0}")]
    Alerts(String),
    /// `--max-body` cannot be read or is out of range.
    #[error("max-body: {0}")]
    MaxBody(String),
    /// The server would be reachable beyond this machine with no authentication.
    #[error(
        "refusing to listen on {addr} without tokens: anyone who can reach it could \
         enqueue, claim, redrive and purge jobs. Configure tokens ([[tokens]] in --config \
         FILE, or REVENANT_TOKENS=NAME:SCOPES:TOKEN), or listen on a loopback address such \
         as 127.0.0.1:8080"
    )]
    OpenBeyondLoopback {
        /// The address asked for.
        addr: SocketAddr,
    },
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    #[serde(default)]
    alerts: Option<PathBuf>,
    #[serde(default)]
    tokens: Vec<FileToken>,
    #[serde(default)]
    queues: BTreeMap<String, FileQueue>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileQueue {
    #[serde(default)]
    kinds: Option<Vec<String>>,
    #[serde(default)]
    deny_kinds: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileToken {
    name: String,
    #[serde(default)]
    token: Option<String>,
    #[serde(default)]
    token_sha256: Option<String>,
    scopes: Vec<String>,
    #[serde(default)]
    queues: Option<Vec<String>>,
}

/// What the config file holds.
#[derive(Debug, Default)]
pub struct FileSettings {
    /// Its tokens.
    pub tokens: Vec<Token>,
    /// Its alert rules file, resolved against the config file's directory.
    pub alerts: Option<PathBuf>,
    /// Its `[queues.NAME]` tables.
    pub queue_rules: QueueRules,
}

/// Reads a config file (see the module docs).
pub fn load_file(path: &Path) -> Result<FileSettings, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.display().to_string(),
        source,
    })?;
    parse_file(&text, path)
}

/// Parses the text of a config file found at `path` (for messages and relative paths).
pub fn parse_file(text: &str, path: &Path) -> Result<FileSettings, ConfigError> {
    let shown = path.display().to_string();
    let file: FileConfig = toml::from_str(text).map_err(|err| ConfigError::Syntax {
        path: shown.clone(),
        message: err.to_string().trim().to_string(),
    })?;
    let source_name = format!("config file {shown}");
    let mut tokens = Vec::new();
    for (i, entry) in file.tokens.into_iter().enumerate() {
        let fail = |message: String| ConfigError::Token {
            source_name: source_name.clone(),
            index: i + 1,
            name: format!(" ({:?})", entry.name),
            message,
        };
        check_name(&entry.name).map_err(fail)?;
        let scopes = scopes(entry.scopes.iter().map(String::as_str)).map_err(fail)?;
        let token = match (&entry.token, &entry.token_sha256) {
            (Some(secret), None) => {
                check_secret(secret).map_err(fail)?;
                Token::new(&entry.name, secret, scopes)
            }
            (None, Some(hex)) => {
                Token::from_digest(&entry.name, parse_digest(hex).map_err(fail)?, scopes)
            }
            _ => {
                return Err(fail(
                    "give exactly one of `token` and `token_sha256`".into(),
                ))
            }
        };
        let token = match &entry.queues {
            None => token,
            Some(queues) => limit(token, queues.iter().map(String::as_str)).map_err(fail)?,
        };
        tokens.push(token);
    }
    let mut queue_rules = BTreeMap::new();
    for (queue, rule) in file.queues {
        let fail = |message: String| ConfigError::Syntax {
            path: shown.clone(),
            message: format!("[queues.{queue:?}]: {message}"),
        };
        if queue != EVERY_QUEUE {
            names::validate_name("queue", &queue).map_err(|err| fail(err.to_string()))?;
        }
        let kinds = |field: &'static str, list: &[String]| {
            list.iter()
                .map(|kind| {
                    names::validate_name(field, kind)
                        .map(|()| kind.clone())
                        .map_err(|err| fail(err.to_string()))
                })
                .collect::<Result<BTreeSet<_>, _>>()
        };
        let rule = QueueRule {
            kinds: rule
                .kinds
                .as_deref()
                .map(|k| kinds("kinds", k))
                .transpose()?,
            deny_kinds: kinds("deny_kinds", &rule.deny_kinds)?,
        };
        queue_rules.insert(queue, rule);
    }
    let alerts = file.alerts.map(|alerts| match path.parent() {
        Some(dir) if alerts.is_relative() => dir.join(alerts),
        _ => alerts,
    });
    Ok(FileSettings {
        tokens,
        alerts,
        queue_rules: QueueRules::new(queue_rules),
    })
}

/// Reads `REVENANT_TOKENS`' value: entries separated by whitespace, each
/// `NAME:SCOPE[,SCOPE...][@QUEUE[,QUEUE...]]:TOKEN`.
pub fn parse_env_tokens(value: &str) -> Result<Vec<Token>, ConfigError> {
    let mut tokens = Vec::new();
    for (i, entry) in value.split_whitespace().enumerate() {
        let mut parts = entry.splitn(3, ':');
        let (name, scope_list, secret) = (parts.next(), parts.next(), parts.next());
        let fail = |name: &str, message: String| ConfigError::Token {
            source_name: "REVENANT_TOKENS".into(),
            index: i + 1,
            name: if name.is_empty() {
                String::new()
            } else {
                format!(" ({name:?})")
            },
            message,
        };
        let (Some(name), Some(scope_list), Some(secret)) = (name, scope_list, secret) else {
            return Err(fail(
                "",
                "is not NAME:SCOPE[,SCOPE...][@QUEUE[,QUEUE...]]:TOKEN (for example \
                 billing:produce:TOKEN or billing:produce@emails:TOKEN)"
                    .into(),
            ));
        };
        check_name(name).map_err(|m| fail(name, m))?;
        let (scope_list, queues) = match scope_list.split_once('@') {
            Some((scopes, queues)) => (scopes, Some(queues)),
            None => (scope_list, None),
        };
        let scopes = scopes(scope_list.split(',')).map_err(|m| fail(name, m))?;
        check_secret(secret).map_err(|m| fail(name, m))?;
        let token = Token::new(name, secret, scopes);
        tokens.push(match queues {
            None => token,
            Some(queues) => limit(token, queues.split(',')).map_err(|m| fail(name, m))?,
        });
    }
    Ok(tokens)
}

/// Puts the tokens of every source together, refusing a name or a secret given twice
/// (two names for one secret would make the audit lie).
pub fn combine(sources: Vec<Vec<Token>>) -> Result<Tokens, ConfigError> {
    let all: Vec<Token> = sources.into_iter().flatten().collect();
    let mut names = BTreeSet::new();
    for (i, token) in all.iter().enumerate() {
        let fail = |message: &str| ConfigError::Token {
            source_name: "tokens".into(),
            index: i + 1,
            name: format!(" ({:?})", token.name()),
            message: message.into(),
        };
        if !names.insert(token.name().to_string()) {
            return Err(fail(
                "the name is given to another token too; names must be unique",
            ));
        }
        if all[..i].iter().any(|other| other.same_secret(token)) {
            return Err(fail("the same secret is given to another token too"));
        }
    }
    Ok(Tokens::new(all))
}

/// Reads the alert rules file (the format of `revenant work --alerts`).
pub fn load_alerts(path: &Path) -> Result<AlertConfig, ConfigError> {
    AlertConfig::load(path).map_err(|err| ConfigError::Alerts(err.to_string()))
}

/// Reads a body limit: a number of bytes, or with a unit `KiB`, `MiB`, `KB`, `MB`
/// (`4MiB`, `512KiB`, `1000000`). From 1 KiB to 1 GiB.
///
/// ```
/// use revenant_server::config::parse_size;
/// assert_eq!(parse_size("4MiB").unwrap(), 4 * 1024 * 1024);
/// assert_eq!(parse_size("512 KiB").unwrap(), 512 * 1024);
/// assert_eq!(parse_size("2000000").unwrap(), 2_000_000);
/// assert!(parse_size("10").is_err());
/// assert!(parse_size("4 parsecs").is_err());
/// ```
pub fn parse_size(text: &str) -> Result<usize, ConfigError> {
    let text = text.trim();
    let digits = text.chars().take_while(|c| c.is_ascii_digit()).count();
    let (number, unit) = text.split_at(digits);
    let number: u64 = number.parse().map_err(|_| {
        ConfigError::MaxBody(format!(
            "{text:?} is not a size; write bytes or e.g. 512KiB, 4MiB"
        ))
    })?;
    let scale: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kib" | "k" => 1024,
        "mib" | "m" => 1024 * 1024,
        "kb" => 1000,
        "mb" => 1_000_000,
        other => {
            return Err(ConfigError::MaxBody(format!(
                "{text:?} has unknown unit {other:?}; use KiB, MiB, KB or MB"
            )))
        }
    };
    let bytes = number.saturating_mul(scale);
    if !(1024..=1024 * 1024 * 1024).contains(&bytes) {
        return Err(ConfigError::MaxBody(format!(
            "{text:?} is out of range; use 1KiB..=1024MiB"
        )));
    }
    usize::try_from(bytes).map_err(|_| ConfigError::MaxBody(format!("{text:?} is too large")))
}

/// Refuses an address beyond loopback when there are no tokens.
pub fn check_listen(addr: SocketAddr, tokens: &Tokens) -> Result<(), ConfigError> {
    if tokens.is_empty() && !addr.ip().is_loopback() {
        return Err(ConfigError::OpenBeyondLoopback { addr });
    }
    Ok(())
}

fn check_name(name: &str) -> Result<(), String> {
    names::validate_name("name", name).map_err(|err| format!("name {}", err.message))?;
    if name.contains(':') {
        return Err(format!("name {name:?} must not contain ':'"));
    }
    Ok(())
}

fn check_secret(secret: &str) -> Result<(), String> {
    if secret.len() < MIN_TOKEN_LEN {
        return Err(format!(
            "the token is {} characters; use at least {MIN_TOKEN_LEN} (e.g. `openssl rand -hex 32`)",
            secret.len()
        ));
    }
    if secret.len() > MAX_TOKEN_LEN {
        return Err(format!(
            "the token is {} characters; the limit is {MAX_TOKEN_LEN}",
            secret.len()
        ));
    }
    if !secret.bytes().all(|b| b.is_ascii_graphic()) {
        return Err("the token must be printable ASCII without spaces".into());
    }
    Ok(())
}

fn scopes<'a>(names: impl Iterator<Item = &'a str>) -> Result<Vec<Scope>, String> {
    let scopes = names
        .map(|name| name.trim().parse::<Scope>())
        .collect::<Result<BTreeSet<_>, _>>()?;
    if scopes.is_empty() {
        return Err("give at least one scope: produce, work, metrics or admin".into());
    }
    Ok(scopes.into_iter().collect())
}

/// Limits `token` to `queues`: at least one, each a valid queue name, and never an
/// `admin` token (the operator routes reach every queue, so the limit would be a lie).
fn limit<'a>(token: Token, queues: impl Iterator<Item = &'a str>) -> Result<Token, String> {
    if token.scopes().contains(&Scope::Admin) {
        return Err(
            "an admin token reaches every queue and cannot be limited to some; give this \
             token produce and/or work"
                .into(),
        );
    }
    let queues = queues
        .map(|queue| {
            let queue = queue.trim();
            names::validate_name("queue", queue)
                .map(|()| queue.to_string())
                .map_err(|err| err.to_string())
        })
        .collect::<Result<BTreeSet<_>, _>>()?;
    if queues.is_empty() {
        return Err("queues is empty; give at least one queue, or leave it out for all".into());
    }
    Ok(token.limited_to(queues))
}

fn parse_digest(hex: &str) -> Result<[u8; 32], String> {
    let hex = hex.trim();
    if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err("token_sha256 must be 64 hex digits (`printf %s TOKEN | sha256sum`)".into());
    }
    let mut out = [0_u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16)
            .map_err(|_| "token_sha256 is not hex".to_string())?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "0123456789abcdef-secret";

    #[test]
    fn env_tokens_read_name_scopes_and_secret() {
        let tokens = parse_env_tokens(&format!(
            "billing:produce:{SECRET}-1\n ops:admin:{SECRET}:with:colons  fleet:work,metrics:{SECRET}-3"
        ))
        .unwrap();
        let tokens = combine(vec![tokens]).unwrap();
        assert_eq!(tokens.len(), 3);
        assert_eq!(
            tokens
                .find(&format!("{SECRET}:with:colons"))
                .unwrap()
                .name(),
            "ops"
        );
        let fleet = tokens.find(&format!("{SECRET}-3")).unwrap();
        assert_eq!(fleet.scopes(), &[Scope::Work, Scope::Metrics]);
        assert!(parse_env_tokens("   ").unwrap().is_empty());
    }

    #[test]
    fn tokens_can_be_limited_to_queues_in_the_environment_and_the_file() {
        let tokens = parse_env_tokens(&format!(
            "billing:produce@emails,webhooks:{SECRET}-1 fleet:work,metrics@emails:{SECRET}:2 \
             open:produce:{SECRET}-3"
        ))
        .unwrap();
        let queues = |i: usize| {
            tokens[i]
                .queues()
                .map(|q| q.iter().cloned().collect::<Vec<_>>())
        };
        assert_eq!(queues(0), Some(vec!["emails".into(), "webhooks".into()]));
        assert_eq!(tokens[1].scopes(), &[Scope::Work, Scope::Metrics]);
        assert_eq!(queues(1), Some(vec!["emails".into()]));
        assert_eq!(queues(2), None, "no @: every queue, as before");
        assert!(combine(vec![tokens.clone()])
            .unwrap()
            .find(&format!("{SECRET}:2"))
            .is_some());

        let text = format!(
            "[[tokens]]\nname = \"mailer\"\ntoken = \"{SECRET}\"\nscopes = [\"work\"]\n\
             queues = [\"emails\", \"eu:emails\"]\n\
             [queues.\"*\"]\ndeny_kinds = [\"exec\"]\n[queues.emails]\nkinds = [\"send\"]\n"
        );
        let settings = parse_file(&text, Path::new("serve.toml")).unwrap();
        assert_eq!(
            settings.tokens[0].queues().unwrap().len(),
            2,
            "{:?}",
            settings.tokens[0]
        );
        assert!(settings.queue_rules.check("kind", "emails", "send").is_ok());
        assert!(settings
            .queue_rules
            .check("kind", "emails", "exec")
            .is_err());
        assert!(settings.queue_rules.check("kind", "other", "exec").is_err());
        assert!(settings.queue_rules.check("kind", "other", "build").is_ok());

        for (value, mentions) in [
            ("ops:admin@emails:0123456789abcdef", "cannot be limited"),
            ("a:produce@:0123456789abcdef", "queue"),
            ("a:produce@bad/queue:0123456789abcdef", "queue"),
        ] {
            let err = parse_env_tokens(value).unwrap_err().to_string();
            assert!(err.contains(mentions), "{value}: {err}");
        }
        for (text, mentions) in [
            (
                format!("[[tokens]]\nname = \"a\"\ntoken = \"{SECRET}\"\nscopes = [\"admin\"]\nqueues = [\"q\"]\n"),
                "cannot be limited",
            ),
            (
                format!("[[tokens]]\nname = \"a\"\ntoken = \"{SECRET}\"\nscopes = [\"work\"]\nqueues = []\n"),
                "at least one queue",
            ),
            ("[queues.\"bad queue\"]\nkinds = []\n".to_string(), "bad queue"),
            ("[queues.q]\nallow = []\n".to_string(), "unknown field"),
        ] {
            let err = parse_file(&text, Path::new("serve.toml")).unwrap_err().to_string();
            assert!(err.contains(mentions), "{text}: {err}");
        }
    }

    #[test]
    fn bad_env_tokens_are_refused_with_their_position() {
        for (value, mentions) in [
            ("billing:produce", "NAME:SCOPE"),
            (
                "billing:publish:0123456789abcdef",
                "unknown scope \"publish\"",
            ),
            ("billing::0123456789abcdef", "unknown scope"),
            ("billing:produce:short", "at least 16"),
            ("bad/name:produce:0123456789abcdef", "name"),
        ] {
            let err = parse_env_tokens(value).unwrap_err().to_string();
            assert!(err.contains("REVENANT_TOKENS: token 1"), "{value}: {err}");
            assert!(err.contains(mentions), "{value}: {err}");
        }
    }

    #[test]
    fn the_file_reads_tokens_digests_and_a_relative_alerts_path() {
        let text = format!(
            "alerts = \"alerts.toml\"\n\
             [[tokens]]\nname = \"billing\"\ntoken = \"{SECRET}\"\nscopes = [\"produce\"]\n\
             [[tokens]]\nname = \"ops\"\ntoken_sha256 = \"{}\"\nscopes = [\"admin\"]\n",
            hex(&crate::auth::digest("ops-0123456789abcdef"))
        );
        let settings = parse_file(&text, Path::new("/etc/revenant/serve.toml")).unwrap();
        assert_eq!(
            settings.alerts,
            Some(PathBuf::from("/etc/revenant/alerts.toml"))
        );
        let tokens = combine(vec![settings.tokens]).unwrap();
        assert_eq!(tokens.find(SECRET).unwrap().name(), "billing");
        assert_eq!(tokens.find("ops-0123456789abcdef").unwrap().name(), "ops");
    }

    #[test]
    fn bad_files_name_the_problem() {
        let path = Path::new("serve.toml");
        for (text, mentions) in [
            ("listen = 3\n", "unknown field `listen`"),
            (
                "[[tokens]]\nname = \"a\"\nscopes = [\"admin\"]\n",
                "exactly one of",
            ),
            (
                "[[tokens]]\nname = \"a\"\ntoken_sha256 = \"xyz\"\nscopes = [\"admin\"]\n",
                "64 hex digits",
            ),
            (
                &format!("[[tokens]]\nname = \"a\"\ntoken = \"{SECRET}\"\nscopes = []\n"),
                "at least one scope",
            ),
        ] {
            let err = parse_file(text, path).unwrap_err().to_string();
            assert!(err.contains("serve.toml"), "{text}: {err}");
            assert!(err.contains(mentions), "{text}: {err}");
        }
    }

    #[test]
    fn names_and_secrets_must_be_unique_across_sources() {
        let a = parse_env_tokens(&format!("a:admin:{SECRET}")).unwrap();
        let b = parse_env_tokens(&format!("a:work:{SECRET}-other")).unwrap();
        assert!(combine(vec![a.clone(), b])
            .unwrap_err()
            .to_string()
            .contains("name"));
        let c = parse_env_tokens(&format!("c:work:{SECRET}")).unwrap();
        assert!(combine(vec![a, c])
            .unwrap_err()
            .to_string()
            .contains("same secret"));
    }

    #[test]
    fn without_tokens_only_loopback_is_allowed() {
        let none = Tokens::default();
        assert!(check_listen("127.0.0.1:8080".parse().unwrap(), &none).is_ok());
        assert!(check_listen("[::1]:8080".parse().unwrap(), &none).is_ok());
        for open in ["0.0.0.0:8080", "[::]:8080", "192.168.1.10:8080"] {
            let err = check_listen(open.parse().unwrap(), &none).unwrap_err();
            assert!(err.to_string().contains("refusing to listen"), "{open}");
        }
        let some = combine(vec![parse_env_tokens(&format!("a:admin:{SECRET}")).unwrap()]).unwrap();
        assert!(check_listen("0.0.0.0:8080".parse().unwrap(), &some).is_ok());
    }

    #[test]
    fn sizes_read_units_and_refuse_nonsense() {
        assert_eq!(parse_size("1KiB").unwrap(), 1024);
        assert_eq!(parse_size("1MB").unwrap(), 1_000_000);
        for bad in ["", "MiB", "-1", "1.5MiB", "4GiB", "1023", "2048MiB"] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
    }

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }
}
