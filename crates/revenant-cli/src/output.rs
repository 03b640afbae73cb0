//! Printing: aligned tables for people, JSON for scripts.

use std::io::Write;

use chrono::SecondsFormat;
use revenant::Timestamp;
use serde::Serialize;

use crate::error::CliError;

/// Prints a value as pretty JSON on standard output.
pub fn json<T: Serialize + ?Sized>(value: &T) -> Result<(), CliError> {
    let mut out = std::io::stdout().lock();
    serde_json::to_writer_pretty(&mut out, value)
        .map_err(|err| CliError::Failed(err.to_string()))?;
    writeln!(out)?;
    Ok(())
}

/// A table printed with columns padded to their widest cell.
pub struct Table {
    headers: Vec<&'static str>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these column headers.
    pub fn new(headers: Vec<&'static str>) -> Self {
        Table {
            headers,
            rows: Vec::new(),
        }
    }

    /// Adds a row (one cell per header).
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// Prints the table, or `empty` when it has no rows.
    pub fn print(&self, empty: &str) -> Result<(), CliError> {
        let mut out = std::io::stdout().lock();
        if self.rows.is_empty() {
            writeln!(out, "{empty}")?;
            return Ok(());
        }
        let mut widths: Vec<usize> = self.headers.iter().map(|h| h.len()).collect();
        for row in &self.rows {
            for (width, cell) in widths.iter_mut().zip(row) {
                *width = (*width).max(cell.chars().count());
            }
        }
        let line = |cells: Vec<&str>| {
            let mut text = String::new();
            for (i, (cell, width)) in cells.iter().zip(&widths).enumerate() {
                if i + 1 == cells.len() {
                    text.push_str(cell);
                } else {
                    text.push_str(&format!("{cell:<width$}  "));
                }
            }
            text.trim_end().to_string()
        };
        writeln!(out, "{}", line(self.headers.clone()))?;
        for row in &self.rows {
            writeln!(out, "{}", line(row.iter().map(String::as_str).collect()))?;
        }
        Ok(())
    }
}

/// A timestamp as RFC 3339 in UTC, to the millisecond.
pub fn time(at: Timestamp) -> String {
    at.to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// An optional timestamp, or `-`.
pub fn time_opt(at: Option<Timestamp>) -> String {
    at.map(time).unwrap_or_else(|| "-".to_string())
}

/// A message cut to `max` characters on one line, for table cells.
pub fn clip(text: &str, max: usize) -> String {
    let one_line: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if one_line.chars().count() <= max {
        one_line
    } else {
        let cut: String = one_line.chars().take(max.saturating_sub(1)).collect();
        format!("{cut}…")
    }
}

/// Seconds as a short age: `42s`, `3m12s`, `2h5m`.
pub fn age(seconds: f64) -> String {
    let secs = seconds.max(0.0).round() as u64;
    revenant::duration::format(std::time::Duration::from_secs(secs))
}
