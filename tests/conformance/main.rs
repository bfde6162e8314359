//! The storage interface's conformance suite (issue 33): every test here runs against both
//! backends, SQLite in a temporary file and PostgreSQL in a database of its own on
//! 127.0.0.1:5432, through `warren::storage::Store` and the parts of warren that use it. A
//! behaviour one backend has and the other lacks fails here.
//!
//! One file per part behind the interface: accounts (users, sessions, tokens), alerts, the
//! audit log, custody, fates, snapshots, the history's samples, roll-ups, their day partitions,
//! nodes and topology, leases and the outbox's claims. Each file lists its tests in
//! `conformance!`, which makes `PART::sqlite::TEST` and `PART::postgres::TEST` of each.

use warren::storage::Store;

mod accounts;
mod acknowledgements;
mod alerts;
mod audit;
mod custody;
mod fates;
mod leases;
mod logins;
mod nodes;
mod outbox;
mod partitions;
#[path = "../common/queue_history.rs"]
mod queue_history;
mod replicas;
mod rollups;
mod samples;
mod snapshots;
mod topology;

const ADMIN_URL: &str = "postgres://postgres@127.0.0.1:5432/postgres";

/// One backend with a fresh database, dropped with it (a failed test's too).
pub struct Backend {
    pub store: Store,
    /// The same database's pool, for what is not behind the interface yet.
    pub pool: Pool,
    _dir: Option<tempfile::TempDir>,
    /// The PostgreSQL database to drop at the end.
    database: Option<String>,
}

/// A backend's own pool. The roll-ups' tests write the raw samples they roll up with it, since
/// the samples' write path is not behind the interface yet.
pub enum Pool {
    Sqlite(sqlx::SqlitePool),
    Postgres(sqlx::PgPool),
}

/// Numbers this process's PostgreSQL databases: short names, since PostgreSQL cuts identifiers
/// at 63 bytes, and two tests whose names begin alike must not share a database.
static DATABASES: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

impl Backend {
    pub async fn sqlite() -> Backend {
        let dir = tempfile::tempdir().unwrap();
        let pool = warren::history::open(&dir.path().join("warren.db")).await.unwrap();
        Backend {
            store: warren::storage::sqlite::store(pool.clone()),
            pool: Pool::Sqlite(pool),
            _dir: Some(dir),
            database: None,
        }
    }

    /// A database of its own, so tests run in parallel. A missing server fails the test: it is
    /// part of what CI sets up.
    pub async fn postgres() -> Backend {
        let n = DATABASES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let database = format!("warren_conformance_{}_{n}", std::process::id());
        admin(&format!("drop database if exists {database} with (force)")).await;
        admin(&format!("create database {database}")).await;
        let url = format!("postgres://postgres@127.0.0.1:5432/{database}");
        let pool = warren::storage::postgres::open(&url).await.unwrap_or_else(|e| panic!("{url}: {e}"));
        Backend {
            store: warren::storage::postgres::store(pool.clone()),
            pool: Pool::Postgres(pool),
            _dir: None,
            database: Some(database),
        }
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        let Some(database) = self.database.take() else { return };
        // On a thread of its own: a test's runtime may be gone or inside a panic by now.
        let dropped = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            runtime.block_on(admin(&format!("drop database if exists {database} with (force)")));
        })
        .join();
        if dropped.is_err() && !std::thread::panicking() {
            panic!("the test's PostgreSQL database could not be dropped");
        }
    }
}

async fn admin(sql: &str) {
    use sqlx::Connection;
    let mut conn = sqlx::PgConnection::connect(ADMIN_URL).await.unwrap_or_else(|e| {
        panic!("PostgreSQL at {ADMIN_URL} (every machine of this kind has one; .ci/run checks it): {e}")
    });
    sqlx::query(sql).execute(&mut conn).await.unwrap_or_else(|e| panic!("{sql}: {e}"));
}

/// Three replicas on one database as recovery sees them (issue 33): `live` renews its
/// heartbeat (a minute long here), `stopped` let go of it at a clean shutdown, and `killed`
/// stopped renewing it: its heartbeat of [`KILLED_TTL`] runs out on its own.
pub struct Replicas {
    pub live: std::sync::Arc<warren::replicas::Replica>,
    pub stopped: std::sync::Arc<warren::replicas::Replica>,
    pub killed: std::sync::Arc<warren::replicas::Replica>,
}

/// Long enough that a test's writes on a loaded machine come well within it.
pub const KILLED_TTL: std::time::Duration = std::time::Duration::from_secs(3);

impl Replicas {
    pub async fn start(store: &Store) -> Replicas {
        use warren::replicas::Replica;
        let minute = std::time::Duration::from_secs(60);
        let replicas = Replicas {
            live: Replica::new(store.clone(), minute, vec![]),
            stopped: Replica::new(store.clone(), minute, vec![]),
            killed: Replica::new(store.clone(), KILLED_TTL, vec![]),
        };
        for replica in [&replicas.live, &replicas.stopped, &replicas.killed] {
            replica.round().await.unwrap();
        }
        replicas.stopped.release_all().await;
        replicas
    }

    /// Waits until `killed`'s heartbeat has run out by the database's clock.
    pub async fn until_killed_is_dead(&self, store: &Store) {
        let name = format!("{}{}", warren::storage::leases::HEARTBEAT_PREFIX, self.killed.id());
        let deadline = std::time::Instant::now() + KILLED_TTL * 10;
        loop {
            let now = store.database_now().await.unwrap();
            let leases = store.leases().await.unwrap();
            let heartbeat = leases.iter().find(|l| l.name == name).expect("the killed replica's heartbeat");
            if heartbeat.expires_at <= now {
                return;
            }
            assert!(std::time::Instant::now() < deadline, "{name} still unexpired: {heartbeat:?}, now {now}");
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }
}

/// Each test, once per backend: `sqlite::name` and `postgres::name`. With `with_pool:` first,
/// each test takes the backend's [`Pool`] too.
#[macro_export]
macro_rules! conformance {
    (with_pool: $($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test]
                async fn $name() {
                    let backend = $crate::Backend::sqlite().await;
                    super::$name(&backend.store, &backend.pool).await;
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test]
                async fn $name() {
                    let backend = $crate::Backend::postgres().await;
                    super::$name(&backend.store, &backend.pool).await;
                }
            )*
        }
    };
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test]
                async fn $name() {
                    let backend = $crate::Backend::sqlite().await;
                    super::$name(&backend.store).await;
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test]
                async fn $name() {
                    let backend = $crate::Backend::postgres().await;
                    super::$name(&backend.store).await;
                }
            )*
        }
    };
}
