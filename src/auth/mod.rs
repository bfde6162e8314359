//! Who may do what: local accounts, browser sessions, API tokens, a trusted proxy header, and the
//! role each action needs (issue #6).
//!
//! This module is the I/O-light core; the web layer wires it in. The decisions it encodes:
//!
//! - Three ordered roles: a viewer reads, an operator also acts on messages (requeue, delete,
//!   purge, snapshots, job cancel) and silences alerts, an admin also changes alert rules,
//!   notification channels, brokers and users ([`required_role`]).
//! - Secrets are stored only as hashes, so a copy of the database gives no way in: passwords as
//!   argon2id PHC strings, session ids and API tokens as SHA-256 (they are 32 random bytes, so a
//!   slow hash would add nothing).
//! - A session lasts at most [`DEFAULT_SESSION_TTL`] (12 h) and ends after [`DEFAULT_SESSION_IDLE`]
//!   (2 h) without a request; every state-changing request carries the session's CSRF token.
//! - Login throttling counts failures in the database ([`begin_login`]): a restart grants no
//!   fresh burst of guesses, and replicas sharing a database throttle together.
//! - Without any authentication configured warren only serves on loopback ([`check_bind`]).

mod gate;
mod policy;
mod proxy;
mod sessions;
mod throttle;
mod tokens;
mod users;

use std::fmt;
use std::str::FromStr;

use base64::Engine;
use rand::RngCore;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

pub use gate::Gate;
pub use policy::{anonymous_allowed, check_bind, required_role};
pub use proxy::{Cidr, ProxyAuth};
pub use sessions::{
    clear_session_cookie, create_session, csrf_ok, end_session, end_user_sessions, purge_expired, session,
    session_cookie, session_cookie_from, ActiveSession, NewSession, CSRF_FIELD, CSRF_HEADER, DEFAULT_SESSION_IDLE,
    DEFAULT_SESSION_TTL, SESSION_COOKIE,
};
pub use throttle::{begin_login, login_succeeded, Counted, FIRST_DELAY, FREE_FAILURES, MAX_DELAY, WINDOW};
pub use tokens::{bearer_token, create_token, list_tokens, revoke_token, token, NewToken, TokenInfo, TOKEN_PREFIX};
pub use users::{
    add_user, count_users, get_user, list_users, record_login, remove_user, set_disabled, set_password, set_role,
    verify_password, LoginOutcome, User, MAX_PASSWORD_LEN, MIN_PASSWORD_LEN,
};

/// What a principal may do; each role includes the ones before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Reads everything a page or the API shows.
    Viewer,
    /// Also requeues, deletes and purges messages, takes snapshots, cancels jobs, sets silences.
    Operator,
    /// Also changes alert rules, notification channels, brokers, users and API tokens.
    Admin,
}

impl Role {
    /// Whether a principal with this role may do what needs `needed`.
    pub fn allows(self, needed: Role) -> bool {
        self >= needed
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Role::Viewer => "viewer",
            Role::Operator => "operator",
            Role::Admin => "admin",
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Role {
    type Err = AuthError;

    /// Case-insensitive, for the command line and proxy headers.
    fn from_str(text: &str) -> Result<Self, AuthError> {
        match text.trim().to_ascii_lowercase().as_str() {
            "viewer" => Ok(Role::Viewer),
            "operator" => Ok(Role::Operator),
            "admin" => Ok(Role::Admin),
            _ => Err(AuthError::UnknownRole(shorten(text))),
        }
    }
}

/// How a request proved who it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum How {
    /// A login session cookie (needs the CSRF token on state-changing requests).
    Session,
    /// An API token in the `Authorization: Bearer` header (not sent by browsers on their own, so
    /// no CSRF token is needed).
    Token,
    /// The trusted reverse proxy's user header.
    Proxy,
    /// No authentication configured, loopback only.
    Anonymous,
}

/// Who is making a request, and with which role.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Principal {
    /// The user name; for a token, the token's name.
    pub name: String,
    pub role: Role,
    pub via: How,
}

impl Principal {
    /// The local user when no authentication is configured (loopback only): everything is
    /// allowed, as before accounts existed.
    pub fn anonymous() -> Principal {
        Principal { name: "anonymous".to_string(), role: Role::Admin, via: How::Anonymous }
    }

    /// The name the audit log records: tokens are marked so they cannot pass for a user.
    pub fn actor(&self) -> String {
        match self.via {
            How::Token => format!("token:{}", self.name),
            How::Proxy => format!("proxy:{}", self.name),
            How::Session | How::Anonymous => self.name.clone(),
        }
    }
}

/// What can go wrong in account, session and token handling. Messages are safe to show to the
/// admin who made the request; none contains a password, hash or token.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    #[error("invalid name {0:?}: use 1 to 64 characters: letters, digits, '-', '_', '.', '@'")]
    InvalidName(String),
    #[error("the password is too short: use at least {MIN_PASSWORD_LEN} characters")]
    PasswordTooShort,
    #[error("the password is too long: use at most {MAX_PASSWORD_LEN} characters")]
    PasswordTooLong,
    #[error("a user named {0:?} already exists")]
    UserExists(String),
    #[error("no user named {0:?}")]
    NoSuchUser(String),
    #[error("{0:?} is the last enabled admin; make another user admin first (its role can be changed on the Users page, or with `warren user role`)")]
    LastAdmin(String),
    #[error("unknown role {0:?}: use viewer, operator or admin")]
    UnknownRole(String),
    #[error("an API token named {0:?} already exists; revoke it first or pick another name")]
    TokenExists(String),
    #[error("no live API token with id {0}")]
    NoSuchToken(i64),
    #[error("invalid network {text:?}: {problem}")]
    InvalidCidr { text: String, problem: String },
    #[error("proxy authentication needs at least one trusted proxy address")]
    NoTrustedProxy,
    #[error("invalid header name {0:?}")]
    InvalidHeader(String),
    #[error("too many password checks at once; try again in a few seconds")]
    Busy,
    #[error("password hashing failed: {0}")]
    Hash(String),
    #[error("password hashing task failed: {0}")]
    Task(#[from] tokio::task::JoinError),
    #[error("database error: {0}")]
    Db(#[from] sqlx::Error),
}

/// Checks a user or token name: 1 to 64 ASCII letters, digits and `-_.@`. ASCII only, so two
/// names that look alike are alike.
pub(crate) fn check_name(name: &str) -> Result<(), AuthError> {
    let valid = (1..=64).contains(&name.len())
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'@'));
    if valid {
        Ok(())
    } else {
        Err(AuthError::InvalidName(shorten(name)))
    }
}

