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
//! 3. in each word: a URL (`scheme://...`) keeps its scheme, host and port, its path
//!    becomes `/<path>`, each query value `<v>` (the keys stay), a fragment
//!    `#<fragment>` and user information `<user>@`; an e-mail address becomes
//!    `<email>`; a UUID becomes `<uuid>`; a run of 8 or more hex digits with at least
//!    one digit (or `0x` and hex digits) becomes `<hex>`; every other run of decimal
//!    digits becomes `<n>`;
//! 4. the result is lowercased.
//!
//! ```
//! use revenant_core::fingerprint::{fingerprint, normalize};
//!
//! // A webhook fan-out failing against one dead host is one group, not one per URL.
//! assert_eq!(
//!     normalize("POST https://hooks.example:8443/a/991?sig=x1: connection refused"),
//!     "post https://hooks.example:8443/<path>?sig=<v>: connection refused"
//! );
//! assert_eq!(
//!     fingerprint("POST https://h.example/a: connection refused"),
//!     fingerprint("POST https://h.example/b: connection refused"),
//! );
//! // Another host is another cause.
//! assert_ne!(
//!     fingerprint("POST https://h.example/a: connection refused"),
//!     fingerprint("POST https://other.example/a: connection refused"),
//! );
//! ```
//!
//! Why the whole path and not only the segments that look like ids: error trackers
//! parameterise numbers, UUIDs and hashes, and revenant does that everywhere else, but a
//! webhook fan-out's paths are names (`/hooks/acme`, `/hooks/globex`) as often as ids,
//! and the cause a dead-letter group stands for (a host that refuses connections,
//! answers 503, fails TLS) is the host's. Two different causes at one host still differ
//! in the rest of the message (`HTTP 404` against `HTTP 503`). What is lost: two
//! endpoints of one host failing with the very same message read as one group; the
//! example message of each group (and `revenant dead list --fingerprint`) still shows
//! the full URLs.
//!
//! Limits, said plainly: an id made of random letters and digits that is not hex
//! (`req_8fK2xQ9z`) keeps its letters, so each such message gets its own fingerprint;
//! put ids in quotes or at least in hex if you want them grouped.
//!
//! The hash is FNV-1a 64 over the UTF-8 bytes of the normalised message, and the
//! fingerprint is the high 48 bits as 12 lowercase hex digits. It depends on nothing
//! but those bytes: the same on every platform, in every process and every release.
//!
//! # Versions
//!
//! A fingerprint names a pattern (the normalised text), not a rule set, and it is
//! computed and stored when a job dies. The rules are at version [`VERSION`]; version 1
//! had no URL rule beyond replacing a query string with `?<query>` (a URL's path was
//! kept, so `/a`, `/b` and `/c` were three groups). For a message without a URL both
//! versions give the same pattern, so the same fingerprint: nothing changed for those.
//! Jobs that died of a URL error before the upgrade keep the fingerprint they were given,
//! so filters, scripts and redrive records that name it keep selecting them; they form
//! their own group next to the new one until they are redriven or purged, and
//! [`pattern`] shows each group under the rules its fingerprint was made with.

/// The version of the rules [`normalize`] applies (see "Versions" in the module docs).
pub const VERSION: u32 = 2;

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

/// The message with its varying parts replaced by placeholders, under the current
/// rules ([`VERSION`]). See the module docs.
pub fn normalize(message: &str) -> String {
    normalize_with(message, Rules::V2)
}

/// The message normalised under version 1 of the rules (before URL paths and query
/// values were parameterised), to name the pattern of a fingerprint stored then.
pub fn normalize_v1(message: &str) -> String {
    normalize_with(message, Rules::V1)
}

/// The pattern a stored fingerprint stands for, given one message of its group: the
/// message normalised under the rules that produced `print` (current first, then
/// version 1), or [`LEASE_EXPIRED_PATTERN`] for the `lease_expired` fingerprint. When
/// no version matches (a fingerprint written by hand, or a message changed since), the
/// current rules' pattern.
///
/// ```
/// use revenant_core::fingerprint::{fingerprint, normalize_v1, pattern};
///
/// let message = "POST https://h.example/a: connection refused";
/// assert_eq!(
///     pattern(&fingerprint(message), message),
///     "post https://h.example/<path>: connection refused"
/// );
/// // A job that died under version 1 keeps its fingerprint and its pattern.
/// let old = "ed2c9d535d4c"; // what version 1 stored for this message
/// assert_eq!(pattern(old, message), normalize_v1(message));
/// assert_eq!(normalize_v1(message), "post https://h.example/a: connection refused");
/// ```
pub fn pattern(print: &str, message: &str) -> String {
    if print == lease_expired() {
        return LEASE_EXPIRED_PATTERN.to_string();
    }
    let current = normalize(message);
    if hash(&current) == print {
        return current;
    }
    let v1 = normalize_v1(message);
    if hash(&v1) == print {
        return v1;
    }
    current
}

/// Which rules [`normalize_with`] applies.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Rules {
    /// A URL's path kept, its query string replaced whole.
    V1,
    /// A URL's path and query values parameterised, its host kept.
    V2,
}

