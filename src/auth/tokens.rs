//! API tokens for scripts: `wrn_` and 32 random bytes in base64url (47 characters), shown once
//! when created and stored as SHA-256. A token acts with its own role, sent as
//! `Authorization: Bearer wrn_...`. The prefix lets secret scanners and people recognise one.

use std::fmt;

use axum::http::{header, HeaderMap};
use serde::Serialize;

use super::{check_name, is_secret_shaped, random_secret, secret_hash, AuthError, How, Principal, Role};
use crate::storage::Store;

pub const TOKEN_PREFIX: &str = "wrn_";
/// `last_used_at` is written at most this often.
const LAST_USED_EVERY_SECS: i64 = 60;

/// A token just created: `token` is shown to its creator once and kept nowhere.
pub struct NewToken {
    pub id: i64,
    pub token: String,
}

impl fmt::Debug for NewToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NewToken").field("id", &self.id).field("token", &"***").finish()
    }
}

/// A token as the admin pages list it: never the token itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct TokenInfo {
    pub id: i64,
    pub name: String,
    pub role: Role,
    pub created_by: String,
    /// Unix seconds, like `last_used_at` (to within a minute).
    #[serde(flatten, serialize_with = "crate::times::created_at")]
    #[schema(schema_with = crate::times::schema::created_at)]
    pub created_at: i64,
    #[serde(flatten, serialize_with = "crate::times::last_used_at")]
    #[schema(schema_with = crate::times::schema::last_used_at)]
    pub last_used_at: Option<i64>,
    pub revoked: bool,
}

/// Creates a token named `name` (unique among live tokens; same rules as user names) with
/// `role`, on behalf of `created_by` (the creator's audit actor).
pub async fn create_token(
    store: &Store,
    name: &str,
    role: Role,
    created_by: &str,
    now: i64,
) -> Result<NewToken, AuthError> {
    check_name(name)?;
    let token = format!("{TOKEN_PREFIX}{}", random_secret());
    match store.insert_token(name, role.as_str(), &secret_hash(&token), created_by, now).await? {
        Some(id) => Ok(NewToken { id, token }),
        None => Err(AuthError::TokenExists(name.to_string())),
    }
}

/// The principal a presented token stands for, if it is live; records when it was last used.
pub async fn token(store: &Store, presented: &str, now: i64) -> Result<Option<Principal>, AuthError> {
    if !presented.strip_prefix(TOKEN_PREFIX).is_some_and(is_secret_shaped) {
        return Ok(None);
    }
    let Some(live) = store.live_token(&secret_hash(presented)).await? else { return Ok(None) };
    if live.last_used_at.is_none_or(|at| now - at >= LAST_USED_EVERY_SECS) {
        store.touch_token(live.id, now).await?;
    }
    let role: Role = live.role.parse()?;
    Ok(Some(Principal { name: live.name, role, via: How::Token }))
}

/// Revokes a live token by id; its row stays for the record.
pub async fn revoke_token(store: &Store, id: i64) -> Result<(), AuthError> {
    if !store.revoke_token(id).await? {
        return Err(AuthError::NoSuchToken(id));
    }
    Ok(())
}

/// All tokens, live and revoked, oldest first.
pub async fn list_tokens(store: &Store) -> Result<Vec<TokenInfo>, AuthError> {
    store
        .tokens()
        .await?
        .into_iter()
        .map(|row| {
            Ok(TokenInfo {
                role: row.role.parse()?,
                id: row.id,
                name: row.name,
                created_by: row.created_by,
                created_at: row.created_at,
                last_used_at: row.last_used_at,
                revoked: row.revoked,
            })
        })
        .collect()
}

