//! What custody holds of a queue, as the pages, the API and the poller show it: counts, triage
//! groups (by reason, original queue and error, with an error group's variants), the records a
//! filter matches, and one record with its message.

use std::collections::HashMap;

use serde::Serialize;

use super::copy::decode_properties;
use super::intake::{Custody, IntakeState};
use super::search::{matching_ids, records, Record, SearchError};
use crate::dlq::budget::Budget;
use crate::dlq::message::{self, Filter, SnapshotMessage};
use crate::dlq::mover::peeked_parts;
use crate::storage::custody::{States, StoredMessage};
use crate::storage::Store;

/// One record with its message: what the record page shows, and the payload it offers.
pub async fn message(
    store: &Store,
    queue: (&str, &str, &str),
    id: i64,
) -> Result<Option<(Record, SnapshotMessage, Vec<u8>)>, sqlx::Error> {
    let Some(StoredMessage { record, exchange, properties, body, .. }) = store.custody_message(queue, id).await? else {
        return Ok(None);
    };
    let properties = decode_properties(&properties).unwrap_or_default();
    let shown = peeked_parts((&exchange, &record.routing_key), record.redelivered, &properties, &body, usize::MAX);
    Ok(Some((record, message::summarize(id.max(0) as usize, String::new(), shown), body)))
}

/// Counts of one queue's custody.
#[derive(Debug, Clone, Default, Serialize, utoipa::ToSchema)]
#[schema(as = CustodyCounts)]
pub struct Counts {
    pub held: u64,
    pub claimed: u64,
    /// Records replayed: in `list`, since the queue's current incarnation began (a queue
    /// deleted and re-created starts at 0; the audit log keeps its predecessor's replays); in
    /// `counts_by_queue`, which the poller reads for what is held, every record under the name.
    pub replayed: u64,
    pub bytes: u64,
    /// When the oldest record still held (or claimed by a replay) was taken, unix seconds.
    #[serde(flatten, serialize_with = "crate::times::oldest_taken_at")]
    #[schema(schema_with = crate::times::schema::oldest_taken_at)]
    pub oldest_taken_at: Option<i64>,
}

/// Every queue's custody counts of a broker, by (vhost, queue): for the poller.
pub async fn counts_by_queue(store: &Store, broker: &str) -> Result<HashMap<(String, String), Counts>, sqlx::Error> {
    let mut out: HashMap<(String, String), Counts> = HashMap::new();
    for tally in store.custody_counts(broker).await? {
        let c = out.entry((tally.vhost, tally.queue)).or_default();
        let (n, bytes) = (tally.records.max(0) as u64, tally.bytes.max(0) as u64);
        match tally.state.as_str() {
            "held" => c.held = n,
            "claimed" => c.claimed = n,
            _ => c.replayed = n,
        }
        if tally.state != "replayed" {
            c.bytes += bytes;
            c.oldest_taken_at = match (c.oldest_taken_at, tally.first_at) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
        }
    }
    Ok(out)
}

