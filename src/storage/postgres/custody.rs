//! Custody on PostgreSQL. Where SQLite's single writer makes a check and its change one step,
//! the statement does it here: a claim locks the held records it takes (`for update skip
//! locked`: another replica's claim neither waits for nor takes them), and a delete is guarded
//! by the state in its own `where`, which PostgreSQL re-reads after any concurrent change.
//!
//! Searches mean what SQLite's do, with the functions of `0005_custody_search.sql`: text in a
//! body is found byte for byte (`custody_text`), ignoring the case of ASCII letters only
//! (`lower(... collate "C")`, as SQLite's `like` and `lower`), and a payload that is not JSON has
//! no path (`custody_json`). JSON values that are not strings compare as JSON (`1.50` equals
//! `1.5`, and objects whatever their keys' order), where SQLite compares their text.

use std::borrow::Cow;
use std::collections::HashMap;

use async_trait::async_trait;
use futures_util::StreamExt;

use super::fates::text;
use super::leases::dead_replica;
use super::{PgTx, Postgres};
use crate::storage::custody::{
    like_pattern, verbatim_in_json, Candidate, Custody, CustodyWrites, Deleted, NewRecord, PathStep, Queue, Record,
    Scan, Search, States, StoredMessage, Tally, MESSAGE_COLUMNS,
};
use crate::storage::leases::HEARTBEAT_PREFIX;
use crate::storage::Result;

/// [`crate::storage::custody::RECORD_COLUMNS`] as PostgreSQL reads them: `length` of a bytea is
/// an `integer`.
const RECORD_COLUMNS: &str = "id, received_at, message_id, reason, original_queue, error, routing_key, \
                              length(body)::bigint as size, redelivered, state";