/// The token in an `Authorization: Bearer ...` header (scheme case-insensitive), if any.
pub fn bearer_token(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.trim().split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;
    use sqlx::Row;

    use super::*;
    use crate::auth::test_db;

    const T0: i64 = 1_700_000_000;

    #[tokio::test]
    async fn a_token_stands_for_its_name_and_role() {
        let (_dir, db, _) = test_db().await;
        let new = create_token(&db, "deploy-script", Role::Operator, "alice", T0).await.unwrap();
        assert!(new.token.starts_with("wrn_"));
        assert_eq!(new.token.len(), 47);
        assert!(!format!("{new:?}").contains(&new.token));

        let principal = token(&db, &new.token, T0 + 1).await.unwrap().expect("live token");
        assert_eq!(principal, Principal { name: "deploy-script".into(), role: Role::Operator, via: How::Token });
        assert_eq!(principal.actor(), "token:deploy-script");
    }

    #[tokio::test]
    async fn the_database_holds_no_token() {
        let (_dir, db, pool) = test_db().await;
        let new = create_token(&db, "ci", Role::Viewer, "alice", T0).await.unwrap();
        let secret = new.token.strip_prefix(TOKEN_PREFIX).unwrap();
        let rows = sqlx::query("select * from api_tokens").fetch_all(&pool).await.unwrap();
        for row in &rows {
            for column in ["name", "role", "token_hash", "created_by"] {
                let stored: String = row.get(column);
                assert!(!stored.contains(secret), "{column} holds the token");
            }
        }
        let stored_hash: String = rows[0].get("token_hash");
        assert!(token(&db, &format!("{TOKEN_PREFIX}{stored_hash}"), T0).await.unwrap().is_none());
    }

    #[tokio::test]
    async fn wrong_malformed_and_revoked_tokens_are_refused() {
        let (_dir, db, _) = test_db().await;
        let new = create_token(&db, "ci", Role::Admin, "alice", T0).await.unwrap();
        let bare = new.token.strip_prefix(TOKEN_PREFIX).unwrap();
        for wrong in ["", "wrn_", bare, &format!("wrn_{}", random_secret()), &format!("{}x", new.token), "wrn_' or 1=1"]
        {
            assert!(token(&db, wrong, T0).await.unwrap().is_none(), "{wrong}");
        }

        revoke_token(&db, new.id).await.unwrap();
        assert!(token(&db, &new.token, T0).await.unwrap().is_none());
        assert!(matches!(revoke_token(&db, new.id).await, Err(AuthError::NoSuchToken(_))));
        assert!(matches!(revoke_token(&db, 999).await, Err(AuthError::NoSuchToken(999))));
    }

    #[tokio::test]
    async fn names_are_unique_among_live_tokens() {
        let (_dir, db, _) = test_db().await;
        let first = create_token(&db, "ci", Role::Viewer, "alice", T0).await.unwrap();
        assert!(matches!(create_token(&db, "ci", Role::Viewer, "bob", T0).await, Err(AuthError::TokenExists(_))));
        assert!(matches!(create_token(&db, "c i", Role::Viewer, "bob", T0).await, Err(AuthError::InvalidName(_))));
        revoke_token(&db, first.id).await.unwrap();
        let second = create_token(&db, "ci", Role::Operator, "bob", T0 + 5).await.unwrap();
        token(&db, &second.token, T0 + 10).await.unwrap().unwrap();

        let listed = list_tokens(&db).await.unwrap();
        assert_eq!(listed.len(), 2);
        assert!(listed[0].revoked && !listed[1].revoked);
        assert_eq!(listed[0].last_used_at, None);
        assert_eq!(
            listed[1],
            TokenInfo {
                id: second.id,
                name: "ci".into(),
                role: Role::Operator,
                created_by: "bob".into(),
                created_at: T0 + 5,
                last_used_at: Some(T0 + 10),
                revoked: false,
            }
        );
    }

    #[tokio::test]
    async fn last_used_is_written_at_most_once_a_minute() {
        let (_dir, db, pool) = test_db().await;
        let new = create_token(&db, "ci", Role::Viewer, "alice", T0).await.unwrap();
        let last_used = || sqlx::query_scalar::<_, Option<i64>>("select last_used_at from api_tokens").fetch_one(&pool);
        token(&db, &new.token, T0 + 1).await.unwrap().unwrap();
        token(&db, &new.token, T0 + 60).await.unwrap().unwrap();
        assert_eq!(last_used().await.unwrap(), Some(T0 + 1));
        token(&db, &new.token, T0 + 61).await.unwrap().unwrap();
        assert_eq!(last_used().await.unwrap(), Some(T0 + 61));
    }

    #[test]
    fn bearer_tokens_are_read_from_the_authorization_header() {
        let mut headers = HeaderMap::new();
        assert_eq!(bearer_token(&headers), None);
        headers.insert(header::AUTHORIZATION, HeaderValue::from_static("Bearer wrn_abc"));
        assert_eq!(bearer_token(&headers), Some("wrn_abc"));
        headers.insert(header::AUTHORIZATION, HeaderValue::from_static("bearer  wrn_abc "));
        assert_eq!(bearer_token(&headers), Some("wrn_abc"));
        headers.insert(header::AUTHORIZATION, HeaderValue::from_static("Basic YWxpY2U6cHc="));
        assert_eq!(bearer_token(&headers), None);
    }
}
