//! Hand-written SVG charts: no scripts, no fonts or styles fetched from anywhere, so
//! the file opens the same in a browser, an image viewer or a pull request.
//!
//! [`render`] draws any [`Chart`]: panels stacked vertically over one time axis, each
//! with its own y axis, layers drawn as steps (one step per bucket, so a bucket's
//! value is shown over the time it covers), shaded spans (the outage) and markers.
//! [`traffic`] builds the chart the design asks for from a [`Series`]: provider
//! requests per second, fresh and retries stacked, over the queue's depth. It takes
//! plain series, so `revenant demo` can draw its measured run the same way as the
//! simulator draws its prediction.

use std::fmt::Write as _;
use std::time::Duration;

use revenant_core::{duration, Jitter};

use crate::report::Report;
use crate::series::Series;

/// Fresh requests: blue.
pub const FRESH_COLOR: &str = "#4C78A8";
/// Retries: orange, apart from blue for every common kind of colour blindness.
pub const RETRY_COLOR: &str = "#F58518";
/// Queue depth: purple.
pub const DEPTH_COLOR: &str = "#7B4FA0";
/// The outage's shading: a pale red.
pub const OUTAGE_COLOR: &str = "#E45756";

/// A chart: a title, panels over one time axis, shaded spans and markers.
#[derive(Debug, Clone, PartialEq)]
pub struct Chart {
    /// The title, at the top.
    pub title: String,
    /// A line of context under the title (the scenario), if any.
    pub subtitle: Option<String>,
    /// The time axis: from, to, in seconds from the start. Ticks are labelled as
    /// durations (`10m`, `1h30m`).
    pub x_range: (f64, f64),
    /// The time axis's label.
    pub x_label: String,
    /// The panels, top to bottom.
    pub panels: Vec<Panel>,
    /// Spans shaded in every panel (the outage), labelled in the first.
    pub shaded: Vec<Span>,
    /// Vertical dashed lines across every panel (when the queue drained), labelled in
    /// the last.
    pub markers: Vec<Marker>,
}

/// One panel: a y axis and its layers.
#[derive(Debug, Clone, PartialEq)]
pub struct Panel {
    /// The y axis's label.
    pub y_label: String,
    /// The panel's height in pixels (the plot area, without ticks and labels).
    pub height: u32,
    /// Stack the layers (each on top of the previous, filled), or draw each as its
    /// own line. Stacked layers must share their x values, as the columns of one
    /// [`Series`] do.
    pub stacked: bool,
    /// The layers, bottom first when stacked.
    pub layers: Vec<Layer>,
}

/// One named series of steps: each point's value holds from its x to the next
/// point's x (the last one for as long as the step before it).
#[derive(Debug, Clone, PartialEq)]
pub struct Layer {
    /// The name in the legend.
    pub name: String,
    /// A CSS colour.
    pub color: String,
    /// (seconds from the start, value), in time order.
    pub points: Vec<(f64, f64)>,
}

/// A shaded span of time.
#[derive(Debug, Clone, PartialEq)]
pub struct Span {
    /// From, in seconds.
    pub from: f64,
    /// To, in seconds.
    pub to: f64,
    /// The label, at the top of the first panel.
    pub label: String,
    /// A CSS colour, drawn at low opacity.
    pub color: String,
}

/// A vertical line at an instant.
#[derive(Debug, Clone, PartialEq)]
pub struct Marker {
    /// When, in seconds.
    pub at: f64,
    /// The label.
    pub label: String,
}

