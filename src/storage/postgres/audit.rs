use async_trait::async_trait;
use sqlx::postgres::PgRow;
use sqlx::Row;

use super::Postgres;
use crate::storage::audit::{json, AuditLog, FailedLogin, FailedLoginRows, Kind, NewEntry, Record, Span};
use crate::storage::Result;

const COLUMNS: &str = "id, kind, at, actor, broker, vhost, queue, action, request, outcome, moved, failed, \
     message_ids, detail, source, attempts, throttled, last_at";

fn record(r: &PgRow) -> Result<Record> {
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
impl AuditLog for Postgres {
    async fn insert_entry(&self, e: NewEntry<'_>) -> Result<i64> {
        // In a transaction of its own, so the id is handed on only after the commit returned.
        let mut tx = self.pool.begin().await?;
        let id = sqlx::query_scalar(
            "insert into audit_log (at, kind, actor, source, broker, vhost, queue, action, request, outcome, detail, run_by)
             values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) returning id",
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
        .fetch_one(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(id)
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
                 exists (select 1 from audit_log where bucket = $1 and source = $2 and actor = $3) as own,
                 exists (select 1 from audit_log where bucket = $1 and source = $2 and actor = $4) as other_names,
                 (select count(*) from audit_log where bucket = $1 and source = $2 and actor != $4) as names,
                 (select count(*) from audit_log where bucket = $1) as rows",
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
             values ($1, $1, $2, 'login', $3, $4, '', '', '', 'login', $5, 'failed', $6, $7)
             on conflict (bucket, source, actor) where bucket is not null
             do update set attempts = audit_log.attempts + 1, throttled = audit_log.throttled + excluded.throttled,
                 last_at = greatest(audit_log.last_at, excluded.last_at)",
        )
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
        let sql = format!("select {COLUMNS} from audit_log where id = $1");
        sqlx::query(&sql).bind(id).fetch_optional(&self.pool).await?.as_ref().map(record).transpose()
    }

    async fn entries(&self, span: Span) -> Result<Vec<Record>> {
        let order = if span.ascending { "asc" } else { "desc" };
        let sql = format!(
            "select {COLUMNS} from audit_log where id < $1 and id > $2 and ($3::text is null or kind = $3)
             order by id {order} limit $4"
        );
        sqlx::query(&sql)
            .bind(span.below)
            .bind(span.above)
            .bind(span.kind.map(Kind::as_str))
            .bind(span.limit)
            .fetch_all(&self.pool)
            .await?
            .iter()
            .map(record)
            .collect()
    }

    async fn any_entry_beyond(&self, kind: Option<Kind>, id: i64, above: bool) -> Result<bool> {
        let comparison = if above { ">" } else { "<" };
        let sql = format!(
            "select exists (select 1 from audit_log where id {comparison} $1 and ($2::text is null or kind = $2))"
        );
        sqlx::query_scalar(&sql).bind(id).bind(kind.map(Kind::as_str)).fetch_one(&self.pool).await
    }
}
