//! What an HTTP answer (or the lack of one) means for the job: the classification
//! table of the `http` kind, in one place.
//!
//! | answer | action |
//! | --- | --- |
//! | 2xx | success |
//! | 3xx | permanent: redirects are not followed, the job should name the final URL |
//! | 429, 502, 503, 504 | transient, `Retry-After` honoured |
//! | other 4xx | permanent |
//! | other 5xx | transient, `Retry-After` honoured when present |
//! | connection refused/reset, DNS, TLS, timeout | transient |
//! | a request that cannot be built | permanent |

use std::time::{Duration, SystemTime};

use reqwest::header::{HeaderMap, LOCATION, RETRY_AFTER};
use reqwest::StatusCode;

use revenant_runtime::JobError;

/// How much of the response body goes into the error message.
pub(crate) const BODY_EXCERPT_BYTES: usize = 512;

/// The job's fate for a response with this status. `body` is the start of the
/// response body (already cut to [`BODY_EXCERPT_BYTES`]); `target` names the request
/// (`POST http://host/path`) for the message.
pub(crate) fn response(
    status: StatusCode,
    headers: &HeaderMap,
    body: &[u8],
    target: &str,
    now: SystemTime,
) -> Result<(), JobError> {
    if status.is_success() {
        return Ok(());
    }
    let mut message = format!("HTTP {} from {target}", status_text(status));
    if status.is_redirection() {
        let location = headers
            .get(LOCATION)
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
        match location {
            Some(location) => message.push_str(&format!(
                ": redirects to {location}; redirects are not followed, point the job at the final URL"
            )),
            None => message.push_str(": a redirect without Location; redirects are not followed"),
        }
        return Err(JobError::permanent(message));
    }
    let excerpt = crate::excerpt::head(body, BODY_EXCERPT_BYTES);
    if !excerpt.is_empty() {
        message.push_str(": ");
        message.push_str(&excerpt);
    }
    let transient = status == StatusCode::TOO_MANY_REQUESTS || status.is_server_error();
    if !transient {
        return Err(JobError::permanent(message));
    }
    match headers.get(RETRY_AFTER) {
        None => Err(JobError::retry(message)),
        Some(value) => match retry_after(value.as_bytes(), now) {
            Some(after) => Err(JobError::retry_after(message, after)),
            None => {
                message.push_str(" (unreadable Retry-After ignored)");
                Err(JobError::retry(message))
            }
        },
    }
}

fn status_text(status: StatusCode) -> String {
    match status.canonical_reason() {
        Some(reason) => format!("{} {reason}", status.as_u16()),
        None => status.as_u16().to_string(),
    }
}

/// Reads a `Retry-After` value: whole seconds (`120`) or an HTTP date
/// (`Wed, 21 Oct 2015 07:28:00 GMT`), relative to `now`. A date in the past means
/// "now" (zero delay). Huge values are returned as they are; the retry policy caps
/// them, and uses the value as a floor under its backoff (a provider saying "in 1 s"
/// does not make us retry sooner than the backoff would). `None` when the value is
/// neither.
pub(crate) fn retry_after(value: &[u8], now: SystemTime) -> Option<Duration> {
    let text = std::str::from_utf8(value).ok()?.trim();
    if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
        // All digits: only overflow can fail, and that is "very long".
        return Some(Duration::from_secs(text.parse().unwrap_or(u64::MAX)));
    }
    let at = httpdate::parse_http_date(text).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

/// The job's fate when no response came back.
pub(crate) fn transport(err: reqwest::Error, target: &str) -> JobError {
    // reqwest's message names the full URL; `target` already names it without secrets.
    let err = err.without_url();
    if let Some(refused) = refusal_in(&err) {
        // The resolver found only addresses the outbound policy refuses: that will
        // not change by retrying, and nothing was sent.
        return JobError::permanent(format!("{refused} [{target}]"));
    }
    let message = format!("{target}: {}", chain(&err));
    if err.is_builder() {
        // The request could not even be built from the payload: it never will be.
        JobError::permanent(message)
    } else {
        // Connection refused or reset, DNS, TLS, a timeout, a body cut short: the
        // other side may be back soon.
        JobError::retry(message)
    }
}

/// The outbound policy's refusal, when it is among `err`'s causes.
fn refusal_in<'a>(
    err: &'a (dyn std::error::Error + 'static),
) -> Option<&'a super::DestinationRefused> {
    let mut cause = Some(err);
    while let Some(current) = cause {
        if let Some(refused) = current.downcast_ref::<super::DestinationRefused>() {
            return Some(refused);
        }
        cause = current.source();
    }
    None
}

/// The error and its causes, `: `-joined (reqwest's own message is "error sending
/// request", the useful part is in the sources).
fn chain(err: &dyn std::error::Error) -> String {
    let mut message = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !message.contains(&text) {
            message.push_str(": ");
            message.push_str(&text);
        }
        source = cause.source();
    }
    message
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_reads_seconds_and_dates() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        assert_eq!(retry_after(b"120", now), Some(Duration::from_secs(120)));
        assert_eq!(retry_after(b" 0 ", now), Some(Duration::ZERO));
        let later = httpdate::fmt_http_date(now + Duration::from_secs(90));
        assert_eq!(
            retry_after(later.as_bytes(), now),
            Some(Duration::from_secs(90))
        );
        let earlier = httpdate::fmt_http_date(now - Duration::from_secs(90));
        assert_eq!(retry_after(earlier.as_bytes(), now), Some(Duration::ZERO));
        assert_eq!(
            retry_after(b"99999999999999999999999", now),
            Some(Duration::from_secs(u64::MAX))
        );
        assert_eq!(retry_after(b"-5", now), None);
        assert_eq!(retry_after(b"soon", now), None);
    }
}
