//! A snapshot as the dead-letter page shows it: its messages as rows, counted by reason, by the
//! queue they died in and by the cause of their error, each count a link that filters the page
//! to it. Custody's groups are listed the same way.

use std::collections::BTreeMap;

use crate::dlq::browse::Snapshot;
use crate::dlq::message;
use crate::web::format;

pub(super) struct SnapshotView {
    pub(super) requested: usize,
    /// Why the read stopped early, or why the queue's order may differ.
    pub(super) note: Option<String>,
    pub(super) count: usize,
    pub(super) delivery_limit: Option<i64>,
    /// (value, messages, the page filtered to it or empty): by reason, queue died in, error.
    pub(super) by_reason: Vec<(String, usize, String)>,
    pub(super) by_queue: Vec<(String, usize, String)>,
    /// By the error the application recorded, grouped by cause (`any_error`: some message has
    /// one).
    pub(super) by_error: Vec<ErrorGroupRow>,
    /// Messages in the queue as of the last poll, for the bound of the counts.
    pub(super) queue_total: String,
    pub(super) any_error: bool,
    pub(super) rows: Vec<Row>,
    /// Some message names a task or type (a framework's): the column shows only then, so a
    /// narrow screen does not spend its width on an empty one.
    pub(super) any_kind: bool,
    pub(super) shown: usize,
    /// A filter is set: "requeue all matching" is offered.
    pub(super) filtered: bool,
    /// What ran since the snapshot was taken (`Snapshot::outdated`): no single messages are
    /// selected from it.
    pub(super) outdated: Option<String>,
    /// The least role that reads payloads, headers and errors here, when `me` is below it.
    pub(super) content_hidden: Option<&'static str>,
}