#[async_trait]
impl Custody for Postgres {
    async fn keep_records(&self, queue: Queue<'_>, received_at: i64, records: &[NewRecord<'_>]) -> Result<()> {
        let mut tx = self.pool.begin().await?;
        insert(&mut tx, queue, received_at, records).await?;
        tx.commit().await
    }

    async fn custody_bytes(&self, (broker, vhost, queue): Queue<'_>) -> Result<u64> {
        let bytes: i64 = sqlx::query_scalar(
            "select coalesce(sum(size), 0)::bigint from custody_messages
             where broker = $1 and vhost = $2 and queue = $3 and state in ('held', 'claimed')",
        )
        .bind(broker)
        .bind(vhost)
        .bind(queue)
        .fetch_one(&self.pool)
        .await?;
        Ok(bytes.max(0) as u64)
    }

    async fn ungrouped_errors(&self) -> Result<Vec<(i64, String)>> {
        sqlx::query_as("select id, error from custody_messages where error_group is null and error is not null")
            .fetch_all(&self.pool)
            .await
    }

    async fn set_error_groups(&self, groups: &[(i64, String)]) -> Result<()> {
        let mut tx = self.pool.begin().await?;
        for (id, group) in groups {
            sqlx::query("update custody_messages set error_group = $1 where id = $2")
                .bind(text(group))
                .bind(id)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await
    }

    async fn prune_replayed(&self, before: i64) -> Result<u64> {
        let done = sqlx::query("delete from custody_messages where state = 'replayed' and replayed_at < $1")
            .bind(before)
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected())
    }

    async fn delete_held(&self, (broker, vhost, queue): Queue<'_>, id: i64) -> Result<Deleted> {
        // A claim that committed first leaves the row `claimed`, which this `where` reads again
        // after waiting for it: a record a replay took is never deleted under it.
        let deleted = sqlx::query_scalar::<_, Option<String>>(
            "delete from custody_messages
             where broker = $1 and vhost = $2 and queue = $3 and id = $4 and state = 'held'
             returning message_id",
        )
        .bind(text(broker))
        .bind(text(vhost))
        .bind(text(queue))
        .bind(id)
        .fetch_optional(&self.pool)
        .await?;
        if let Some(message_id) = deleted {
            return Ok(Deleted::Deleted(message_id));
        }
        let state = sqlx::query_scalar::<_, String>(
            "select state from custody_messages where broker = $1 and vhost = $2 and queue = $3 and id = $4",
        )
        .bind(text(broker))
        .bind(text(vhost))
        .bind(text(queue))
        .bind(id)
        .fetch_optional(&self.pool)
        .await?;
        Ok(state.map_or(Deleted::NotFound, Deleted::NotHeld))
    }

    async fn custody_switches(&self, broker: &str) -> Result<Vec<(String, String, String)>> {
        sqlx::query_as("select vhost, queue, state from custody_queues where broker = $1")
            .bind(text(broker))
            .fetch_all(&self.pool)
            .await
    }

    async fn set_custody_switch(
        &self,
        (broker, vhost, queue): Queue<'_>,
        state: &str,
        at: i64,
        by: &str,
    ) -> Result<()> {
        sqlx::query(
            "insert into custody_queues (broker, vhost, queue, state, changed_at, changed_by)
             values ($1, $2, $3, $4, $5, $6)
             on conflict (broker, vhost, queue) do update set state = excluded.state, changed_at = excluded.changed_at,
             changed_by = excluded.changed_by",
        )
        .bind(text(broker))
        .bind(text(vhost))
        .bind(text(queue))
        .bind(state)
        .bind(at)
        .bind(text(by))
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn custody_counts(&self, broker: &str) -> Result<Vec<Tally>> {
        sqlx::query_as(
            "select vhost, queue, state, null::text as reason, null::text as original_queue, null::text as error,
             count(*) as records, coalesce(sum(size), 0)::bigint as bytes, min(received_at) as first_at,
             max(received_at) as last_at
             from custody_messages where broker = $1 group by vhost, queue, state",
        )
        .bind(text(broker))
        .fetch_all(&self.pool)
        .await
    }

    async fn custody_replayed(&self, (broker, vhost, queue): Queue<'_>) -> Result<i64> {
        sqlx::query_scalar(
            "select count(*) from custody_messages m
             where m.broker = $1 and m.vhost = $2 and m.queue = $3 and m.state = 'replayed'
               and m.replayed_at >= coalesce((select q.incarnation_since from queues q join brokers b on b.id = q.broker_id
                                              where b.name = m.broker and q.vhost = m.vhost and q.name = m.queue), 0)",
        )
        .bind(text(broker))
        .bind(text(vhost))
        .bind(text(queue))
        .fetch_one(&self.pool)
        .await
    }

    async fn custody_triage(&self, (broker, vhost, queue): Queue<'_>) -> Result<Vec<Tally>> {
        sqlx::query_as(
            "select vhost, queue, state, reason, original_queue, error, count(*) as records,
             coalesce(sum(size), 0)::bigint as bytes, min(received_at) as first_at, max(received_at) as last_at
             from custody_messages where broker = $1 and vhost = $2 and queue = $3
             group by vhost, queue, state, reason, original_queue, error",
        )
        .bind(text(broker))
        .bind(text(vhost))
        .bind(text(queue))
        .fetch_all(&self.pool)
        .await
    }

    async fn custody_message(&self, (broker, vhost, queue): Queue<'_>, id: i64) -> Result<Option<StoredMessage>> {
        let sql = format!(
            "select {RECORD_COLUMNS}, {MESSAGE_COLUMNS} from custody_messages
             where broker = $1 and vhost = $2 and queue = $3 and id = $4"
        );
        sqlx::query_as(&sql)
            .bind(text(broker))
            .bind(text(vhost))
            .bind(text(queue))
            .bind(id)
            .fetch_optional(&self.pool)
            .await
    }

    async fn custody_messages(&self, ids: &[i64]) -> Result<Vec<StoredMessage>> {
        let sql =
            format!("select {RECORD_COLUMNS}, {MESSAGE_COLUMNS} from custody_messages where id = any($1) order by id");
        sqlx::query_as(&sql).bind(ids).fetch_all(&self.pool).await
    }

    async fn custody_records(&self, queue: Queue<'_>, search: &Search, limit: i64) -> Result<Vec<Record>> {
        let mut c = conditions(queue, search);
        let limit = c.push(Value::Int(limit));
        let sql = format!("select {RECORD_COLUMNS} from custody_messages where {} order by id limit {limit}", c.sql);
        c.values.iter().fold(sqlx::query_as::<_, Record>(&sql), |q, v| v.bind_to(q)).fetch_all(&self.pool).await
    }

    async fn custody_ids(&self, queue: Queue<'_>, search: &Search, (low, high): (i64, i64)) -> Result<Vec<i64>> {
        let mut c = conditions(queue, search);
        let (low, high) = (c.push(Value::Int(low)), c.push(Value::Int(high)));
        let sql =
            format!("select id from custody_messages where {} and id between {low} and {high} order by id", c.sql);
        let query = c.values.iter().fold(sqlx::query_as::<_, (i64,)>(&sql), |q, v| v.bind_to(q));
        Ok(query.fetch_all(&self.pool).await?.into_iter().map(|(id,)| id).collect())
    }

    async fn custody_records_by_id(&self, ids: &[i64]) -> Result<Vec<Record>> {
        let sql = format!("select {RECORD_COLUMNS} from custody_messages where id = any($1) order by id");
        sqlx::query_as(&sql).bind(ids).fetch_all(&self.pool).await
    }

    async fn custody_id_span(&self, (broker, vhost, queue): Queue<'_>) -> Result<Option<(i64, i64)>> {
        let (low, high): (Option<i64>, Option<i64>) = sqlx::query_as(
            "select min(id), max(id) from custody_messages where broker = $1 and vhost = $2 and queue = $3",
        )
        .bind(text(broker))
        .bind(text(vhost))
        .bind(text(queue))
        .fetch_one(&self.pool)
        .await?;
        Ok(low.zip(high))
    }

    async fn custody_candidates(&self, queue: Queue<'_>, search: &Search, scan: Scan) -> Result<Vec<Candidate>> {
        let mut c = conditions(queue, search);
        let head = c.push(Value::Int(i64::try_from(scan.head_bytes).unwrap_or(i64::MAX)));
        let (low, high) = (c.push(Value::Int(scan.ids.0)), c.push(Value::Int(scan.ids.1)));
        // Only the head of each body leaves the server: the expression reads no further.
        let sql = format!(
            "select {RECORD_COLUMNS}, substring(body from 1 for {head}::integer) as head, properties_json
             from custody_messages where {} and id between {low} and {high} order by id",
            c.sql
        );
        let mut rows =
            c.values.iter().fold(sqlx::query_as::<_, CandidateRow>(&sql), |q, v| v.bind_to(q)).fetch(&self.pool);
        let (mut out, mut bytes) = (Vec::new(), 0);
        while bytes < scan.max_bytes {
            let Some(CandidateRow { record, head, properties_json }) = rows.next().await.transpose()? else { break };
            let properties = properties_json.as_bytes()[..properties_json.len().min(scan.head_bytes)].to_vec();
            bytes += head.len() + properties.len();
            out.push((record, head, properties));
        }
        Ok(out)
    }

    async fn recover_claims(&self, survivor: &str) -> Result<u64> {
        let sql = format!(
            "update custody_messages set state = 'held', job = null, claimed_by = null
             where state = 'claimed' and {}",
            dead_replica("custody_messages.claimed_by", "$1", "$2")
        );
        let done = sqlx::query(&sql).bind(survivor).bind(HEARTBEAT_PREFIX).execute(&self.pool).await?;
        Ok(done.rows_affected())
    }

    async fn claim_records(&self, job: &str, replica: &str, ids: &[i64]) -> Result<Vec<i64>> {
        // The held rows are locked before they change: one locked by another claim (or a delete)
        // is skipped, not waited for, and one whose claim committed first is no longer held when
        // its lock is taken. Two claims never both get a record, and never deadlock.
        let mut got: Vec<i64> = sqlx::query_scalar(
            "update custody_messages set state = 'claimed', job = $1, claimed_by = $2
             where id in (select id from custody_messages where state = 'held' and id = any($3)
                          for update skip locked)
             returning id",
        )
        .bind(text(job))
        .bind(replica)
        .bind(ids)
        .fetch_all(&self.pool)
        .await?;
        got.sort_unstable();
        Ok(got)
    }

    async fn settle_records(&self, replayed: &[(i64, String)], failed: &[i64], at: i64) -> Result<()> {
        let mut tx = self.pool.begin().await?;
        let mut by_target: HashMap<&str, Vec<i64>> = HashMap::new();
        for (record, to) in replayed {
            by_target.entry(to.as_str()).or_default().push(*record);
        }
        for (to, records) in by_target {
            sqlx::query(
                "update custody_messages set state = 'replayed', replayed_at = $1, replayed_to = $2 where id = any($3)",
            )
            .bind(at)
            .bind(text(to))
            .bind(&records)
            .execute(&mut *tx)
            .await?;
        }
        if !failed.is_empty() {
            sqlx::query("update custody_messages set state = 'held', job = null, claimed_by = null where id = any($1)")
                .bind(failed)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await
    }

    async fn unclaim_records(&self, job: &str) -> Result<u64> {
        let done =
            sqlx::query("update custody_messages set state = 'held', job = null, claimed_by = null where job = $1 and state = 'claimed'")
                .bind(text(job))
                .execute(&self.pool)
                .await?;
        Ok(done.rows_affected())
    }

    async fn replay_parts(&self, ids: &[i64]) -> Result<HashMap<i64, (Vec<u8>, Vec<u8>)>> {
        let rows: Vec<(i64, Vec<u8>, Vec<u8>)> =
            sqlx::query_as("select id, properties, body from custody_messages where id = any($1)")
                .bind(ids)
                .fetch_all(&self.pool)
                .await?;
        Ok(rows.into_iter().map(|(id, properties, body)| (id, (properties, body))).collect())
    }
}

#[async_trait]
impl CustodyWrites for PgTx {
    async fn keep_records(&mut self, queue: Queue<'_>, received_at: i64, records: &[NewRecord<'_>]) -> Result<()> {
        insert(&mut self.0, queue, received_at, records).await
    }
}

