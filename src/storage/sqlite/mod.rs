//! The SQLite backend: the embedded default. The pool is opened (WAL, `synchronous=FULL`,
//! migrations from `migrations/sqlite/`) by `history::open`, which the parts not yet behind the
//! interface still share.

use std::sync::Arc;

use async_trait::async_trait;
use sqlx::sqlite::SqlitePool;

mod accounts;
mod alerts;
mod audit;
mod custody;
mod fates;
mod leases;
mod logins;
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

#[async_trait]
impl super::Database for Sqlite {
    fn backend(&self) -> &'static str {
        "sqlite"
    }

    async fn begin(&self) -> super::Result<Box<dyn super::Transaction>> {
        Ok(Box::new(SqliteTx(self.pool.begin().await?)))
    }

    async fn instance_key(&self, name: &str, fresh: &[u8]) -> super::Result<Vec<u8>> {
        sqlx::query("insert or ignore into instance_keys (name, key) values (?, ?)")
            .bind(name)
            .bind(fresh)
            .execute(&self.pool)
            .await?;
        sqlx::query_scalar("select key from instance_keys where name = ?").bind(name).fetch_one(&self.pool).await
    }
}

/// A transaction on the SQLite pool.
pub struct SqliteTx(sqlx::Transaction<'static, sqlx::Sqlite>);

#[async_trait]
impl super::Transaction for SqliteTx {
    async fn commit(self: Box<Self>) -> super::Result<()> {
        self.0.commit().await
    }
}

/// The store over an open SQLite pool.
pub fn store(pool: SqlitePool) -> super::Store {
    Arc::new(Sqlite::new(pool))
}
