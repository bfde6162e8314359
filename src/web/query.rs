//! Request parameters shared by the pages and the JSON API: queue filters, sorting, paging and
//! time ranges.
//!
//! Every list of the API pages one way (docs/api.md, "Pagination"): `?limit=&cursor=`, answering
//! `{"items", "next_cursor", "limit"}`; pass `next_cursor` back as `cursor` for the next page
//! until it is `null`.

use std::cmp::Ordering;

use chrono::{DateTime, NaiveDateTime, Utc};
use serde::Deserialize;

use crate::live::BrokerLive;
use crate::metrics::QueueView;
use crate::web::error::WebError;

pub const DEFAULT_PER_PAGE: usize = 50;
pub const MAX_PER_PAGE: usize = 500;

/// Sortable columns: the query value and how to read it.
pub const SORT_KEYS: &[&str] = &[
    "name",
    "vhost",
    "broker",
    "type",
    "ready",
    "unacked",
    "total",
    "consumers",
    "publish_rate",
    "deliver_rate",
    "ack_rate",
    "redeliver_rate",
    "oldest_age",
];

/// Items of a list page unless `limit` says otherwise, and at most.
pub const DEFAULT_LIMIT: usize = 100;
pub const MAX_LIMIT: usize = 500;

/// `?cursor=&limit=` of every list in the API, as text so that a bad value gets a 400 that says
/// why. A request that names `cursor` (empty for the first page) pages the new way; one that does
/// not keeps the list's old parameters and shape for one release (docs/api.md).
#[derive(Debug, Clone, Default)]
pub struct Paging {
    /// Where to go on: the `next_cursor` of the page before, as it came (empty: the first page).
    /// A list that answered a bare array answers the `{"items", "next_cursor", "limit"}` envelope
    /// when `cursor` is given.
    pub cursor: Option<String>,
    /// Items per page: 1 to 500 (default 100).
    pub limit: Option<String>,
}

/// A validated `Paging`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PageAt {
    /// The cursor given; none on the first page.
    pub cursor: Option<i64>,
    pub limit: usize,
}

impl Paging {
    /// Whether the request pages the new way (it names `cursor`, even empty).
    pub fn cursor_given(&self) -> bool {
        self.cursor.is_some()
    }

    /// `cursor` and `limit` as every list takes them: a cursor is a number this list gave
    /// (`next_cursor`), a limit a whole number from 1 to `MAX_LIMIT`.
    pub fn validate(&self) -> Result<PageAt, WebError> {
        let cursor = match non_empty(&self.cursor) {
            None => None,
            Some(text) => Some(text.parse::<i64>().ok().filter(|c| *c >= 0).ok_or_else(|| {
                WebError::BadRequest(format!(
                    "cursor: {:?} is not a cursor of this list (pass next_cursor back as it came)",
                    crate::auth::shorten(&text)
                ))
            })?),
        };
        Ok(PageAt { cursor, limit: limit_of(&self.limit, DEFAULT_LIMIT)? })
    }
}

/// A `limit` from 1 to `MAX_LIMIT`, or `default` when none is given.
fn limit_of(value: &Option<String>, default: usize) -> Result<usize, WebError> {
    match non_empty(value) {
        None => Ok(default),
        Some(text) => text.parse::<usize>().ok().filter(|n| (1..=MAX_LIMIT).contains(n)).ok_or_else(|| {
            WebError::BadRequest(format!(
                "limit: {:?} is not a whole number from 1 to {MAX_LIMIT}",
                crate::auth::shorten(&text)
            ))
        }),
    }
}

/// One page of a list, as every list of the API answers it.
#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
pub struct Paged<T> {
    pub items: Vec<T>,
    /// The `cursor` of the next page; `null` on the last one.
    pub next_cursor: Option<String>,
    /// The `limit` this page was read with.
    pub limit: usize,
}

impl<T> Paged<T> {
    /// A page from up to `limit + 1` items read in list order: the extra one, when there is one,
    /// only says that there is a next page, which starts after the last item kept.
    pub fn from_one_more(mut items: Vec<T>, limit: usize, cursor_of: impl Fn(&T) -> i64) -> Paged<T> {
        let more = items.len() > limit;
        items.truncate(limit);
        let next_cursor = if more { items.last().map(|last| cursor_of(last).to_string()) } else { None };
        Paged { items, next_cursor, limit }
    }
}

