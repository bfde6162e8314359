use async_trait::async_trait;
use sqlx::sqlite::SqliteRow;
use sqlx::Row;

use super::Sqlite;
use crate::storage::audit::{json, AuditLog, FailedLogin, FailedLoginRows, Kind, NewEntry, Record, Span};
use crate::storage::Result;

const COLUMNS: &str = "id, kind, at, actor, broker, vhost, queue, action, request, outcome, moved, failed, \
     message_ids, detail, source, attempts, throttled, last_at";

fn record(r: &SqliteRow) -> Result<Record> {
    let kind: String = r.try_get("kind")?;
    Ok(Record {
        id: r.try_get("id")?,
        kind: Kind::parse(&kind).ok_or_else(|| sqlx::Error::Decode(format!("audit kind {kind:?}").into()))?,
        at: r.try_get("at")?,
        actor: r.try_get("actor")?,
        broker: r.try_get("broker")?,
        vhost: r.try_get("vhost")?,
        queue: r.try_get("queue")?,
        action: r.try_get("action")?,
        request: json(r.try_get("request")?),
        outcome: r.try_get("outcome")?,
        moved: r.try_get("moved")?,
        failed: r.try_get("failed")?,
        message_ids: json(r.try_get("message_ids")?),
        detail: r.try_get("detail")?,
        source: r.try_get("source")?,
        attempts: r.try_get("attempts")?,
        throttled: r.try_get("throttled")?,
        last_at: r.try_get("last_at")?,
    })
}

#[async_trait]
impl AuditLog for Sqlite {
    async fn insert_entry(&self, e: NewEntry<'_>) -> Result<i64> {
        // Not `returning id`: SQLite hands the returned row over before the statement ends, so
        // the id could come before a commit that then failed.
        let done = sqlx::query(
            "insert into audit_log (at, kind, actor, source, broker, vhost, queue, action, request, outcome, detail, run_by)
             values (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        )
        .bind(e.at)
        .bind(e.kind.as_str())
        .bind(e.actor)
        .bind(e.source)
        .bind(e.broker)
        .bind(e.vhost)
        .bind(e.queue)
        .bind(e.action)
        .bind(e.request)
        .bind(e.outcome)
        .bind(e.detail)
        .bind(e.run_by)
        .execute(&self.pool)
        .await?;
        Ok(done.last_insert_rowid())
    }

    async fn failed_login_rows(
        &self,
        bucket: i64,
        source: &str,
        name: &str,
        other_names: &str,
    ) -> Result<FailedLoginRows> {
        let row = sqlx::query(
            "select
                 exists (select 1 from audit_log where bucket = ?1 and source = ?2 and actor = ?3) as own,
                 exists (select 1 from audit_log where bucket = ?1 and source = ?2 and actor = ?4) as other_names,
                 (select count(*) from audit_log where bucket = ?1 and source = ?2 and actor != ?4) as names,
                 (select count(*) from audit_log where bucket = ?1) as rows",
        )
        .bind(bucket)
        .bind(source)
        .bind(name)
        .bind(other_names)
        .fetch_one(&self.pool)
        .await?;
        Ok(FailedLoginRows {
            own: row.try_get("own")?,
            other_names: row.try_get("other_names")?,
            names: row.try_get("names")?,
            rows: row.try_get("rows")?,
        })
    }

    async fn count_failed_login(&self, login: FailedLogin<'_>) -> Result<()> {
        sqlx::query(
            "insert into audit_log
                 (at, last_at, bucket, kind, actor, source, broker, vhost, queue, action, request, outcome, detail, throttled)
             values (?, ?, ?, 'login', ?, ?, '', '', '', 'login', ?, 'failed', ?, ?)
             on conflict (bucket, source, actor) where bucket is not null
             do update set attempts = attempts + 1, throttled = throttled + excluded.throttled,
                 last_at = max(last_at, excluded.last_at)",
        )
        .bind(login.at)
        .bind(login.at)
        .bind(login.bucket)
        .bind(login.name)
        .bind(login.source)
        .bind(login.request)
        .bind(login.detail)
        .bind(i64::from(login.throttled))
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn entry(&self, id: i64) -> Result<Option<Record>> {
        let sql = format!("select {COLUMNS} from audit_log where id = ?");
        sqlx::query(&sql).bind(id).fetch_optional(&self.pool).await?.as_ref().map(record).transpose()
    }

    async fn entries(&self, span: Span) -> Result<Vec<Record>> {
        let kind = if span.kind.is_some() { " and kind = ?" } else { "" };
        let order = if span.ascending { "asc" } else { "desc" };
        let sql = format!("select {COLUMNS} from audit_log where id < ? and id > ?{kind} order by id {order} limit ?");
        let mut query = sqlx::query(&sql).bind(span.below).bind(span.above);
        if let Some(k) = span.kind {
            query = query.bind(k.as_str());
        }
        query.bind(span.limit).fetch_all(&self.pool).await?.iter().map(record).collect()
    }

    async fn any_entry_beyond(&self, kind: Option<Kind>, id: i64, above: bool) -> Result<bool> {
        let comparison = if above { ">" } else { "<" };
        let kind_is = if kind.is_some() { " and kind = ?" } else { "" };
        let sql = format!("select exists (select 1 from audit_log where id {comparison} ?{kind_is})");
        let mut query = sqlx::query_scalar::<_, bool>(&sql).bind(id);
        if let Some(k) = kind {
            query = query.bind(k.as_str());
        }
        query.fetch_one(&self.pool).await
    }
}
