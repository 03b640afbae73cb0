//! [`Rate`]: a pace of jobs per unit of time, validated once at the type.
//!
//! A paced redrive spreads its jobs' `run_at` one [`Rate::spacing`] apart. Every door
//! (the CLI's `--rate`, the API's `rate`, library code) builds a `Rate` and nothing
//! else reaches the store, so no door can pass an unchecked float down: a rate of
//! `1e-15` per second once produced a `run_at` 31 million years away that no read
//! could decode.
//!
//! ```
//! use revenant_core::Rate;
//! let rate: Rate = "600/m".parse().unwrap();
//! assert_eq!(rate.per_second(), 10.0);
//! assert_eq!(rate.spacing(), std::time::Duration::from_millis(100));
//! assert_eq!(rate.to_string(), "10/s");
//! assert!("1e-15/s".parse::<Rate>().is_err());   // below the floor
//! assert!("0/s".parse::<Rate>().is_err());
//! ```

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::error::InputError;

/// Jobs per second, between [`Rate::MIN_PER_SECOND`] (one an hour) and
/// [`Rate::MAX_PER_SECOND`] (100,000 a second), finite. The field it is refused under
/// is always `rate`.
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd)]
pub struct Rate(f64);

impl Rate {
    /// The slowest pace: one job an hour. A slower redrive is better done as several.
    pub const MIN_PER_SECOND: f64 = 1.0 / 3600.0;
    /// The fastest pace: 100,000 jobs a second. Faster than that is "at once": leave
    /// the rate out.
    pub const MAX_PER_SECOND: f64 = 100_000.0;

    /// A rate of `per_second` jobs a second, or an error naming `rate` when it is not
    /// a finite number within the bounds.
    pub fn per_second_checked(per_second: f64) -> Result<Rate, InputError> {
        if !per_second.is_finite() || per_second <= 0.0 {
            return Err(InputError::new("rate", "must be a number above zero"));
        }
        if per_second < Self::MIN_PER_SECOND {
            return Err(InputError::new(
                "rate",
                "is below 1/h; a slower redrive is better done as several",
            ));
        }
        if per_second > Self::MAX_PER_SECOND {
            return Err(InputError::new(
                "rate",
                "is above 100000/s; leave the rate out to redrive at once",
            ));
        }
        Ok(Rate(per_second))
    }

    /// Jobs per second.
    pub fn per_second(self) -> f64 {
        self.0
    }

    /// The gap between two consecutive jobs: between 10 µs and one hour.
    pub fn spacing(self) -> Duration {
        // In range by construction: 1/MAX .. 1/MIN seconds, so this cannot overflow.
        Duration::from_secs_f64(1.0 / self.0)
    }

    /// How long `count` jobs take at this rate (the first goes at once).
    pub fn span(self, count: u64) -> Duration {
        Duration::from_secs_f64(count.saturating_sub(1) as f64 / self.0)
    }
}

impl FromStr for Rate {
    type Err = InputError;

    /// Reads `20/s`, `600/m`, `3600/h` (also `/sec`, `/min`) or a bare number per
    /// second; no spaces inside.
    fn from_str(text: &str) -> Result<Rate, InputError> {
        let not_a_rate = || {
            InputError::new(
                "rate",
                format!("{text:?} is not a rate; write e.g. 20/s, 600/m or 3600/h"),
            )
        };
        let (number, per) = text.split_once('/').unwrap_or((text, "s"));
        let seconds = match per {
            "s" | "sec" => 1.0,
            "m" | "min" => 60.0,
            "h" => 3600.0,
            other => {
                return Err(InputError::new(
                    "rate",
                    format!("{text:?}: unknown unit {other:?}; write e.g. 20/s, 600/m or 3600/h"),
                ))
            }
        };
        // Digits with at most one inner dot or an exponent: no sign, no "inf"/"NaN",
        // nothing f64's parser would take that a person would not mean as a count.
        let plain = !number.is_empty()
            && number
                .chars()
                .all(|c| c.is_ascii_digit() || matches!(c, '.' | 'e' | 'E' | '-'))
            && number.starts_with(|c: char| c.is_ascii_digit())
            && !number.ends_with('.');
        if !plain {
            return Err(not_a_rate());
        }
        let count: f64 = number.parse().map_err(|_| not_a_rate())?;
        Rate::per_second_checked(count / seconds)
            .map_err(|err| InputError::new("rate", format!("{text:?} {}", err.message)))
    }
}