#[derive(Debug, Clone, Default, Deserialize, utoipa::IntoParams)]
pub struct QueueQuery {
    pub broker: Option<String>,
    pub vhost: Option<String>,
    pub name: Option<String>,
    /// `true`: only dead-letter queues.
    pub dlq: Option<String>,
    pub sort: Option<String>,
    pub order: Option<String>,
    /// The position to go on from: the `next_cursor` of the page before (empty: the first).
    /// The list is sorted anew at each request, so a queue whose place changed between two
    /// pages may be seen twice or not at all.
    pub cursor: Option<String>,
    /// Queues per page: 1 to 500 (default 100).
    pub limit: Option<String>,
    /// Deprecated (kept for one release): the page, from 1; use `cursor`.
    pub page: Option<String>,
    /// Deprecated (kept for one release): queues per page, 1 to 500 (default 50); use `limit`.
    pub per_page: Option<String>,
}

/// A validated `QueueQuery`.
#[derive(Debug, Clone)]
pub struct Listing {
    pub broker: Option<String>,
    pub vhost: Option<String>,
    pub name: Option<String>,
    pub dlq_only: bool,
    pub sort: &'static str,
    pub descending: bool,
    /// The page, from 1 (from `cursor`: the page the offset falls in).
    pub page: usize,
    /// Queues per page (`limit` or `per_page`).
    pub per_page: usize,
    /// Queues skipped before the page.
    pub offset: usize,
}

/// The pairs of a urlencoded form or query string, keys and values decoded, in order (repeated
/// keys kept: serde's `Query` keeps only one of them). `?%71=x` is `q=x`, as browsers and
/// serde's `Query` read it.
pub fn form_pairs(text: &str) -> impl Iterator<Item = (String, String)> + '_ {
    form_urlencoded::parse(text.as_bytes()).map(|(key, value)| (key.into_owned(), value.into_owned()))
}

fn non_empty(v: &Option<String>) -> Option<String> {
    v.as_ref().map(|s| s.trim().to_string()).filter(|s| !s.is_empty())
}

impl QueueQuery {
    pub fn validate(&self) -> Result<Listing, WebError> {
        let sort_text = non_empty(&self.sort).unwrap_or_else(|| "name".to_string());
        let sort = SORT_KEYS.iter().find(|k| **k == sort_text).ok_or_else(|| {
            WebError::BadRequest(format!("sort: unknown column {sort_text:?}; one of {}", SORT_KEYS.join(", ")))
        })?;
        let descending = match non_empty(&self.order).as_deref() {
            None => !matches!(*sort, "name" | "vhost" | "broker" | "type"),
            Some("asc") => false,
            Some("desc") => true,
            Some(other) => return Err(WebError::BadRequest(format!("order: {other:?} is not asc or desc"))),
        };
        let number = |field: &str, v: &Option<String>, default: usize| -> Result<usize, WebError> {
            match non_empty(v) {
                None => Ok(default),
                Some(text) => text
                    .parse::<usize>()
                    .ok()
                    .filter(|n| *n >= 1)
                    .ok_or_else(|| WebError::BadRequest(format!("{field}: {text:?} is not a whole number from 1"))),
            }
        };
        let paging = Paging { cursor: self.cursor.clone(), limit: self.limit.clone() };
        // Without `cursor` or `limit` the list pages as it did (`page`, `per_page`, 50 a page),
        // which the pages' links still use.
        let new_style = paging.cursor_given() || non_empty(&self.limit).is_some();
        if new_style && (non_empty(&self.page).is_some() || non_empty(&self.per_page).is_some()) {
            return Err(WebError::BadRequest(
                "page and per_page (deprecated) or cursor and limit: give one pair, not both".to_string(),
            ));
        }
        let (page, per_page, offset) = if !new_style {
            let page = number("page", &self.page, 1)?;
            let per_page = number("per_page", &self.per_page, DEFAULT_PER_PAGE)?;
            if per_page > MAX_PER_PAGE {
                return Err(WebError::BadRequest(format!("per_page: at most {MAX_PER_PAGE}")));
            }
            (page, per_page, (page - 1).saturating_mul(per_page))
        } else {
            let at = paging.validate()?;
            let offset = usize::try_from(at.cursor.unwrap_or(0)).unwrap_or(usize::MAX);
            (offset / at.limit + 1, at.limit, offset)
        };
        let dlq_only = match non_empty(&self.dlq).as_deref() {
            None | Some("false") | Some("0") => false,
            Some("true") | Some("1") | Some("on") => true,
            Some(other) => return Err(WebError::BadRequest(format!("dlq: {other:?} is not true or false"))),
        };
        Ok(Listing {
            dlq_only,
            broker: non_empty(&self.broker),
            vhost: non_empty(&self.vhost),
            name: non_empty(&self.name),
            sort,
            descending,
            page,
            per_page,
            offset,
        })
    }
}

