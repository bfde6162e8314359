use async_trait::async_trait;
use sqlx::{FromRow, Row};

use super::Sqlite;
use crate::storage::accounts::{Accounts, LiveToken, NewSessionRow, SessionRow, TokenRow, UserRow};
use crate::storage::Result;

/// The condition that keeps at least one enabled admin other than `name` (bound twice).
const NOT_LAST_ADMIN: &str = "(role != 'admin' or disabled != 0
     or exists (select 1 from users other where other.role = 'admin' and other.disabled = 0 and other.name != ?))";

#[async_trait]
impl Accounts for Sqlite {
    async fn insert_user(&self, name: &str, role: &str, password_hash: &str, created_at: i64) -> Result<bool> {
        let added = sqlx::query(
            "insert into users (name, role, password_hash, created_at) values (?, ?, ?, ?) on conflict (name) do nothing",
        )
        .bind(name)
        .bind(role)
        .bind(password_hash)
        .bind(created_at)
        .execute(&self.pool)
        .await?;
        Ok(added.rows_affected() > 0)
    }

    async fn set_password_hash(&self, name: &str, password_hash: &str) -> Result<Option<u64>> {
        let mut tx = self.pool.begin().await?;
        let updated = sqlx::query("update users set password_hash = ? where name = ?")
            .bind(password_hash)
            .bind(name)
            .execute(&mut *tx)
            .await?;
        if updated.rows_affected() == 0 {
            return Ok(None);
        }
        let ended = sqlx::query("delete from sessions where user_name = ?").bind(name).execute(&mut *tx).await?;
        tx.commit().await?;
        Ok(Some(ended.rows_affected()))
    }

    async fn remove_user(&self, name: &str) -> Result<bool> {
        // Sessions go by cascade.
        let sql = format!("delete from users where name = ? and {NOT_LAST_ADMIN}");
        Ok(sqlx::query(&sql).bind(name).bind(name).execute(&self.pool).await?.rows_affected() > 0)
    }

    async fn set_role(&self, name: &str, role: &str) -> Result<bool> {
        let sql = format!("update users set role = ? where name = ? and (? = 'admin' or {NOT_LAST_ADMIN})");
        let updated = sqlx::query(&sql).bind(role).bind(name).bind(role).bind(name).execute(&self.pool).await?;
        Ok(updated.rows_affected() > 0)
    }

    async fn set_disabled(&self, name: &str, disabled: bool) -> Result<bool> {
        let mut tx = self.pool.begin().await?;
        let sql = format!("update users set disabled = ? where name = ? and (? = 0 or {NOT_LAST_ADMIN})");
        let updated = sqlx::query(&sql).bind(disabled).bind(name).bind(disabled).bind(name).execute(&mut *tx).await?;
        if updated.rows_affected() == 0 {
            return Ok(false);
        }
        if disabled {
            sqlx::query("delete from sessions where user_name = ?").bind(name).execute(&mut *tx).await?;
        }
        tx.commit().await?;
        Ok(true)
    }

    async fn user(&self, name: &str) -> Result<Option<UserRow>> {
        let row = sqlx::query("select name, role, created_at, disabled from users where name = ?")
            .bind(name)
            .fetch_optional(&self.pool)
            .await?;
        row.as_ref().map(UserRow::from_row).transpose()
    }

    async fn user_with_password(&self, name: &str) -> Result<Option<(UserRow, String)>> {
        let row = sqlx::query("select name, role, created_at, disabled, password_hash from users where name = ?")
            .bind(name)
            .fetch_optional(&self.pool)
            .await?;
        row.map(|row| Ok((UserRow::from_row(&row)?, row.try_get("password_hash")?))).transpose()
    }

    async fn users(&self) -> Result<Vec<UserRow>> {
        let rows = sqlx::query("select name, role, created_at, disabled from users order by name")
            .fetch_all(&self.pool)
            .await?;
        rows.iter().map(UserRow::from_row).collect()
    }

