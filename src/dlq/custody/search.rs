//! Searching custody: the records of a queue that a filter matches, meaning what the browser's
//! filter means (`Filter::matches`). The store matches all but a regular expression (in SQL,
//! `storage::custody::Search`); an expression, which neither backend has in Rust's syntax, is
//! matched on the budget's threads over the rows the rest of the filter leaves, a range of ids
//! per core.

use crate::dlq::budget::{Budget, Stopped};
use crate::dlq::expression::SCAN_BYTES;
use crate::dlq::message::Filter;
pub use crate::storage::custody::Record;
use crate::storage::custody::{JsonSearch, Queue, Scan, Search, States};
use crate::storage::Store;

/// What the store is to match of `filter` (all but its regular expression, of which it gets
/// the literals), over a queue's records in `states` after the id `after`.
fn search(filter: &Filter, states: States, after: Option<i64>) -> Search {
    let set = |v: &Option<String>| v.as_deref().map(str::trim).filter(|s| !s.is_empty()).map(str::to_string);
    let json_path = filter.json_path.as_deref().is_some_and(|p| !p.trim().is_empty());
    Search {
        states,
        after,
        reason: set(&filter.reason),
        original_queue: set(&filter.original_queue),
        error: set(&filter.error),
        error_group: set(&filter.error_group),
        text: set(&filter.text),
        literals: filter.regex_literals(),
        header: filter.header_name().map(str::to_string),
        header_part: filter.header_part().map(str::to_string),
        json: json_path
            .then(|| JsonSearch { steps: filter.json_steps(), expected: filter.json_expected().map(str::to_string) }),
    }
}

/// The records of a queue in `states` (after the id `after`) that `filter` matches, oldest
/// first, at most `limit`; a regular expression matches within `budget`.
pub(super) async fn records(
    store: &Store,
    queue: Queue<'_>,
    filter: &Filter,
    (states, after): (States, Option<i64>),
    limit: i64,
    budget: &Budget,
) -> Result<Vec<Record>, SearchError> {
    let search = search(filter, states, after);
    let Some(regex) = filter.regex() else {
        return Ok(store.custody_records(queue, &search, limit).await?);
    };
    let Some(regex) = regex else { return Ok(Vec::new()) };
    // The rows the rest of the filter leaves are read in order, a range of ids per core, and
    // matched in batches on the budget's threads (`dlq::budget`).
    let scans = id_ranges(store, queue).await?.into_iter().map(|(low, high)| {
        let search = &search;
        async move {
            let mut out = Vec::new();
            let mut from = low;
            loop {
                let scan = Scan { ids: (from, high), head_bytes: SCAN_BYTES, max_bytes: MATCH_BATCH_BYTES };
                let candidates = store.custody_candidates(queue, search, scan).await?;
                let read: usize = candidates.iter().map(|(_, body, properties)| body.len() + properties.len()).sum();
                let last = candidates.last().map(|(record, _, _)| record.id);
                let regex = regex.clone();
                let matched = budget
                    .run(move |check| {
                        let (mut matched, mut searcher) = (Vec::new(), regex.searcher());
                        for (record, body, properties) in candidates {
                            check.go_on()?;
                            if searcher.in_record(&body, &properties, Some(check))? {
                                matched.push(record);
                            }
                        }
                        Ok(matched)
                    })
                    .await?;
                out.extend(matched);
                // A batch short of its bytes was the range's last.
                match last {
                    Some(last) if read >= MATCH_BATCH_BYTES && last < high && (out.len() as i64) < limit => {
                        from = last + 1
                    }
                    _ => break,
                }
            }
            out.truncate(usize::try_from(limit.max(0)).unwrap_or(usize::MAX));
            Ok::<_, SearchError>(out)
        }
    });
    let mut out: Vec<Record> = futures_util::future::try_join_all(scans).await?.into_iter().flatten().collect();
    out.truncate(usize::try_from(limit.max(0)).unwrap_or(usize::MAX));
    Ok(out)
}

/// How many bytes of records are matched on a thread at once: few enough hops between the
/// runtime and the thread (25 over 100 MB), little enough held per scan.
const MATCH_BATCH_BYTES: usize = 4 << 20;

/// Why a search of custody gave no answer.
#[derive(Debug, thiserror::Error)]
pub enum SearchError {
    /// Its regular expression ran past its budget, or the request went away.
    #[error(transparent)]
    Stopped(#[from] Stopped),
    #[error(transparent)]
    Database(#[from] sqlx::Error),
}

/// Id ranges that split a queue's records into one scan per core (at most 4), in order: one
/// SQLite query runs on one core, and a filter that reads every body reads 100 MB at 100,000
/// records (225 ms in one scan on the benchmark's machine).
async fn id_ranges(store: &Store, queue: Queue<'_>) -> Result<Vec<(i64, i64)>, sqlx::Error> {
    let parts = std::thread::available_parallelism().map_or(1, |n| n.get()).clamp(1, 4) as i64;
    let Some((low, high)) = store.custody_id_span(queue).await? else { return Ok(vec![(i64::MIN, i64::MAX)]) };
    let step = ((high - low) / parts).max(1);
    let mut ranges = Vec::new();
    let mut start = i64::MIN;
    for i in 1..parts {
        let end = low + step * i;
        if end >= high {
            break;
        }
        ranges.push((start, end));
        start = end + 1;
    }
    ranges.push((start, i64::MAX));
    Ok(ranges)
}

/// The ids of a queue's held or claimed records that `filter` (without a regular expression)
/// matches, in order; a filter that reads bodies or headers scans a range of ids per core.
pub(super) async fn matching_ids(store: &Store, queue: Queue<'_>, filter: &Filter) -> Result<Vec<i64>, sqlx::Error> {
    let search = search(filter, States::Kept, None);
    let ranges = if filter.reads_content() { id_ranges(store, queue).await? } else { vec![(i64::MIN, i64::MAX)] };
    let scans = ranges.into_iter().map(|range| store.custody_ids(queue, &search, range));
    Ok(futures_util::future::try_join_all(scans).await?.into_iter().flatten().collect())
}

/// Every record of a queue held in custody (not being replayed) that `filter` matches, oldest
/// first.
pub(in crate::dlq) async fn matching(
    store: &Store,
    queue: Queue<'_>,
    filter: &Filter,
    budget: &Budget,
) -> Result<Vec<Record>, SearchError> {
    records(store, queue, filter, (States::Kept, None), i64::MAX, budget).await
}

/// Of the record ids a user ticked, those `queue`'s custody does not hold now: ids of another
/// queue's records, replayed or being replayed ones, ids that never existed. One query over the
/// span of the ids, whatever their number.
pub async fn not_held(store: &Store, queue: Queue<'_>, ids: &[i64]) -> Result<Vec<i64>, sqlx::Error> {
    let (Some(&low), Some(&high)) = (ids.iter().min(), ids.iter().max()) else { return Ok(Vec::new()) };
    let search = Search { states: States::Held, ..Search::default() };
    let held: std::collections::HashSet<i64> =
        store.custody_ids(queue, &search, (low, high)).await?.into_iter().collect();
    Ok(ids.iter().copied().filter(|id| !held.contains(id)).collect())
}
