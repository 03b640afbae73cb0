//! Bounded, valid UTF-8 excerpts of bytes we do not control (a response body, a
//! command's standard error), for error messages.
//!
//! Error messages land in the job's error history and in logs, so they must be short and
//! must be text: a cut never splits a character, and bytes that are not UTF-8 become
//! `U+FFFD` instead of failing the whole message.

/// The first `cap` bytes of `bytes` (fewer if a character straddles the cut), trimmed,
/// with `…` appended when something was cut.
pub(crate) fn head(bytes: &[u8], cap: usize) -> String {
    if bytes.len() <= cap {
        return String::from_utf8_lossy(bytes).trim().to_string();
    }
    let mut cut = &bytes[..cap];
    // Drop a character the cut split in two (an incomplete sequence at the very end);
    // invalid bytes elsewhere are the body's own and are replaced.
    if let Err(err) = std::str::from_utf8(cut) {
        if err.error_len().is_none() {
            cut = &cut[..err.valid_up_to()];
        }
    }
    format!("{}…", String::from_utf8_lossy(cut).trim_end())
}

/// The last `cap` bytes of `bytes` (fewer if a character straddles the cut), trimmed,
/// with `…` prepended when something was cut.
pub(crate) fn tail(bytes: &[u8], cap: usize) -> String {
    if bytes.len() <= cap {
        return String::from_utf8_lossy(bytes).trim().to_string();
    }
    let mut cut = &bytes[bytes.len() - cap..];
    // Skip the continuation bytes of a character the cut split (at most three).
    let partial = cut
        .iter()
        .take(3)
        .take_while(|b| (**b & 0b1100_0000) == 0b1000_0000)
        .count();
    cut = &cut[partial..];
    format!("…{}", String::from_utf8_lossy(cut).trim())
}

/// Keeps the last `cap` bytes written to it: a command's output can be gigabytes, its
/// error message needs the end.
#[derive(Debug)]
pub(crate) struct TailBuffer {
    cap: usize,
    bytes: Vec<u8>,
    /// Whether anything was dropped from the front.
    cut: bool,
}

impl TailBuffer {
    pub(crate) fn new(cap: usize) -> Self {
        TailBuffer {
            cap,
            bytes: Vec::with_capacity(cap.min(64 * 1024)),
            cut: false,
        }
    }

    pub(crate) fn push(&mut self, chunk: &[u8]) {
        self.bytes.extend_from_slice(chunk);
        // Compact only when twice over the cap, so pushes stay amortised O(n).
        if self.bytes.len() > 2 * self.cap {
            let drop = self.bytes.len() - self.cap;
            self.bytes.drain(..drop);
            self.cut = true;
        }
    }

    /// The tail as text (see [`tail`]).
    pub(crate) fn text(&self) -> String {
        let text = tail(&self.bytes, self.cap);
        if self.cut && !text.starts_with('…') {
            // Cut at a compaction and what is left fits: still say it was cut.
            format!("…{text}")
        } else {
            text
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn head_never_splits_a_character() {
        // "é" is two bytes; a cut after 3 bytes of "aéé" lands inside the second one.
        assert_eq!(head("aéé".as_bytes(), 4), "aé…");
        assert_eq!(head("aéé".as_bytes(), 5), "aéé");
        assert_eq!(head(b"  short  ", 512), "short");
    }

    #[test]
    fn head_replaces_bytes_that_are_not_utf8() {
        assert_eq!(head(&[b'a', 0xff, b'b'], 512), "a\u{fffd}b");
    }

    #[test]
    fn tail_never_splits_a_character() {
        // Last 3 bytes of "aéé" start inside the first "é".
        assert_eq!(tail("aéé".as_bytes(), 3), "…é");
        assert_eq!(tail(b"one\ntwo\nthree\n", 6), "…three");
    }

    #[test]
    fn tail_buffer_keeps_the_end_of_a_long_stream() {
        let mut buffer = TailBuffer::new(8);
        for i in 0..100 {
            buffer.push(format!("line {i}\n").as_bytes());
        }
        assert_eq!(buffer.text(), "…line 99");
        let mut short = TailBuffer::new(8);
        short.push(b"oops\n");
        assert_eq!(short.text(), "oops");
    }
}