/// A triage group: the records sharing a reason, an original queue or an error's group
/// (`framework::error_group`: its type and its message's fingerprint).
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[schema(as = CustodyGroup)]
pub struct Group {
    /// "—" for records without one (no error groups of those).
    pub value: String,
    pub records: usize,
    /// When custody took in the first and the last of them, unix seconds.
    #[serde(flatten, serialize_with = "crate::times::first_seen")]
    #[schema(schema_with = crate::times::schema::first_seen)]
    pub first_seen: i64,
    #[serde(flatten, serialize_with = "crate::times::last_seen")]
    #[schema(schema_with = crate::times::schema::last_seen)]
    pub last_seen: i64,
    /// An error group's texts as recorded, with their records, most first (`VARIANTS_SHOWN` at
    /// most; `variant_count` says how many there are).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub variants: Vec<Variant>,
    #[serde(skip_serializing_if = "is_zero")]
    pub variant_count: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// One text of an error group, as the application recorded it.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
#[schema(as = ErrorVariant)]
pub struct Variant {
    pub value: String,
    pub records: usize,
}

/// Variants listed in a group, at most: a group of 100,000 order numbers names the commonest.
pub const VARIANTS_SHOWN: usize = 20;

/// Error texts, each with its records and when the first and the last were taken in (unix
/// seconds; 0 where not known), as groups (`framework::error_group`) with their variants,
/// largest first, then by value.
pub fn error_groups(errors: impl IntoIterator<Item = (String, usize, i64, i64)>) -> Vec<Group> {
    let mut by_group: HashMap<String, (Group, HashMap<String, usize>)> = HashMap::new();
    for (error, n, first, last) in errors {
        let value = crate::dlq::framework::error_group(&error);
        let (group, variants) = by_group.entry(value.clone()).or_insert_with(|| {
            let group =
                Group { value, records: 0, first_seen: first, last_seen: last, variants: Vec::new(), variant_count: 0 };
            (group, HashMap::new())
        });
        group.records += n;
        group.first_seen = group.first_seen.min(first);
        group.last_seen = group.last_seen.max(last);
        *variants.entry(error).or_default() += n;
    }
    let mut out: Vec<Group> = by_group
        .into_values()
        .map(|(mut group, variants)| {
            group.variant_count = variants.len();
            group.variants = variants.into_iter().map(|(value, records)| Variant { value, records }).collect();
            group.variants.sort_by(|a, b| b.records.cmp(&a.records).then_with(|| a.value.cmp(&b.value)));
            group.variants.truncate(VARIANTS_SHOWN);
            group
        })
        .collect();
    out.sort_by(|a, b| b.records.cmp(&a.records).then_with(|| a.value.cmp(&b.value)));
    out
}

/// What custody holds of a queue, filtered, with its groups over every held record.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[schema(as = CustodyListing)]
pub struct Listing {
    pub counts: Counts,
    pub intake: Option<IntakeState>,
    /// Over every held record (not only the filtered ones).
    pub by_reason: Vec<Group>,
    pub by_original_queue: Vec<Group>,
    pub by_error: Vec<Group>,
    /// Held records matching the filter.
    pub matching: usize,
    /// The first `limit` of them.
    pub records: Vec<Record>,
}

/// What custody holds of a queue: counts, groups over every held record, and the records the
/// filter matches. In SQL, so that it answers in milliseconds over 100,000 records (reading and
/// decoding every record per request took seconds). The filter means what the browser's does
/// (`Filter::matches`); its text search looks in the body and in every property, headers
/// included, ignoring the case of ASCII letters.
pub async fn list(
    store: &Store,
    custody: &Custody,
    (broker, vhost, queue): (&str, &str, &str),
    filter: &Filter,
    after: Option<i64>,
    limit: usize,
    budget: &Budget,
) -> Result<Listing, SearchError> {
    // One scan gives the counts, the sizes and every group.
    let tallies = store.custody_triage((broker, vhost, queue)).await?;
    let mut counts = Counts::default();
    let mut groups: [HashMap<Option<String>, Group>; 3] = Default::default();
    for tally in tallies {
        let n = tally.records.max(0) as u64;
        match tally.state.as_str() {
            "held" => counts.held += n,
            "claimed" => counts.claimed += n,
            // Counted below, from this incarnation of the queue only.
            _ => continue,
        }
        counts.bytes += tally.bytes.max(0) as u64;
        let (first, last) = (tally.first_at.unwrap_or_default(), tally.last_at.unwrap_or_default());
        for (by, value) in groups.iter_mut().zip([tally.reason, tally.original_queue, tally.error]) {
            let group = by.entry(value.clone()).or_insert_with(|| Group {
                value: value.unwrap_or_else(|| "—".to_string()),
                records: 0,
                first_seen: first,
                last_seen: last,
                variants: Vec::new(),
                variant_count: 0,
            });
            group.records += n as usize;
            group.first_seen = group.first_seen.min(first);
            group.last_seen = group.last_seen.max(last);
        }
    }
    // Not the triage's replayed records: those of a queue deleted and re-created under this
    // name were the old queue's (issue 34, case 6: a new queue showed "907 replayed").
    counts.replayed = store.custody_replayed((broker, vhost, queue)).await?.max(0) as u64;
    // Largest first, then by value; records without an error form no error group.
    let ordered = |by: HashMap<Option<String>, Group>, with_none: bool| -> Vec<Group> {
        let mut out: Vec<Group> = by.into_iter().filter(|(k, _)| with_none || k.is_some()).map(|(_, g)| g).collect();
        out.sort_by(|a, b| b.records.cmp(&a.records).then_with(|| a.value.cmp(&b.value)));
        out
    };
    let [reasons, queues, errors] = groups;
    let (by_reason, by_original_queue) = (ordered(reasons, true), ordered(queues, true));
    // Errors by their group, from the error texts the scan gave (old records too, whatever
    // their stored group), each with its variants.
    let by_error =
        error_groups(errors.into_iter().filter_map(|(k, g)| Some((k?, g.records, g.first_seen, g.last_seen))));

    // The page starts after the id `after` (the API's cursor); `matching` counts every match.
    let place = (broker, vhost, queue);
    let after = after.unwrap_or(0);
    let records = if filter.is_empty() {
        let kept = (counts.held + counts.claimed) as usize;
        (kept, records(store, place, filter, (States::Kept, Some(after)), limit as i64, budget).await?)
    } else if filter.regex().is_some() {
        // Matched outside SQL: every match read once, counted, and the first `limit` kept.
        let mut all = records(store, place, filter, (States::Kept, None), i64::MAX, budget).await?;
        let matching = all.len();
        all.retain(|r| r.id > after);
        all.truncate(limit);
        (matching, all)
    } else {
        // One scan for the count and the page: a count and then the first `limit` read every
        // body twice when matches are rare (a text search reads 100 MB at 100,000 records).
        let ids = matching_ids(store, place, filter).await?;
        let page: Vec<i64> = ids.iter().copied().filter(|id| *id > after).take(limit).collect();
        (ids.len(), store.custody_records_by_id(&page).await?)
    };
    let (matching, records) = records;
    Ok(Listing {
        counts,
        intake: custody.state(broker, vhost, queue),
        by_reason,
        by_original_queue,
        by_error,
        matching,
        records,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_group_by_cause_with_their_variants() {
        let errors =
            (0..78).map(|n| (format!("java.lang.NullPointerException: customer of order {n} is null"), 1, n, n));
        let other = std::iter::once(("com.shop.SkuUnknown: sku 'A-1' unknown".to_string(), 5, 100, 200));
        let groups = error_groups(errors.chain(other));
        assert_eq!(groups.len(), 2);
        let npe = &groups[0];
        assert_eq!(npe.value, "java.lang.NullPointerException: customer of order <n> is null");
        assert_eq!((npe.records, npe.variant_count, npe.variants.len()), (78, 78, VARIANTS_SHOWN));
        assert_eq!((npe.first_seen, npe.last_seen), (0, 77));
        assert_eq!(groups[1].value, "com.shop.SkuUnknown: sku <q> unknown");
        assert_eq!(
            groups[1].variants,
            vec![Variant { value: "com.shop.SkuUnknown: sku 'A-1' unknown".into(), records: 5 }]
        );
    }
}
