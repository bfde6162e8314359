//! The SQLite backend: the embedded default. The pool is opened (WAL, `synchronous=FULL`,
//! migrations from `migrations/sqlite/`) by `history::open`, which the parts not yet behind the
//! interface still share.

use std::sync::Arc;

use async_trait::async_trait;
use sqlx::sqlite::SqlitePool;

mod accounts;
mod acknowledgements;
mod alerts;
mod audit;
mod custody;
mod fates;
mod leases;
mod logins;
mod nodes;
mod rollups;
mod samples;
mod snapshots;
mod topology;

pub use custody::json_path;

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

    async fn close(&self) {
        self.pool.close().await;
    }

    async fn instance_key(&self, name: &str, fresh: &[u8]) -> super::Result<Vec<u8>> {
        sqlx::query("insert or ignore into instance_keys (name, key) values (?, ?)")
            .bind(name)
            .bind(fresh)
            .execute(&self.pool)
            .await?;
        sqlx::query_scalar("select key from instance_keys where name = ?").bind(name).fetch_one(&self.pool).await
    }

    async fn probe(&self, at: i64) -> super::Result<i64> {
        // Not `returning` in autocommit: SQLite hands the row over before the commit, and the
        // commit's failure (a full disk, tests/storage.rs) comes after the one row read.
        let mut tx = self.pool.begin().await?;
        sqlx::query("insert into storage_probe (id, at) values (1, ?) on conflict (id) do update set at = excluded.at")
            .bind(at)
            .execute(&mut *tx)
            .await?;
        let written = sqlx::query_scalar("select at from storage_probe where id = 1").fetch_one(&mut *tx).await?;
        tx.commit().await?;
        Ok(written)
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
