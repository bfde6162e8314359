use std::collections::HashMap;

use async_trait::async_trait;
use futures_util::StreamExt;
use sqlx::Row;

use super::leases::dead_replica;
use super::{Sqlite, SqliteTx};
use crate::storage::custody::{
    like_pattern, verbatim_in_json, Candidate, Custody, CustodyWrites, Deleted, NewRecord, PathStep, Queue, Record,
    Scan, Search, States, StoredMessage, Tally, IDS_PER_STATEMENT, MESSAGE_COLUMNS, RECORD_COLUMNS,
};
use crate::storage::leases::HEARTBEAT_PREFIX;
use crate::storage::Result;

#[async_trait]
impl Custody for Sqlite {
    async fn keep_records(&self, queue: Queue<'_>, received_at: i64, records: &[NewRecord<'_>]) -> Result<()> {
        // The pool's `synchronous = FULL`: committed, it survives power loss.
        let mut tx = self.pool.begin().await?;
        insert(&mut tx, queue, received_at, records).await?;
        tx.commit().await
    }

    async fn custody_bytes(&self, (broker, vhost, queue): Queue<'_>) -> Result<u64> {
        let row = sqlx::query(
            "select coalesce(sum(size), 0) from custody_messages
             where broker = ? and vhost = ? and queue = ? and state in ('held', 'claimed')",
        )
        .bind(broker)
        .bind(vhost)
        .bind(queue)
        .fetch_one(&self.pool)
        .await?;
        Ok(row.get::<i64, _>(0).max(0) as u64)
    }

    async fn ungrouped_errors(&self) -> Result<Vec<(i64, String)>> {
        sqlx::query_as("select id, error from custody_messages where error_group is null and error is not null")
            .fetch_all(&self.pool)
            .await
    }

    async fn set_error_groups(&self, groups: &[(i64, String)]) -> Result<()> {
        let mut tx = self.pool.begin().await?;
        for (id, group) in groups {
            sqlx::query("update custody_messages set error_group = ? where id = ?")
                .bind(group)
                .bind(id)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await
    }

    async fn prune_replayed(&self, before: i64) -> Result<u64> {
        let done = sqlx::query("delete from custody_messages where state = 'replayed' and replayed_at < ?")
            .bind(before)
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected())
    }

    async fn delete_held(&self, (broker, vhost, queue): Queue<'_>, id: i64) -> Result<Deleted> {
        let deleted = sqlx::query_scalar::<_, Option<String>>(
            "delete from custody_messages where broker = ? and vhost = ? and queue = ? and id = ? and state = 'held'
             returning message_id",
        )
        .bind(broker)
        .bind(vhost)
        .bind(queue)
        .bind(id)
        .fetch_optional(&self.pool)
        .await?;
        if let Some(message_id) = deleted {
            return Ok(Deleted::Deleted(message_id));
        }
        let state = sqlx::query_scalar::<_, String>(
            "select state from custody_messages where broker = ? and vhost = ? and queue = ? and id = ?",
        )
        .bind(broker)
        .bind(vhost)
        .bind(queue)
        .bind(id)
        .fetch_optional(&self.pool)
        .await?;
        Ok(state.map_or(Deleted::NotFound, Deleted::NotHeld))
    }

    async fn custody_switches(&self, broker: &str) -> Result<Vec<(String, String, String)>> {
        sqlx::query_as("select vhost, queue, state from custody_queues where broker = ?")
            .bind(broker)
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
            "insert into custody_queues (broker, vhost, queue, state, changed_at, changed_by) values (?, ?, ?, ?, ?, ?)
             on conflict (broker, vhost, queue) do update set state = excluded.state, changed_at = excluded.changed_at,
             changed_by = excluded.changed_by",
        )
        .bind(broker)
        .bind(vhost)
        .bind(queue)
        .bind(state)
        .bind(at)
        .bind(by)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn custody_counts(&self, broker: &str) -> Result<Vec<Tally>> {
        sqlx::query_as(
            "select vhost, queue, state, null as reason, null as original_queue, null as error,
             count(*) as records, coalesce(sum(size), 0) as bytes, min(received_at) as first_at,
             max(received_at) as last_at
             from custody_messages where broker = ? group by vhost, queue, state",
        )
        .bind(broker)
        .fetch_all(&self.pool)
        .await
    }

    async fn custody_replayed(&self, (broker, vhost, queue): Queue<'_>) -> Result<i64> {
        sqlx::query_scalar(
            "select count(*) from custody_messages m
             where m.broker = ? and m.vhost = ? and m.queue = ? and m.state = 'replayed'
               and m.replayed_at >= coalesce((select q.incarnation_since from queues q join brokers b on b.id = q.broker_id
                                              where b.name = m.broker and q.vhost = m.vhost and q.name = m.queue), 0)",
        )
        .bind(broker)
        .bind(vhost)
        .bind(queue)
        .fetch_one(&self.pool)
        .await
    }

    async fn custody_triage(&self, (broker, vhost, queue): Queue<'_>) -> Result<Vec<Tally>> {
        // One scan of the covering index (in its order: no sort) gives the counts, the sizes and
        // every group; a query per group plus the broker-wide counts read it five times (269 ms
        // at 100,000 records).
        sqlx::query_as(
            "select vhost, queue, state, reason, original_queue, error, count(*) as records,
             coalesce(sum(size), 0) as bytes, min(received_at) as first_at, max(received_at) as last_at
             from custody_messages where broker = ? and vhost = ? and queue = ?
             group by state, reason, original_queue, error",
        )
        .bind(broker)
        .bind(vhost)
        .bind(queue)
        .fetch_all(&self.pool)
        .await
    }

    async fn custody_message(&self, (broker, vhost, queue): Queue<'_>, id: i64) -> Result<Option<StoredMessage>> {
        let sql = format!(
            "select {RECORD_COLUMNS}, {MESSAGE_COLUMNS} from custody_messages
             where broker = ? and vhost = ? and queue = ? and id = ?"
        );
        sqlx::query_as(&sql).bind(broker).bind(vhost).bind(queue).bind(id).fetch_optional(&self.pool).await
    }

    async fn custody_messages(&self, ids: &[i64]) -> Result<Vec<StoredMessage>> {
        let mut out = Vec::with_capacity(ids.len());
        for chunk in ids.chunks(IDS_PER_STATEMENT) {
            let sql = format!(
                "select {RECORD_COLUMNS}, {MESSAGE_COLUMNS} from custody_messages where id in ({}) order by id",
                placeholders(chunk.len())
            );
            let mut query = sqlx::query_as(&sql);
            for id in chunk {
                query = query.bind(id);
            }
            out.extend(query.fetch_all(&self.pool).await?);
        }
        Ok(out)
    }

    async fn custody_records(&self, queue: Queue<'_>, search: &Search, limit: i64) -> Result<Vec<Record>> {
        let (conditions, values) = conditions(queue, search);
        let sql = format!("select {RECORD_COLUMNS} from custody_messages where {conditions} order by id limit ?");
        let mut query = sqlx::query_as(&sql);
        for v in &values {
            query = query.bind(v);
        }
        query.bind(limit).fetch_all(&self.pool).await
    }

    async fn custody_ids(&self, queue: Queue<'_>, search: &Search, (low, high): (i64, i64)) -> Result<Vec<i64>> {
        let (conditions, values) = conditions(queue, search);
        let sql = format!("select id from custody_messages where {conditions} and id between ? and ? order by id");
        let mut query = sqlx::query_scalar(&sql);
        for v in &values {
            query = query.bind(v);
        }
        query.bind(low).bind(high).fetch_all(&self.pool).await
    }

    async fn custody_records_by_id(&self, ids: &[i64]) -> Result<Vec<Record>> {
        let mut out = Vec::with_capacity(ids.len());
        for chunk in ids.chunks(IDS_PER_STATEMENT) {
            let marks = placeholders(chunk.len());
            let sql = format!("select {RECORD_COLUMNS} from custody_messages where id in ({marks}) order by id");
            let mut query = sqlx::query_as(&sql);
            for id in chunk {
                query = query.bind(id);
            }
            out.extend(query.fetch_all(&self.pool).await?);
        }
        Ok(out)
    }

    async fn custody_id_span(&self, (broker, vhost, queue): Queue<'_>) -> Result<Option<(i64, i64)>> {
        let (low, high): (Option<i64>, Option<i64>) = sqlx::query_as(
            "select min(id), max(id) from custody_messages where broker = ? and vhost = ? and queue = ?",
        )
        .bind(broker)
        .bind(vhost)
        .bind(queue)
        .fetch_one(&self.pool)
        .await?;
        Ok(low.zip(high))
    }

    async fn custody_candidates(&self, queue: Queue<'_>, search: &Search, scan: Scan) -> Result<Vec<Candidate>> {
        let (conditions, values) = conditions(queue, search);
        let sql = format!(
            "select {RECORD_COLUMNS}, body, properties_json from custody_messages
             where {conditions} and id between ? and ? order by id"
        );
        let mut query = sqlx::query(&sql);
        for v in &values {
            query = query.bind(v);
        }
        // Read row by row: only what the expression reads is kept of each.
        let mut rows = query.bind(scan.ids.0).bind(scan.ids.1).fetch(&self.pool);
        let (mut out, mut bytes) = (Vec::new(), 0);
        while bytes < scan.max_bytes {
            let Some(row) = rows.next().await.transpose()? else { break };
            let (body, properties): (&[u8], &str) = (row.try_get("body")?, row.try_get("properties_json")?);
            let body = body[..body.len().min(scan.head_bytes)].to_vec();
            let properties = properties.as_bytes()[..properties.len().min(scan.head_bytes)].to_vec();
            bytes += body.len() + properties.len();
            out.push((sqlx::FromRow::from_row(&row)?, body, properties));
        }
        Ok(out)
    }

    async fn recover_claims(&self, survivor: &str) -> Result<u64> {
        let sql = format!(
            "update custody_messages set state = 'held', job = null, claimed_by = null
             where state = 'claimed' and {}",
            dead_replica("custody_messages.claimed_by", "?1", "?2")
        );
        let done = sqlx::query(&sql).bind(survivor).bind(HEARTBEAT_PREFIX).execute(&self.pool).await?;
        Ok(done.rows_affected())
    }

    async fn claim_records(&self, job: &str, replica: &str, ids: &[i64]) -> Result<Vec<i64>> {
        // The state guard makes a record claimable once: SQLite's one writer runs each statement
        // alone, so a second replay of the same records claims none of them.
        let mut got = Vec::new();
        for chunk in ids.chunks(IDS_PER_STATEMENT) {
            let marks = placeholders(chunk.len());
            let sql = format!(
                "update custody_messages set state = 'claimed', job = ?, claimed_by = ?
                 where state = 'held' and id in ({marks})
                 returning id"
            );
            let mut query = sqlx::query_scalar::<_, i64>(&sql).bind(job).bind(replica);
            for id in chunk {
                query = query.bind(id);
            }
            got.extend(query.fetch_all(&self.pool).await?);
        }
        got.sort_unstable();
        Ok(got)
    }

    async fn settle_records(&self, replayed: &[(i64, String)], failed: &[i64], at: i64) -> Result<()> {
        let mut tx = self.pool.begin().await?;
        // One statement per target (most replays have one or a few), not one per record.
        let mut by_target: HashMap<&str, Vec<i64>> = HashMap::new();
        for (record, to) in replayed {
            by_target.entry(to.as_str()).or_default().push(*record);
        }
        for (to, records) in by_target {
            for chunk in records.chunks(IDS_PER_STATEMENT) {
                let marks = placeholders(chunk.len());
                let sql = format!(
                    "update custody_messages set state = 'replayed', replayed_at = ?, replayed_to = ? where id in ({marks})"
                );
                let mut query = sqlx::query(&sql).bind(at).bind(to);
                for id in chunk {
                    query = query.bind(id);
                }
                query.execute(&mut *tx).await?;
            }
        }
        for chunk in failed.chunks(IDS_PER_STATEMENT) {
            let marks = placeholders(chunk.len());
            let sql = format!(
                "update custody_messages set state = 'held', job = null, claimed_by = null where id in ({marks})"
            );
            let mut query = sqlx::query(&sql);
            for id in chunk {
                query = query.bind(id);
            }
            query.execute(&mut *tx).await?;
        }
        tx.commit().await
    }

    async fn unclaim_records(&self, job: &str) -> Result<u64> {
        let done =
            sqlx::query("update custody_messages set state = 'held', job = null, claimed_by = null where job = ? and state = 'claimed'")
                .bind(job)
                .execute(&self.pool)
                .await?;
        Ok(done.rows_affected())
    }

    async fn replay_parts(&self, ids: &[i64]) -> Result<HashMap<i64, (Vec<u8>, Vec<u8>)>> {
        let mut out = HashMap::with_capacity(ids.len());
        for chunk in ids.chunks(IDS_PER_STATEMENT) {
            let marks = placeholders(chunk.len());
            let sql = format!("select id, properties, body from custody_messages where id in ({marks})");
            let mut query = sqlx::query(&sql);
            for id in chunk {
                query = query.bind(id);
            }
            for row in query.fetch_all(&self.pool).await? {
                out.insert(row.try_get(0)?, (row.try_get(1)?, row.try_get(2)?));
            }
        }
        Ok(out)
    }
}

