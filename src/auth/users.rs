//! Local accounts: argon2id password hashes in the `users` table, and logins in the audit log.

use std::net::IpAddr;
use std::sync::OnceLock;

use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use argon2::Argon2;
use rand::RngCore;
use serde::Serialize;

use super::{check_name, shorten, AuthError, Role};
use crate::audit;
use crate::storage::accounts::UserRow;
use crate::storage::Store;

/// Shorter passwords are refused (NIST SP 800-63B asks for at least 8; 12 leaves a margin for
/// offline guessing after a database leak).
pub const MIN_PASSWORD_LEN: usize = 12;
/// Longer ones are refused: nobody types more, and hashing megabytes on request costs time.
pub const MAX_PASSWORD_LEN: usize = 1024;

/// An account as the rest of warren sees it; the hash never leaves this file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct User {
    pub name: String,
    pub role: Role,
    /// Unix seconds.
    #[serde(flatten, serialize_with = "crate::times::created_at")]
    #[schema(schema_with = crate::times::schema::created_at)]
    pub created_at: i64,
    /// A disabled user cannot log in and has no sessions.
    pub disabled: bool,
}

fn check_password(password: &str) -> Result<(), AuthError> {
    let chars = password.chars().count();
    if chars < MIN_PASSWORD_LEN {
        Err(AuthError::PasswordTooShort)
    } else if chars > MAX_PASSWORD_LEN {
        Err(AuthError::PasswordTooLong)
    } else {
        Ok(())
    }
}

/// How long a password check waits for its turn before the request is refused as busy.
const HASH_QUEUE_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Runs an argon2 computation when one of few slots is free. Each takes 19 MiB while it runs,
/// and the blocking pool runs hundreds at once: 60 concurrent logins took peak memory from 123
/// to 780 MB. More checks at once than cores finish no sooner, so the slots are the cores (at
/// most 4); the rest wait in line, up to [`HASH_QUEUE_WAIT`]. Process-wide like the CPUs it
/// shares out, hence a static.
async fn run_argon2<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> Result<T, AuthError> {
    static SLOTS: OnceLock<tokio::sync::Semaphore> = OnceLock::new();
    let slots = SLOTS.get_or_init(|| {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        tokio::sync::Semaphore::new(cores.clamp(1, MAX_CONCURRENT_HASHES))
    });
    let _slot = tokio::time::timeout(HASH_QUEUE_WAIT, slots.acquire())
        .await
        .map_err(|_| AuthError::Busy)?
        .expect("the semaphore is never closed");
    Ok(tokio::task::spawn_blocking(work).await?)
}

/// Argon2 computations at once, at most (see [`run_argon2`]).
pub const MAX_CONCURRENT_HASHES: usize = 4;

/// Hashes with argon2id and the crate's default parameters (19 MiB, 2 passes, 1 lane: OWASP's
/// recommendation), off the async threads because it takes tens of milliseconds of CPU.
async fn hash_password(password: &str) -> Result<String, AuthError> {
    let password = password.to_owned();
    run_argon2(move || {
        let mut salt = [0u8; 16];
        rand::rngs::OsRng.fill_bytes(&mut salt);
        let salt = SaltString::encode_b64(&salt).map_err(|e| AuthError::Hash(e.to_string()))?;
        let hash =
            Argon2::default().hash_password(password.as_bytes(), &salt).map_err(|e| AuthError::Hash(e.to_string()))?;
        Ok(hash.to_string())
    })
    .await?
}

/// Whether `password` matches the PHC string `hash`; a malformed hash matches nothing.
async fn password_matches(password: &str, hash: String) -> Result<bool, AuthError> {
    let password = password.to_owned();
    run_argon2(move || {
        PasswordHash::new(&hash)
            .is_ok_and(|parsed| Argon2::default().verify_password(password.as_bytes(), &parsed).is_ok())
    })
    .await
}

/// A hash of a password nobody knows, with the same parameters as real ones: verifying against
/// it for an unknown user takes as long as for a known one, so timing does not tell which names
/// exist. Made on first use (that one call takes a hash longer).
async fn dummy_hash() -> Result<String, AuthError> {
    static DUMMY: OnceLock<String> = OnceLock::new();
    if let Some(hash) = DUMMY.get() {
        return Ok(hash.clone());
    }
    let hash = hash_password(&super::random_secret()).await?;
    Ok(DUMMY.get_or_init(|| hash).clone())
}