/// The design's chart from a series: provider requests per second (fresh and
/// retries stacked) above the number of jobs waiting, with the outage shaded and,
/// when given, a marker where the queue drained.
pub fn traffic(
    title: &str,
    subtitle: Option<String>,
    series: &Series,
    outage: (Duration, Duration),
    drained_at: Option<Duration>,
) -> Chart {
    let column = |f: fn(&crate::series::Point) -> f64| {
        series.points.iter().map(|p| (p.at_secs, f(p))).collect()
    };
    let end = series
        .points
        .last()
        .map_or(0.0, |p| p.at_secs + series.bucket_secs);
    let (outage_from, outage_to) = (outage.0.as_secs_f64(), outage.1.as_secs_f64());
    let per = if series.bucket_secs == 1.0 {
        String::new()
    } else {
        format!(", mean over {} s", series.bucket_secs)
    };
    Chart {
        title: title.to_string(),
        subtitle,
        x_range: (0.0, end.max(outage_to)),
        x_label: "time since start".to_string(),
        panels: vec![
            Panel {
                y_label: format!("provider requests / s{per}"),
                height: 280,
                stacked: true,
                layers: vec![
                    Layer {
                        name: "fresh (first attempts)".to_string(),
                        color: FRESH_COLOR.to_string(),
                        points: column(|p| p.fresh_per_sec),
                    },
                    Layer {
                        name: "retries".to_string(),
                        color: RETRY_COLOR.to_string(),
                        points: column(|p| p.retries_per_sec),
                    },
                ],
            },
            Panel {
                y_label: "jobs waiting (in backoff or due)".to_string(),
                height: 160,
                stacked: false,
                layers: vec![Layer {
                    name: "jobs waiting".to_string(),
                    color: DEPTH_COLOR.to_string(),
                    points: column(|p| p.waiting as f64),
                }],
            },
        ],
        shaded: vec![Span {
            from: outage_from,
            to: outage_to,
            label: format!(
                "provider down ({})",
                duration::format(Duration::from_secs_f64((outage_to - outage_from).round()))
            ),
            color: OUTAGE_COLOR.to_string(),
        }],
        markers: drained_at
            .map(|at| Marker {
                at: at.as_secs_f64(),
                label: "drained".to_string(),
            })
            .into_iter()
            .collect(),
    }
}

/// A simulation's chart, in 10-second buckets, its scenario in the subtitle.
pub fn render_report(report: &Report) -> String {
    let c = &report.config;
    let p = &c.policy;
    let b = p.backoff();
    let subtitle = format!(
        "{} jobs/s; {}; {} attempts, {} x{} capped at {}, jitter {}; {:.2} requests per fresh job while down; {} dead ({:.2}%); drained {} after recovery",
        c.arrivals.rate,
        match (&c.dependency.breaker, &c.dependency.rate_limit) {
            (Some(_), Some(rate)) => format!("breaker, rate limit {}/s", rate.per_second),
            (Some(_), None) => "breaker".to_string(),
            (None, Some(rate)) => format!("rate limit {}/s", rate.per_second),
            (None, None) => "no breaker".to_string(),
        },
        p.max_attempts(),
        duration::format(b.base),
        b.multiplier,
        duration::format(b.cap),
        p.jitter(),
        report.outage.requests_per_fresh_job,
        report.dead,
        report.dead_share * 100.0,
        duration::format(Duration::from_secs(report.drain_secs.max(0.0).round() as u64)),
    );
    let chart = traffic(
        "Provider requests and queue depth through the outage (simulated)",
        Some(subtitle),
        &report.series(Duration::from_secs(10)),
        (c.provider.outage_start, c.provider.outage_end()),
        Some(Duration::from_secs_f64(report.drained_at_secs)),
    );
    render(&chart)
}

/// A file-name-safe name for a jitter kind: `none`, `full`, `proportional-0.2`.
pub fn file_stem(jitter: Jitter) -> String {
    match jitter {
        Jitter::Proportional(f) => format!("proportional-{f}"),
        other => other.to_string(),
    }
}

const WIDTH: f64 = 960.0;
const LEFT: f64 = 78.0;
const RIGHT: f64 = 24.0;
const TOP: f64 = 92.0;
const PANEL_GAP: f64 = 34.0;
const BOTTOM: f64 = 56.0;
const FONT: &str = "system-ui, -apple-system, 'Segoe UI', Helvetica, Arial, sans-serif";

