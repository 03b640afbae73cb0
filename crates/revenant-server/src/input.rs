//! Reading and checking the values requests carry: durations, times, list limits,
//! fingerprints. Each error names the field. (A redrive's rate is a `revenant::Rate`,
//! checked as serde reads it.)

use std::time::Duration;

use revenant::{duration, names, InputError};
use serde::{Deserialize, Deserializer};

use crate::error::ApiError;

/// Serde support for an optional duration written as revenant's duration syntax
/// (`"250ms"`, `"30s"`, `"1h30m"`) or a whole number of milliseconds. The field's path
/// is added by the caller's decoder.
pub fn opt_duration<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<Duration>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        Text(String),
        Millis(u64),
        Other(serde_json::Value),
    }
    match Option::<Raw>::deserialize(deserializer)? {
        None => Ok(None),
        // Letters and digits only (`1m30s`): the document's pattern, exactly.
        Some(Raw::Text(text)) if !text.chars().all(|c| c.is_ascii_alphanumeric()) => {
            Err(serde::de::Error::custom(format!(
                "{text:?} is not a duration; write one like \"250ms\", \"30s\", \"1h30m\" (no spaces)"
            )))
        }
        Some(Raw::Text(text)) => duration::parse("duration", &text)
            .map(Some)
            .map_err(|err| serde::de::Error::custom(err.message)),
        Some(Raw::Millis(ms)) => Ok(Some(Duration::from_millis(ms))),
        Some(Raw::Other(value)) => Err(serde::de::Error::custom(format!(
            "{value} is not a duration; write one like \"250ms\", \"30s\", \"5m\" or a whole number of milliseconds"
        ))),
    }
}

/// Serde support for an optional RFC 3339 time (`2026-12-01T08:00:00Z`,
/// `2026-12-01T09:00:00.5+01:00`), strictly: a `T` between date and time, an offset.
pub fn opt_timestamp<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<revenant::Timestamp>, D::Error> {
    let Some(text) = Option::<String>::deserialize(deserializer)? else {
        return Ok(None);
    };
    let bad = || {
        serde::de::Error::custom(format!(
            "{text:?} is not an RFC 3339 time like \"2026-12-01T08:00:00Z\""
        ))
    };
    if !matches!(text.as_bytes().get(10), Some(b'T' | b't')) {
        return Err(bad());
    }
    chrono::DateTime::parse_from_rfc3339(&text)
        .map(|at| Some(at.with_timezone(&chrono::Utc)))
        .map_err(|_| bad())
}

/// Checks a duration against a range, naming the field.
pub fn duration_in(
    field: &str,
    value: Duration,
    min: Duration,
    max: Duration,
) -> Result<Duration, ApiError> {
    if value < min || value > max {
        return Err(ApiError::field(
            field,
            format!(
                "{} is out of range; use {}..={}",
                duration::format(value),
                duration::format(min),
                duration::format(max)
            ),
        ));
    }
    Ok(value)
}

/// A list limit: `default` when absent, else within 1..=`max`.
pub fn limit(value: Option<u32>, default: u32, max: u32) -> Result<u32, ApiError> {
    match value {
        None => Ok(default),
        Some(n) if (1..=max).contains(&n) => Ok(n),
        Some(n) => Err(ApiError::field(
            "limit",
            format!("{n} is out of range; use 1..={max}"),
        )),
    }
}

/// A paging cursor: a positive job id.
pub fn before(value: Option<i64>) -> Result<Option<i64>, ApiError> {
    match value {
        Some(id) if id < 1 => Err(ApiError::field(
            "before",
            format!("{id} is not a job id (a positive whole number)"),
        )),
        other => Ok(other),
    }
}

/// An error fingerprint: 12 hex digits, returned in lower case.
pub fn fingerprint(value: &str) -> Result<String, ApiError> {
    if value.len() != 12 || !value.chars().all(|c| c.is_ascii_hexdigit()) {
        return Err(ApiError::field(
            "fingerprint",
            format!("{value:?} is not a fingerprint; it is 12 hex digits, as GET /v1/dead/fingerprints lists them"),
        ));
    }
    Ok(value.to_ascii_lowercase())
}

