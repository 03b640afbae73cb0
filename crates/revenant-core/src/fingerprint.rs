//! Fingerprints of error messages: 212 jobs dead of one bug read as one line.
//!
//! [`normalize`] replaces the parts of a message that change from job to job with
//! placeholders, and [`fingerprint`] hashes what is left:
//!
//! ```
//! use revenant_core::fingerprint::{fingerprint, normalize};
//!
//! assert_eq!(
//!     normalize("HTTP 503 from provider after 1234ms"),
//!     "http <n> from provider after <n>ms"
//! );
//! assert_eq!(
//!     fingerprint("HTTP 503 from provider after 1234ms"),
//!     fingerprint("HTTP 503 from provider after 98ms"),
//! );
//! assert_ne!(
//!     fingerprint("HTTP 503 from provider after 98ms"),
//!     fingerprint("template crashed on 'Café Ünï'"),
//! );
//! assert_eq!(fingerprint("template crashed on 'Café Ünï'").len(), 12);
//! ```
//!
//! The rules, applied in this order:
//!
//! 1. a quoted value, `'...'` (a doubled `''` inside is part of it, as in SQL) or
//!    `"..."` (with `\"` escapes), becomes `'<q>'` or `"<q>"`; a quote counts as an
//!    opening one only after a character that is not a letter or digit, so the
//!    apostrophe in `can't` is left alone, and a single quote followed by a letter or
//!    digit does not close a value, so `'Bob's Diner'` is one value;
//! 2. runs of whitespace become one space, and the ends are trimmed;
//! 3. in each word: an e-mail address becomes `<email>`; a URL keeps its scheme, host
//!    and path but its query string becomes `?<query>`; a UUID becomes `<uuid>`; a
//!    run of 8 or more hex digits with at least one digit (or `0x` and hex digits)
//!    becomes `<hex>`; every other run of decimal digits becomes `<n>`;
//! 4. the result is lowercased.
//!
//! Limits, said plainly: an id made of random letters and digits that is not hex
//! (`req_8fK2xQ9z`) keeps its letters, so each such message gets its own fingerprint;
//! put ids in quotes or at least in hex if you want them grouped.
//!
//! The hash is FNV-1a 64 over the UTF-8 bytes of the normalised message, and the
//! fingerprint is the high 48 bits as 12 lowercase hex digits. It depends on nothing
//! but those bytes: the same on every platform, in every process and every release.
//! A fingerprint is computed and stored when a job dies, so a future change of the
//! rules (a breaking change, said in the changelog) would only split new deaths from
//! old ones; the table tests below pin the rules and the hash.

/// The fingerprint every job made dead by an expired lease (`lease_expired`) gets,
/// whatever worker held the lease and whenever it expired: the hash of this pattern.
pub const LEASE_EXPIRED_PATTERN: &str =
    "lease held by worker <worker> expired at <time> and no attempt is left; the worker died or stalled";

/// The fingerprint of a message: 12 lowercase hex digits. See the module docs.
pub fn fingerprint(message: &str) -> String {
    hash(&normalize(message))
}

/// The fingerprint of a `lease_expired` death ([`LEASE_EXPIRED_PATTERN`]).
pub fn lease_expired() -> String {
    hash(LEASE_EXPIRED_PATTERN)
}

/// FNV-1a 64 of the bytes, high 48 bits, as 12 hex digits.
fn hash(normalized: &str) -> String {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut h = OFFSET;
    for byte in normalized.as_bytes() {
        h ^= u64::from(*byte);
        h = h.wrapping_mul(PRIME);
    }
    format!("{:012x}", h >> 16)
}

/// The message with its varying parts replaced by placeholders. See the module docs.
pub fn normalize(message: &str) -> String {
    let unquoted = strip_quotes(message);
    let words: Vec<String> = unquoted.split_whitespace().map(normalize_word).collect();
    words.join(" ").to_lowercase()
}

/// Rule 1: quoted values.
fn strip_quotes(message: &str) -> String {
    let chars: Vec<char> = message.chars().collect();
    let mut out = String::with_capacity(message.len());
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let opens = (c == '\'' || c == '"') && (i == 0 || !chars[i - 1].is_alphanumeric());
        if opens {
            if let Some(end) = closing_quote(&chars, i) {
                out.push(c);
                out.push_str("<q>");
                out.push(c);
                i = end + 1;
                continue;
            }
        }
        out.push(c);
        i += 1;
    }
    out
}

/// The index of the quote closing the one at `open`, if any.
fn closing_quote(chars: &[char], open: usize) -> Option<usize> {
    let quote = chars[open];
    let mut i = open + 1;
    while i < chars.len() {
        let c = chars[i];
        if quote == '"' && c == '\\' {
            i += 2;
            continue;
        }
        if c == quote {
            if quote == '\'' && chars.get(i + 1) == Some(&'\'') {
                i += 2; // '' inside a single-quoted value
                continue;
            }
            if quote == '\'' && chars.get(i + 1).is_some_and(|c| c.is_alphanumeric()) {
                i += 1; // an apostrophe inside the value: 'Bob's Diner'
                continue;
            }
            return Some(i);
        }
        i += 1;
    }
    None
}

/// Rule 3, for one whitespace-free word.
fn normalize_word(word: &str) -> String {
    let trimmed = word.trim_matches(|c: char| "()[]{}<>,;.:!".contains(c));
    if let Some(at) = trimmed.find('@') {
        let (local, domain) = (&trimmed[..at], &trimmed[at + 1..]);
        if !local.is_empty() && domain.contains('.') && !domain.starts_with('.') {
            return word.replacen(trimmed, "<email>", 1);
        }
    }
    if let Some(scheme_end) = word.find("://") {
        if let Some(query) = word[scheme_end..].find('?') {
            let cut = scheme_end + query;
            return format!("{}?<query>", normalize_tokens(&word[..cut]));
        }
    }
    normalize_tokens(word)
}