#[async_trait]
impl CustodyWrites for SqliteTx {
    async fn keep_records(&mut self, queue: Queue<'_>, received_at: i64, records: &[NewRecord<'_>]) -> Result<()> {
        insert(&mut self.0, queue, received_at, records).await
    }
}

async fn insert(
    conn: &mut sqlx::SqliteConnection,
    (broker, vhost, queue): Queue<'_>,
    now: i64,
    records: &[NewRecord<'_>],
) -> Result<()> {
    for r in records {
        sqlx::query(
            "insert into custody_messages (broker, vhost, queue, received_at, exchange, routing_key, properties,
             properties_json, body, size, message_id, reason, original_queue, error, redelivered, body_nul,
             fingerprint, error_group)
             values (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14,
                     ?15 and exists (select 1 from custody_messages
                                     where broker = ?1 and vhost = ?2 and queue = ?3 and fingerprint = ?17),
                     ?16, ?17, ?18)",
        )
        .bind(broker)
        .bind(vhost)
        .bind(queue)
        .bind(now)
        .bind(r.exchange)
        .bind(r.routing_key)
        .bind(r.properties)
        .bind(r.properties_json)
        .bind(r.body)
        .bind(r.size)
        .bind(r.message_id)
        .bind(r.reason)
        .bind(r.original_queue)
        .bind(r.error)
        .bind(r.redelivered)
        // LIKE stops at a NUL byte: such a body is also searched whole (`conditions`).
        .bind(r.body.contains(&0))
        .bind(r.fingerprint)
        .bind(r.error_group)
        .execute(&mut *conn)
        .await?;
    }
    Ok(())
}

