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
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

pub fn rate(v: Option<f64>) -> String {
    match v {
        None => UNKNOWN.to_string(),
        Some(0.0) => "0/s".to_string(),
        Some(r) if r < 10.0 => format!("{r:.2}/s"),
        Some(r) if r < 100.0 => format!("{r:.1}/s"),
        Some(r) => format!("{}/s", group_thousands(r.round() as u64)),
    }
}

pub fn duration(secs: f64) -> String {
    let s = secs.max(0.0).round() as u64;
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m {}s", s / 60, s % 60),
        3600..=86_399 => format!("{}h {}m", s / 3600, (s % 3600) / 60),
        _ => format!("{}d {}h", s / 86_400, (s % 86_400) / 3600),
    }
}

pub fn age(view: &QueueView) -> String {
    match (view.oldest_age_secs, view.oldest_age_source) {
        (Some(secs), AgeSource::Estimated) if view.oldest_age_lower_bound => {
            format!("> {}", duration(secs))
        }
        (Some(secs), AgeSource::Estimated) => format!("~{}", duration(secs)),
        (Some(secs), AgeSource::Exact) if view.age_since_first_publish => {
            format!("{} since first published", duration(secs))
        }
        (Some(secs), _) => duration(secs),
        (None, _) => UNKNOWN.to_string(),
    }
}

pub fn age_title(view: &QueueView) -> &'static str {
    match view.oldest_age_source {
        AgeSource::Exact if view.age_since_first_publish => {
            "from the head message's timestamp, set when it was first published: in a wait (retry) queue that \
             includes every earlier try, not only the wait here (each wait is at most its TTL)"
        }
        AgeSource::Exact => "exact: from the broker's head message timestamp (or the queue is empty)",
        AgeSource::Estimated if view.fifo_broken_since.is_some() => {
            "estimated lower bound: warren requeued older messages into this queue, which breaks the FIFO order the \
             estimate assumes; it holds again once they drain"
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

pub fn ago(t: Option<DateTime<Utc>>, now: DateTime<Utc>) -> String {
    match t {
        Some(t) => format!("{} ago", duration((now - t).num_milliseconds() as f64 / 1000.0)),
        None => "never".to_string(),
    }
}

/// Inline SVG polylines of a depth series (server-side, so it needs no JavaScript); one per run
/// of known values, so gaps stay gaps.
pub fn sparkline(series: &[Option<i64>]) -> Vec<String> {
    const W: f64 = 100.0;
    const H: f64 = 20.0;
    let max = series.iter().flatten().copied().max().unwrap_or(0).max(1) as f64;
    if series.len() < 2 {
        return Vec::new();
    }
    let dx = W / (series.len() - 1) as f64;
    let mut segments: Vec<Vec<String>> = vec![Vec::new()];
    for (i, v) in series.iter().enumerate() {
        match v {
            Some(v) => segments.last_mut().expect("never empty").push(format!(
                "{:.1},{:.1}",
                i as f64 * dx,
                H - (*v as f64 / max) * (H - 2.0) - 1.0
            )),
            None => segments.push(Vec::new()),
        }
    }
    segments.into_iter().filter(|s| !s.is_empty()).map(|s| s.join(" ")).collect()
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
    }

    #[test]
    fn durations_read_naturally() {
        assert_eq!(duration(42.0), "42s");
        assert_eq!(duration(3725.0), "1h 2m");
        assert_eq!(duration(90_000.0), "1d 1h");
    }

    #[test]
    fn sparkline_breaks_at_gaps() {
        assert_eq!(sparkline(&[Some(0), Some(10), None, Some(5), Some(5)]).len(), 2);
    }
}
