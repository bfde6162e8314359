//! The SQLite backend: the embedded default. The pool is opened (WAL, `synchronous=FULL`,
//! migrations from `migrations/sqlite/`) by `history::open`, which the parts not yet behind the
//! interface still share.

use std::sync::Arc;

use sqlx::sqlite::SqlitePool;

mod accounts;
mod audit;
mod fates;
mod snapshots;

/// warren's database in one SQLite file.
#[derive(Debug, Clone)]
pub struct Sqlite {
    pool: SqlitePool,
}

impl Sqlite {
    pub fn new(pool: SqlitePool) -> Sqlite {
        Sqlite { pool }
    }
}

impl super::Database for Sqlite {
    fn backend(&self) -> &'static str {
        "sqlite"
    }
}

/// The store over an open SQLite pool.
pub fn store(pool: SqlitePool) -> super::Store {
    Arc::new(Sqlite::new(pool))
}