/// `?, ?, ...`: `n` placeholders for an `in (...)` list.
fn placeholders(n: usize) -> String {
    vec!["?"; n].join(", ")
}

/// The path as SQLite's JSON functions read it: `$."order"."items"[0]."sku"` (public for the
/// fuzz target of web queries, which builds it from every filter it parses).
pub fn json_path(steps: &[PathStep]) -> String {
    let mut out = String::from("$");
    for step in steps {
        match step {
            PathStep::Key(k) => out.push_str(&format!(".\"{k}\"")),
            PathStep::Index(i) => out.push_str(&format!("[{i}]")),
        }
    }
    out
}

/// Whether `c` can be part of a number as SQLite writes one.
fn in_number(c: char) -> bool {
    matches!(c, '0'..='9' | '.' | 'e' | 'E' | '+' | '-')
}

/// The SQL condition (and its values, in order) for a queue's records that `search` matches
/// (its regular expression's literals too): what the browser's filter means
/// (`Filter::matches`), its text search in the body and in every property, headers included,
/// ignoring the case of ASCII letters.
fn conditions((broker, vhost, queue): Queue<'_>, search: &Search) -> (String, Vec<String>) {
    let states = match search.states {
        States::Held => "state = 'held'",
        States::Kept => "state in ('held', 'claimed')",
    };
    let mut conditions = format!("broker = ? and vhost = ? and queue = ? and {states}");
    let mut values: Vec<String> = vec![broker.to_string(), vhost.to_string(), queue.to_string()];
    if let Some(after) = search.after {
        conditions.push_str(&format!(" and id > {after}"));
    }
    if let Some(reason) = &search.reason {
        conditions.push_str(" and reason = ?");
        values.push(reason.clone());
    }
    if let Some(original) = &search.original_queue {
        conditions.push_str(" and original_queue = ?");
        values.push(original.clone());
    }
    if let Some(error) = &search.error {
        conditions.push_str(" and instr(lower(error), ?) > 0");
        values.push(error.to_ascii_lowercase());
    }
    if let Some(group) = &search.error_group {
        conditions.push_str(" and error_group = ?");
        values.push(group.clone());
    }
    if let Some(text) = &search.text {
        // LIKE folds ASCII case as lower() does, without copying each body; it stops at a NUL
        // byte, so a body that may hold one is also searched whole (`body_nul`).
        conditions.push_str(
            " and (cast(body as text) like ? escape '\\' or properties_json like ? escape '\\' \
             or (body_nul is not 0 and instr(lower(cast(body as text)), ?) > 0))",
        );
        let pattern = like_pattern(text);
        values.extend([pattern.clone(), pattern, text.to_ascii_lowercase()]);
    }
    // A header's value as `message::json_text` gives it (json_each gives true as 1).
    const HEADER_TEXT: &str =
        "case h.type when 'true' then 'true' when 'false' then 'false' when 'null' then 'null' else h.value end";
    if let Some(literals) = &search.literals {
        // Every match starts with one of these: rows without any are passed over in SQL, before
        // their bodies are copied out to run the expression (LIKE folds case: more rows, never
        // fewer; it stops at a NUL, so such bodies are always read).
        let looks: Vec<&str> = literals
            .iter()
            .map(|_| "cast(body as text) like ? escape '\\' or properties_json like ? escape '\\'")
            .collect();
        conditions.push_str(&format!(" and ({} or body_nul is not 0)", looks.join(" or ")));
        for literal in literals {
            let pattern = like_pattern(literal);
            values.extend([pattern.clone(), pattern]);
        }
    }
    if let Some(name) = &search.header {
        // A cheap first look at the JSON text passes over most records without parsing them,
        // where it cannot miss: a part that no number's text holds (json_each gives numbers in
        // SQLite's own format) and that JSON writes as it is.
        let part = search.header_part.as_deref();
        if let Some(part) = part.filter(|p| verbatim_in_json(p) && !p.chars().all(in_number)) {
            conditions.push_str(" and properties_json like ? escape '\\'");
            values.push(like_pattern(part));
        }
        conditions.push_str(" and exists (select 1 from json_each(properties_json, '$.headers') h where h.key = ?");
        values.push(name.clone());
        if let Some(part) = part {
            conditions.push_str(&format!(" and instr(lower({HEADER_TEXT}), ?) > 0"));
            values.push(part.to_ascii_lowercase());
        }
        conditions.push(')');
    }
    if let Some(json) = &search.json {
        // A payload that is not JSON has no path (json_type would fail the whole query on it;
        // `case` is evaluated in order, `and` need not be).
        const BODY: &str = "cast(body as text)";
        match &json.steps {
            Some(steps) => {
                let path = json_path(steps);
                match &json.expected {
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
                        values.extend([path.clone(), path.clone(), path, expected.clone()]);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_reads_as_sqlite_writes_it() {
        let key = |k: &str| PathStep::Key(k.to_string());
        let steps = [key("order"), key("items"), PathStep::Index(0), PathStep::Index(2), key("sku")];
        assert_eq!(json_path(&steps), r#"$."order"."items"[0][2]."sku""#);
        assert_eq!(json_path(&[PathStep::Index(3), key("a")]), r#"$[3]."a""#);
    }
}
