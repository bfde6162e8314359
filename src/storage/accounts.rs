//! Accounts as stored: users with their password hashes, login sessions and API tokens. Roles
//! are kept as their names (`admin`, `operator`, `viewer`); `auth` reads them and decides.

use async_trait::async_trait;

use super::Result;

/// A user's row, without the password hash.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct UserRow {
    pub name: String,
    pub role: String,
    /// Unix seconds.
    pub created_at: i64,
    pub disabled: bool,
}

/// A session to store: only the SHA-256 of its cookie value is kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewSessionRow<'a> {
    pub id_hash: &'a str,
    pub user_name: &'a str,
    pub csrf_token: &'a str,
    pub created_at: i64,
    pub expires_at: i64,
}

/// A session found by its id's hash, with its user's current role and state.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct SessionRow {
    pub user_name: String,
    pub csrf_token: String,
    pub expires_at: i64,
    pub last_seen_at: i64,
    pub role: String,
    pub disabled: bool,
}

/// A live token found by its hash.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct LiveToken {
    pub id: i64,
    pub name: String,
    pub role: String,
    pub last_used_at: Option<i64>,
}

/// A token as listed, live or revoked.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct TokenRow {
    pub id: i64,
    pub name: String,
    pub role: String,
    pub created_by: String,
    pub created_at: i64,
    pub last_used_at: Option<i64>,
    pub revoked: bool,
}

/// Users, sessions and tokens. The changes that could lock everyone out (removing, demoting or
/// disabling a user) leave at least one enabled admin: they change nothing and answer `false`
/// when the user is missing or is the last enabled admin.
#[async_trait]
pub trait Accounts {
    /// `false` if the name is taken.
    async fn insert_user(&self, name: &str, role: &str, password_hash: &str, created_at: i64) -> Result<bool>;
    /// Replaces the hash and deletes the user's sessions, in one transaction: how many sessions
    /// it ended, or `None` for no such user.
    async fn set_password_hash(&self, name: &str, password_hash: &str) -> Result<Option<u64>>;
    /// Deletes the user and their sessions.
    async fn remove_user(&self, name: &str) -> Result<bool>;
    async fn set_role(&self, name: &str, role: &str) -> Result<bool>;
    /// Disabling also deletes the user's sessions, in the same transaction.
    async fn set_disabled(&self, name: &str, disabled: bool) -> Result<bool>;
    async fn user(&self, name: &str) -> Result<Option<UserRow>>;
    /// The user and their password hash (PHC string), for a login.
    async fn user_with_password(&self, name: &str) -> Result<Option<(UserRow, String)>>;
    /// All users by name.
    async fn users(&self) -> Result<Vec<UserRow>>;
    async fn count_users(&self) -> Result<i64>;

    async fn insert_session(&self, session: NewSessionRow<'_>) -> Result<()>;
    async fn session(&self, id_hash: &str) -> Result<Option<SessionRow>>;
    /// Sets `last_seen_at`.
    async fn touch_session(&self, id_hash: &str, now: i64) -> Result<()>;
    /// Whether there was one.
    async fn delete_session(&self, id_hash: &str) -> Result<bool>;
    /// How many there were.
    async fn delete_user_sessions(&self, name: &str) -> Result<u64>;
    /// Deletes sessions that expire by `expired_by` or were last seen by `idle_since`: how many.
    async fn purge_sessions(&self, expired_by: i64, idle_since: i64) -> Result<u64>;

    /// The new token's id, or `None` if a live token has that name.
    async fn insert_token(
        &self,
        name: &str,
        role: &str,
        token_hash: &str,
        created_by: &str,
        created_at: i64,
    ) -> Result<Option<i64>>;
    async fn live_token(&self, token_hash: &str) -> Result<Option<LiveToken>>;
    async fn touch_token(&self, id: i64, now: i64) -> Result<()>;
    /// Whether a live token had that id.
    async fn revoke_token(&self, id: i64) -> Result<bool>;
    /// Oldest first.
    async fn tokens(&self) -> Result<Vec<TokenRow>>;
}
