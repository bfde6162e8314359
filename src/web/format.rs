//! How numbers read on a page. Unknown is "—" (with a tooltip saying why), never 0.

use chrono::{DateTime, Utc};

use crate::metrics::{AgeSource, QueueView};

pub const UNKNOWN: &str = "—";

pub fn count(v: Option<u64>) -> String {
    match v {
        Some(n) => group_thousands(n),
        None => UNKNOWN.to_string(),
    }
}

fn group_thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A value a rule compares, as the cards beside it show numbers: counts grouped ("1,047", not
/// "1047.00"; issue 34, case 6), fractions with at most two decimals ("2.5", "0.93").
pub fn value(v: Option<f64>) -> String {
    match v {
        None => UNKNOWN.to_string(),
        Some(v) if v.fract() == 0.0 && v.abs() < 1e15 => {
            let grouped = group_thousands(v.abs() as u64);
            if v < 0.0 {
                format!("-{grouped}")
            } else {
                grouped
            }
        }
        Some(v) => {
            let text = format!("{v:.2}");
            text.trim_end_matches('0').trim_end_matches('.').to_string()
        }
    }
}

pub fn rate(v: Option<f64>) -> String {
    match v {
        None => UNKNOWN.to_string(),
        Some(0.0) => "0/s".to_string(),
        // Not "0.00/s" beside a badge that says messages arrive (issue 34, case 6).
        Some(r) if r > 0.0 && r < 0.005 => "< 0.01/s".to_string(),
        Some(r) if r < 10.0 => format!("{r:.2}/s"),
        Some(r) if r < 100.0 => format!("{r:.1}/s"),
        Some(r) => format!("{}/s", group_thousands(r.round() as u64)),
    }
}

pub fn duration(secs: f64) -> String {
    let s = secs.max(0.0).round() as u64;
    // The smaller unit only when it is not 0: "1m", not "1m 0s" (issue 34, case 6).
    let two = |big: u64, big_unit: &str, small: u64, small_unit: &str| match small {
        0 => format!("{big}{big_unit}"),
        _ => format!("{big}{big_unit} {small}{small_unit}"),
    };
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => two(s / 60, "m", s % 60, "s"),
        3600..=86_399 => two(s / 3600, "h", (s % 3600) / 60, "m"),
        _ => two(s / 86_400, "d", (s % 86_400) / 3600, "h"),
    }
}

pub fn age(view: &QueueView) -> String {
    match (view.oldest_age_secs, view.oldest_age_source) {
        (Some(secs), AgeSource::Estimated) if view.oldest_age_lower_bound => {
            format!("> {}", duration(secs))
        }
        (Some(secs), AgeSource::Estimated) => format!("~{}", duration(secs)),
        (Some(secs), AgeSource::Exact) if view.age_since_first_publish => {
            format!("{} {}", duration(secs), SINCE_FIRST_PUBLISHED)
        }
        (Some(secs), _) => duration(secs),
        (None, _) => UNKNOWN.to_string(),
    }
}

/// What a wait queue's age measures, said after it (`age`, `age_parts`).
const SINCE_FIRST_PUBLISHED: &str = "since first published";

/// The age as `age` says it, split into the number and what it measures, for a table column:
/// a column of "10s since first published" in one line widened the queue list past a 1400 px
/// window (issue 34, case 2); the note goes on a line of its own below the number.
pub fn age_parts(view: &QueueView) -> (String, Option<&'static str>) {
    match (view.oldest_age_secs, view.oldest_age_source) {
        (Some(secs), AgeSource::Exact) if view.age_since_first_publish => (duration(secs), Some(SINCE_FIRST_PUBLISHED)),
        _ => (age(view), None),
    }
}

