//! Searching custody: the records of a queue that a filter matches, in SQL, meaning what the
//! browser's filter means (`Filter::matches`); a regular expression, which SQLite lacks, is
//! matched on the budget's threads over the rows the rest of the filter leaves, a range of ids
//! per core.

use futures_util::StreamExt;
use serde::Serialize;
use sqlx::Row;

use super::store::placeholders;
use crate::dlq::budget::{Budget, Stopped};
use crate::dlq::expression::head;
use crate::dlq::message::{self, Filter};
use crate::history::Db;

/// One record as the list shows it.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[schema(as = CustodyRecord)]
pub struct Record {
    pub id: i64,
    #[serde(flatten, serialize_with = "crate::times::received_at")]
    #[schema(schema_with = crate::times::schema::received_at)]
    pub received_at: i64,
    pub message_id: Option<String>,
    pub reason: Option<String>,
    pub original_queue: Option<String>,
    pub error: Option<String>,
    pub routing_key: String,
    pub size: u64,
    pub redelivered: bool,
    pub state: String,
}

/// The columns a `Record` is read from (`record`), first in every query that lists records.
pub(super) const RECORD_COLUMNS: &str =
    "id, received_at, message_id, reason, original_queue, error, routing_key, length(body), redelivered, state";

pub(super) fn record(row: &sqlx::sqlite::SqliteRow) -> Record {
    Record {
        id: row.get(0),
        received_at: row.get(1),
        message_id: row.get(2),
        reason: row.get(3),
        original_queue: row.get(4),
        error: row.get(5),
        routing_key: row.get(6),
        size: row.get::<i64, _>(7).max(0) as u64,
        redelivered: row.get(8),
        state: row.get(9),
    }
}

/// The SQL condition (and its values, in order) for a queue's records in `states` that `filter`
/// matches: what the browser's filter means (`Filter::matches`), its text search in the body and
/// in every property, headers included, ignoring the case of ASCII letters.
fn conditions(broker: &str, vhost: &str, queue: &str, states: &str, filter: &Filter) -> (String, Vec<String>) {
    let set = |v: &Option<String>| v.as_deref().map(str::trim).filter(|s| !s.is_empty()).map(str::to_string);
    let mut conditions = format!("broker = ? and vhost = ? and queue = ? and {states}");
    let mut values: Vec<String> = vec![broker.to_string(), vhost.to_string(), queue.to_string()];
    if let Some(reason) = set(&filter.reason) {
        conditions.push_str(" and reason = ?");
        values.push(reason);
    }
    if let Some(original) = set(&filter.original_queue) {
        conditions.push_str(" and original_queue = ?");
        values.push(original);
    }
    if let Some(error) = set(&filter.error) {
        conditions.push_str(" and instr(lower(error), ?) > 0");
        values.push(error.to_ascii_lowercase());
    }
    if let Some(group) = set(&filter.error_group) {
        conditions.push_str(" and error_group = ?");
        values.push(group);
    }
    if let Some(text) = set(&filter.text) {
        // LIKE folds ASCII case as lower() does, without copying each body; it stops at a NUL
        // byte, so a body that may hold one is also searched whole (`body_nul`).
        conditions.push_str(
            " and (cast(body as text) like ? escape '\\' or properties_json like ? escape '\\' \
             or (body_nul is not 0 and instr(lower(cast(body as text)), ?) > 0))",
        );
        let pattern = like_pattern(&text);
        values.extend([pattern.clone(), pattern, text.to_ascii_lowercase()]);
    }
    // A header's value as `message::json_text` gives it (json_each gives true as 1).
    const HEADER_TEXT: &str =
        "case h.type when 'true' then 'true' when 'false' then 'false' when 'null' then 'null' else h.value end";
    if let Some(literals) = filter.regex_literals() {
        // Every match starts with one of these: rows without any are passed over in SQL, before
        // their bodies are copied out to run the expression (LIKE folds case: more rows, never
        // fewer; it stops at a NUL, so such bodies are always read).
        let looks: Vec<&str> = literals
            .iter()
            .map(|_| "cast(body as text) like ? escape '\\' or properties_json like ? escape '\\'")
            .collect();
        conditions.push_str(&format!(" and ({} or body_nul is not 0)", looks.join(" or ")));
        for literal in &literals {
            let pattern = like_pattern(literal);
            values.extend([pattern.clone(), pattern]);
        }
    }
    if let Some(name) = filter.header_name() {
        // A cheap first look at the JSON text passes over most records without parsing them,
        // where it cannot miss: a part that no number's text holds (json_each gives numbers in
        // SQLite's own format) and that JSON writes as it is.
        if let Some(part) = filter.header_part().filter(|p| verbatim_in_json(p) && !p.chars().all(in_number)) {
            conditions.push_str(" and properties_json like ? escape '\\'");
            values.push(like_pattern(part));
        }
        conditions.push_str(" and exists (select 1 from json_each(properties_json, '$.headers') h where h.key = ?");
        values.push(name.to_string());
        if let Some(part) = filter.header_part() {
            conditions.push_str(&format!(" and instr(lower({HEADER_TEXT}), ?) > 0"));
            values.push(part.to_ascii_lowercase());
        }
        conditions.push(')');
    }
    if filter.json_path.as_deref().is_some_and(|p| !p.trim().is_empty()) {
        // A payload that is not JSON has no path (json_type would fail the whole query on it;
        // `case` is evaluated in order, `and` need not be).
        const BODY: &str = "cast(body as text)";
        match filter.json_steps() {
            Some(steps) => {
                let path = message::sqlite_json_path(&steps);
                match filter.json_expected() {
                    Some(expected) => {
                        // The expected value, when it is a string or a scalar that JSON writes
                        // as it is, is in the body's text, unless a \u escape spells it (or a
                        // NUL ends LIKE's reading): a cheap first look passes over the rest
                        // without parsing them (a third of the time at 100,000 records).
                        if verbatim_in_json(expected) && !expected.starts_with(['{', '[']) {
                            conditions.push_str(&format!(
                                " and ({BODY} like ? escape '\\' or {BODY} like '%\\u%' or body_nul is not 0)"
                            ));
                            values.push(like_pattern(expected));
                        }
                        conditions.push_str(&format!(
                            " and (case when json_valid({BODY}) then (case json_type({BODY}, ?) \
                             when 'true' then 'true' when 'false' then 'false' when 'null' then 'null' \
                             when 'text' then json_extract({BODY}, ?) else json(json_extract({BODY}, ?)) end) end) = ?"
                        ));
                        values.extend([path.clone(), path.clone(), path, expected.to_string()]);
                    }
                    None => {
                        conditions.push_str(&format!(
                            " and (case when json_valid({BODY}) then json_type({BODY}, ?) end) is not null"
                        ));
                        values.push(path);
                    }
                }
            }
            None => conditions.push_str(" and 0"),
        }
    }
    (conditions, values)
}

