//! Durations as people write them: `500ms`, `10s`, `1m30s`, `1h`, `2d`.
//!
//! One parser for every entry point (CLI flags, config files, HTTP bodies), so `10s`
//! means the same everywhere and a bad value gets the same clear error.

use std::time::Duration;

use crate::error::InputError;

/// Parses a duration such as `500ms`, `10s`, `1m30s`, `1h` or `2d`.
///
/// Units: `ms`, `s`, `m`, `h`, `d`. A bare number is refused (is `30` seconds or
/// milliseconds?), and so are negative values and values above ten years.
///
/// ```
/// use std::time::Duration;
/// use revenant_core::duration::parse;
/// assert_eq!(parse("field", "500ms").unwrap(), Duration::from_millis(500));
/// assert_eq!(parse("field", "1m30s").unwrap(), Duration::from_secs(90));
/// assert_eq!(parse("field", "1h").unwrap(), Duration::from_secs(3600));
/// assert!(parse("field", "-5s").is_err());
/// assert!(parse("field", "30").is_err());
/// ```
pub fn parse(field: &'static str, text: &str) -> Result<Duration, InputError> {
    const LIMIT_MS: u128 = 10 * 365 * 24 * 3600 * 1000;
    let text = text.trim();
    if text.is_empty() {
        return Err(InputError::new(
            field,
            "is empty; write a duration like 500ms, 10s, 5m, 1h",
        ));
    }
    if text.starts_with('-') {
        return Err(InputError::new(
            field,
            format!("{text:?} is negative; durations must be zero or more"),
        ));
    }
    let mut total_ms: u128 = 0;
    let mut rest = text;
    while !rest.is_empty() {
        let digits = rest.chars().take_while(|c| c.is_ascii_digit()).count();
        if digits == 0 {
            return Err(InputError::new(
                field,
                format!("{text:?} is not a duration; write one like 500ms, 10s, 5m, 1h"),
            ));
        }
        let number: u128 = rest[..digits]
            .parse()
            .map_err(|_| InputError::new(field, format!("{text:?} has a number too large")))?;
        rest = &rest[digits..];
        let unit_len = rest.chars().take_while(|c| c.is_ascii_alphabetic()).count();
        let unit = &rest[..unit_len];
        rest = &rest[unit_len..];
        let scale: u128 = match unit {
            "ms" => 1,
            "s" => 1000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            "" => {
                return Err(InputError::new(
                    field,
                    format!(
                        "{text:?} has no unit; add one of ms, s, m, h, d (for example {number}s)"
                    ),
                ))
            }
            other => {
                return Err(InputError::new(
                    field,
                    format!("{text:?} has unknown unit {other:?}; use ms, s, m, h or d"),
                ))
            }
        };
        total_ms = total_ms.saturating_add(number.saturating_mul(scale));
        if total_ms > LIMIT_MS {
            return Err(InputError::new(
                field,
                format!("{text:?} is longer than ten years"),
            ));
        }
    }
    Ok(Duration::from_millis(total_ms as u64))
}

/// Formats a duration the way [`parse`] reads it, dropping zero parts: `1h2m3s`,
/// `250ms`, `0s`. Sub-millisecond parts are dropped.
///
/// ```
/// use std::time::Duration;
/// use revenant_core::duration::format;
/// assert_eq!(format(Duration::from_secs(3723)), "1h2m3s");
/// assert_eq!(format(Duration::from_millis(1500)), "1s500ms");
/// assert_eq!(format(Duration::ZERO), "0s");
/// ```
pub fn format(duration: Duration) -> String {
    let mut ms = duration.as_millis();
    if ms == 0 {
        return "0s".to_string();
    }
    let mut out = String::new();
    for (unit, scale) in [
        ("d", 86_400_000u128),
        ("h", 3_600_000),
        ("m", 60_000),
        ("s", 1000),
        ("ms", 1),
    ] {
        if ms >= scale {
            out.push_str(&format!("{}{unit}", ms / scale));
            ms %= scale;
        }
    }
    out
}

/// Serde support for `Option<Duration>` written as a string (`"10s"`) or a number of
/// milliseconds.
pub mod serde_opt {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    /// Writes the duration as a string such as `"1m30s"`.
    pub fn serialize<S: Serializer>(
        value: &Option<Duration>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        match value {
            Some(duration) => serializer.serialize_str(&super::format(*duration)),
            None => serializer.serialize_none(),
        }
    }

    /// Reads `"10s"` or a whole number of milliseconds; refuses negatives.
    pub fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<Duration>, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Text(String),
            Millis(i64),
        }
        match Option::<Raw>::deserialize(deserializer)? {
            None => Ok(None),
            Some(Raw::Text(text)) => super::parse("delay", &text)
                .map(Some)
                .map_err(serde::de::Error::custom),
            Some(Raw::Millis(ms)) if ms < 0 => Err(serde::de::Error::custom(format!(
                "delay of {ms} ms is negative"
            ))),
            Some(Raw::Millis(ms)) => Ok(Some(Duration::from_millis(ms as u64))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_compound_durations() {
        assert_eq!(parse("d", "2d").unwrap(), Duration::from_secs(2 * 86_400));
        assert_eq!(parse("d", "1h30m").unwrap(), Duration::from_secs(5400));
        assert_eq!(parse("d", " 0s ").unwrap(), Duration::ZERO);
    }

    #[test]
    fn refuses_what_it_cannot_read_and_names_the_field() {
        for bad in [
            "",
            "abc",
            "10",
            "10x",
            "-1s",
            "1.5s",
            "s",
            "99999999999999999999999999999999999999999d",
            "11000d",
        ] {
            let err = parse("backoff.base", bad).unwrap_err();
            assert_eq!(err.field, "backoff.base", "{bad:?}");
        }
    }

    #[test]
    fn format_round_trips_through_parse() {
        for ms in [0u64, 1, 999, 1000, 61_001, 3_600_000, 90_061_001] {
            let d = Duration::from_millis(ms);
            assert_eq!(parse("d", &format(d)).unwrap(), d);
        }
    }
}