/// Renders a chart as a standalone SVG document.
pub fn render(chart: &Chart) -> String {
    let plot_width = WIDTH - LEFT - RIGHT;
    let heights: f64 = chart.panels.iter().map(|p| f64::from(p.height)).sum();
    let gaps = PANEL_GAP * chart.panels.len().saturating_sub(1) as f64;
    let total_height = TOP + heights + gaps + BOTTOM;
    let (x0, x1) = chart.x_range;
    let x_span = (x1 - x0).max(1.0);
    let x = |t: f64| LEFT + (t.clamp(x0, x1) - x0) / x_span * plot_width;

    let mut svg = String::new();
    let _ = writeln!(svg, r#"<?xml version="1.0" encoding="UTF-8"?>"#);
    let _ = writeln!(
        svg,
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{total_height}" viewBox="0 0 {WIDTH} {total_height}" font-family="{FONT}" font-size="12" fill="#222">"##
    );
    let _ = writeln!(svg, "<title>{}</title>", escape(&chart.title));
    let _ = writeln!(
        svg,
        r##"<rect x="0" y="0" width="{WIDTH}" height="{total_height}" fill="#ffffff"/>"##
    );
    let _ = writeln!(
        svg,
        r#"<text x="{LEFT}" y="26" font-size="17" font-weight="600">{}</text>"#,
        escape(&chart.title)
    );
    if let Some(subtitle) = &chart.subtitle {
        // A long scenario line is squeezed to the chart's width rather than cut off
        // at its edge (about 6.5 px per character at this size).
        let room = WIDTH - LEFT - 16.0;
        let fit = if subtitle.chars().count() as f64 * 6.5 > room {
            format!(r#" textLength="{room:.0}" lengthAdjust="spacingAndGlyphs""#)
        } else {
            String::new()
        };
        let _ = writeln!(
            svg,
            r##"<text x="{LEFT}" y="46" font-size="12" fill="#555"{fit}>{}</text>"##,
            escape(subtitle)
        );
    }
    legend(&mut svg, chart);

    let x_ticks = time_ticks(x0, x1);
    let mut top = TOP;
    for (index, panel) in chart.panels.iter().enumerate() {
        let height = f64::from(panel.height);
        let bottom = top + height;
        let stacks = stacked_values(panel);
        let y_max = stacks
            .iter()
            .flat_map(|layer| layer.iter().map(|step| step.high))
            .fold(0.0_f64, f64::max);
        let (y_ticks, y_top) = value_ticks(y_max);
        let y = |v: f64| bottom - (v / y_top).clamp(0.0, 1.0) * height;
        let _ = writeln!(svg, r#"<g class="panel">"#);

        // Shading first, so everything else is drawn over it.
        for span in &chart.shaded {
            let (a, b) = (x(span.from), x(span.to));
            let _ = writeln!(
                svg,
                r#"<rect x="{a:.1}" y="{top:.1}" width="{:.1}" height="{height:.1}" fill="{}" fill-opacity="0.12"/>"#,
                (b - a).max(0.0),
                escape(&span.color)
            );
            if index == 0 {
                let _ = writeln!(
                    svg,
                    r#"<text x="{:.1}" y="{:.1}" font-size="11" fill="{}">{}</text>"#,
                    a + 6.0,
                    top + 14.0,
                    escape(&span.color),
                    escape(&span.label)
                );
            }
        }
        // Grid and y ticks.
        for &tick in &y_ticks {
            let ty = y(tick);
            let _ = writeln!(
                svg,
                r##"<line x1="{LEFT}" y1="{ty:.1}" x2="{:.1}" y2="{ty:.1}" stroke="#e4e4e4" stroke-width="1"/>"##,
                LEFT + plot_width
            );
            let _ = writeln!(
                svg,
                r##"<text x="{:.1}" y="{:.1}" text-anchor="end" fill="#444">{}</text>"##,
                LEFT - 8.0,
                ty + 4.0,
                number(tick)
            );
        }
        for &tick in &x_ticks {
            let tx = x(tick);
            let _ = writeln!(
                svg,
                r##"<line x1="{tx:.1}" y1="{top:.1}" x2="{tx:.1}" y2="{bottom:.1}" stroke="#f0f0f0" stroke-width="1"/>"##
            );
        }
        // Layers.
        for (layer, values) in panel.layers.iter().zip(&stacks) {
            draw_layer(
                &mut svg,
                layer,
                values,
                panel.stacked || panel.layers.len() == 1,
                &x,
                &y,
            );
        }
        // Markers.
        for marker in &chart.markers {
            let mx = x(marker.at);
            let _ = writeln!(
                svg,
                r##"<line x1="{mx:.1}" y1="{top:.1}" x2="{mx:.1}" y2="{bottom:.1}" stroke="#333" stroke-width="1" stroke-dasharray="4 3"/>"##
            );
            if index + 1 == chart.panels.len() {
                // Labels near the right edge go on the line's left, inside the plot.
                let (lx, anchor) = if mx > LEFT + plot_width - 80.0 {
                    (mx - 4.0, "end")
                } else {
                    (mx + 4.0, "start")
                };
                let _ = writeln!(
                    svg,
                    r##"<text x="{lx:.1}" y="{:.1}" font-size="11" text-anchor="{anchor}" fill="#333">{}</text>"##,
                    top + 14.0,
                    escape(&marker.label)
                );
            }
        }
        // Axes.
        let _ = writeln!(
            svg,
            r##"<path d="M{LEFT},{top:.1} V{bottom:.1} H{:.1}" fill="none" stroke="#333" stroke-width="1"/>"##,
            LEFT + plot_width
        );
        for &tick in &x_ticks {
            let tx = x(tick);
            let _ = writeln!(
                svg,
                r##"<line x1="{tx:.1}" y1="{bottom:.1}" x2="{tx:.1}" y2="{:.1}" stroke="#333" stroke-width="1"/>"##,
                bottom + 5.0
            );
            if index + 1 == chart.panels.len() {
                let _ = writeln!(
                    svg,
                    r##"<text x="{tx:.1}" y="{:.1}" text-anchor="middle" fill="#444">{}</text>"##,
                    bottom + 19.0,
                    time_label(tick)
                );
            }
        }
        let mid = top + height / 2.0;
        let _ = writeln!(
            svg,
            r##"<text x="18" y="{mid:.1}" text-anchor="middle" transform="rotate(-90 18 {mid:.1})" fill="#333">{}</text>"##,
            escape(&panel.y_label)
        );
        let _ = writeln!(svg, "</g>");
        top = bottom + PANEL_GAP;
    }
    let _ = writeln!(
        svg,
        r##"<text x="{:.1}" y="{:.1}" text-anchor="middle" fill="#333">{}</text>"##,
        LEFT + plot_width / 2.0,
        total_height - 12.0,
        escape(&chart.x_label)
    );
    svg.push_str("</svg>\n");
    svg
}

/// One drawn step: a bucket's span of time and the band it fills.
#[derive(Debug, Clone, Copy)]
struct Step {
    from: f64,
    to: f64,
    low: f64,
    high: f64,
}

/// Each layer's steps: on top of the layers below when stacked, else from zero.
fn stacked_values(panel: &Panel) -> Vec<Vec<Step>> {
    let mut base: Vec<f64> = Vec::new();
    panel
        .layers
        .iter()
        .map(|layer| {
            let points = &layer.points;
            let steps: Vec<Step> = points
                .iter()
                .enumerate()
                .map(|(i, &(at, value))| {
                    let to = match (points.get(i + 1), i.checked_sub(1)) {
                        (Some(&(next, _)), _) => next,
                        (None, Some(prev)) => at + (at - points[prev].0),
                        (None, None) => at + 1.0,
                    };
                    let value = if value.is_finite() {
                        value.max(0.0)
                    } else {
                        0.0
                    };
                    let low = if panel.stacked {
                        base.get(i).copied().unwrap_or(0.0)
                    } else {
                        0.0
                    };
                    Step {
                        from: at,
                        to,
                        low,
                        high: low + value,
                    }
                })
                .collect();
            if panel.stacked {
                base = steps.iter().map(|step| step.high).collect();
            }
            steps
        })
        .collect()
}

/// A layer as a filled band (with its top edge drawn darker) or as a line.
fn draw_layer(
    svg: &mut String,
    layer: &Layer,
    steps: &[Step],
    filled: bool,
    x: &dyn Fn(f64) -> f64,
    y: &dyn Fn(f64) -> f64,
) {
    if steps.is_empty() {
        return;
    }
    let mut top = String::new();
    for (i, step) in steps.iter().enumerate() {
        let command = if i == 0 { 'M' } else { 'L' };
        let _ = write!(
            top,
            "{command}{:.1},{:.1} L{:.1},{:.1} ",
            x(step.from),
            y(step.high),
            x(step.to),
            y(step.high)
        );
    }
    let color = escape(&layer.color);
    let name = escape(&layer.name);
    if filled {
        let mut band = top.clone();
        for step in steps.iter().rev() {
            let _ = write!(
                band,
                "L{:.1},{:.1} L{:.1},{:.1} ",
                x(step.to),
                y(step.low),
                x(step.from),
                y(step.low)
            );
        }
        band.push('Z');
        let _ = writeln!(
            svg,
            r#"<path d="{band}" fill="{color}" fill-opacity="0.7" stroke="none"><title>{name}</title></path>"#
        );
    }
    let _ = writeln!(
        svg,
        r#"<path d="{}" fill="none" stroke="{color}" stroke-width="1.5" stroke-linejoin="round"><title>{name}</title></path>"#,
        top.trim_end()
    );
}

/// Every layer's name and colour, once, right-aligned above the first panel.
fn legend(svg: &mut String, chart: &Chart) {
    let mut entries: Vec<(&str, &str)> = Vec::new();
    for layer in chart.panels.iter().flat_map(|p| &p.layers) {
        if !entries.iter().any(|(name, _)| *name == layer.name) {
            entries.push((&layer.name, &layer.color));
        }
    }
    for span in &chart.shaded {
        entries.push((&span.label, &span.color));
    }
    // About 6.5 px per character at 12 px: enough to keep entries apart.
    let mut at = LEFT;
    let _ = writeln!(svg, r#"<g class="legend">"#);
    for (name, color) in entries {
        let _ = writeln!(
            svg,
            r#"<rect x="{at:.1}" y="62" width="14" height="10" fill="{}" fill-opacity="0.7"/>"#,
            escape(color)
        );
        let _ = writeln!(
            svg,
            r#"<text x="{:.1}" y="71">{}</text>"#,
            at + 19.0,
            escape(name)
        );
        at += 19.0 + name.chars().count() as f64 * 6.5 + 22.0;
    }
    let _ = writeln!(svg, "</g>");
}

/// Time ticks at a round step (seconds, minutes or hours), about six to twelve.
fn time_ticks(from: f64, to: f64) -> Vec<f64> {
    const STEPS: [f64; 17] = [
        1.0, 2.0, 5.0, 10.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 900.0, 1800.0, 3600.0, 7200.0,
        10_800.0, 21_600.0, 43_200.0,
    ];
    let span = (to - from).max(1.0);
    let step = STEPS
        .iter()
        .copied()
        .find(|step| span / step <= 12.0)
        .unwrap_or(86_400.0 * (span / 86_400.0 / 12.0).ceil());
    let mut ticks = Vec::new();
    let mut tick = (from / step).ceil() * step;
    while tick <= to + 1e-9 {
        ticks.push(tick);
        tick += step;
    }
    ticks
}

/// Value ticks at 1, 2 or 5 times a power of ten, and the axis top (the last tick).
fn value_ticks(max: f64) -> (Vec<f64>, f64) {
    let max = if max.is_finite() && max > 0.0 {
        max
    } else {
        1.0
    };
    let raw = max / 5.0;
    let magnitude = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * magnitude)
        .find(|step| *step >= raw)
        .unwrap_or(10.0 * magnitude);
    let count = (max / step).ceil().max(1.0) as usize;
    let ticks = (0..=count).map(|i| i as f64 * step).collect();
    (ticks, count as f64 * step)
}

/// A tick value: whole numbers without decimals, thousands as `12k`.
fn number(value: f64) -> String {
    if value >= 10_000.0 && value % 1000.0 == 0.0 {
        format!("{}k", value / 1000.0)
    } else if value.fract() == 0.0 {
        format!("{value:.0}")
    } else {
        let text = format!("{value:.2}");
        text.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}

/// A time tick: `0`, `30s`, `10m`, `1h30m`.
fn time_label(seconds: f64) -> String {
    if seconds <= 0.0 {
        "0".to_string()
    } else {
        duration::format(Duration::from_secs(seconds.round() as u64))
    }
}

/// Escapes text for SVG content and attribute values.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c if c.is_control() => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn value_ticks_are_round_and_cover_the_maximum() {
        assert_eq!(
            value_ticks(87.0),
            (vec![0.0, 20.0, 40.0, 60.0, 80.0, 100.0], 100.0)
        );
        assert_eq!(value_ticks(0.0).1, 1.0);
        let (ticks, top) = value_ticks(12_345.0);
        assert!(top >= 12_345.0 && ticks.len() <= 8, "{ticks:?}");
    }

    #[test]
    fn time_ticks_are_round_durations() {
        let ticks = time_ticks(0.0, 2.0 * 3600.0);
        assert_eq!(ticks.first(), Some(&0.0));
        assert_eq!(ticks[1], 600.0);
        assert_eq!(time_label(5400.0), "1h30m");
    }

    #[test]
    fn text_is_escaped() {
        assert_eq!(escape(r#"<a & "b">"#), "&lt;a &amp; &quot;b&quot;&gt;");
    }

    #[test]
    fn stacked_layers_sit_on_the_ones_below() {
        let layer = |v: f64| Layer {
            name: "x".into(),
            color: "#000".into(),
            points: vec![(0.0, v), (10.0, v)],
        };
        let panel = Panel {
            y_label: "y".into(),
            height: 100,
            stacked: true,
            layers: vec![layer(2.0), layer(3.0)],
        };
        let steps = stacked_values(&panel);
        assert_eq!((steps[1][0].low, steps[1][0].high), (2.0, 5.0));
        assert_eq!(steps[1][1].to, 20.0);
    }
}