/// Hostile input goes into error messages and the audit log at most this long, without control
/// characters.
pub(crate) fn shorten(text: &str) -> String {
    let mut short: String = text.chars().take(80).map(|c| if c.is_control() { '?' } else { c }).collect();
    if text.chars().count() > 80 {
        short.push('…');
    }
    short
}

/// 32 bytes from the operating system's generator, base64url without padding (43 characters).
pub(crate) fn random_secret() -> String {
    let mut bytes = [0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut bytes);
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// Whether `text` looks like what [`random_secret`] makes; anything else is not looked up.
pub(crate) fn is_secret_shaped(text: &str) -> bool {
    text.len() == 43 && text.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// What the database stores instead of a session id or token: SHA-256, lowercase hex.
pub(crate) fn secret_hash(secret: &str) -> String {
    Sha256::digest(secret.as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
}

/// Compares two secrets in time that depends on their lengths only (which are public: tokens
/// have a fixed length), not on where they first differ. `subtle` keeps the compiler from
/// turning the comparison back into an early exit, which `black_box` never promised.
pub(crate) fn same_secret(a: &[u8], b: &[u8]) -> bool {
    use subtle::ConstantTimeEq;
    a.ct_eq(b).into()
}

/// A fresh database in its own directory, so tests run in parallel.
#[cfg(test)]
async fn test_db() -> (tempfile::TempDir, crate::storage::Store, crate::history::Db) {
    let dir = tempfile::tempdir().unwrap();
    let pool = crate::history::open(&dir.path().join("warren.db")).await.unwrap();
    (dir, crate::storage::sqlite::store(pool.clone()), pool)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_are_ordered() {
        assert!(Role::Viewer < Role::Operator && Role::Operator < Role::Admin);
        assert!(Role::Admin.allows(Role::Operator));
        assert!(Role::Admin.allows(Role::Admin));
        assert!(Role::Operator.allows(Role::Viewer));
        assert!(!Role::Operator.allows(Role::Admin));
        assert!(!Role::Viewer.allows(Role::Operator));
    }

    #[test]
    fn roles_parse_and_serialise_lowercase() {
        assert_eq!("Operator".parse::<Role>().unwrap(), Role::Operator);
        assert_eq!(" admin ".parse::<Role>().unwrap(), Role::Admin);
        assert!(matches!("root".parse::<Role>(), Err(AuthError::UnknownRole(_))));
        assert_eq!(serde_json::to_string(&Role::Viewer).unwrap(), "\"viewer\"");
        assert_eq!(serde_json::from_str::<Role>("\"admin\"").unwrap(), Role::Admin);
        assert!(serde_json::from_str::<Role>("\"Admin\"").is_err());
        assert_eq!(Role::Operator.to_string(), "operator");
    }

    #[test]
    fn names_are_checked() {
        for good in ["a", "alice", "ops.team-1", "bob@example.com", "x_y", &"n".repeat(64)] {
            assert!(check_name(good).is_ok(), "{good}");
        }
        for bad in ["", "with space", "tab\t", "ünïcode", "semi;colon", "slash/", &"n".repeat(65), "<script>"] {
            assert!(matches!(check_name(bad), Err(AuthError::InvalidName(_))), "{bad}");
        }
    }

    #[test]
    fn hostile_text_is_shortened_without_control_characters() {
        assert_eq!(shorten("evil\nline"), "evil?line");
        let long = shorten(&"x".repeat(1000));
        assert_eq!(long.chars().count(), 81);
        assert!(long.ends_with('…'));
    }

    #[test]
    fn secrets_are_random_url_safe_and_hashed() {
        let a = random_secret();
        let b = random_secret();
        assert_ne!(a, b);
        assert!(is_secret_shaped(&a), "{a}");
        assert!(!is_secret_shaped(&a[1..]));
        assert!(!is_secret_shaped(&format!("{}=", &a[1..])));
        let hash = secret_hash(&a);
        assert_eq!(hash.len(), 64);
        assert_ne!(hash, a);
        assert_eq!(secret_hash("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    }

    #[test]
    fn same_secret_compares_whole_values() {
        assert!(same_secret(b"abc", b"abc"));
        assert!(!same_secret(b"abc", b"abd"));
        assert!(!same_secret(b"abc", b"abcd"));
        assert!(same_secret(b"", b""));
    }

    #[test]
    fn principals_name_their_actor() {
        let p = |via| Principal { name: "deploy".into(), role: Role::Viewer, via };
        assert_eq!(p(How::Session).actor(), "deploy");
        assert_eq!(p(How::Token).actor(), "token:deploy");
        assert_eq!(p(How::Proxy).actor(), "proxy:deploy");
        assert_eq!(Principal::anonymous().actor(), "anonymous");
        assert_eq!(Principal::anonymous().role, Role::Admin);
    }
}