async fn insert(
    conn: &mut sqlx::PgConnection,
    (broker, vhost, queue): Queue<'_>,
    now: i64,
    records: &[NewRecord<'_>],
) -> Result<()> {
    for r in records {
        sqlx::query(
            "insert into custody_messages (broker, vhost, queue, received_at, exchange, routing_key, properties,
             properties_json, body, size, message_id, reason, original_queue, error, redelivered, body_nul,
             fingerprint, error_group)
             values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14,
                     $15 and exists (select 1 from custody_messages
                                     where broker = $1 and vhost = $2 and queue = $3 and fingerprint = $17),
                     $16, $17, $18)",
        )
        .bind(text(broker))
        .bind(text(vhost))
        .bind(text(queue))
        .bind(now)
        .bind(text(r.exchange))
        .bind(text(r.routing_key))
        .bind(r.properties)
        .bind(json_text(r.properties_json))
        .bind(r.body)
        .bind(r.size)
        .bind(r.message_id.map(text))
        .bind(r.reason.map(text))
        .bind(r.original_queue.map(text))
        .bind(r.error.map(text))
        .bind(r.redelivered)
        .bind(r.body.contains(&0))
        .bind(text(r.fingerprint))
        .bind(r.error_group.map(text))
        .execute(&mut *conn)
        .await?;
    }
    Ok(())
}

