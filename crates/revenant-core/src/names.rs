//! What a queue name, a kind name and a key may look like.
//!
//! Names show up in SQL filters, metric labels, URLs and log lines, so they are kept to
//! a small, printable alphabet: ASCII letters, digits, `_`, `-`, `.` and `:`, starting
//! with a letter or digit, at most [`MAX_NAME_LEN`] bytes. Keys (group, unique,
//! correlation) are freer: any printable text without control characters, at most
//! [`MAX_KEY_LEN`] bytes.

use crate::error::InputError;

/// The longest queue or kind name accepted.
pub const MAX_NAME_LEN: usize = 64;
/// The longest group key, unique key or correlation id accepted.
pub const MAX_KEY_LEN: usize = 255;

/// Checks a queue or kind name. `field` names the input in the error.
///
/// ```
/// use revenant_core::names::validate_name;
/// assert!(validate_name("queue", "emails").is_ok());
/// assert!(validate_name("kind", "send_receipt.v2").is_ok());
/// assert!(validate_name("queue", "").is_err());
/// assert!(validate_name("queue", "emails; drop table").is_err());
/// ```
pub fn validate_name(field: &'static str, name: &str) -> Result<(), InputError> {
    if name.is_empty() {
        return Err(InputError::new(field, "must not be empty"));
    }
    if name.len() > MAX_NAME_LEN {
        return Err(InputError::new(
            field,
            format!("is {} bytes long; the limit is {MAX_NAME_LEN}", name.len()),
        ));
    }
    if !name.as_bytes()[0].is_ascii_alphanumeric() {
        return Err(InputError::new(
            field,
            format!("{name:?} must start with a letter or digit"),
        ));
    }
    if let Some(bad) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | ':')))
    {
        return Err(InputError::new(
            field,
            format!(
                "{:?} contains {bad:?}; use letters, digits, '_', '-', '.' or ':'",
                name.escape_debug().to_string()
            ),
        ));
    }
    Ok(())
}

/// Checks a free-form key (group key, unique key, correlation id).
pub fn validate_key(field: &'static str, key: &str) -> Result<(), InputError> {
    if key.is_empty() {
        return Err(InputError::new(field, "must not be empty when given"));
    }
    if key.len() > MAX_KEY_LEN {
        return Err(InputError::new(
            field,
            format!("is {} bytes long; the limit is {MAX_KEY_LEN}", key.len()),
        ));
    }
    if key.chars().any(char::is_control) {
        return Err(InputError::new(
            field,
            "must not contain control characters",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_reject_hostile_and_odd_input() {
        for bad in [
            "",
            " ",
            "-leading",
            "with space",
            "tab\t",
            "nul\0",
            "new\nline",
            "ünïcode",
            "quote'",
            "semi;colon",
            "slash/",
            &"x".repeat(MAX_NAME_LEN + 1),
        ] {
            assert!(validate_name("queue", bad).is_err(), "accepted {bad:?}");
        }
        for good in [
            "emails",
            "a",
            "send_receipt",
            "v2.webhooks",
            "tenant:42",
            "A-b_c",
        ] {
            assert!(validate_name("queue", good).is_ok(), "refused {good:?}");
        }
    }

    #[test]
    fn name_errors_name_the_field() {
        let err = validate_name("kind", "").unwrap_err();
        assert_eq!(err.field, "kind");
        assert!(err.to_string().contains("kind"));
    }

    #[test]
    fn keys_allow_text_but_not_control_characters() {
        assert!(validate_key("group_key", "customer 42 / Zürich").is_ok());
        assert!(validate_key("group_key", "a\u{7}b").is_err());
        assert!(validate_key("unique_key", "").is_err());
        assert!(validate_key("unique_key", &"k".repeat(MAX_KEY_LEN + 1)).is_err());
    }
}
