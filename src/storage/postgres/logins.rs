use std::time::Duration;

use async_trait::async_trait;

use super::Postgres;
use crate::storage::logins::{Decide, Logins};
use crate::storage::Result;

#[async_trait]
impl Logins for Postgres {
    async fn attempt_login(
        &self,
        keys: &[&str],
        now: i64,
        since: i64,
        decide: Decide<'_>,
    ) -> Result<std::result::Result<(), Duration>> {
        let mut tx = self.pool.begin().await?;
        // Share row exclusive conflicts with itself: one attempt at a time, on every replica,
        // from its check to its count (measured: without it, twenty concurrent guesses got more
        // than the five free ones through). Logins are rare; reads of other tables go on.
        sqlx::query("lock table login_failures in share row exclusive mode").execute(&mut *tx).await?;
        sqlx::query("delete from login_failures where at < $1").bind(since).execute(&mut *tx).await?;
        let mut failures = Vec::with_capacity(keys.len());
        for key in keys {
            let at: Vec<i64> = sqlx::query_scalar("select at from login_failures where key = $1 order by at")
                .bind(key)
                .fetch_all(&mut *tx)
                .await?;
            failures.push(at);
        }
        let decided = decide(&failures);
        if decided.is_ok() {
            for key in keys {
                sqlx::query("insert into login_failures (key, at) values ($1, $2)")
                    .bind(key)
                    .bind(now)
                    .execute(&mut *tx)
                    .await?;
            }
        }
        tx.commit().await?;
        Ok(decided)
    }

    async fn login_succeeded(&self, clear: &str, take_back: &str, counted_at: i64) -> Result<()> {
        let mut tx = self.pool.begin().await?;
        sqlx::query("delete from login_failures where key = $1").bind(clear).execute(&mut *tx).await?;
        sqlx::query(
            "delete from login_failures where ctid =
                 (select ctid from login_failures where key = $1 and at = $2 limit 1)",
        )
        .bind(take_back)
        .bind(counted_at)
        .execute(&mut *tx)
        .await?;
        tx.commit().await
    }
}