impl Listing {
    /// The matching queues of all brokers, sorted, and the page asked for; plus the total count.
    pub fn apply(&self, brokers: &[BrokerLive]) -> (Vec<QueueView>, usize) {
        let needle = self.name.as_ref().map(|n| n.to_lowercase());
        let mut matching: Vec<&QueueView> = brokers
            .iter()
            .filter(|b| self.broker.as_ref().is_none_or(|name| &b.name == name))
            .flat_map(|b| b.queues.iter())
            .filter(|q| self.vhost.as_ref().is_none_or(|v| *q.vhost == **v))
            .filter(|q| needle.as_ref().is_none_or(|n| q.name.to_lowercase().contains(n)))
            .filter(|q| !self.dlq_only || q.dead_letters.is_dlq)
            .collect();
        let total = matching.len();
        matching.sort_by(|a, b| {
            let primary = compare(self.sort, a, b);
            // Unknown values sort last in either direction: they are not "smallest".
            let primary = match primary {
                Keyed::Both(o) => {
                    if self.descending {
                        o.reverse()
                    } else {
                        o
                    }
                }
                Keyed::LeftMissing => Ordering::Greater,
                Keyed::RightMissing => Ordering::Less,
                Keyed::BothMissing => Ordering::Equal,
            };
            primary.then_with(|| (&a.broker, &a.vhost, &a.name).cmp(&(&b.broker, &b.vhost, &b.name)))
        });
        let items = matching.into_iter().skip(self.offset).take(self.per_page).cloned().collect();
        (items, total)
    }
}

enum Keyed {
    Both(Ordering),
    LeftMissing,
    RightMissing,
    BothMissing,
}

fn keyed<T: PartialOrd>(a: Option<T>, b: Option<T>) -> Keyed {
    match (a, b) {
        (Some(a), Some(b)) => Keyed::Both(a.partial_cmp(&b).unwrap_or(Ordering::Equal)),
        (None, Some(_)) => Keyed::LeftMissing,
        (Some(_), None) => Keyed::RightMissing,
        (None, None) => Keyed::BothMissing,
    }
}

fn compare(sort: &str, a: &QueueView, b: &QueueView) -> Keyed {
    match sort {
        "vhost" => Keyed::Both(a.vhost.cmp(&b.vhost)),
        "broker" => Keyed::Both(a.broker.cmp(&b.broker)),
        "type" => Keyed::Both(a.kind.cmp(&b.kind)),
        "ready" => keyed(a.ready, b.ready),
        "unacked" => keyed(a.unacked, b.unacked),
        "total" => keyed(a.total, b.total),
        "consumers" => keyed(a.consumers, b.consumers),
        "publish_rate" => keyed(a.publish_rate, b.publish_rate),
        "deliver_rate" => keyed(a.deliver_rate, b.deliver_rate),
        "ack_rate" => keyed(a.ack_rate, b.ack_rate),
        "redeliver_rate" => keyed(a.redeliver_rate, b.redeliver_rate),
        "oldest_age" => keyed(a.oldest_age_secs, b.oldest_age_secs),
        _ => Keyed::Both(a.name.cmp(&b.name)),
    }
}

/// `from` / `to` / `range` of a history request.
#[derive(Debug, Clone, Default, Deserialize, utoipa::IntoParams)]
pub struct RangeQuery {
    pub from: Option<String>,
    pub to: Option<String>,
    /// Shorthand for the last N: `15m`, `1h`, `6h`, `24h`, `7d`, `30d`.
    pub range: Option<String>,
}

pub const RANGES: &[(&str, i64)] =
    &[("15m", 15 * 60), ("1h", 3600), ("6h", 6 * 3600), ("24h", 86_400), ("7d", 7 * 86_400), ("30d", 30 * 86_400)];

/// Points per chart at most; the step grows with the range.
const MAX_POINTS: i64 = 720;

/// A validated time range with the step that fits it.
#[derive(Debug, Clone, Copy)]
pub struct TimeRange {
    pub from: i64,
    pub to: i64,
    pub step: i64,
}

/// The latest time a request may name: 9999-12-31T23:59:59Z. Together with the earliest, 0 (no
/// history predates 1970), it keeps every sum and difference of two times far from `i64`'s
/// limits: `to - from` once wrapped and made a chart grid of 2^63 points.
pub const MAX_TIME: i64 = 253_402_300_799;