    async fn count_users(&self) -> Result<i64> {
        sqlx::query_scalar("select count(*) from users").fetch_one(&self.pool).await
    }

    async fn insert_session(&self, session: NewSessionRow<'_>) -> Result<()> {
        sqlx::query(
            "insert into sessions (id_hash, user_name, csrf_token, created_at, expires_at, last_seen_at)
             values (?, ?, ?, ?, ?, ?)",
        )
        .bind(session.id_hash)
        .bind(session.user_name)
        .bind(session.csrf_token)
        .bind(session.created_at)
        .bind(session.expires_at)
        .bind(session.created_at)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn session(&self, id_hash: &str) -> Result<Option<SessionRow>> {
        let row = sqlx::query(
            "select s.user_name, s.csrf_token, s.expires_at, s.last_seen_at, u.role, u.disabled
             from sessions s join users u on u.name = s.user_name
             where s.id_hash = ?",
        )
        .bind(id_hash)
        .fetch_optional(&self.pool)
        .await?;
        row.as_ref().map(SessionRow::from_row).transpose()
    }

    async fn touch_session(&self, id_hash: &str, now: i64) -> Result<()> {
        sqlx::query("update sessions set last_seen_at = ? where id_hash = ?")
            .bind(now)
            .bind(id_hash)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn delete_session(&self, id_hash: &str) -> Result<bool> {
        let ended = sqlx::query("delete from sessions where id_hash = ?").bind(id_hash).execute(&self.pool).await?;
        Ok(ended.rows_affected() > 0)
    }

    async fn delete_user_sessions(&self, name: &str) -> Result<u64> {
        let ended = sqlx::query("delete from sessions where user_name = ?").bind(name).execute(&self.pool).await?;
        Ok(ended.rows_affected())
    }

    async fn purge_sessions(&self, expired_by: i64, idle_since: i64) -> Result<u64> {
        let purged = sqlx::query("delete from sessions where expires_at <= ? or last_seen_at <= ?")
            .bind(expired_by)
            .bind(idle_since)
            .execute(&self.pool)
            .await?;
        Ok(purged.rows_affected())
    }

    async fn insert_token(
        &self,
        name: &str,
        role: &str,
        token_hash: &str,
        created_by: &str,
        created_at: i64,
    ) -> Result<Option<i64>> {
        let inserted = sqlx::query(
            "insert into api_tokens (name, role, token_hash, created_by, created_at) values (?, ?, ?, ?, ?)",
        )
        .bind(name)
        .bind(role)
        .bind(token_hash)
        .bind(created_by)
        .bind(created_at)
        .execute(&self.pool)
        .await;
        match inserted {
            Ok(done) => Ok(Some(done.last_insert_rowid())),
            Err(sqlx::Error::Database(e)) if e.is_unique_violation() => Ok(None),
            Err(e) => Err(e),
        }
    }

    async fn live_token(&self, token_hash: &str) -> Result<Option<LiveToken>> {
        let row =
            sqlx::query("select id, name, role, last_used_at from api_tokens where token_hash = ? and revoked = 0")
                .bind(token_hash)
                .fetch_optional(&self.pool)
                .await?;
        row.as_ref().map(LiveToken::from_row).transpose()
    }

    async fn touch_token(&self, id: i64, now: i64) -> Result<()> {
        sqlx::query("update api_tokens set last_used_at = ? where id = ?")
            .bind(now)
            .bind(id)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn revoke_token(&self, id: i64) -> Result<bool> {
        let revoked = sqlx::query("update api_tokens set revoked = 1 where id = ? and revoked = 0")
            .bind(id)
            .execute(&self.pool)
            .await?;
        Ok(revoked.rows_affected() > 0)
    }

    async fn tokens(&self) -> Result<Vec<TokenRow>> {
        let rows = sqlx::query(
            "select id, name, role, created_by, created_at, last_used_at, revoked from api_tokens order by id",
        )
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(TokenRow::from_row).collect()
    }
}