pub fn age_title(view: &QueueView) -> &'static str {
    match view.oldest_age_source {
        AgeSource::Exact if view.age_since_first_publish => {
            "from the head message's timestamp, set when it was first published: in a wait (retry) queue that \
             includes every earlier try, not only the wait here (each wait is at most its TTL)"
        }
        AgeSource::Exact => "exact: from the broker's head message timestamp (or the queue is empty)",
        AgeSource::Estimated if view.age_from_custody => {
            "at least: the oldest dead letter in warren's custody, counted from when warren took it off the broker"
        }
        AgeSource::Estimated if view.age_from_depth && view.oldest_age_lower_bound => {
            "estimated lower bound from the queue's depth history: nothing has left it while warren watched, and it \
             was never seen empty, so its oldest message arrived before warren's history of it"
        }
        AgeSource::Estimated if view.age_from_depth => {
            "estimated from the queue's depth history: nothing has left it since it was last empty, so its oldest \
             message is the first that arrived after that (dead letters arrive without a publish counter)"
        }
        AgeSource::Estimated if view.fifo_broken_since.is_some() => {
            "estimated lower bound: older messages came back into this queue (handed back by its consumers with a \
             requeue, or requeued by warren), which breaks the FIFO order the estimate assumes; it holds again once \
             they drain"
        }
        AgeSource::Estimated if view.oldest_age_lower_bound => {
            "estimated lower bound: the oldest message is older than warren's history of this queue"
        }
        AgeSource::Estimated => "estimated from warren's history of the publish counter (assumes FIFO)",
        AgeSource::Unknown => "unknown: the broker gives no timestamp for this queue",
    }
}

pub fn time(t: Option<DateTime<Utc>>) -> String {
    match t {
        Some(t) => t.format("%Y-%m-%d %H:%M:%S UTC").to_string(),
        None => "never".to_string(),
    }
}

/// Unix seconds as a time, like every other time on the pages; the number itself where it is
/// not a time chrono can show.
pub fn unix(secs: i64) -> String {
    match DateTime::from_timestamp(secs, 0) {
        Some(t) => time(Some(t)),
        None => secs.to_string(),
    }
}

pub fn ago(t: Option<DateTime<Utc>>, now: DateTime<Utc>) -> String {
    match t {
        Some(t) => format!("{} ago", duration((now - t).num_milliseconds() as f64 / 1000.0)),
        None => "never".to_string(),
    }
}

/// A depth sparkline: inline SVG polylines (server-side, so it needs no JavaScript) and what
/// they cover.
#[derive(Debug, Default)]
pub struct Sparkline {
    /// One polyline per run of known values, so gaps stay gaps.
    pub lines: Vec<String>,
    pub title: String,
}

/// The sparkline of a depth series of `step`-second points. A new queue's series starts with
/// points before warren's first sample of it: the line starts at its first value and spans the
/// whole width, and the title says how much it covers (a tick at the right edge read as "no
/// data"). One value is a level line.
pub fn sparkline(series: &[Option<i64>], step: i64) -> Sparkline {
    const W: f64 = 100.0;
    const H: f64 = 20.0;
    let first = series.iter().position(Option::is_some);
    let Some(first) = first else {
        return Sparkline { lines: Vec::new(), title: "No depth recorded in the last hour".to_string() };
    };
    let series = &series[first..];
    let covered = duration(((series.len().max(2) - 1) as i64 * step) as f64);
    let title = if first == 0 {
        "Depth over the last hour".to_string()
    } else {
        format!("Depth over the last {covered} only: warren's history of this queue starts there")
    };
    let max = series.iter().flatten().copied().max().unwrap_or(0).max(1) as f64;
    let y = |v: i64| H - (v as f64 / max) * (H - 2.0) - 1.0;
    if series.len() == 1 {
        let v = series[0].expect("the first known value");
        return Sparkline { lines: vec![format!("0,{0:.1} {W:.1},{0:.1}", y(v))], title };
    }
    let dx = W / (series.len() - 1) as f64;
    let mut segments: Vec<Vec<String>> = vec![Vec::new()];
    for (i, v) in series.iter().enumerate() {
        match v {
            Some(v) => segments.last_mut().expect("never empty").push(format!("{:.1},{:.1}", i as f64 * dx, y(*v))),
            None => segments.push(Vec::new()),
        }
    }
    let lines = segments.into_iter().filter(|s| !s.is_empty()).map(|s| s.join(" ")).collect();
    Sparkline { lines, title }
}