impl fmt::Display for Rate {
    /// Per second when at least one a second, else per minute or per hour, rounded to
    /// two decimals: `20/s`, `30/m`, `2/h`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let round = |x: f64| (x * 100.0).round() / 100.0;
        if self.0 >= 1.0 {
            write!(f, "{}/s", round(self.0))
        } else if self.0 * 60.0 >= 1.0 {
            write!(f, "{}/m", round(self.0 * 60.0))
        } else {
            write!(f, "{}/h", round(self.0 * 3600.0))
        }
    }
}

impl Serialize for Rate {
    /// As a number of jobs per second.
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_f64(self.0)
    }
}

impl<'de> Deserialize<'de> for Rate {
    /// From a number per second or a string such as `"20/s"`.
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Rate, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Number(f64),
            Text(String),
        }
        match Raw::deserialize(deserializer).map_err(|_| {
            serde::de::Error::custom("is not a rate; write e.g. \"20/s\" or a number per second")
        })? {
            Raw::Number(n) => Rate::per_second_checked(n),
            Raw::Text(text) => text.parse(),
        }
        .map_err(|err| serde::de::Error::custom(err.message))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_read_every_unit_and_refuse_nonsense_naming_the_field() {
        let rate = |text: &str| text.parse::<Rate>().map(Rate::per_second);
        assert_eq!(rate("20/s").unwrap(), 20.0);
        assert_eq!(rate("600/m").unwrap(), 10.0);
        assert_eq!(rate("7200/h").unwrap(), 2.0);
        assert_eq!(rate("5").unwrap(), 5.0);
        assert_eq!(rate("1/h").unwrap(), Rate::MIN_PER_SECOND);
        assert_eq!(rate("1e5/s").unwrap(), 100_000.0);
        for bad in [
            "0/s",
            "-1/s",
            "x/s",
            "20/fortnight",
            "1e9/s",
            "NaN",
            "inf",
            "",
            " 5/s",
            "1./s",
            ".5/s",
            "1.2.3/s",
            "1e-300",
            "1e-15/s",
            "0.5/h",
            "1e400",
        ] {
            assert_eq!(rate(bad).unwrap_err().field, "rate", "{bad}");
        }
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY, 7.6e-301, 1e-15, 1e6] {
            assert!(Rate::per_second_checked(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_spacing_stays_between_ten_microseconds_and_an_hour() {
        let slowest = Rate::per_second_checked(Rate::MIN_PER_SECOND).unwrap();
        assert_eq!(slowest.spacing(), Duration::from_secs(3600));
        let fastest = Rate::per_second_checked(Rate::MAX_PER_SECOND).unwrap();
        assert_eq!(fastest.spacing(), Duration::from_micros(10));
        assert_eq!(slowest.span(3), Duration::from_secs(7200));
        assert_eq!(fastest.span(0), Duration::ZERO);
    }

    #[test]
    fn a_rate_prints_in_the_unit_a_person_would_use_and_reads_back_from_json() {
        for (text, shown) in [("20/s", "20/s"), ("30/m", "30/m"), ("2/h", "2/h")] {
            assert_eq!(text.parse::<Rate>().unwrap().to_string(), shown);
        }
        let rate: Rate = serde_json::from_str("\"600/m\"").unwrap();
        assert_eq!(rate.per_second(), 10.0);
        let rate: Rate = serde_json::from_str("2.5").unwrap();
        assert_eq!(serde_json::to_string(&rate).unwrap(), "2.5");
        for bad in ["0", "\"1e-15/s\"", "[]", "{}", "true", "1e-300"] {
            assert!(serde_json::from_str::<Rate>(bad).is_err(), "{bad}");
        }
    }
}
