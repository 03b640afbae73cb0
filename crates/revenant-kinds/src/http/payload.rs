//! The `http` kind's payload, and the checks that turn it into a request we can send.

use std::collections::BTreeMap;
use std::time::Duration;

use reqwest::header::{HeaderMap, HeaderName, HeaderValue, CONTENT_TYPE};
use reqwest::{Method, Url};
use serde::{Deserialize, Serialize};

use revenant_runtime::JobError;

/// The payload of an `http` job.
///
/// ```json
/// { "method": "POST", "url": "https://example.invalid/hooks/receipt",
///   "headers": { "Authorization": "Bearer ..." },
///   "body": { "order": 42 }, "timeout": "10s" }
/// ```
///
/// Fields are strings on purpose: a bad method, URL, header or timeout is reported as a
/// permanent failure that names the field (`http payload: url: ...`), where a typed
/// field would only give the decoder's generic message. Unknown fields are refused
/// (`decode_error`), so a misspelt `timout` does not silently fall back to the default.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpPayload {
    /// `GET`, `HEAD`, `POST`, `PUT`, `PATCH`, `DELETE` or `OPTIONS` (any case).
    /// Default `POST`: the kind is mostly for delivering webhooks.
    #[serde(default)]
    pub method: Option<String>,
    /// An absolute `http://` or `https://` URL. Required.
    pub url: String,
    /// Request headers. `Host`, `Content-Length` and `Transfer-Encoding` are refused
    /// (the client sets them). An `Idempotency-Key` given here replaces revenant's
    /// (`revenant-<job id>`): a key of your own, such as an order id, also survives a
    /// job enqueued twice. The `X-Revenant-*` headers are always revenant's.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// The request body: a JSON string is sent as is (`Content-Type: text/plain;
    /// charset=utf-8` unless a header says otherwise); any other JSON value is sent
    /// serialized (`Content-Type: application/json` unless a header says otherwise).
    /// Absent or `null`: no body.
    #[serde(default)]
    pub body: Option<serde_json::Value>,
    /// The request's timeout, as a duration string (`10s`, `1m30s`). Default 30 s.
    /// Always cut to what is left of the attempt (the policy's `attempt_timeout`), so
    /// keep it below that, and the attempt timeout below the lease. Covers connecting,
    /// sending and reading the response; running past it is transient.
    #[serde(default)]
    pub timeout: Option<String>,
    /// The dependency this request calls (`"email-provider"`): a worker protecting
    /// dependencies (`revenant work`, or `WorkerBuilder::dependencies`) gives each key
    /// a circuit breaker, a rate limit and a retry budget shared by every worker.
    /// Default: the URL's host, so every request to one host shares them; name it to
    /// group several hosts of one provider, or to split one host's services.
    #[serde(default)]
    pub dependency: Option<String>,
}

/// The default request timeout when the payload gives none.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// A payload that passed its checks.
#[derive(Debug)]
pub(crate) struct Request {
    pub(crate) method: Method,
    pub(crate) url: Url,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Option<Vec<u8>>,
    pub(crate) timeout: Duration,
}

const METHODS: [&str; 7] = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"];

/// Headers the client owns: setting them by hand breaks the framing of the request.
const REFUSED_HEADERS: [&str; 3] = ["host", "content-length", "transfer-encoding"];

fn invalid(field: &str, message: impl std::fmt::Display) -> JobError {
    JobError::permanent(format!("http payload: {field}: {message}"))
}

impl HttpPayload {
    /// The dependency key: [`HttpPayload::dependency`], else the URL's host (none for
    /// a URL that does not parse: such a job fails permanently before calling anyone).
    pub fn dependency_key(&self) -> Option<String> {
        if let Some(key) = self.dependency.as_deref().map(str::trim) {
            if !key.is_empty() {
                return Some(key.to_string());
            }
        }
        Url::parse(self.url.trim())
            .ok()?
            .host_str()
            .filter(|host| !host.is_empty())
            .map(str::to_string)
    }

    /// Checks every field; the first bad one is a permanent failure naming it.
    pub(crate) fn validate(&self) -> Result<Request, JobError> {
        let method_text = self.method.as_deref().unwrap_or("POST").trim();
        let upper = method_text.to_ascii_uppercase();
        if !METHODS.contains(&upper.as_str()) {
            return Err(invalid(
                "method",
                format!("{method_text:?} is not one of {}", METHODS.join(", ")),
            ));
        }
        let method = Method::from_bytes(upper.as_bytes())
            .map_err(|err| invalid("method", format!("{method_text:?}: {err}")))?;

        let url = Url::parse(self.url.trim())
            .map_err(|err| invalid("url", format!("{:?} is not a URL: {err}", self.url)))?;
        if url.scheme() != "http" && url.scheme() != "https" {
            return Err(invalid(
                "url",
                format!(
                    "scheme {:?} is not supported; use http or https",
                    url.scheme()
                ),
            ));
        }
        if url.host_str().is_none_or(str::is_empty) {
            return Err(invalid("url", format!("{:?} has no host", self.url)));
        }

        let mut headers = HeaderMap::new();
        for (name, value) in &self.headers {
            let field = format!("headers.{name}");
            let header = HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| invalid(&field, "is not a valid header name"))?;
            if REFUSED_HEADERS.contains(&header.as_str()) {
                return Err(invalid(&field, "is set by the client; remove it"));
            }
            let value = HeaderValue::from_str(value).map_err(|_| {
                invalid(
                    &field,
                    "value is not a valid header value (visible ASCII, no line breaks)",
                )
            })?;
            headers.append(header, value);
        }

