//! The trace context of the code that enqueued a job: a W3C Trace Context
//! `traceparent` (and its optional `tracestate`), kept with the job so each attempt's
//! span can join the producer's trace.
//!
//! The core does not trace: it validates the two strings once, at the type, and the
//! stores keep them as text. The runtime (with OpenTelemetry switched on) links each
//! attempt's span to it. A producer controls these strings, so they are hostile input:
//! [`TraceContext::new`] refuses a malformed one by name (`traceparent`, `tracestate`)
//! instead of dropping it, so a caller who meant to trace learns at once that nothing
//! will join up.
//!
//! ```
//! use revenant_core::trace::TraceContext;
//!
//! let ctx = TraceContext::new("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", None)
//!     .unwrap();
//! assert_eq!(ctx.trace_id(), "4bf92f3577b34da6a3ce929d0e0e4736");
//! assert_eq!(ctx.parent_id(), "00f067aa0ba902b7");
//! assert!(ctx.sampled());
//! let err = TraceContext::new("00-not-a-trace", None).unwrap_err();
//! assert_eq!(err.field, "traceparent");
//! ```

use serde::{Deserialize, Serialize};

use crate::error::InputError;

/// A validated W3C trace context: `traceparent` and, optionally, `tracestate`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "RawTraceContext")]
pub struct TraceContext {
    traceparent: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    tracestate: Option<String>,
}

/// The wire form, checked by [`TraceContext::new`] on the way in.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTraceContext {
    traceparent: String,
    #[serde(default)]
    tracestate: Option<String>,
}

impl TryFrom<RawTraceContext> for TraceContext {
    type Error = InputError;
    fn try_from(raw: RawTraceContext) -> Result<Self, InputError> {
        TraceContext::new(&raw.traceparent, raw.tracestate.as_deref())
    }
}

impl TraceContext {
    /// The longest `tracestate` kept: 512 characters, the length the W3C
    /// recommendation asks every platform to propagate.
    pub const MAX_TRACESTATE_LEN: usize = 512;
    /// At most 32 `tracestate` list members (W3C).
    pub const MAX_TRACESTATE_MEMBERS: usize = 32;

    /// Checks and keeps a trace context.
    ///
    /// `traceparent` is `version-traceid-parentid-flags` in lowercase hex: version
    /// `00` (exactly 55 characters) or a later version (at least that long, the four
    /// fields first; `ff` is invalid), a trace id of 32 and a parent id of 16 hex
    /// digits, neither all zeros, and 2 hex digits of flags. `tracestate`, when given
    /// and not empty, is at most 512 characters of at most 32 comma-separated
    /// `key=value` members of printable ASCII; an empty one counts as none.
    pub fn new(traceparent: &str, tracestate: Option<&str>) -> Result<Self, InputError> {
        check_traceparent(traceparent)?;
        let tracestate = match tracestate.map(str::trim) {
            None | Some("") => None,
            Some(state) => {
                check_tracestate(state)?;
                Some(state.to_string())
            }
        };
        Ok(TraceContext {
            traceparent: traceparent.to_string(),
            tracestate,
        })
    }

    /// The trace context of a stored row: the two columns as read. Every store checks
    /// them before writing, so an unreadable pair means a row edited by hand; it reads
    /// as no trace context (a job must still run when its tracing link cannot).
    pub fn from_stored(traceparent: Option<String>, tracestate: Option<String>) -> Option<Self> {
        TraceContext::new(&traceparent?, tracestate.as_deref()).ok()
    }

    /// The `traceparent` header value.
    pub fn traceparent(&self) -> &str {
        &self.traceparent
    }

    /// The `tracestate` header value, if any.
    pub fn tracestate(&self) -> Option<&str> {
        self.tracestate.as_deref()
    }

    /// The trace id: 32 lowercase hex digits.
    pub fn trace_id(&self) -> &str {
        &self.traceparent[3..35]
    }

    /// The id of the span that enqueued: 16 lowercase hex digits.
    pub fn parent_id(&self) -> &str {
        &self.traceparent[36..52]
    }

    /// The trace flags byte.
    pub fn flags(&self) -> u8 {
        u8::from_str_radix(&self.traceparent[53..55], 16).unwrap_or(0)
    }

    /// Whether the producer sampled its trace (flag bit 0).
    pub fn sampled(&self) -> bool {
        self.flags() & 1 == 1
    }
}

fn bad(field: &'static str, message: impl Into<String>) -> InputError {
    InputError::new(field, message)
}