fn normalize_with(message: &str, rules: Rules) -> String {
    let unquoted = strip_quotes(message);
    let words: Vec<String> = unquoted
        .split_whitespace()
        .map(|word| normalize_word(word, rules))
        .collect();
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
fn normalize_word(word: &str, rules: Rules) -> String {
    if rules == Rules::V2 {
        if let Some(url) = normalize_url(word) {
            return url;
        }
    }
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

/// Rule 3's URL (version 2): `word` holds `scheme://`; the punctuation around the URL
/// (`(`, `[`, a trailing `:` or `,`) is kept and normalised as any other text.
fn normalize_url(word: &str) -> Option<String> {
    let sep = word.find("://")?;
    let is_scheme = |c: char| c.is_ascii_alphanumeric() || "+-.".contains(c);
    let start = word[..sep]
        .char_indices()
        .rev()
        .take_while(|(_, c)| is_scheme(*c))
        .last()
        .map(|(i, _)| i)?;
    if !word[start..].starts_with(|c: char| c.is_ascii_alphabetic()) {
        return None;
    }
    // Trailing punctuation ends the URL: `(https://h/a):` and `https://h/a,`.
    let end = word
        .trim_end_matches(|c: char| ")]}>,;.:!'\"".contains(c))
        .len()
        .max(sep + 3);
    let (prefix, url, suffix) = (&word[..start], &word[start..end], &word[end..]);
    let scheme_end = sep - start + 3;
    let rest = &url[scheme_end..];
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..authority_end];
    let host = match authority.rfind('@') {
        Some(at) => format!("<user>@{}", &authority[at + 1..]),
        None => authority.to_string(),
    };
    let mut tail = &rest[authority_end..];
    let mut out = format!("{}{}{host}", normalize_tokens(prefix), &url[..scheme_end]);
    let fragment = tail.find('#').map(|at| {
        let fragment = &tail[at..];
        tail = &tail[..at];
        fragment
    });
    let (path, query) = match tail.find('?') {
        Some(at) => (&tail[..at], Some(&tail[at + 1..])),
        None => (tail, None),
    };
    if path == "/" {
        out.push('/');
    } else if !path.is_empty() {
        out.push_str("/<path>");
    }
    if let Some(query) = query {
        out.push('?');
        let params: Vec<String> = query
            .split('&')
            .map(|param| match param.split_once('=') {
                Some((key, _)) => format!("{}=<v>", normalize_tokens(key)),
                None => normalize_tokens(param),
            })
            .collect();
        out.push_str(&params.join("&"));
    }
    if fragment.is_some() {
        out.push_str("#<fragment>");
    }
    out.push_str(&normalize_tokens(suffix));
    Some(out)
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
                "get https://api.example.com/<path>?token=<v>&x=<v> failed",
            ),
            (
                "error sending request for url (http://127.0.0.1:9/hooks/42#top): refused",
                "error sending request for url (http://127.0.0.1:9/<path>#<fragment>): refused",
            ),
            (
                "[POST https://bob:s3cret@h.example/]",
                "[post https://<user>@h.example/]",
            ),
            (
                "HTTP 503 from GET https://h.example?a&b=2, giving up",
                "http <n> from get https://h.example?a&b=<v>, giving up",
            ),
            ("see ://nothing and x://", "see ://nothing and x://"),
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

    /// Version 1 is kept to name the pattern of fingerprints stored under it.
    #[test]
    fn version_1_rules_are_kept() {
        assert_eq!(
            normalize_v1("GET https://api.example.com/v2/orders/991?token=abc&x=1 failed"),
            "get https://api.example.com/v<n>/orders/<n>?<query> failed"
        );
        // Without a URL, both versions agree, so those fingerprints did not change.
        for message in [
            "HTTP 503 from provider after 1234ms",
            "template crashed on 'Café Ünï'",
            "user bob@example.com not found",
        ] {
            assert_eq!(normalize(message), normalize_v1(message), "{message:?}");
        }
    }

    #[test]
    fn one_host_refusing_many_paths_is_one_group() {
        let prints: Vec<String> = ["/a", "/b", "/c", "/hooks/42"]
            .iter()
            .map(|path| fingerprint(&format!("POST https://h.example{path}: connection refused")))
            .collect();
        assert!(prints.iter().all(|p| *p == prints[0]), "{prints:?}");
        assert_ne!(
            prints[0],
            fingerprint("POST https://other.example/a: connection refused")
        );
        assert_ne!(
            prints[0],
            fingerprint("HTTP 404 Not Found from POST https://h.example/a")
        );
    }

    #[test]
    fn a_group_shows_the_pattern_its_fingerprint_was_made_with() {
        let message = "POST https://h.example/a: connection refused";
        let old = hash(&normalize_v1(message));
        assert_ne!(old, fingerprint(message));
        assert_eq!(pattern(&old, message), normalize_v1(message));
        assert_eq!(pattern(&fingerprint(message), message), normalize(message));
        assert_eq!(pattern(&lease_expired(), "whatever"), LEASE_EXPIRED_PATTERN);
        assert_eq!(pattern("000000000000", message), normalize(message));
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
        // A version 1 fingerprint stored before URL paths were parameterised.
        assert_eq!(
            hash(&normalize_v1(
                "POST https://h.example/a: connection refused"
            )),
            "ed2c9d535d4c"
        );
        assert_eq!(lease_expired().len(), 12);
        assert!(lease_expired().chars().all(|c| c.is_ascii_hexdigit()));
    }
}
