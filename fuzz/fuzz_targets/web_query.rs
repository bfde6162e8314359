//! Query strings as the pages and the JSON API read them (axum's `Query`, which is
//! `serde_urlencoded`), and their validation: the queue list's filters, sort and paging (applied
//! to an empty listing), a history request's `from` / `to` / `range` with the resolution and step
//! chosen for it, the DLQ browser's filter, and a snapshot request.
#![no_main]

use std::sync::OnceLock;

use chrono::{DateTime, Utc};
use libfuzzer_sys::fuzz_target;
use warren::dlq::message::Filter;
use warren::history::rollup::Windows;
use warren::history::series;
use warren::web::input::TakeRequest;
use warren::web::query::{parse_time, QueueQuery, RangeQuery};

fuzz_target!(|data: &[u8]| {
    let Ok(query) = std::str::from_utf8(data) else { return };
    let now = DateTime::<Utc>::from_timestamp(1_700_000_000, 0).unwrap();
    if let Ok(q) = serde_urlencoded::from_str::<QueueQuery>(query) {
        if let Ok(listing) = q.validate() {
            assert!(listing.page >= 1 && (1..=warren::web::query::MAX_PER_PAGE).contains(&listing.per_page));
            listing.apply(&[]);
        }
    }
    if let Ok(r) = serde_urlencoded::from_str::<RangeQuery>(query) {
        if let Ok(range) = r.validate(now, 10) {
            assert!(range.from < range.to && range.step >= 1);
            // As the history handlers choose what to read (`resolution_for`).
            let resolution = series::choose(range.step, range.from, now.timestamp(), default_windows());
            resolution.step(range.step);
        }
    }
    let _ = parse_time("from", query);
    if let Ok(filter) = serde_urlencoded::from_str::<Filter>(query) {
        filter.is_empty();
        filter.describe();
        // A JSON path, a regular expression: refused with a reason or usable, never a panic.
        if filter.check().is_ok() {
            filter.json_steps().map(|steps| warren::storage::sqlite::json_path(&steps));
            filter.regex();
        }
        filter.form_fields();
    }
    let _ = serde_urlencoded::from_str::<TakeRequest>(query);
});

/// The history windows of the default configuration.
fn default_windows() -> &'static Windows {
    static WINDOWS: OnceLock<Windows> = OnceLock::new();
    WINDOWS.get_or_init(|| Windows::from_config(&warren::config::Config::from_toml("").unwrap()))
}
