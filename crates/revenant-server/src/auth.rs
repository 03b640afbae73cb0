//! Bearer tokens and their scopes, and the check every protected route runs.
//!
//! A token grants one or more scopes:
//!
//! | scope | routes |
//! | --- | --- |
//! | `produce` | `POST /v1/jobs` |
//! | `work` | `POST /v1/claims`, and heartbeat, complete, fail, snooze of a job |
//! | `metrics` | `GET /metrics` |
//! | `admin` | every route, including all the operator ones under `/v1` |
//!
//! Tokens are kept as SHA-256 digests and a presented token is hashed and compared
//! with every known digest in constant time ([`subtle`]), without stopping at a match:
//! the time taken says nothing about how much of a token was right, nor its length,
//! nor which token matched.
//!
//! A token may be limited to queues (`queues = ["emails"]` in the config file,
//! `NAME:SCOPES@QUEUE,QUEUE:TOKEN` in `REVENANT_TOKENS`). Its `produce` and `work`
//! scopes then reach those queues only: it enqueues into them, claims from them, and
//! settles only their jobs; a job of another queue answers as if it did not exist.
//! Every worker name it registers is prefixed with `TOKEN_NAME/`, so it cannot pass
//! for another token's workers. A limited token cannot hold `admin` (the operator
//! routes read and change every queue). The route handlers read the limit from the
//! [`Reach`] the check adds to the request.
//!
//! With no token configured every route is open; [`crate::check_listen`] makes sure
//! that only happens on a loopback address, and [`crate::loopback`] that only this
//! machine's programs, not the web pages its browser shows, reach it.

use std::collections::BTreeSet;
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use axum::extract::{FromRequestParts, Request, State};
use axum::http::header;
use axum::http::request::Parts;
use axum::middleware::Next;
use axum::response::Response;
use sha2::{Digest, Sha256};
use subtle::{ConditionallySelectable, ConstantTimeEq};

use crate::error::{ApiError, ErrorCode};

/// What a token may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Scope {
    /// Enqueue jobs.
    Produce,
    /// Claim jobs and settle the attempts claimed (remote workers).
    Work,
    /// Scrape `/metrics`.
    Metrics,
    /// Everything: the operator routes, and every other scope.
    Admin,
}

impl Scope {
    /// Every scope, in the order the docs list them.
    pub const ALL: [Scope; 4] = [Scope::Produce, Scope::Work, Scope::Metrics, Scope::Admin];

    /// The scope's name in config files, `REVENANT_TOKENS` and the OpenAPI document.
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Produce => "produce",
            Scope::Work => "work",
            Scope::Metrics => "metrics",
            Scope::Admin => "admin",
        }
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Scope {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Scope::ALL
            .into_iter()
            .find(|scope| scope.as_str() == s)
            .ok_or_else(|| format!("unknown scope {s:?}; expected produce, work, metrics or admin"))
    }
}

/// One known token: a name for logs and the redrive audit, the digest, the scopes.
#[derive(Clone)]
pub struct Token {
    name: String,
    digest: [u8; 32],
    scopes: Vec<Scope>,
    queues: Option<Arc<BTreeSet<String>>>,
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never the digest: a debug print in a log should not help a brute force.
        f.debug_struct("Token")
            .field("name", &self.name)
            .field("scopes", &self.scopes)
            .field("queues", &self.queues)
            .finish_non_exhaustive()
    }
}

impl Token {
    /// A token from its secret text.
    pub fn new(name: impl Into<String>, secret: &str, scopes: Vec<Scope>) -> Self {
        Token::from_digest(name, digest(secret), scopes)
    }

    /// A token from the SHA-256 digest of its secret (so a config file need not hold
    /// the secret itself).
    pub fn from_digest(name: impl Into<String>, digest: [u8; 32], scopes: Vec<Scope>) -> Self {
        Token {
            name: name.into(),
            digest,
            scopes,
            queues: None,
        }
    }