fn is_lower_hex(text: &str) -> bool {
    !text.is_empty()
        && text
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

fn check_traceparent(value: &str) -> Result<(), InputError> {
    let shape = || {
        bad(
            "traceparent",
            format!(
                "{:?} is not a W3C traceparent; expected 00-<32 hex trace id>-<16 hex parent id>-<2 hex flags>, lowercase",
                value.chars().take(80).collect::<String>()
            ),
        )
    };
    if value.len() < 55 || !value.is_ascii() {
        return Err(shape());
    }
    let (version, trace_id, parent_id, flags) =
        (&value[0..2], &value[3..35], &value[36..52], &value[53..55]);
    let dashes = [2, 35, 52].iter().all(|&i| value.as_bytes()[i] == b'-');
    if !dashes
        || ![version, trace_id, parent_id, flags]
            .iter()
            .all(|f| is_lower_hex(f))
    {
        return Err(shape());
    }
    if version == "ff" {
        return Err(bad("traceparent", "version ff is invalid (W3C)"));
    }
    // Version 00 is exactly 55 characters; a later version may append fields after a
    // dash, which a version-00 reader ignores.
    if (version == "00" && value.len() != 55) || (value.len() > 55 && value.as_bytes()[55] != b'-')
    {
        return Err(shape());
    }
    if value.len() > 256 {
        return Err(bad("traceparent", "is longer than 256 characters"));
    }
    if trace_id.bytes().all(|b| b == b'0') {
        return Err(bad("traceparent", "the trace id is all zeros (invalid)"));
    }
    if parent_id.bytes().all(|b| b == b'0') {
        return Err(bad("traceparent", "the parent id is all zeros (invalid)"));
    }
    Ok(())
}

fn check_tracestate(value: &str) -> Result<(), InputError> {
    if value.len() > TraceContext::MAX_TRACESTATE_LEN {
        return Err(bad(
            "tracestate",
            format!(
                "is {} characters; the limit is {}",
                value.len(),
                TraceContext::MAX_TRACESTATE_LEN
            ),
        ));
    }
    let members: Vec<&str> = value
        .split(',')
        .map(str::trim)
        .filter(|m| !m.is_empty())
        .collect();
    if members.len() > TraceContext::MAX_TRACESTATE_MEMBERS {
        return Err(bad(
            "tracestate",
            format!(
                "has {} members; the limit is {}",
                members.len(),
                TraceContext::MAX_TRACESTATE_MEMBERS
            ),
        ));
    }
    for member in members {
        let ok = member.split_once('=').is_some_and(|(key, val)| {
            !key.is_empty()
                && key
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"_-*/@".contains(&b))
                && !val.is_empty()
                && val
                    .bytes()
                    .all(|b| (0x20..=0x7e).contains(&b) && b != b',' && b != b'=')
        });
        if !ok {
            return Err(bad(
                "tracestate",
                format!(
                    "member {:?} is not key=value (W3C tracestate)",
                    member.chars().take(80).collect::<String>()
                ),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn a_w3c_traceparent_is_kept_and_read() {
        let ctx = TraceContext::new(GOOD, Some("congo=t61rcWkgMzE,rojo=00f067aa0ba902b7")).unwrap();
        assert_eq!(ctx.traceparent(), GOOD);
        assert_eq!(
            ctx.tracestate(),
            Some("congo=t61rcWkgMzE,rojo=00f067aa0ba902b7")
        );
        assert_eq!(ctx.flags(), 1);
        let unsampled = GOOD.replace("-01", "-00");
        assert!(!TraceContext::new(&unsampled, Some("")).unwrap().sampled());
        assert_eq!(
            TraceContext::new(GOOD, Some(" ")).unwrap().tracestate(),
            None
        );
        // A later version may carry more fields.
        assert!(TraceContext::new(&format!("01{}-extra", &GOOD[2..]), None).is_ok());
    }

    #[test]
    fn a_malformed_trace_context_is_refused_by_name() {
        let refused = [
            ("", "traceparent"),
            (
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
                "traceparent",
            ),
            (&GOOD.to_uppercase(), "traceparent"),
            (
                &GOOD.replace("4bf92f3577b34da6a3ce929d0e0e4736", &"0".repeat(32)),
                "traceparent",
            ),
            (
                &GOOD.replace("00f067aa0ba902b7", &"0".repeat(16)),
                "traceparent",
            ),
            (&format!("ff{}", &GOOD[2..]), "traceparent"),
            (&format!("{GOOD}-x"), "traceparent"),
            (&GOOD.replace('-', "_"), "traceparent"),
            (
                "00-4bf92f3577b34da6a3ce929d0e0e473é-00f067aa0ba902b7-01",
                "traceparent",
            ),
        ];
        for (value, field) in refused {
            let err = TraceContext::new(value, None).unwrap_err();
            assert_eq!(err.field, field, "{value:?}");
        }
        for state in [
            "novalue",
            "k=",
            "=v",
            "k=a,b",
            &"k=v,".repeat(33),
            &format!("k={}", "v".repeat(600)),
        ] {
            let err = TraceContext::new(GOOD, Some(state)).unwrap_err();
            assert_eq!(err.field, "tracestate", "{state:?}");
        }
    }

    #[test]
    fn the_json_form_is_checked_on_the_way_in() {
        let ctx: TraceContext =
            serde_json::from_value(serde_json::json!({ "traceparent": GOOD })).unwrap();
        assert_eq!(ctx.trace_id(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(
            serde_json::to_value(&ctx).unwrap(),
            serde_json::json!({ "traceparent": GOOD })
        );
        let err = serde_json::from_value::<TraceContext>(serde_json::json!({ "traceparent": "x" }))
            .unwrap_err();
        assert!(err.to_string().contains("traceparent"), "{err}");
    }
}