/// Whether JSON writes `text` as it is (nothing in it is escaped), so that a value that shows
/// as `text` holds it verbatim in the JSON text.
fn verbatim_in_json(text: &str) -> bool {
    !text.chars().any(|c| c == '"' || c == '\\' || c.is_control())
}

/// Whether `c` can be part of a number as SQLite writes one.
fn in_number(c: char) -> bool {
    matches!(c, '0'..='9' | '.' | 'e' | 'E' | '+' | '-')
}

/// A LIKE pattern that matches `text` anywhere, its own `%`, `_` and `\\` taken literally.
fn like_pattern(text: &str) -> String {
    let mut pattern = String::with_capacity(text.len() + 2);
    pattern.push('%');
    for c in text.chars() {
        if matches!(c, '%' | '_' | '\\') {
            pattern.push('\\');
        }
        pattern.push(c);
    }
    pattern.push('%');
    pattern
}

/// The records of a queue in `states` that `filter` matches, oldest first, at most `limit`; a
/// regular expression matches within `budget`.
pub(super) async fn records(
    db: &Db,
    (broker, vhost, queue): (&str, &str, &str),
    states: &str,
    filter: &Filter,
    limit: i64,
    budget: &Budget,
) -> Result<Vec<Record>, SearchError> {
    let (conditions, values) = conditions(broker, vhost, queue, states, filter);
    let Some(regex) = filter.regex() else {
        let sql = format!("select {RECORD_COLUMNS} from custody_messages where {conditions} order by id limit ?");
        let mut query = sqlx::query(&sql);
        for v in &values {
            query = query.bind(v);
        }
        return Ok(query.bind(limit).fetch_all(db).await?.iter().map(record).collect());
    };
    let Some(regex) = regex else { return Ok(Vec::new()) };
    // SQLite has no regular expressions of its own (and sqlx's fails the query on a body that
    // is not UTF-8): the rows the rest of the filter leaves are read in order, a range of ids
    // per core, and matched in batches on the budget's threads (`dlq::budget`).
    let sql = format!(
        "select {RECORD_COLUMNS}, body, properties_json from custody_messages
         where {conditions} and id between ? and ? order by id"
    );
    let scans = id_ranges(db, (broker, vhost, queue)).await?.into_iter().map(|(low, high)| {
        let (sql, values) = (&sql, &values);
        async move {
            let mut query = sqlx::query(sql);
            for v in values {
                query = query.bind(v);
            }
            let mut rows = query.bind(low).bind(high).fetch(db);
            let mut out = Vec::new();
            let (mut batch, mut batch_bytes) = (Vec::new(), 0);
            loop {
                let row = rows.next().await.transpose()?;
                if let Some(row) = &row {
                    // Only what the expression reads is copied out of the row.
                    let (body, properties): (&[u8], &str) = (row.get(10), row.get(11));
                    let (body, properties) = (head(body).to_vec(), head(properties.as_bytes()).to_vec());
                    batch_bytes += body.len() + properties.len();
                    batch.push((record(row), body, properties));
                }
                if row.is_some() && batch_bytes < MATCH_BATCH_BYTES {
                    continue;
                }
                let (regex, candidates) = (regex.clone(), std::mem::take(&mut batch));
                batch_bytes = 0;
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
                if row.is_none() || out.len() as i64 >= limit {
                    break;
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
async fn id_ranges(db: &Db, (broker, vhost, queue): (&str, &str, &str)) -> Result<Vec<(i64, i64)>, sqlx::Error> {
    let parts = std::thread::available_parallelism().map_or(1, |n| n.get()).clamp(1, 4) as i64;
    let (low, high): (Option<i64>, Option<i64>) =
        sqlx::query_as("select min(id), max(id) from custody_messages where broker = ? and vhost = ? and queue = ?")
            .bind(broker)
            .bind(vhost)
            .bind(queue)
            .fetch_one(db)
            .await?;
    let (Some(low), Some(high)) = (low, high) else { return Ok(vec![(i64::MIN, i64::MAX)]) };
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

/// The ids of a queue's records in `states` that `filter` (without a regular expression)
/// matches, in order; a filter that reads bodies or headers scans a range of ids per core.
pub(super) async fn matching_ids(
    db: &Db,
    queue: (&str, &str, &str),
    states: &str,
    filter: &Filter,
) -> Result<Vec<i64>, sqlx::Error> {
    let (conditions, values) = conditions(queue.0, queue.1, queue.2, states, filter);
    let sql = format!("select id from custody_messages where {conditions} and id between ? and ? order by id");
    let ranges = if filter.reads_content() { id_ranges(db, queue).await? } else { vec![(i64::MIN, i64::MAX)] };
    let scans = ranges.into_iter().map(|(low, high)| {
        let mut query = sqlx::query_scalar::<_, i64>(&sql);
        for v in &values {
            query = query.bind(v);
        }
        query.bind(low).bind(high).fetch_all(db)
    });
    Ok(futures_util::future::try_join_all(scans).await?.into_iter().flatten().collect())
}

/// The records with these ids (sorted), oldest first.
pub(super) async fn records_by_id(db: &Db, ids: &[i64]) -> Result<Vec<Record>, sqlx::Error> {
    let mut out = Vec::with_capacity(ids.len());
    for chunk in ids.chunks(500) {
        let marks = placeholders(chunk.len());
        let sql = format!("select {RECORD_COLUMNS} from custody_messages where id in ({marks}) order by id");
        let mut query = sqlx::query(&sql);
        for id in chunk {
            query = query.bind(id);
        }
        out.extend(query.fetch_all(db).await?.iter().map(record));
    }
    Ok(out)
}

/// Every record of a queue held in custody (not being replayed) that `filter` matches, oldest
/// first.
pub(in crate::dlq) async fn matching(
    db: &Db,
    queue: (&str, &str, &str),
    filter: &Filter,
    budget: &Budget,
) -> Result<Vec<Record>, SearchError> {
    records(db, queue, "state in ('held', 'claimed')", filter, i64::MAX, budget).await
}