/// Parses RFC 3339, unix seconds, or a date and time without a zone (what the custom range form
/// sends without JavaScript: `2026-12-03 09:30`), taken as UTC like every time warren writes;
/// from 1970 to the end of year 9999.
pub fn parse_time(field: &str, text: &str) -> Result<i64, WebError> {
    let text = text.trim();
    let naive = |format| NaiveDateTime::parse_from_str(text, format).map(|t| t.and_utc().timestamp());
    let secs = match text.parse::<i64>() {
        Ok(secs) => secs,
        Err(_) => DateTime::parse_from_rfc3339(text)
            .map(|t| t.timestamp())
            .or_else(|_| naive("%Y-%m-%dT%H:%M"))
            .or_else(|_| naive("%Y-%m-%dT%H:%M:%S"))
            .or_else(|_| naive("%Y-%m-%d %H:%M:%S"))
            .or_else(|_| naive("%Y-%m-%d %H:%M"))
            .or_else(|_| naive("%Y-%m-%d %H:%M:%S UTC"))
            .map_err(|_| {
                WebError::BadRequest(format!(
                    "{field}: {text:?} is neither RFC 3339, a UTC date and time (2026-12-03T09:30) nor unix seconds"
                ))
            })?,
    };
    if !(0..=MAX_TIME).contains(&secs) {
        return Err(WebError::BadRequest(format!(
            "{field}: {text:?} is outside 1970-01-01 to 9999-12-31 (unix seconds 0 to {MAX_TIME})"
        )));
    }
    Ok(secs)
}