/// JSON text whose strings hold no NUL: each `\u0000` escape becomes `\ufffd`, as a NUL in a
/// text column becomes U+FFFD ([`text`]), so that PostgreSQL can read its strings (`->>`
/// refuses a `\u0000`). Escapes are read left to right, so `\\u0000` (a backslash, then
/// `u0000`) stays as it is.
fn json_text(json: &str) -> Cow<'_, str> {
    if !json.contains("\\u0000") {
        return Cow::Borrowed(json);
    }
    let mut out = String::with_capacity(json.len());
    let mut rest = json;
    while let Some(at) = rest.find('\\') {
        out.push_str(&rest[..at]);
        let escape = &rest[at..];
        let (taken, written) = if escape.starts_with("\\u0000") {
            (6, "\\ufffd")
        } else {
            // A backslash and the character it escapes (both ASCII in an escape).
            let n = escape.char_indices().nth(2).map_or(escape.len(), |(i, _)| i);
            (n, &escape[..n])
        };
        out.push_str(written);
        rest = &escape[taken..];
    }
    out.push_str(rest);
    Cow::Owned(out)
}

/// A regular expression's candidate as read.
#[derive(sqlx::FromRow)]
struct CandidateRow {
    #[sqlx(flatten)]
    record: Record,
    head: Vec<u8>,
    properties_json: String,
}

