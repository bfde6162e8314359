use std::time::Duration;

use async_trait::async_trait;

use super::{Sqlite, SqliteTx};
use crate::storage::leases::{Fence, Held, LeaseRow, Leases};
use crate::storage::Result;

/// Now in unix milliseconds by SQLite's clock (`julianday` has sub-second precision on every
/// version sqlx bundles; `unixepoch('subsec')` needs 3.42).
pub(super) const NOW_MS: &str = "cast(round((julianday('now') - 2440587.5) * 86400000.0) as integer)";

/// A condition that holds when the replica named in `column` is dead, for recovery
/// (`Fates::mark_interrupted`, `Custody::recover_claims`): none is named (rows from before
/// replicas), or it is not the survivor (parameter `survivor`) and has no heartbeat lease
/// (named parameter `prefix` and its id) unexpired by SQLite's clock. Read in the same
/// statement as the rows it guards: a replica alive at that moment keeps its rows.
pub(super) fn dead_replica(column: &str, survivor: &str, prefix: &str) -> String {
    format!(
        "({column} is null or ({column} <> {survivor} and not exists (select 1 from leases
             where leases.name = {prefix} || {column} and leases.expires_at > {NOW_MS})))"
    )
}

#[async_trait]
impl Leases for Sqlite {
    async fn take_lease(&self, name: &str, holder: &str, ttl: Duration) -> Result<Option<Held>> {
        let sql = format!(
            "insert into leases (name, holder, epoch, expires_at) values (?1, ?2, 1, {NOW_MS} + ?3)
             on conflict (name) do update set
                 epoch = case when leases.holder = excluded.holder then leases.epoch else leases.epoch + 1 end,
                 holder = excluded.holder,
                 expires_at = excluded.expires_at
             where leases.holder = excluded.holder or leases.expires_at <= {NOW_MS}
             returning epoch, expires_at"
        );
        let taken: Option<(i64, i64)> = sqlx::query_as(&sql)
            .bind(name)
            .bind(holder)
            .bind(ttl.as_millis() as i64)
            .fetch_optional(&self.pool)
            .await?;
        Ok(taken.map(|(epoch, expires_at)| Held { name: name.into(), holder: holder.into(), epoch, expires_at }))
    }

    async fn release_lease(&self, held: &Held) -> Result<()> {
        sqlx::query(&format!("update leases set expires_at = {NOW_MS} where name = ? and holder = ? and epoch = ?"))
            .bind(&held.name)
            .bind(&held.holder)
            .bind(held.epoch)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn leases(&self) -> Result<Vec<LeaseRow>> {
        sqlx::query_as("select name, holder, epoch, expires_at from leases order by name").fetch_all(&self.pool).await
    }

    async fn database_now(&self) -> Result<i64> {
        sqlx::query_scalar(&format!("select {NOW_MS}")).fetch_one(&self.pool).await
    }
}

#[async_trait]
impl Fence for SqliteTx {
    async fn fence(&mut self, held: &Held) -> Result<bool> {
        fence_in(&mut self.0, held).await
    }
}

/// `Fence::fence` inside any of this backend's transactions (the poll's write has its own).
pub(super) async fn fence_in(conn: &mut sqlx::SqliteConnection, held: &Held) -> Result<bool> {
    // A write that changes nothing: it takes SQLite's one write lock for the rest of the
    // transaction, so no takeover commits between this check and the writes it guards.
    let done = sqlx::query("update leases set epoch = epoch where name = ? and holder = ? and epoch = ?")
        .bind(&held.name)
        .bind(&held.holder)
        .bind(held.epoch)
        .execute(conn)
        .await?;
    Ok(done.rows_affected() == 1)
}
