//! The running server's authentication state: whether logins are required, and the CSRF tokens of principals without a session.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::RwLock;

use base64::Engine;
use hmac::{Hmac, Mac};
use rand::RngCore;
use sha2::Sha256;

use super::{count_users, AuthError, Principal, ProxyAuth};
use crate::config::AuthConfig;
use crate::storage::Store;

/// Shared by every request (in `AppState`).
pub struct Gate {
    pub config: AuthConfig,
    /// `[auth.proxy]`, as the auth wing read it.
    pub proxy: Option<ProxyAuth>,
    /// Signs the CSRF tokens of proxy and anonymous principals: the installation's, read from the
    /// database at start ([`Gate::use_stored_csrf_key`]), so a form opened before a restart or
    /// served by another replica still posts; random until then.
    csrf_key: RwLock<[u8; 32]>,
    /// Once a local user exists, logins stay required until restart (a removed last user does
    /// not silently open the dashboard).
    accounts_exist: AtomicBool,
}

impl Gate {
    pub fn new(config: AuthConfig, proxy: Option<ProxyAuth>) -> Gate {
        let mut csrf_key = [0u8; 32];
        rand::rngs::OsRng.fill_bytes(&mut csrf_key);
        Gate { config, proxy, csrf_key: RwLock::new(csrf_key), accounts_exist: AtomicBool::new(false) }
    }

    /// Whether anyone must prove who they are: local users exist or a trusted proxy is set up.
    /// Without either, warren serves loopback requests anonymously (see `anonymous_allowed`).
    /// Users added while warren runs (API or `warren user add`) take effect at the next request.
    pub async fn auth_configured(&self, store: &Store) -> Result<bool, AuthError> {
        if self.proxy.is_some() || self.accounts_exist.load(Ordering::Relaxed) {
            return Ok(true);
        }
        let exist = count_users(store).await? > 0;
        if exist {
            self.accounts_exist.store(true, Ordering::Relaxed);
        }
        Ok(exist)
    }

    /// Signs with the installation's key (`instance_keys`, made on the first start; every
    /// replica on one database reads the same) instead of this process's random one.
    pub async fn use_stored_csrf_key(&self, store: &Store) -> Result<(), AuthError> {
        let mut fresh = [0u8; 32];
        rand::rngs::OsRng.fill_bytes(&mut fresh);
        let key = store.instance_key("csrf", &fresh).await?;
        let key: [u8; 32] = key.try_into().map_err(|k: Vec<u8>| {
            sqlx::Error::Protocol(format!("the stored CSRF key has {} bytes, not 32", k.len()))
        })?;
        *self.csrf_key.write().unwrap_or_else(|p| p.into_inner()) = key;
        Ok(())
    }

    /// The CSRF token of a principal that has no session (a proxy user, or anonymous on
    /// loopback): HMAC-SHA256 of its audit name under the installation's key. Stateless, so a
    /// proxy user needs no row in the database.
    pub fn csrf_token_for(&self, principal: &Principal) -> String {
        let key = *self.csrf_key.read().unwrap_or_else(|p| p.into_inner());
        let mac = hmac_sha256(&key, format!("csrf\0{}", principal.actor()).as_bytes());
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(mac)
    }
}

/// HMAC-SHA256 (RFC 2104) from the `hmac` crate: the same bytes the hand-written version gave,
/// so tokens signed before the change still verify.
fn hmac_sha256(key: &[u8; 32], message: &[u8]) -> [u8; 32] {
    // A 32-byte key is always accepted (HMAC takes keys of any length).
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC accepts keys of any length");
    mac.update(message);
    mac.finalize().into_bytes().into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::{add_user, test_db, How, Role};

    /// RFC 4231 test case 1 (a 20-byte key of 0x0b): the known answer of the standard.
    #[test]
    fn hmac_matches_rfc_4231_test_case_1() {
        let mut key = [0u8; 32];
        key[..20].copy_from_slice(&[0x0b; 20]);
        let hex: String = hmac_sha256(&key, b"Hi There").iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(hex, "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
    }

    #[test]
    fn hmac_matches_rfc_4231_style_vector() {
        // RFC 4231 test case 2 uses a 4-byte key "Jefe"; padded with zeros to 32 bytes it is the
        // same HMAC key (keys are zero-padded to the block size either way).
        let mut key = [0u8; 32];
        key[..4].copy_from_slice(b"Jefe");
        let mac = hmac_sha256(&key, b"what do ya want for nothing?");
        let hex: String = mac.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(hex, "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
    }

    #[test]
    fn csrf_tokens_differ_by_principal_and_process() {
        let gate = Gate::new(AuthConfig::default(), None);
        let alice = Principal { name: "alice".into(), role: Role::Admin, via: How::Proxy };
        let bob = Principal { name: "bob".into(), role: Role::Admin, via: How::Proxy };
        assert_eq!(gate.csrf_token_for(&alice), gate.csrf_token_for(&alice));
        assert_ne!(gate.csrf_token_for(&alice), gate.csrf_token_for(&bob));
        assert_ne!(gate.csrf_token_for(&alice), Gate::new(AuthConfig::default(), None).csrf_token_for(&alice));
    }

    /// Two processes on one database (a restart, or two replicas) sign alike once each has read
    /// the stored key; before, each signs with its own.
    #[tokio::test]
    async fn processes_on_one_database_share_the_csrf_key() {
        let (_dir, db, _) = test_db().await;
        let alice = Principal { name: "alice".into(), role: Role::Admin, via: How::Proxy };
        let (first, second) = (Gate::new(AuthConfig::default(), None), Gate::new(AuthConfig::default(), None));
        assert_ne!(first.csrf_token_for(&alice), second.csrf_token_for(&alice));
        first.use_stored_csrf_key(&db).await.unwrap();
        second.use_stored_csrf_key(&db).await.unwrap();
        assert_eq!(first.csrf_token_for(&alice), second.csrf_token_for(&alice));
        let identity = db.instance_key("identity", &[0; 32]).await.unwrap();
        assert_ne!(identity, db.instance_key("csrf", &[0; 32]).await.unwrap(), "a key of its own");
    }

    #[tokio::test]
    async fn logins_are_required_once_a_user_exists() {
        let (_dir, db, _) = test_db().await;
        let gate = Gate::new(AuthConfig::default(), None);
        assert!(!gate.auth_configured(&db).await.unwrap());
        add_user(&db, "alice", Role::Admin, "correct horse battery").await.unwrap();
        assert!(gate.auth_configured(&db).await.unwrap());
    }
}