/// A value bound to a search.
enum Value {
    Text(String),
    Bytes(Vec<u8>),
    Path(Vec<String>),
    Int(i64),
}

impl Value {
    fn bind_to<'q, O>(
        &'q self,
        query: sqlx::query::QueryAs<'q, sqlx::Postgres, O, sqlx::postgres::PgArguments>,
    ) -> sqlx::query::QueryAs<'q, sqlx::Postgres, O, sqlx::postgres::PgArguments> {
        match self {
            Value::Text(v) => query.bind(v),
            Value::Bytes(v) => query.bind(v),
            Value::Path(v) => query.bind(v),
            Value::Int(v) => query.bind(v),
        }
    }
}

/// A search's condition and its values, each placed as `$n`.
struct Conditions {
    sql: String,
    values: Vec<Value>,
}

impl Conditions {
    /// Adds `value`; returns its placeholder.
    fn push(&mut self, value: Value) -> String {
        self.values.push(value);
        format!("${}", self.values.len())
    }

    fn text(&mut self, value: &str) -> String {
        self.push(Value::Text(text(value).into_owned()))
    }
}

/// `text` as `custody_text` shows a body: each byte one character (LATIN1), ASCII lowercased.
fn as_body_text(text: &str) -> String {
    text.to_ascii_lowercase().bytes().map(char::from).collect()
}