/// Creates a user. The name is 1-64 letters, digits or `-_.@`; the password at least
/// [`MIN_PASSWORD_LEN`] characters.
pub async fn add_user(store: &Store, name: &str, role: Role, password: &str) -> Result<(), AuthError> {
    check_name(name)?;
    check_password(password)?;
    let hash = hash_password(password).await?;
    if !store.insert_user(name, role.as_str(), &hash, chrono::Utc::now().timestamp()).await? {
        return Err(AuthError::UserExists(name.to_string()));
    }
    Ok(())
}

/// Replaces a user's password and ends all their sessions (a password change logs out
/// everywhere, including whoever knew the old one); returns how many sessions it ended.
pub async fn set_password(store: &Store, name: &str, password: &str) -> Result<u64, AuthError> {
    check_password(password)?;
    let hash = hash_password(password).await?;
    store.set_password_hash(name, &hash).await?.ok_or_else(|| AuthError::NoSuchUser(shorten(name)))
}

/// Removes a user and their sessions. The last enabled admin cannot be removed, so the web UI
/// cannot lock everyone out (`warren user add` on the command line always can add one).
pub async fn remove_user(store: &Store, name: &str) -> Result<(), AuthError> {
    if !store.remove_user(name).await? {
        return Err(not_changed(store, name).await?);
    }
    Ok(())
}

/// Changes a user's role, read at their next request (issue 34, case 5: there was no way to, so
/// the last admin could never hand over). The last enabled admin keeps the role.
pub async fn set_role(store: &Store, name: &str, role: Role) -> Result<(), AuthError> {
    if !store.set_role(name, role.as_str()).await? {
        return Err(not_changed(store, name).await?);
    }
    Ok(())
}

/// Disables (ending their sessions) or re-enables a user; the last enabled admin cannot be disabled.
pub async fn set_disabled(store: &Store, name: &str, disabled: bool) -> Result<(), AuthError> {
    if !store.set_disabled(name, disabled).await? {
        return Err(not_changed(store, name).await?);
    }
    Ok(())
}

/// Why a guarded change touched no row: the user does not exist, or is the last admin.
async fn not_changed(store: &Store, name: &str) -> Result<AuthError, AuthError> {
    Ok(match get_user(store, name).await? {
        Some(_) => AuthError::LastAdmin(name.to_string()),
        None => AuthError::NoSuchUser(shorten(name)),
    })
}

fn user_from_row(row: UserRow) -> Result<User, AuthError> {
    Ok(User { role: row.role.parse()?, name: row.name, created_at: row.created_at, disabled: row.disabled })
}

pub async fn get_user(store: &Store, name: &str) -> Result<Option<User>, AuthError> {
    store.user(name).await?.map(user_from_row).transpose()
}

/// All users by name.
pub async fn list_users(store: &Store) -> Result<Vec<User>, AuthError> {
    store.users().await?.into_iter().map(user_from_row).collect()
}

/// How many accounts exist (enabled or not); zero means no local login is configured.
pub async fn count_users(store: &Store) -> Result<i64, AuthError> {
    Ok(store.count_users().await?)
}

/// The user if `password` is theirs and the account is enabled. An unknown name costs the same
/// hash verification as a known one, and a disabled account is checked like an enabled one, so
/// the answer time does not tell which names exist.
pub async fn verify_password(store: &Store, name: &str, password: &str) -> Result<Option<User>, AuthError> {
    if password.chars().count() > MAX_PASSWORD_LEN {
        return Ok(None);
    }
    let Some((row, hash)) = store.user_with_password(name).await? else {
        password_matches(password, dummy_hash().await?).await?;
        return Ok(None);
    };
    let user = user_from_row(row)?;
    let matches = password_matches(password, hash).await?;
    Ok((matches && !user.disabled).then_some(user))
}

/// How a login attempt ended, for the audit log. Unknown names and wrong passwords are one
/// outcome, as the person at the login form is told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoginOutcome {
    Success,
    Failed,
    /// Refused by the throttle before the password was checked.
    Throttled,
}

