use async_trait::async_trait;
use sqlx::{FromRow, Postgres as Pg, Row, Transaction};

use super::Postgres;
use crate::storage::accounts::{Accounts, LiveToken, NewSessionRow, SessionRow, TokenRow, UserRow};
use crate::storage::Result;

/// The condition that keeps at least one enabled admin other than `name` (`$2`).
const NOT_LAST_ADMIN: &str = "(role != 'admin' or disabled
     or exists (select 1 from users other where other.role = 'admin' and not other.disabled and other.name != $2))";

/// A transaction in which no other transaction changes `users` until it ends, so that the
/// last-admin check and the change it guards are one step (two replicas each demoting one of
/// the last two admins would otherwise both pass it). Reads go on.
async fn users_locked(pool: &sqlx::PgPool) -> Result<Transaction<'static, Pg>> {
    let mut tx = pool.begin().await?;
    sqlx::query("lock table users in share row exclusive mode").execute(&mut *tx).await?;
    Ok(tx)
}

#[async_trait]
impl Accounts for Postgres {
    async fn insert_user(&self, name: &str, role: &str, password_hash: &str, created_at: i64) -> Result<bool> {
        let added = sqlx::query(
            "insert into users (name, role, password_hash, created_at) values ($1, $2, $3, $4)
             on conflict (name) do nothing",
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
        let updated = sqlx::query("update users set password_hash = $1 where name = $2")
            .bind(password_hash)
            .bind(name)
            .execute(&mut *tx)
            .await?;
        if updated.rows_affected() == 0 {
            return Ok(None);
        }
        let ended = sqlx::query("delete from sessions where user_name = $1").bind(name).execute(&mut *tx).await?;
        tx.commit().await?;
        Ok(Some(ended.rows_affected()))
    }

    async fn remove_user(&self, name: &str) -> Result<bool> {
        let mut tx = users_locked(&self.pool).await?;
        // Sessions go by cascade.
        let sql = format!("delete from users where name = $1 and {NOT_LAST_ADMIN}");
        let removed = sqlx::query(&sql).bind(name).bind(name).execute(&mut *tx).await?.rows_affected() > 0;
        tx.commit().await?;
        Ok(removed)
    }

    async fn set_role(&self, name: &str, role: &str) -> Result<bool> {
        let mut tx = users_locked(&self.pool).await?;
        let sql = format!("update users set role = $3 where name = $1 and ($3 = 'admin' or {NOT_LAST_ADMIN})");
        let updated = sqlx::query(&sql).bind(name).bind(name).bind(role).execute(&mut *tx).await?.rows_affected() > 0;
        tx.commit().await?;
        Ok(updated)
    }

    async fn set_disabled(&self, name: &str, disabled: bool) -> Result<bool> {
        let mut tx = users_locked(&self.pool).await?;
        let sql = format!("update users set disabled = $3 where name = $1 and (not $3 or {NOT_LAST_ADMIN})");
        let updated = sqlx::query(&sql).bind(name).bind(name).bind(disabled).execute(&mut *tx).await?;
        if updated.rows_affected() == 0 {
            return Ok(false);
        }
        if disabled {
            sqlx::query("delete from sessions where user_name = $1").bind(name).execute(&mut *tx).await?;
        }
        tx.commit().await?;
        Ok(true)
    }

    async fn user(&self, name: &str) -> Result<Option<UserRow>> {
        let row = sqlx::query("select name, role, created_at, disabled from users where name = $1")
            .bind(name)
            .fetch_optional(&self.pool)
            .await?;
        row.as_ref().map(UserRow::from_row).transpose()
    }

    async fn user_with_password(&self, name: &str) -> Result<Option<(UserRow, String)>> {
        let row = sqlx::query("select name, role, created_at, disabled, password_hash from users where name = $1")
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
             values ($1, $2, $3, $4, $5, $4)",
        )
        .bind(session.id_hash)
        .bind(session.user_name)
        .bind(session.csrf_token)
        .bind(session.created_at)
        .bind(session.expires_at)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn session(&self, id_hash: &str) -> Result<Option<SessionRow>> {
        let row = sqlx::query(
            "select s.user_name, s.csrf_token, s.expires_at, s.last_seen_at, u.role, u.disabled
             from sessions s join users u on u.name = s.user_name
             where s.id_hash = $1",
        )
        .bind(id_hash)
        .fetch_optional(&self.pool)
        .await?;
        row.as_ref().map(SessionRow::from_row).transpose()
    }

    async fn touch_session(&self, id_hash: &str, now: i64) -> Result<()> {
        sqlx::query("update sessions set last_seen_at = $1 where id_hash = $2")
            .bind(now)
            .bind(id_hash)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn delete_session(&self, id_hash: &str) -> Result<bool> {
        let ended = sqlx::query("delete from sessions where id_hash = $1").bind(id_hash).execute(&self.pool).await?;
        Ok(ended.rows_affected() > 0)
    }

    async fn delete_user_sessions(&self, name: &str) -> Result<u64> {
        let ended = sqlx::query("delete from sessions where user_name = $1").bind(name).execute(&self.pool).await?;
        Ok(ended.rows_affected())
    }

    async fn purge_sessions(&self, expired_by: i64, idle_since: i64) -> Result<u64> {
        let purged = sqlx::query("delete from sessions where expires_at <= $1 or last_seen_at <= $2")
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
        let inserted = sqlx::query_scalar(
            "insert into api_tokens (name, role, token_hash, created_by, created_at) values ($1, $2, $3, $4, $5)
             returning id",
        )
        .bind(name)
        .bind(role)
        .bind(token_hash)
        .bind(created_by)
        .bind(created_at)
        .fetch_one(&self.pool)
        .await;
        match inserted {
            Ok(id) => Ok(Some(id)),
            Err(sqlx::Error::Database(e)) if e.is_unique_violation() => Ok(None),
            Err(e) => Err(e),
        }
    }

    async fn live_token(&self, token_hash: &str) -> Result<Option<LiveToken>> {
        let row =
            sqlx::query("select id, name, role, last_used_at from api_tokens where token_hash = $1 and not revoked")
                .bind(token_hash)
                .fetch_optional(&self.pool)
                .await?;
        row.as_ref().map(LiveToken::from_row).transpose()
    }

    async fn touch_token(&self, id: i64, now: i64) -> Result<()> {
        sqlx::query("update api_tokens set last_used_at = $1 where id = $2")
            .bind(now)
            .bind(id)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn revoke_token(&self, id: i64) -> Result<bool> {
        let revoked = sqlx::query("update api_tokens set revoked = true where id = $1 and not revoked")
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
