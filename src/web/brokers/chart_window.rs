//! The time window of a page's charts and its range picker, shared by the overview, a queue's
//! page, the comparison and the nodes page.

use chrono::{DateTime, Utc};

use crate::broker::management::encode_segment;
use crate::state::AppState;
use crate::web::error::WebError;
use crate::web::format;
use crate::web::lookup::poll_interval_secs;
use crate::web::query::{RangeQuery, RANGES};

/// One relative range of the picker (`1h`, `24h`, ...), as a link.
pub(super) struct Range {
    pub(super) label: &'static str,
    pub(super) href: String,
    pub(super) active: bool,
}

/// The time window of a page's charts, for the range picker (`_range_picker.html`): the
/// relative ranges, both ends as text in warren's one format and as the custom form's values
/// (`2026-12-03 09:30`, UTC, as the form is read without JavaScript).
pub(super) struct ChartWindow {
    pub(super) ranges: Vec<Range>,
    pub(super) from: String,
    pub(super) to: String,
    pub(super) from_field: String,
    pub(super) to_field: String,
    /// A custom or zoomed window (`from` given): the picker offers the way back.
    pub(super) custom: bool,
    /// The relative range to return to from a custom window.
    pub(super) reset_href: String,
    /// The page's other query parameters, kept by the custom range form.
    pub(super) keep: Vec<(String, String)>,
    /// Before the zoom hint, e.g. "61 points; ".
    pub(super) note: String,
}

impl ChartWindow {
    /// `page`: the page's path and its query parameters other than the window's.
    pub(super) fn new(
        state: &AppState,
        broker: &str,
        range: &RangeQuery,
        page: &str,
        keep: Vec<(String, String)>,
        note: String,
    ) -> Result<Self, WebError> {
        let window = range.validate(Utc::now(), poll_interval_secs(state, broker))?;
        let custom = range.from.as_deref().is_some_and(|f| !f.trim().is_empty());
        let selected = range.range.clone().unwrap_or_else(|| "1h".to_string());
        let query: String = keep.iter().map(|(k, v)| format!("{k}={}&", encode_segment(v))).collect();
        let field = |secs: i64| {
            DateTime::from_timestamp(secs, 0).map(|t| t.format("%Y-%m-%d %H:%M").to_string()).unwrap_or_default()
        };
        Ok(ChartWindow {
            ranges: RANGES
                .iter()
                .map(|(label, _)| Range {
                    label,
                    href: format!("{page}?{query}range={label}"),
                    active: !custom && *label == selected,
                })
                .collect(),
            from: format::unix(window.from),
            to: format::unix(window.to),
            from_field: field(window.from),
            to_field: field(window.to),
            custom,
            reset_href: format!("{page}?{query}range={selected}"),
            keep,
            note,
        })
    }
}