        let body = match &self.body {
            None | Some(serde_json::Value::Null) => None,
            Some(serde_json::Value::String(text)) => {
                if !headers.contains_key(CONTENT_TYPE) {
                    headers.insert(
                        CONTENT_TYPE,
                        HeaderValue::from_static("text/plain; charset=utf-8"),
                    );
                }
                Some(text.clone().into_bytes())
            }
            Some(json) => {
                if !headers.contains_key(CONTENT_TYPE) {
                    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
                }
                Some(serde_json::to_vec(json).map_err(|err| invalid("body", err))?)
            }
        };

        let timeout = match &self.timeout {
            None => DEFAULT_TIMEOUT,
            Some(text) => revenant_core::duration::parse("timeout", text)
                .map_err(|err| invalid("timeout", err.message))?,
        };
        if timeout.is_zero() {
            return Err(invalid("timeout", "must be above zero"));
        }

        Ok(Request {
            method,
            url,
            headers,
            body,
            timeout,
        })
    }
}

/// The URL as it may appear in error messages and logs: scheme, host, port and path,
/// without credentials or query string (both often carry secrets, and the error history
/// is shown to every operator).
pub(crate) fn redacted(url: &Url) -> String {
    let mut shown = url.clone();
    let _ = shown.set_username("");
    let _ = shown.set_password(None);
    shown.set_query(None);
    shown.set_fragment(None);
    shown.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use revenant_runtime::JobAction;

    fn payload(url: &str) -> HttpPayload {
        HttpPayload {
            url: url.into(),
            ..HttpPayload::default()
        }
    }

    fn refusal(p: HttpPayload) -> String {
        let err = p.validate().unwrap_err();
        assert_eq!(err.action(), JobAction::Permanent);
        err.message().to_string()
    }

    #[test]
    fn the_dependency_is_the_payloads_or_else_the_urls_host() {
        assert_eq!(
            payload("https://api.mail.example:8443/v1/send?k=1")
                .dependency_key()
                .as_deref(),
            Some("api.mail.example")
        );
        let mut named = payload("https://api.mail.example/v1/send");
        named.dependency = Some("email-provider".into());
        assert_eq!(named.dependency_key().as_deref(), Some("email-provider"));
        named.dependency = Some("  ".into());
        assert_eq!(named.dependency_key().as_deref(), Some("api.mail.example"));
        assert_eq!(payload("not a url").dependency_key(), None);
    }

    #[test]
    fn defaults_are_post_with_a_30s_timeout_and_no_body() {
        let request = payload("http://127.0.0.1:9/x").validate().unwrap();
        assert_eq!(request.method, Method::POST);
        assert_eq!(request.timeout, DEFAULT_TIMEOUT);
        assert!(request.body.is_none());
    }

    #[test]
    fn each_bad_field_is_permanent_and_named() {
        assert!(refusal(payload("not a url")).starts_with("http payload: url:"));
        assert!(refusal(payload("ftp://host/file")).contains("scheme \"ftp\""));
        let mut p = payload("http://127.0.0.1/");
        p.method = Some("FETCH".into());
        assert!(refusal(p).starts_with("http payload: method:"));
        let mut p = payload("http://127.0.0.1/");
        p.headers.insert("bad header".into(), "x".into());
        assert!(refusal(p).starts_with("http payload: headers.bad header:"));
        let mut p = payload("http://127.0.0.1/");
        p.headers.insert("X-Ok".into(), "line\nbreak".into());
        assert!(refusal(p).starts_with("http payload: headers.X-Ok:"));
        let mut p = payload("http://127.0.0.1/");
        p.headers.insert("Content-Length".into(), "3".into());
        assert!(refusal(p).contains("set by the client"));
        let mut p = payload("http://127.0.0.1/");
        p.timeout = Some("10".into());
        assert!(refusal(p).starts_with("http payload: timeout:"));
        let mut p = payload("http://127.0.0.1/");
        p.timeout = Some("0s".into());
        assert!(refusal(p).contains("above zero"));
    }

    #[test]
    fn a_json_body_is_serialized_and_typed_and_a_string_is_sent_as_is() {
        let mut p = payload("http://127.0.0.1/");
        p.body = Some(serde_json::json!({"order": 42}));
        let request = p.validate().unwrap();
        assert_eq!(request.body.as_deref(), Some(&br#"{"order":42}"#[..]));
        assert_eq!(request.headers[CONTENT_TYPE], "application/json");

        let mut p = payload("http://127.0.0.1/");
        p.body = Some(serde_json::json!("a=1&b=2"));
        p.headers.insert(
            "content-type".into(),
            "application/x-www-form-urlencoded".into(),
        );
        let request = p.validate().unwrap();
        assert_eq!(request.body.as_deref(), Some(&b"a=1&b=2"[..]));
        assert_eq!(
            request.headers[CONTENT_TYPE],
            "application/x-www-form-urlencoded"
        );
    }

    #[test]
    fn credentials_and_query_never_reach_the_error_history() {
        let url = Url::parse("https://user:secret@host.invalid/hook?token=abc#x").unwrap();
        assert_eq!(redacted(&url), "https://host.invalid/hook");
    }
}