/// The condition for a queue's records that `search` matches (`Search`): what SQLite's
/// `conditions` (`storage/sqlite/custody.rs`) means.
fn conditions((broker, vhost, queue): Queue<'_>, search: &Search) -> Conditions {
    let mut c = Conditions { sql: String::new(), values: Vec::new() };
    let (b, v, q) = (c.text(broker), c.text(vhost), c.text(queue));
    let states = match search.states {
        States::Held => "state = 'held'",
        States::Kept => "state in ('held', 'claimed')",
    };
    let mut sql = format!("broker = {b} and vhost = {v} and queue = {q} and {states}");
    if let Some(after) = search.after {
        sql.push_str(&format!(" and id > {}", c.push(Value::Int(after))));
    }
    if let Some(reason) = &search.reason {
        sql.push_str(&format!(" and reason = {}", c.text(reason)));
    }
    if let Some(original) = &search.original_queue {
        sql.push_str(&format!(" and original_queue = {}", c.text(original)));
    }
    if let Some(error) = &search.error {
        sql.push_str(&format!(" and strpos(lower(error collate \"C\"), {}) > 0", c.text(&error.to_ascii_lowercase())));
    }
    if let Some(group) = &search.error_group {
        sql.push_str(&format!(" and error_group = {}", c.text(group)));
    }
    if let Some(needle) = &search.text {
        let in_body = c.text(&like_pattern(&as_body_text(needle)));
        let in_properties = c.text(&like_pattern(&needle.to_ascii_lowercase()));
        sql.push_str(&format!(
            " and (lower(custody_text(body) collate \"C\") like {in_body} escape '\\' \
             or lower(properties_json collate \"C\") like {in_properties} escape '\\')"
        ));
    }
    if let Some(literals) = &search.literals {
        // Case-sensitive, as the literals are: the rows of a match hold one byte for byte.
        let looks: Vec<String> = literals
            .iter()
            .map(|literal| {
                let (bytes, text) = (c.push(Value::Bytes(literal.as_bytes().to_vec())), c.text(literal));
                format!("position({bytes} in body) > 0 or strpos(properties_json, {text}) > 0")
            })
            .collect();
        sql.push_str(&format!(" and ({})", looks.join(" or ")));
    }
    if let Some(name) = &search.header {
        // A cheap first look at the JSON text, where it cannot miss (the part is written as it
        // is), before its headers are parsed.
        let part = search.header_part.as_deref();
        if let Some(part) = part.filter(|p| verbatim_in_json(p)) {
            let look = c.text(&part.to_ascii_lowercase());
            sql.push_str(&format!(" and strpos(lower(properties_json collate \"C\"), {look}) > 0"));
        }
        // `json` keeps each value's text as written, as SQLite's `json_each` does.
        let name = c.text(name);
        sql.push_str(&format!(
            " and exists (select 1 from json_each(properties_json::json -> 'headers') h where h.key = {name}"
        ));
        if let Some(part) = part {
            let part = c.text(&part.to_ascii_lowercase());
            sql.push_str(&format!(
                " and strpos(lower((case json_typeof(h.value) when 'string' then h.value #>> '{{}}' \
                 else h.value::text end) collate \"C\"), {part}) > 0"
            ));
        }
        sql.push(')');
    }
    if let Some(json) = &search.json {
        match &json.steps {
            Some(steps) => {
                let path: Vec<String> = steps
                    .iter()
                    .map(|s| match s {
                        PathStep::Key(k) => text(k).into_owned(),
                        PathStep::Index(i) => i.to_string(),
                    })
                    .collect();
                let path = c.push(Value::Path(path));
                match &json.expected {
                    Some(expected) => {
                        // As on SQLite: a value JSON writes as it is lies in the body's bytes,
                        // unless a \u escape spells it; the rest are passed over unparsed.
                        if verbatim_in_json(expected) && !expected.starts_with(['{', '[']) {
                            let look = c.push(Value::Bytes(expected.as_bytes().to_vec()));
                            sql.push_str(&format!(
                                " and (position({look} in body) > 0 or position('\\x5c75'::bytea in body) > 0)"
                            ));
                        }
                        let expected = c.text(expected);
                        sql.push_str(&format!(
                            " and (select case jsonb_typeof(j.v) when 'string' then j.v #>> '{{}}' = {expected} \
                             else j.v = custody_json(convert_to({expected}, 'UTF8')) end \
                             from (select custody_json(body) #> {path} as v) j)"
                        ));
                    }
                    None => sql.push_str(&format!(" and custody_json(body) #> {path} is not null")),
                }
            }
            None => sql.push_str(" and false"),
        }
    }
    c.sql = sql;
    c
}

#[cfg(test)]
mod tests {
    use super::json_text;

    #[test]
    fn only_nul_escapes_change() {
        assert_eq!(json_text(r#"{"a":"x\u0000y"}"#), r#"{"a":"x\ufffdy"}"#);
        assert_eq!(json_text(r#"{"a":"x\\u0000y\u0000"}"#), r#"{"a":"x\\u0000y\ufffd"}"#);
        assert_eq!(json_text(r#"{"a":"\"é\n"}"#), r#"{"a":"\"é\n"}"#);
    }
}
