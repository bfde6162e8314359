use std::time::Duration;

use async_trait::async_trait;

use super::Sqlite;
use crate::storage::logins::{Decide, Logins};
use crate::storage::Result;

#[async_trait]
impl Logins for Sqlite {
    async fn attempt_login(
        &self,
        keys: &[&str],
        now: i64,
        since: i64,
        decide: Decide<'_>,
    ) -> Result<std::result::Result<(), Duration>> {
        let mut tx = self.pool.begin().await?;
        // A write first: it takes SQLite's one write lock for the whole transaction, so no other
        // attempt reads between this one's check and its count (a read first would let two
        // attempts read the same count, and the second's write then fails as busy).
        sqlx::query("delete from login_failures where at < ?").bind(since).execute(&mut *tx).await?;
        let mut failures = Vec::with_capacity(keys.len());
        for key in keys {
            let at: Vec<i64> = sqlx::query_scalar("select at from login_failures where key = ? order by at")
                .bind(key)
                .fetch_all(&mut *tx)
                .await?;
            failures.push(at);
        }
        let decided = decide(&failures);
        if decided.is_ok() {
            for key in keys {
                sqlx::query("insert into login_failures (key, at) values (?, ?)")
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
        sqlx::query("delete from login_failures where key = ?").bind(clear).execute(&mut *tx).await?;
        sqlx::query(
            "delete from login_failures where rowid =
                 (select rowid from login_failures where key = ? and at = ? limit 1)",
        )
        .bind(take_back)
        .bind(counted_at)
        .execute(&mut *tx)
        .await?;
        tx.commit().await
    }
}