/// Writes a login attempt to the audit log: a success as a row of its own, a failure counted in
/// its source's row for the name and minute (`audit::login_failed`). The name is what was typed,
/// shortened and without control characters: it is hostile input.
pub async fn record_login(store: &Store, name: &str, peer: IpAddr, outcome: LoginOutcome) -> Result<(), AuthError> {
    let name = shorten(name);
    match outcome {
        LoginOutcome::Success => audit::login_succeeded(store, &name, &peer.to_canonical().to_string()).await?,
        LoginOutcome::Failed | LoginOutcome::Throttled => {
            let throttled = outcome == LoginOutcome::Throttled;
            let now = chrono::Utc::now().timestamp();
            audit::login_failed(store, &name, &super::throttle::source(peer), throttled, now).await?
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::test_db;
    use serde_json::json;

    const PW: &str = "correct horse battery";

    #[tokio::test]
    async fn add_and_verify() {
        let (_dir, db, _) = test_db().await;
        assert_eq!(count_users(&db).await.unwrap(), 0);
        add_user(&db, "alice", Role::Operator, PW).await.unwrap();
        assert_eq!(count_users(&db).await.unwrap(), 1);

        let user = verify_password(&db, "alice", PW).await.unwrap().expect("right password");
        assert_eq!((user.name.as_str(), user.role, user.disabled), ("alice", Role::Operator, false));
        assert!(verify_password(&db, "alice", "correct horse battery!").await.unwrap().is_none());
        assert!(verify_password(&db, "Alice", PW).await.unwrap().is_none());
        assert!(verify_password(&db, "bob", PW).await.unwrap().is_none());
        assert!(verify_password(&db, "alice", &"x".repeat(MAX_PASSWORD_LEN + 1)).await.unwrap().is_none());
    }

    #[tokio::test]
    async fn passwords_are_stored_as_argon2id() {
        let (_dir, db, pool) = test_db().await;
        add_user(&db, "alice", Role::Viewer, PW).await.unwrap();
        add_user(&db, "bob", Role::Viewer, PW).await.unwrap();
        let hashes: Vec<String> =
            sqlx::query_scalar("select password_hash from users order by name").fetch_all(&pool).await.unwrap();
        for hash in &hashes {
            assert!(hash.starts_with("$argon2id$v=19$m=19456,t=2,p=1$"), "{hash}");
            assert!(!hash.contains(PW));
        }
        assert_ne!(hashes[0], hashes[1], "each hash has its own salt");
    }

    #[tokio::test]
    async fn unknown_users_cost_a_real_verification() {
        let dummy = dummy_hash().await.unwrap();
        assert!(dummy.starts_with("$argon2id$v=19$m=19456,t=2,p=1$"), "{dummy}");
        assert_eq!(dummy_hash().await.unwrap(), dummy, "made once");
        assert!(!password_matches("", dummy).await.unwrap());
    }

    #[tokio::test]
    async fn add_user_validates() {
        let (_dir, db, _) = test_db().await;
        assert!(matches!(add_user(&db, "", Role::Admin, PW).await, Err(AuthError::InvalidName(_))));
        assert!(matches!(add_user(&db, "a b", Role::Admin, PW).await, Err(AuthError::InvalidName(_))));
        assert!(matches!(add_user(&db, "alice", Role::Admin, "elevenchars").await, Err(AuthError::PasswordTooShort)));
        assert!(matches!(
            add_user(&db, "alice", Role::Admin, &"p".repeat(MAX_PASSWORD_LEN + 1)).await,
            Err(AuthError::PasswordTooLong)
        ));
        // Characters, not bytes: twelve non-ASCII letters are enough.
        add_user(&db, "alice", Role::Admin, "ääääääääääää").await.unwrap();
        assert!(matches!(add_user(&db, "alice", Role::Viewer, PW).await, Err(AuthError::UserExists(_))));
        assert_eq!(count_users(&db).await.unwrap(), 1);
    }

    #[tokio::test]
    async fn set_password_replaces_the_old_one_and_ends_sessions() {
        let (_dir, db, _) = test_db().await;
        add_user(&db, "alice", Role::Admin, PW).await.unwrap();
        let user = get_user(&db, "alice").await.unwrap().unwrap();
        let new = crate::auth::create_session(&db, &user, crate::auth::DEFAULT_SESSION_TTL, 1000).await.unwrap();

        assert_eq!(set_password(&db, "alice", "a new long password").await.unwrap(), 1, "sessions ended");
        assert!(verify_password(&db, "alice", PW).await.unwrap().is_none());
        assert!(verify_password(&db, "alice", "a new long password").await.unwrap().is_some());
        let idle = crate::auth::DEFAULT_SESSION_IDLE;
        assert!(crate::auth::session(&db, &new.cookie, idle, 1001).await.unwrap().is_none());

        assert!(matches!(set_password(&db, "bob", "a new long password").await, Err(AuthError::NoSuchUser(_))));
        assert!(matches!(set_password(&db, "alice", "short").await, Err(AuthError::PasswordTooShort)));
    }

    #[tokio::test]
    async fn password_checks_run_a_few_at_a_time() {
        // 60 concurrent logins once ran 60 argon2 computations of 19 MiB each at once.
        let (_dir, db, _) = test_db().await;
        add_user(&db, "alice", Role::Admin, PW).await.unwrap();
        let running = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let most = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let checks: Vec<_> = (0..24)
            .map(|_| {
                let (running, most) = (running.clone(), most.clone());
                tokio::spawn(async move {
                    run_argon2(move || {
                        use std::sync::atomic::Ordering::SeqCst;
                        let now = running.fetch_add(1, SeqCst) + 1;
                        most.fetch_max(now, SeqCst);
                        std::thread::sleep(std::time::Duration::from_millis(20));
                        running.fetch_sub(1, SeqCst);
                    })
                    .await
                })
            })
            .collect();
        for check in checks {
            check.await.unwrap().unwrap();
        }
        let most = most.load(std::sync::atomic::Ordering::SeqCst);
        assert!((1..=MAX_CONCURRENT_HASHES).contains(&most), "{most} at once");
        // Real checks go through the same slots and still answer.
        assert!(verify_password(&db, "alice", PW).await.unwrap().is_some());
    }

    #[tokio::test]
    async fn the_last_enabled_admin_stays() {
        let (_dir, db, _) = test_db().await;
        add_user(&db, "root", Role::Admin, PW).await.unwrap();
        add_user(&db, "ops", Role::Operator, PW).await.unwrap();
        assert!(matches!(remove_user(&db, "root").await, Err(AuthError::LastAdmin(_))));
        assert!(matches!(set_disabled(&db, "root", true).await, Err(AuthError::LastAdmin(_))));
        assert!(matches!(remove_user(&db, "nobody").await, Err(AuthError::NoSuchUser(_))));
        assert!(matches!(set_role(&db, "root", Role::Viewer).await, Err(AuthError::LastAdmin(_))));
        // Another admin first: then the old one can step down, and back.
        set_role(&db, "ops", Role::Admin).await.unwrap();
        set_role(&db, "root", Role::Viewer).await.unwrap();
        assert_eq!(get_user(&db, "root").await.unwrap().unwrap().role, Role::Viewer);
        set_role(&db, "root", Role::Admin).await.unwrap();
        set_role(&db, "ops", Role::Operator).await.unwrap();
        assert!(matches!(set_role(&db, "nobody", Role::Admin).await, Err(AuthError::NoSuchUser(_))));

        remove_user(&db, "ops").await.unwrap();
        add_user(&db, "second", Role::Admin, PW).await.unwrap();
        set_disabled(&db, "second", true).await.unwrap();
        // A disabled admin does not count as the other admin.
        assert!(matches!(remove_user(&db, "root").await, Err(AuthError::LastAdmin(_))));
        // ...but can itself be removed, and re-enabled.
        set_disabled(&db, "second", false).await.unwrap();
        remove_user(&db, "root").await.unwrap();
        let names: Vec<String> = list_users(&db).await.unwrap().into_iter().map(|u| u.name).collect();
        assert_eq!(names, ["second"]);
    }

    #[tokio::test]
    async fn disabled_users_cannot_log_in_and_lose_sessions() {
        let (_dir, db, _) = test_db().await;
        add_user(&db, "root", Role::Admin, PW).await.unwrap();
        add_user(&db, "alice", Role::Viewer, PW).await.unwrap();
        let alice = get_user(&db, "alice").await.unwrap().unwrap();
        let new = crate::auth::create_session(&db, &alice, crate::auth::DEFAULT_SESSION_TTL, 1000).await.unwrap();

        set_disabled(&db, "alice", true).await.unwrap();
        assert!(verify_password(&db, "alice", PW).await.unwrap().is_none());
        let idle = crate::auth::DEFAULT_SESSION_IDLE;
        assert!(crate::auth::session(&db, &new.cookie, idle, 1001).await.unwrap().is_none());
        assert!(get_user(&db, "alice").await.unwrap().unwrap().disabled);

        set_disabled(&db, "alice", false).await.unwrap();
        assert!(verify_password(&db, "alice", PW).await.unwrap().is_some());
        assert!(matches!(set_disabled(&db, "nobody", true).await, Err(AuthError::NoSuchUser(_))));
    }

    #[tokio::test]
    async fn removing_a_user_ends_their_sessions() {
        let (_dir, db, pool) = test_db().await;
        add_user(&db, "alice", Role::Viewer, PW).await.unwrap();
        let alice = get_user(&db, "alice").await.unwrap().unwrap();
        crate::auth::create_session(&db, &alice, crate::auth::DEFAULT_SESSION_TTL, 1000).await.unwrap();
        remove_user(&db, "alice").await.unwrap();
        let left: i64 = sqlx::query_scalar("select count(*) from sessions").fetch_one(&pool).await.unwrap();
        assert_eq!(left, 0);
        assert!(get_user(&db, "alice").await.unwrap().is_none());
    }

    #[tokio::test]
    async fn logins_go_to_the_audit_log() {
        let (_dir, db, _) = test_db().await;
        let peer: IpAddr = "::ffff:192.0.2.7".parse().unwrap();
        record_login(&db, "alice", peer, LoginOutcome::Success).await.unwrap();
        record_login(&db, "evil\n<b>name", peer, LoginOutcome::Failed).await.unwrap();
        record_login(&db, "alice", peer, LoginOutcome::Failed).await.unwrap();
        record_login(&db, "alice", peer, LoginOutcome::Throttled).await.unwrap();
        let page = audit::Page { kind: Some(audit::Kind::Login), before: None, after: None, per_page: 10 };
        let entries = audit::list(&db, &page).await.unwrap().records;
        assert!(entries.iter().all(|e| e.kind == audit::Kind::Login));
        let (alice, evil) = (&entries[entries.len() - 1], &entries[entries.len() - 2]);
        assert_eq!((alice.outcome.as_str(), alice.attempts, alice.source.as_deref()), ("done", 1, Some("192.0.2.7")));
        assert_eq!((evil.action.as_str(), evil.outcome.as_str()), ("login", "failed"));
        assert_eq!(evil.actor, "evil?<b>name");
        assert_eq!((evil.source.as_deref(), &evil.request["peer"]), (Some("192.0.2.7"), &json!("192.0.2.7")));
        // Alice's two failures share a row (two if the minute turned between them).
        let failed = &entries[..entries.len() - 2];
        assert!(failed.iter().all(|e| e.actor == "alice" && e.outcome == "failed"), "{failed:?}");
        let counts = failed.iter().fold((0, 0), |(n, t), e| (n + e.attempts, t + e.throttled));
        assert_eq!((failed.len() <= 2, counts), (true, (2, 1)), "{failed:?}");
    }

    #[tokio::test]
    async fn failed_logins_from_ipv6_count_per_slash_64() {
        let (_dir, db, _) = test_db().await;
        for peer in ["2001:db8:1:2::1", "2001:db8:1:2:ffff::9"] {
            record_login(&db, "alice", peer.parse().unwrap(), LoginOutcome::Failed).await.unwrap();
        }
        let page = audit::Page { kind: None, before: None, after: None, per_page: 10 };
        let entries = audit::list(&db, &page).await.unwrap().records;
        // One row (two if the minute turned between the attempts).
        assert!(entries.iter().all(|e| e.source.as_deref() == Some("2001:db8:1:2::/64")), "{entries:?}");
        assert_eq!(entries.iter().map(|e| e.attempts).sum::<i64>(), 2);
    }
}