    /// This token, its `produce` and `work` scopes limited to `queues`. The caller
    /// checks the names (the config readers do) and that the token is not `admin`.
    pub fn limited_to(mut self, queues: impl IntoIterator<Item = String>) -> Self {
        self.queues = Some(Arc::new(queues.into_iter().collect()));
        self
    }

    /// The queues it is limited to; `None`: every queue.
    pub fn queues(&self) -> Option<&BTreeSet<String>> {
        self.queues.as_deref()
    }

    /// The token's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The scopes it was given.
    pub fn scopes(&self) -> &[Scope] {
        &self.scopes
    }

    /// Whether two tokens have one secret (a start-up check, not constant-time: never
    /// on a request's path).
    pub(crate) fn same_secret(&self, other: &Token) -> bool {
        self.digest == other.digest
    }

    /// Whether it grants `scope` (`admin` grants every scope).
    pub fn allows(&self, scope: Scope) -> bool {
        self.scopes.contains(&Scope::Admin) || self.scopes.contains(&scope)
    }
}

/// The SHA-256 digest of a token's text.
pub fn digest(secret: &str) -> [u8; 32] {
    Sha256::digest(secret.as_bytes()).into()
}

/// Every token the server accepts. Empty means "no authentication" (loopback only).
#[derive(Debug, Clone, Default)]
pub struct Tokens {
    tokens: Vec<Token>,
}

impl Tokens {
    /// These tokens.
    pub fn new(tokens: Vec<Token>) -> Self {
        Tokens { tokens }
    }

    /// No token: every route open.
    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    /// How many.
    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    /// The token whose secret is `presented`, if any. Hashes it, then compares the
    /// digest with every known one in constant time, all of them whatever matched.
    pub fn find(&self, presented: &str) -> Option<&Token> {
        let wanted = digest(presented);
        // 0: none; i + 1: token i.
        let mut matched = 0_u32;
        for (i, token) in self.tokens.iter().enumerate() {
            let index = u32::try_from(i + 1).unwrap_or(u32::MAX);
            matched.conditional_assign(&index, token.digest.ct_eq(&wanted));
        }
        matched
            .checked_sub(1)
            .and_then(|i| self.tokens.get(i as usize))
    }
}

/// Who made a request: the matched token's name, or `None` when the server runs
/// without tokens. Handlers read it from the request's extensions (the redrive audit's
/// default actor).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller(pub Option<String>);

/// The queues a request may reach, and what its worker names become: added to every
/// checked request's extensions next to [`Caller`], and an extractor for handlers.
/// Unlimited without tokens, for an unlimited token, and on the open routes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reach {
    limit: Option<(String, Arc<BTreeSet<String>>)>,
}

impl Reach {
    /// Every queue.
    pub fn unlimited() -> Self {
        Reach::default()
    }

    /// What `token` reaches.
    pub fn of(token: &Token) -> Self {
        Reach {
            limit: token
                .queues
                .as_ref()
                .map(|queues| (token.name.clone(), Arc::clone(queues))),
        }
    }

    /// Whether the request is limited to some queues.
    pub fn is_limited(&self) -> bool {
        self.limit.is_some()
    }

    /// Whether `queue` is reachable.
    pub fn allows(&self, queue: &str) -> bool {
        self.limit
            .as_ref()
            .is_none_or(|(_, queues)| queues.contains(queue))
    }