/// An optional queue or kind name.
pub fn name(field: &'static str, value: Option<&str>) -> Result<(), InputError> {
    match value {
        Some(value) => names::validate_name(field, value),
        None => Ok(()),
    }
}

/// An optional key (group, correlation id, worker).
pub fn key(field: &'static str, value: Option<&str>) -> Result<(), InputError> {
    match value {
        Some(value) => names::validate_key(field, value),
        None => Ok(()),
    }
}

/// Free text recorded in a history or an audit: at most 1024 bytes, no NUL.
pub fn text(field: &str, value: Option<&str>, one_line: bool) -> Result<(), ApiError> {
    if let Some(value) = value {
        no_nul(field, value)?;
        if value.len() > 1024 {
            return Err(ApiError::field(
                field,
                format!("is {} bytes; the limit is 1024", value.len()),
            ));
        }
        if one_line && value.chars().any(char::is_control) {
            return Err(ApiError::field(
                field,
                "must be one line without control characters",
            ));
        }
    }
    Ok(())
}

/// Refuses a NUL character: PostgreSQL cannot store one in text or JSON, so it is
/// refused on every backend alike rather than failing on one.
pub fn no_nul(field: &str, value: &str) -> Result<(), ApiError> {
    if value.contains('\0') {
        return Err(ApiError::field(
            field,
            "contains a NUL character (\\u0000), which cannot be stored",
        ));
    }
    Ok(())
}

/// [`no_nul`] for every string and key of a JSON value.
pub fn no_nul_in_json(field: &str, value: &serde_json::Value) -> Result<(), ApiError> {
    use serde_json::Value;
    let mut stack = vec![value];
    while let Some(value) = stack.pop() {
        match value {
            Value::String(text) => no_nul(field, text)?,
            Value::Array(items) => stack.extend(items),
            Value::Object(map) => {
                for (key, item) in map {
                    no_nul(field, key)?;
                    stack.push(item);
                }
            }
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Deserialize)]
    struct WithDuration {
        #[serde(default, deserialize_with = "opt_duration")]
        d: Option<Duration>,
    }

    fn d(json: &str) -> Result<Option<Duration>, String> {
        serde_json::from_str::<WithDuration>(json)
            .map(|w| w.d)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn durations_read_text_and_milliseconds() {
        assert_eq!(
            d(r#"{"d":"1m30s"}"#).unwrap(),
            Some(Duration::from_secs(90))
        );
        assert_eq!(d(r#"{"d":250}"#).unwrap(), Some(Duration::from_millis(250)));
        assert_eq!(d(r#"{}"#).unwrap(), None);
        assert_eq!(d(r#"{"d":null}"#).unwrap(), None);
        for bad in [
            r#"{"d":"30"}"#,
            r#"{"d":-5}"#,
            r#"{"d":1.5}"#,
            r#"{"d":"5x"}"#,
            r#"{"d":[]}"#,
            r#"{"d":" 5s"}"#,
            r#"{"d":"\u00855s"}"#,
        ] {
            assert!(d(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn nul_characters_are_refused_anywhere_in_json() {
        let nested = serde_json::json!({"a": [1, {"b": "x\u{0}y"}]});
        assert!(no_nul_in_json("payload", &nested).is_err());
        assert!(no_nul_in_json("payload", &serde_json::json!({"k\u{0}": 1})).is_err());
        assert!(no_nul_in_json("payload", &serde_json::json!({"fine": ["ü", 1.5, null]})).is_ok());
        assert!(text("reason", Some("a\u{0}b"), false).is_err());
    }

    #[test]
    fn limits_and_cursors_are_checked() {
        assert_eq!(limit(None, 50, 1000).unwrap(), 50);
        assert_eq!(limit(Some(1000), 50, 1000).unwrap(), 1000);
        assert!(limit(Some(0), 50, 1000).is_err());
        assert!(limit(Some(1001), 50, 1000).is_err());
        assert!(before(Some(0)).is_err());
        assert_eq!(before(Some(7)).unwrap(), Some(7));
        assert_eq!(fingerprint("ABCDEF012345").unwrap(), "abcdef012345");
        assert!(fingerprint("abc").is_err());
    }
}