pub(super) struct Row {
    pub(super) href: String,
    pub(super) position: usize,
    pub(super) message_id: String,
    /// Where the id was read (the property, or a framework's header or body).
    pub(super) message_id_from: String,
    /// The task, actor or message type a framework's format names, or empty.
    pub(super) kind: String,
    /// The framework's own fields, for the message page: (name, value).
    pub(super) app: Vec<(&'static str, String)>,
    /// The error the application recorded (type: message), or empty.
    pub(super) error: String,
    /// Where that was read.
    pub(super) error_from: String,
    pub(super) original_queue: String,
    pub(super) reason: String,
    pub(super) death_count: i64,
    pub(super) first_death: String,
    /// Where and why it died first, when that is not where it died last (a retry's wait queue).
    pub(super) first_death_place: Option<String>,
    /// Every death oldest first (`work (rejected ×3) → work.wait (expired ×2)`), or empty.
    pub(super) path: String,
    /// Where its framework says it came from, on a copy the application republished, or empty.
    pub(super) origin: String,
    pub(super) routing_key: String,
    pub(super) size: String,
    pub(super) content_type: String,
    pub(super) delivery_count: String,
    /// No longer in this queue: read at its delivery limit, it went to this holding queue.
    pub(super) held_in: Option<String>,
    pub(super) fingerprint: String,
}

/// A framework's fields as the message page lists them, leaving out those it did not give.
fn app_fields(app: &crate::dlq::framework::App) -> Vec<(&'static str, String)> {
    let mut fields = vec![("Framework", app.framework.to_string())];
    let mut put = |name, value: Option<String>| fields.extend(value.map(|v| (name, v)));
    put("Id", app.id.clone().map(|id| format!("{id} (from {})", app.id_from.unwrap_or("its format"))));
    put("Task / type", app.kind.clone());
    put("Retries before this delivery", app.attempt.map(|a| a.to_string()));
    put("Arguments", app.arguments.clone());
    fields
}

/// Where an application's framework says a republished message came from, in words.
fn origin_text(o: &crate::dlq::framework::Origin) -> String {
    let queue = o.queue.as_ref().map(|q| format!("queue {q:?}"));
    let route = o.route.as_ref().map(|(e, k)| {
        let e = if e.is_empty() { "(default exchange)".to_string() } else { format!("{e:?}") };
        format!("exchange {e}, routing key {k:?}")
    });
    let what: Vec<String> = [queue, route].into_iter().flatten().collect();
    format!("{} (from {})", what.join("; "), o.from)
}

pub(super) fn unknown_if_none(v: Option<String>) -> String {
    v.unwrap_or_else(|| format::UNKNOWN.to_string())
}

pub(super) fn counts(values: impl Iterator<Item = Option<String>>) -> Vec<(String, usize)> {
    let mut map: BTreeMap<String, usize> = BTreeMap::new();
    for v in values {
        *map.entry(unknown_if_none(v)).or_default() += 1;
    }
    let mut out: Vec<(String, usize)> = map.into_iter().collect();
    out.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    out
}

/// Each group with the link that filters the snapshot to it (none for the unknown group).
/// Custody's groups as the page lists them: `filtered`, with when the group was first and last
/// taken in.
pub(super) fn groups(
    base: &str,
    param: &str,
    groups: Vec<crate::dlq::custody::Group>,
) -> Vec<(String, usize, String, String)> {
    let at = |t: i64| format::time(chrono::DateTime::from_timestamp(t, 0));
    let seen: Vec<String> = groups.iter().map(|g| format!("{} … {}", at(g.first_seen), at(g.last_seen))).collect();
    filtered(base, param, groups.into_iter().map(|g| (g.value, g.records)).collect())
        .into_iter()
        .zip(seen)
        .map(|((value, n, href), seen)| (value, n, href, seen))
        .collect()
}

/// One error group as "By error" lists it: the group (type and fingerprinted message), its
/// messages, the page filtered to it (`error_group`), when custody took in its first and last
/// (empty for a snapshot), and the texts it gathers as recorded, with their counts.
pub(super) struct ErrorGroupRow {
    pub(super) value: String,
    pub(super) count: usize,
    pub(super) href: String,
    pub(super) seen: String,
    pub(super) variants: Vec<(String, usize)>,
    /// Texts of the group not listed (`custody::VARIANTS_SHOWN`).
    pub(super) more_variants: usize,
}

/// A snapshot's messages by error group, and those without an error as one unknown row.
fn snapshot_error_groups(base: &str, snapshot: &Snapshot) -> Vec<ErrorGroupRow> {
    let lines: Vec<Option<String>> = snapshot.messages.iter().map(message::error_line).collect();
    let none = lines.iter().filter(|l| l.is_none()).count();
    let errors = counts(lines.into_iter().filter(Option::is_some)).into_iter().map(|(line, n)| (line, n, 0, 0));
    let mut rows = error_group_rows(base, crate::dlq::custody::error_groups(errors));
    if none > 0 {
        let unknown = format::UNKNOWN.to_string();
        let row = ErrorGroupRow {
            value: unknown,
            count: none,
            href: String::new(),
            seen: String::new(),
            variants: Vec::new(),
            more_variants: 0,
        };
        rows.push(row);
    }
    rows
}

pub(super) fn error_group_rows(base: &str, groups: Vec<crate::dlq::custody::Group>) -> Vec<ErrorGroupRow> {
    let at = |t: i64| format::time(chrono::DateTime::from_timestamp(t, 0));
    groups
        .into_iter()
        .map(|g| {
            let seen =
                if g.first_seen > 0 { format!("{} … {}", at(g.first_seen), at(g.last_seen)) } else { String::new() };
            let href = filtered(base, "error_group", vec![(g.value.clone(), g.records)]).remove(0).2;
            ErrorGroupRow {
                more_variants: g.variant_count.saturating_sub(g.variants.len()),
                variants: g.variants.into_iter().map(|v| (v.value, v.records)).collect(),
                value: g.value,
                count: g.records,
                href,
                seen,
            }
        })
        .collect()
}

fn filtered(base: &str, param: &str, groups: Vec<(String, usize)>) -> Vec<(String, usize, String)> {
    groups
        .into_iter()
        .map(|(value, n)| {
            let href = if value == format::UNKNOWN {
                String::new()
            } else {
                let value: String =
                    percent_encoding::utf8_percent_encode(&value, percent_encoding::NON_ALPHANUMERIC).to_string();
                format!("{base}?{param}={value}")
            };
            (value, n, href)
        })
        .collect()
}

/// The page's view of a snapshot, its messages shown where `shown` (one per message) says.
pub(super) fn snapshot_view(snapshot: &Snapshot, base: &str, f: &message::Filter, shown: &[bool]) -> SnapshotView {
    let rows: Vec<Row> = snapshot
        .messages
        .iter()
        .zip(shown)
        .filter(|(_, shown)| **shown)
        .map(|(m, _)| m)
        .map(|m| Row {
            href: format!("{base}/messages/{}", m.position),
            position: m.position,
            message_id: unknown_if_none(m.message_id.clone()),
            message_id_from: m.message_id_from.unwrap_or("no message_id property, and no framework's id").to_string(),
            kind: m.app.as_ref().and_then(|a| a.kind.clone()).unwrap_or_default(),
            app: m.app.as_ref().map(app_fields).unwrap_or_default(),
            error: message::error_line(m).unwrap_or_default(),
            error_from: m.error.as_ref().map(|e| e.from.to_string()).unwrap_or_default(),
            original_queue: unknown_if_none(m.original_queue.clone()),
            reason: unknown_if_none(m.reason.clone()),
            death_count: m.death_count,
            first_death: m
                .first_death_at
                .and_then(|t| chrono::DateTime::from_timestamp(t, 0))
                .map(|t| format::time(Some(t)))
                .unwrap_or_else(|| format::UNKNOWN.to_string()),
            path: m
                .deaths
                .iter()
                .map(|d| format!("{} ({} ×{})", d.queue, d.reason, d.count))
                .collect::<Vec<_>>()
                .join(" → "),
            origin: m.app_origin.as_ref().map(origin_text).unwrap_or_default(),
            first_death_place: (m.first_death_queue.is_some()
                && (m.first_death_queue != m.original_queue || m.first_death_reason != m.reason))
                .then(|| {
                    format!(
                        "{} ({})",
                        unknown_if_none(m.first_death_queue.clone()),
                        unknown_if_none(m.first_death_reason.clone())
                    )
                }),
            routing_key: m.routing_key.clone(),
            size: format!("{} B", format::count(Some(m.payload_bytes))),
            content_type: unknown_if_none(m.content_type.clone()),
            delivery_count: m.delivery_count.map(|c| c.to_string()).unwrap_or_else(|| format::UNKNOWN.to_string()),
            held_in: m.held_in.clone(),
            fingerprint: m.fingerprint.clone(),
        })
        .collect();
    SnapshotView {
        requested: snapshot.requested,
        note: snapshot.note.clone(),
        count: snapshot.messages.len(),
        delivery_limit: snapshot.delivery_limit,
        by_reason: filtered(base, "reason", counts(snapshot.messages.iter().map(|m| m.reason.clone()))),
        by_queue: filtered(base, "original", counts(snapshot.messages.iter().map(|m| m.original_queue.clone()))),
        by_error: snapshot_error_groups(base, snapshot),
        queue_total: String::new(),
        any_error: snapshot.messages.iter().any(|m| m.error.is_some()),
        shown: rows.len(),
        any_kind: rows.iter().any(|r| !r.kind.is_empty()),
        rows,
        filtered: !f.is_empty(),
        outdated: snapshot.outdated.clone(),
        content_hidden: None,
    }
}
