//! The live view: one status line, rewritten in place on a terminal; plain lines, one
//! every simulated five minutes, when the output is a file or a pipe.

use std::io::{IsTerminal, Write};

/// What the live view shows at one instant.
#[derive(Debug, Clone, Copy, Default)]
pub struct Status {
    /// Simulated seconds since the start.
    pub sim_secs: f64,
    /// Whether the provider is answering 503.
    pub provider_down: bool,
    /// Receipts enqueued so far.
    pub enqueued: u64,
    /// Receipts the provider accepted.
    pub delivered: u64,
    /// Jobs waiting out a backoff, or due again after one.
    pub retrying: i64,
    /// Dead jobs.
    pub dead: i64,
    /// Provider requests per simulated second, averaged over the last simulated
    /// minute or so.
    pub requests_per_sec: f64,
    /// The provider's breaker and the receipts parked on it, when it is protected.
    pub breaker: Option<(revenant::dependency::BreakerState, i64)>,
}

/// Where and how the status is drawn.
pub struct LiveView {
    out: Box<dyn Write + Send>,
    in_place: bool,
    every_secs: f64,
    next_plain_at: f64,
    drawn: bool,
}

impl LiveView {
    /// On standard output, or on standard error when standard output carries JSON.
    pub fn new(to_stderr: bool) -> Self {
        let (out, in_place): (Box<dyn Write + Send>, bool) = if to_stderr {
            (Box::new(std::io::stderr()), std::io::stderr().is_terminal())
        } else {
            (Box::new(std::io::stdout()), std::io::stdout().is_terminal())
        };
        LiveView {
            out,
            in_place,
            every_secs: 300.0,
            next_plain_at: 0.0,
            drawn: false,
        }
    }

    /// Prints a plain line: a message between status updates.
    pub fn say(&mut self, text: &str) {
        if self.in_place && self.drawn {
            let _ = write!(self.out, "\r\x1b[2K");
        }
        let _ = writeln!(self.out, "{text}");
        self.drawn = false;
        let _ = self.out.flush();
    }

    /// Shows `status`: in place on a terminal, else as a line every five simulated
    /// minutes.
    pub fn update(&mut self, status: &Status) {
        let line = line(status);
        if self.in_place {
            let _ = write!(self.out, "\r\x1b[2K{line}");
            self.drawn = true;
        } else if status.sim_secs >= self.next_plain_at {
            let _ = writeln!(self.out, "{line}");
            self.next_plain_at =
                (status.sim_secs / self.every_secs).floor() * self.every_secs + self.every_secs;
        }
        let _ = self.out.flush();
    }

    /// Leaves the last status on screen and moves to a new line.
    pub fn finish(&mut self, status: &Status) {
        let line = line(status);
        if self.in_place {
            let _ = writeln!(self.out, "\r\x1b[2K{line}");
        } else {
            let _ = writeln!(self.out, "{line}");
        }
        self.drawn = false;
        let _ = self.out.flush();
    }
}

/// The story's clock: the run starts at 20:09:00, so the provider falls over at
/// 8:10pm, as in the design.
pub fn story_clock(sim_secs: f64) -> String {
    let total = 20 * 3600 + 9 * 60 + sim_secs.max(0.0) as u64;
    format!(
        "{:02}:{:02}:{:02}",
        (total / 3600) % 24,
        (total / 60) % 60,
        total % 60
    )
}

fn line(s: &Status) -> String {
    let breaker = match s.breaker {
        Some((state, parked)) => format!(
            "  breaker {:<9} parked {parked:>6}",
            state.as_str().replace('_', "-")
        ),
        None => String::new(),
    };
    format!(
        "{}  provider {:<4}  enqueued {:>6}  delivered {:>6}  retrying {:>6}  dead {:>3}  provider {:>5.1} req/s{breaker}",
        story_clock(s.sim_secs),
        if s.provider_down { "DOWN" } else { "up" },
        s.enqueued,
        s.delivered,
        s.retrying,
        s.dead,
        s.requests_per_sec,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_story_starts_a_minute_before_eight_ten() {
        assert_eq!(story_clock(0.0), "20:09:00");
        assert_eq!(story_clock(60.0), "20:10:00");
        assert_eq!(story_clock(31.0 * 60.0 + 5.0), "20:40:05");
    }
}
