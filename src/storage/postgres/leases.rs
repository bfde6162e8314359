use std::time::Duration;

use async_trait::async_trait;

use super::{PgTx, Postgres};
use crate::storage::leases::{Fence, Held, LeaseRow, Leases};
use crate::storage::Result;

/// Now in unix milliseconds by PostgreSQL's clock: `clock_timestamp()`, not `now()`, which is
/// the start of the transaction.
pub(super) const NOW_MS: &str = "(extract(epoch from clock_timestamp()) * 1000)::bigint";

/// A condition that holds when the replica named in `column` is dead, for recovery
/// (`Fates::mark_interrupted`, `Custody::recover_claims`): none is named (rows from before
/// replicas), or it is not the survivor (parameter `survivor`) and has no heartbeat lease
/// (named parameter `prefix` and its id) unexpired by PostgreSQL's clock. Read in the same
/// statement as the rows it guards: a replica alive at that moment keeps its rows.
pub(super) fn dead_replica(column: &str, survivor: &str, prefix: &str) -> String {
    format!(
        "({column} is null or ({column} <> {survivor} and not exists (select 1 from leases
             where leases.name = {prefix} || {column} and leases.expires_at > {NOW_MS})))"
    )
}

#[async_trait]
impl Leases for Postgres {
    async fn take_lease(&self, name: &str, holder: &str, ttl: Duration) -> Result<Option<Held>> {
        // The conflict branch locks the row and re-reads it: two replicas taking an expired
        // lease at once are one after the other, and the second sees the first's expiry.
        let sql = format!(
            "insert into leases (name, holder, epoch, expires_at) values ($1, $2, 1, {NOW_MS} + $3)
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
        sqlx::query(&format!("update leases set expires_at = {NOW_MS} where name = $1 and holder = $2 and epoch = $3"))
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
impl Fence for PgTx {
    async fn fence(&mut self, held: &Held) -> Result<bool> {
        fence_in(&mut self.0, held).await
    }
}

/// `Fence::fence` inside any of this backend's transactions (the poll's write has its own).
pub(super) async fn fence_in(conn: &mut sqlx::PgConnection, held: &Held) -> Result<bool> {
    // For share: a takeover's update of the row waits until this transaction ends, so the
    // writes it guards commit before the next epoch begins, or not at all.
    let held: Option<i32> =
        sqlx::query_scalar("select 1 from leases where name = $1 and holder = $2 and epoch = $3 for share")
            .bind(&held.name)
            .bind(&held.holder)
            .bind(held.epoch)
            .fetch_optional(conn)
            .await?;
    Ok(held.is_some())
}