/// Why a broker's numbers are not current, in words; `None` while they are. The last known
/// state restored from the database at start says so and why the broker has not answered.
pub fn stale_note(b: &crate::live::BrokerLive) -> Option<String> {
    let at = time(Some(b.stale_since()?));
    let s = &b.status;
    if let Some(replica) = &s.polled_by {
        return Some(match s.last_success {
            Some(_) => format!("polled by another replica ({replica}), whose last poll in the database is from {at}"),
            None => format!("polled by another replica ({replica}), which has not written a poll yet"),
        });
    }
    Some(match (s.restored_from, s.up, &s.error) {
        (Some(_), Some(false), Some(error)) => {
            format!("last known state from {at}; the broker has not answered since warren started: {error}")
        }
        (Some(_), _, _) => {
            format!("last known state from {at}; the broker has not answered since warren started: its first poll has not finished yet")
        }
        (None, _, Some(error)) => format!("broker down: {error}; data stale since {at}"),
        (None, _, None) => format!("broker down; data stale since {at}"),
    })
}

/// The escaper of every `{{ }}` in the HTML templates (askama.toml): HTML escaping, and control
/// characters written as `\u{202e}` instead of themselves. Names, ids, headers and client
/// properties come from anyone who can publish or connect: a right-to-left override in a
/// message id made "\u{202e}abc" read "cba", and other controls hide text. Tab and line breaks
/// stay as they are: payloads and stack traces need them, and HTML shows them as whitespace.
/// A form field that must send a value back unchanged (a queue name in a hidden input, a body
/// being edited) uses `|e("form")`, HTML escaping alone.
#[derive(Debug, Clone, Copy, Default)]
pub struct VisibleHtml;

impl askama::filters::Escaper for VisibleHtml {
    fn write_escaped_str<W: std::fmt::Write>(&self, mut dest: W, string: &str) -> std::fmt::Result {
        let mut rest = string;
        while let Some(at) = rest.find(is_shown_escaped) {
            askama::filters::Html.write_escaped_str(&mut dest, &rest[..at])?;
            let c = rest[at..].chars().next().expect("found at a char boundary");
            write!(dest, "\\u{{{:x}}}", c as u32)?;
            rest = &rest[at + c.len_utf8()..];
        }
        askama::filters::Html.write_escaped_str(dest, rest)
    }
}

/// Template filters of warren's own (askama finds them as `filters::NAME` beside a template's
/// type, so a module whose templates use one imports this module as `filters`).
pub mod filters {
    use askama::filters::{Escaper, Safe};

    /// An identifier (a queue, vhost or exchange name, a message id) as HTML that breaks between
    /// its parts and never inside one: a line break is allowed after `.`, `-`, `_`, `/`, `:` and
    /// `@` (`<wbr>`, which a copy of the text leaves out), so "orders.fulfillment.dlq" wraps as
    /// "orders." / "fulfillment.dlq", not "orders.fulfill" / "ment.dlq". The text is escaped as
    /// every other value is (`VisibleHtml`).
    pub fn ident<T: std::fmt::Display>(value: T, _: &dyn askama::Values) -> askama::Result<Safe<String>> {
        let text = value.to_string();
        let mut html = String::with_capacity(text.len() + 40);
        html.push_str("<span class=\"ident\">");
        let mut part = String::new();
        for c in text.chars() {
            part.push(c);
            if matches!(c, '.' | '-' | '_' | '/' | ':' | '@') {
                crate::web::format::VisibleHtml.write_escaped_str(&mut html, &part)?;
                html.push_str("<wbr>");
                part.clear();
            }
        }
        crate::web::format::VisibleHtml.write_escaped_str(&mut html, &part)?;
        html.push_str("</span>");
        Ok(Safe(html))
    }
}