impl RangeQuery {
    pub fn validate(&self, now: DateTime<Utc>, poll_interval_secs: i64) -> Result<TimeRange, WebError> {
        let to = match non_empty(&self.to) {
            Some(t) => parse_time("to", &t)?,
            None => now.timestamp(),
        };
        let from = match (non_empty(&self.from), non_empty(&self.range)) {
            (Some(f), _) => parse_time("from", &f)?,
            (None, Some(r)) => {
                let secs = RANGES.iter().find(|(name, _)| *name == r).map(|(_, s)| *s).ok_or_else(|| {
                    let names: Vec<&str> = RANGES.iter().map(|(name, _)| *name).collect();
                    WebError::BadRequest(format!("range: {r:?} is not one of {}", names.join(", ")))
                })?;
                (to - secs).max(0)
            }
            (None, None) => (to - 3600).max(0),
        };
        if from >= to {
            return Err(WebError::BadRequest("from must be before to".to_string()));
        }
        if to - from > 400 * 86_400 {
            return Err(WebError::BadRequest("the range may span at most 400 days".to_string()));
        }
        let step = ((to - from) / MAX_POINTS).max(poll_interval_secs).max(1);
        Ok(TimeRange { from, to, step })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Keys are percent-decoded like values (they were compared as sent, so `%71` was not `q`).
    #[test]
    fn form_pairs_decode_keys_and_values() {
        let pairs: Vec<(String, String)> = form_pairs("%71=a%2Fb&q=c+d&&range=1h&empty").collect();
        let expected = [("q", "a/b"), ("q", "c d"), ("range", "1h"), ("empty", "")];
        assert_eq!(pairs, expected.map(|(k, v)| (k.to_string(), v.to_string())));
    }

    #[test]
    fn bad_parameters_are_rejected_with_the_field() {
        let q = QueueQuery { sort: Some("colour".into()), ..Default::default() };
        assert!(q.validate().unwrap_err().to_string().starts_with("sort:"));
        let q = QueueQuery { per_page: Some("0".into()), ..Default::default() };
        assert!(q.validate().unwrap_err().to_string().starts_with("per_page:"));
        let q = QueueQuery { per_page: Some("501".into()), ..Default::default() };
        assert!(q.validate().is_err());
        let r = RangeQuery { from: Some("yesterday".into()), ..Default::default() };
        assert!(r.validate(Utc::now(), 10).unwrap_err().to_string().starts_with("from:"));
    }

    /// `cursor` and `limit` read the same for every list; the queue list keeps `page` and
    /// `per_page` beside them for one release, but not mixed with them.
    #[test]
    fn paging_parameters_are_one_style() {
        let paging = |cursor: Option<&str>, limit: Option<&str>| Paging {
            cursor: cursor.map(str::to_string),
            limit: limit.map(str::to_string),
        };
        assert_eq!(paging(Some(""), None).validate().unwrap(), PageAt { cursor: None, limit: DEFAULT_LIMIT });
        assert_eq!(paging(Some("42"), Some("500")).validate().unwrap(), PageAt { cursor: Some(42), limit: 500 });
        for (cursor, limit, field) in [
            (Some("x"), None, "cursor:"),
            (Some("-1"), None, "cursor:"),
            (None, Some("0"), "limit:"),
            (None, Some("501"), "limit:"),
        ] {
            let error = paging(cursor, limit).validate().unwrap_err().to_string();
            assert!(error.starts_with(field), "{cursor:?} {limit:?}: {error}");
        }
        let q = QueueQuery { cursor: Some("120".into()), limit: Some("50".into()), ..Default::default() };
        let listing = q.validate().unwrap();
        assert_eq!((listing.offset, listing.per_page, listing.page), (120, 50, 3));
        let q = QueueQuery { cursor: Some("".into()), page: Some("2".into()), ..Default::default() };
        assert!(q.validate().is_err());
        let q = QueueQuery { page: Some("2".into()), ..Default::default() };
        assert_eq!(q.validate().unwrap().offset, DEFAULT_PER_PAGE);

        let page = Paged::from_one_more(vec![9, 8, 7], 2, |n| *n);
        assert_eq!((page.items, page.next_cursor), (vec![9, 8], Some("8".to_string())));
        let page = Paged::from_one_more(vec![9, 8], 2, |n| *n);
        assert_eq!(page.next_cursor, None);
    }

    #[test]
    fn times_parse_as_rfc3339_or_unix_seconds() {
        assert_eq!(parse_time("from", "1700000000").unwrap(), 1_700_000_000);
        assert_eq!(parse_time("from", "2023-11-14T22:13:20Z").unwrap(), 1_700_000_000);
        assert_eq!(parse_time("from", "2023-11-14T23:13:20+01:00").unwrap(), 1_700_000_000);
        // The custom range form's fields, and warren's own way of writing times, are UTC.
        assert_eq!(parse_time("from", "2023-11-14T22:13").unwrap(), 1_700_000_000 - 20);
        assert_eq!(parse_time("from", "2023-11-14T22:13:20").unwrap(), 1_700_000_000);
        assert_eq!(parse_time("from", "2023-11-14 22:13:20").unwrap(), 1_700_000_000);
        assert_eq!(parse_time("from", "2023-11-14 22:13").unwrap(), 1_700_000_000 - 20);
        assert_eq!(parse_time("from", "2023-11-14 22:13:20 UTC").unwrap(), 1_700_000_000);
        let r = RangeQuery { range: Some("15m".into()), ..Default::default() }.validate(Utc::now(), 10).unwrap();
        assert_eq!((r.to - r.from, r.step), (900, 10));
        let r = RangeQuery { range: Some("7d".into()), ..Default::default() }.validate(Utc::now(), 10).unwrap();
        assert_eq!(r.to - r.from, 7 * 86_400);
        assert_eq!(r.step, 7 * 86_400 / MAX_POINTS);
    }

    #[test]
    fn times_near_the_limits_of_i64_are_refused_not_wrapped() {
        // `to - from` wrapped to a small positive span and the chart grid never ended.
        let r = RangeQuery {
            from: Some("9223372036854775806".into()),
            to: Some("9223372036854775807".into()),
            ..Default::default()
        };
        let error = r.validate(Utc::now(), 10).unwrap_err().to_string();
        assert!(error.starts_with("to:") && error.contains("outside 1970-01-01 to 9999-12-31"), "{error}");
        let r = RangeQuery { from: Some("-9223372036854775808".into()), ..Default::default() };
        assert!(r.validate(Utc::now(), 10).unwrap_err().to_string().starts_with("from:"));
        let r = RangeQuery { to: Some("-1".into()), range: Some("30d".into()), ..Default::default() };
        assert!(r.validate(Utc::now(), 10).unwrap_err().to_string().starts_with("to:"));
        let r = RangeQuery { from: Some("+262142-12-31T23:59:59Z".into()), ..Default::default() };
        assert!(r.validate(Utc::now(), 10).is_err());
        // The ends of the accepted span still work.
        let r = RangeQuery { from: Some(MAX_TIME.to_string()), to: Some("0".into()), ..Default::default() };
        assert!(r.validate(Utc::now(), 10).is_err(), "from after to");
        let r = RangeQuery { to: Some("100".into()), ..Default::default() }.validate(Utc::now(), 10).unwrap();
        assert_eq!((r.from, r.to), (0, 100));
    }
}