    /// 403 `forbidden` naming `field` unless `queue` is reachable.
    pub fn check(&self, field: &str, queue: &str) -> Result<(), ApiError> {
        match &self.limit {
            Some((name, queues)) if !queues.contains(queue) => Err(ApiError::at(
                ErrorCode::Forbidden,
                field,
                format!(
                    "token {name:?} is limited to the queues {}; {queue:?} is not one of them",
                    queues
                        .iter()
                        .map(String::as_str)
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            )),
            _ => Ok(()),
        }
    }

    /// The name a worker is registered and recorded under: `worker` itself for an
    /// unlimited request; `TOKEN_NAME/worker` for a limited one (unchanged if it
    /// already has that prefix), so a limited token can only name workers of its own.
    pub fn worker_name(&self, worker: &str) -> String {
        match &self.limit {
            None => worker.to_string(),
            Some((name, _)) => {
                let prefix = format!("{name}/");
                if worker.starts_with(&prefix) {
                    worker.to_string()
                } else {
                    format!("{prefix}{worker}")
                }
            }
        }
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Reach {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, ApiError> {
        Ok(parts.extensions.get::<Reach>().cloned().unwrap_or_default())
    }
}

/// The state of one route's check: the tokens and the scope the route needs.
#[derive(Debug, Clone)]
pub struct RequireScope {
    /// The tokens.
    pub tokens: std::sync::Arc<Tokens>,
    /// The scope.
    pub scope: Scope,
}

/// Middleware: refuses the request unless it carries a token with the route's scope
/// (401 without a known token, 403 with a token lacking the scope). Open when the
/// server has no tokens. Adds a [`Caller`] to the request's extensions.
pub async fn require_scope(
    State(check): State<RequireScope>,
    mut request: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let (caller, reach) = authorize(&check, request.headers().get(header::AUTHORIZATION))?;
    request.extensions_mut().insert(caller);
    request.extensions_mut().insert(reach);
    Ok(next.run(request).await)
}

fn authorize(
    check: &RequireScope,
    header: Option<&axum::http::HeaderValue>,
) -> Result<(Caller, Reach), ApiError> {
    if check.tokens.is_empty() {
        return Ok((Caller(None), Reach::unlimited()));
    }
    let scope = check.scope;
    let Some(header) = header else {
        return Err(ApiError::new(
            ErrorCode::Unauthorized,
            format!("this route needs a bearer token with scope {scope}: send the header `Authorization: Bearer TOKEN`"),
        ));
    };
    let presented = header
        .to_str()
        .ok()
        .and_then(|value| {
            let (scheme, token) = value.trim().split_once(' ')?;
            scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
        })
        .filter(|token| !token.is_empty())
        .ok_or_else(|| {
            ApiError::new(
                ErrorCode::Unauthorized,
                "the Authorization header is not `Bearer TOKEN`",
            )
        })?;
    let token = check.tokens.find(presented).ok_or_else(|| {
        ApiError::new(
            ErrorCode::Unauthorized,
            "the bearer token is not one this server knows",
        )
    })?;
    if !token.allows(scope) {
        let held: Vec<&str> = token.scopes.iter().map(|s| s.as_str()).collect();
        return Err(ApiError::new(
            ErrorCode::Forbidden,
            format!(
                "token {:?} has scope {}; this route needs {scope} (or admin)",
                token.name,
                held.join(", ")
            ),
        ));
    }
    Ok((Caller(Some(token.name.clone())), Reach::of(token)))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use axum::http::HeaderValue;

    use super::*;

    fn check(scope: Scope) -> RequireScope {
        RequireScope {
            tokens: Arc::new(Tokens::new(vec![
                Token::new("producer", "p-0123456789abcdef", vec![Scope::Produce]),
                Token::new("ops", "a-0123456789abcdef", vec![Scope::Admin]),
                Token::new(
                    "fleet",
                    "w-0123456789abcdef",
                    vec![Scope::Work, Scope::Metrics],
                ),
            ])),
            scope,
        }
    }

    fn bearer(token: &str) -> HeaderValue {
        HeaderValue::from_str(&format!("Bearer {token}")).unwrap()
    }

    #[test]
    fn a_token_is_found_by_its_secret_only() {
        let tokens = check(Scope::Work).tokens;
        assert_eq!(tokens.find("w-0123456789abcdef").unwrap().name(), "fleet");
        assert_eq!(
            tokens.find("p-0123456789abcdef").unwrap().name(),
            "producer"
        );
        for wrong in [
            "",
            "w-0123456789abcde",
            "w-0123456789abcdeF",
            "w-0123456789abcdef ",
        ] {
            assert!(tokens.find(wrong).is_none(), "{wrong:?}");
        }
        assert!(Tokens::default().find("anything").is_none());
    }

    #[test]
    fn scopes_gate_routes_and_admin_holds_every_scope() {
        let ok = |scope, token| authorize(&check(scope), Some(&bearer(token)));
        assert_eq!(
            ok(Scope::Produce, "p-0123456789abcdef").unwrap(),
            (Caller(Some("producer".into())), Reach::unlimited())
        );
        assert_eq!(
            ok(Scope::Work, "p-0123456789abcdef").unwrap_err().code,
            ErrorCode::Forbidden
        );
        assert_eq!(
            ok(Scope::Admin, "w-0123456789abcdef").unwrap_err().code,
            ErrorCode::Forbidden
        );
        assert!(ok(Scope::Metrics, "w-0123456789abcdef").is_ok());
        for scope in Scope::ALL {
            assert!(ok(scope, "a-0123456789abcdef").is_ok(), "admin for {scope}");
        }
    }

    #[test]
    fn missing_malformed_and_unknown_tokens_are_unauthorized() {
        let work = check(Scope::Work);
        for header in [
            None,
            Some(HeaderValue::from_static("w-0123456789abcdef")),
            Some(HeaderValue::from_static("Basic dXNlcjpwYXNz")),
            Some(HeaderValue::from_static("Bearer ")),
            Some(bearer("nope-nope-nope-nope")),
        ] {
            let err = authorize(&work, header.as_ref()).unwrap_err();
            assert_eq!(err.code, ErrorCode::Unauthorized, "{header:?}");
        }
        // The scheme is case-insensitive (RFC 7235).
        let lower = HeaderValue::from_static("bearer w-0123456789abcdef");
        assert!(authorize(&work, Some(&lower)).is_ok());
    }

    #[test]
    fn without_tokens_every_route_is_open() {
        let open = RequireScope {
            tokens: Arc::new(Tokens::default()),
            scope: Scope::Admin,
        };
        assert_eq!(
            authorize(&open, None).unwrap(),
            (Caller(None), Reach::unlimited())
        );
    }

    #[test]
    fn a_limited_token_reaches_its_queues_and_names_only_its_own_workers() {
        let token = Token::new("mailer", "m-0123456789abcdef", vec![Scope::Work])
            .limited_to(["emails".to_string(), "webhooks".to_string()]);
        let reach = Reach::of(&token);
        assert!(reach.is_limited());
        assert!(reach.allows("emails") && reach.allows("webhooks"));
        assert!(!reach.allows("billing") && !reach.allows("email"));
        let err = reach.check("queue", "billing").unwrap_err();
        assert_eq!(err.code, ErrorCode::Forbidden);
        assert_eq!(err.field.as_deref(), Some("queue"));
        assert!(err.message.contains("emails, webhooks"), "{}", err.message);
        assert_eq!(reach.worker_name("w1"), "mailer/w1");
        assert_eq!(reach.worker_name("mailer/w1"), "mailer/w1");
        assert_eq!(reach.worker_name("other/w1"), "mailer/other/w1");

        let open = Reach::of(&Token::new("ops", "a-0123456789abcdef", vec![Scope::Admin]));
        assert!(!open.is_limited() && open.allows("billing"));
        assert_eq!(open.worker_name("w1"), "w1");
        assert!(open.check("queue", "billing").is_ok());
    }

    #[test]
    fn debug_output_never_shows_the_digest() {
        let token = Token::new("ops", "a-0123456789abcdef", vec![Scope::Admin]);
        let shown = format!("{token:?}");
        assert!(shown.contains("ops"));
        assert!(!shown.contains("digest"));
    }
}