/// C0 and C1 controls (but tab and line breaks), and the Unicode format characters that reorder
/// or separate text: bidi embeddings, overrides, isolates and marks, line and paragraph separators.
pub fn is_shown_escaped(c: char) -> bool {
    match c {
        '\t' | '\n' | '\r' => false,
        '\u{0}'..='\u{1f}' | '\u{7f}'..='\u{9f}' => true,
        '\u{61c}' | '\u{200e}' | '\u{200f}' | '\u{2028}'..='\u{202e}' | '\u{2066}'..='\u{206f}' => true,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_is_never_zero() {
        assert_eq!(count(None), "—");
        assert_eq!(rate(None), "—");
        assert_eq!(count(Some(0)), "0");
        assert_eq!(count(Some(1234567)), "1,234,567");
        assert_eq!(rate(Some(12.345)), "12.3/s");
        assert_eq!(rate(Some(0.004)), "< 0.01/s", "a rate above 0 does not read as 0");
        assert_eq!(rate(Some(0.02)), "0.02/s");
    }

    #[test]
    fn rule_values_read_like_the_cards() {
        assert_eq!(value(Some(1047.0)), "1,047");
        assert_eq!(value(Some(-3.0)), "-3");
        assert_eq!(value(Some(2.5)), "2.5");
        assert_eq!(value(Some(0.934)), "0.93");
        assert_eq!(value(None), UNKNOWN);
    }

    #[test]
    fn durations_read_naturally() {
        assert_eq!(duration(42.0), "42s");
        assert_eq!(duration(3725.0), "1h 2m");
        assert_eq!((duration(60.0), duration(3600.0), duration(86_400.0)), ("1m".into(), "1h".into(), "1d".into()));
        assert_eq!(duration(61.0), "1m 1s");
        assert_eq!(duration(90_000.0), "1d 1h");
    }

    #[test]
    fn sparkline_breaks_at_gaps() {
        assert_eq!(sparkline(&[Some(0), Some(10), None, Some(5), Some(5)], 60).lines.len(), 2);
    }

    #[test]
    fn a_new_queues_sparkline_spans_the_width_from_its_first_value() {
        // 60 one-minute points; the queue's history starts at the 58th.
        let mut series = vec![None; 57];
        series.extend([Some(3), Some(5), Some(4)]);
        let s = sparkline(&series, 60);
        assert_eq!(s.lines.len(), 1);
        assert!(s.lines[0].starts_with("0.0,") && s.lines[0].contains(" 100.0,"), "{:?}", s.lines);
        assert_eq!(s.title, "Depth over the last 2m only: warren's history of this queue starts there");
        // One value: a level line across, not a dot.
        let s = sparkline(&[None, None, Some(7)], 60);
        assert_eq!(s.lines, vec!["0,1.0 100.0,1.0".to_string()]);
        assert!(sparkline(&[None, None], 60).lines.is_empty());
        assert_eq!(sparkline(&[Some(1), Some(2)], 60).title, "Depth over the last hour");
    }

    #[test]
    fn identifiers_break_after_their_separators_only_and_stay_escaped() {
        let html = |s: &str| filters::ident(s, &()).unwrap().to_string();
        let span = |inner: &str| format!("<span class=\"ident\">{inner}</span>");
        assert_eq!(html("orders.fulfillment.dlq"), span("orders.<wbr>fulfillment.<wbr>dlq"));
        assert_eq!(html("a<b>-\u{202e}c"), span("a&#60;b&#62;-<wbr>\\u{202e}c"));
        assert_eq!(html("plain"), span("plain"));
    }

    #[test]
    fn controls_are_shown_escaped_and_html_escaped_around_them() {
        use askama::filters::Escaper;
        let mut out = String::new();
        VisibleHtml.write_escaped_str(&mut out, "\u{202e}abc <b>\u{0}\u{9b}\u{2067}x\ty\nz").unwrap();
        assert_eq!(out, "\\u{202e}abc &#60;b&#62;\\u{0}\\u{9b}\\u{2067}x\ty\nz");
        let mut out = String::new();
        VisibleHtml.write_escaped_str(&mut out, "שלום é ✓").unwrap();
        assert_eq!(out, "שלום é ✓", "letters of any script are letters");
    }
}