/// UUIDs, hex runs and decimal runs within a word.
fn normalize_tokens(word: &str) -> String {
    let chars: Vec<char> = word.chars().collect();
    let mut out = String::with_capacity(word.len());
    let mut i = 0;
    while i < chars.len() {
        if is_uuid_at(&chars, i) {
            out.push_str("<uuid>");
            i += 36;
            continue;
        }
        if chars[i].is_ascii_alphanumeric() {
            let start = i;
            while i < chars.len() && chars[i].is_ascii_alphanumeric() {
                i += 1;
            }
            let run: String = chars[start..i].iter().collect();
            out.push_str(&normalize_run(&run));
            continue;
        }
        out.push(chars[i]);
        i += 1;
    }
    out
}

fn is_uuid_at(chars: &[char], i: usize) -> bool {
    const GROUPS: [usize; 5] = [8, 4, 4, 4, 12];
    if i > 0 && chars[i - 1].is_ascii_alphanumeric() {
        return false;
    }
    let mut j = i;
    for (n, len) in GROUPS.iter().enumerate() {
        for _ in 0..*len {
            if !chars.get(j).is_some_and(char::is_ascii_hexdigit) {
                return false;
            }
            j += 1;
        }
        if n < GROUPS.len() - 1 {
            if chars.get(j) != Some(&'-') {
                return false;
            }
            j += 1;
        }
    }
    !chars.get(j).is_some_and(char::is_ascii_alphanumeric)
}

/// One run of ASCII letters and digits.
fn normalize_run(run: &str) -> String {
    let lower = run.to_ascii_lowercase();
    if let Some(hex) = lower.strip_prefix("0x") {
        if !hex.is_empty() && hex.chars().all(|c| c.is_ascii_hexdigit()) {
            return "<hex>".into();
        }
    }
    if run.len() >= 8
        && run.chars().all(|c| c.is_ascii_hexdigit())
        && run.chars().any(|c| c.is_ascii_digit())
        && !run.chars().all(|c| c.is_ascii_digit())
    {
        return "<hex>".into();
    }
    let mut out = String::with_capacity(run.len());
    let mut in_digits = false;
    for c in run.chars() {
        if c.is_ascii_digit() {
            if !in_digits {
                out.push_str("<n>");
                in_digits = true;
            }
        } else {
            in_digits = false;
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalisation_table() {
        let cases = [
            (
                "HTTP 503 from provider after 1234ms",
                "http <n> from provider after <n>ms",
            ),
            (
                "template crashed on 'Café Ünï'",
                "template crashed on '<q>'",
            ),
            ("template crashed on 'Bob''s'", "template crashed on '<q>'"),
            (
                "template crashed on 'Bob's Diner'",
                "template crashed on '<q>'",
            ),
            ("can't parse 'x' or 'y'", "can't parse '<q>' or '<q>'"),
            (
                r#"no field "amount\"x" in payload"#,
                r#"no field "<q>" in payload"#,
            ),
            ("can't connect to db", "can't connect to db"),
            ("user bob@example.com not found", "user <email> not found"),
            ("(bob.smith@mail.example.org)", "(<email>)"),
            (
                "GET https://api.example.com/v2/orders/991?token=abc&x=1 failed",
                "get https://api.example.com/v<n>/orders/<n>?<query> failed",
            ),
            (
                "order 3f2b8c1e-9a4d-4e6f-8b2a-1c3d5e7f9a0b missing",
                "order <uuid> missing",
            ),
            (
                "object deadbeef42 gone, ptr 0x7ffd1234",
                "object <hex> gone, ptr <hex>",
            ),
            ("timeout   after\n\t 30s", "timeout after <n>s"),
            ("row 12345678 locked", "row <n> locked"),
            ("took 1.5s", "took <n>.<n>s"),
        ];
        for (message, want) in cases {
            assert_eq!(normalize(message), want, "{message:?}");
        }
    }

    #[test]
    fn the_same_bug_shares_a_fingerprint_and_different_bugs_differ() {
        let same = [
            (
                "HTTP 503 from provider after 1234ms",
                "HTTP 503 from provider after 98ms",
            ),
            (
                "template crashed on 'Café Ünï'",
                "template crashed on 'Bob''s'",
            ),
            (
                "user a@b.io not found",
                "user someone.else@example.com not found",
            ),
            (
                "order 3f2b8c1e-9a4d-4e6f-8b2a-1c3d5e7f9a0b missing",
                "order 00000000-0000-0000-0000-000000000000 missing",
            ),
        ];
        for (a, b) in same {
            assert_eq!(fingerprint(a), fingerprint(b), "{a:?} vs {b:?}");
        }
        let different = [
            "HTTP 503 from provider after 1234ms",
            "HTTP 503 from provider",
            "template crashed on 'Café Ünï'",
            "connection refused",
            "connection reset",
        ];
        for (i, a) in different.iter().enumerate() {
            for b in &different[i + 1..] {
                assert_ne!(fingerprint(a), fingerprint(b), "{a:?} vs {b:?}");
            }
        }
    }

    /// The hash is part of the contract: stored fingerprints must keep matching.
    #[test]
    fn the_hash_is_pinned() {
        assert_eq!(hash(""), "cbf29ce48422");
        assert_eq!(fingerprint(""), "cbf29ce48422");
        assert_eq!(hash("a"), "af63dc4c8601");
        assert_eq!(lease_expired().len(), 12);
        assert!(lease_expired().chars().all(|c| c.is_ascii_hexdigit()));
    }
}
