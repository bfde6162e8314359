//! The PostgreSQL backend, which several replicas can share. Its schema is
//! `migrations/postgres/`, kept alike with SQLite's by `tests/schema.rs`.
//!
//! Where SQLite's one writer at a time makes a check and its change atomic, this backend locks
//! what the check reads (the last-admin rule locks `users`), since concurrent transactions from
//! other replicas would otherwise each pass the check.

use std::sync::Arc;

use async_trait::async_trait;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};

mod accounts;
mod acknowledgements;
mod alerts;
mod audit;
mod custody;
mod fates;
mod leases;
mod logins;
mod nodes;
mod partitions;
mod rollups;
mod samples;
mod snapshots;
mod topology;

/// warren's database in PostgreSQL.
#[derive(Debug, Clone)]
pub struct Postgres {
    pool: PgPool,
}

impl Postgres {
    pub fn new(pool: PgPool) -> Postgres {
        Postgres { pool }
    }
}

#[async_trait]
impl super::Database for Postgres {
    fn backend(&self) -> &'static str {
        "postgres"
    }

    async fn begin(&self) -> super::Result<Box<dyn super::Transaction>> {
        Ok(Box::new(PgTx(self.pool.begin().await?)))
    }

    async fn close(&self) {
        self.pool.close().await;
    }

    async fn instance_key(&self, name: &str, fresh: &[u8]) -> super::Result<Vec<u8>> {
        // A second process inserting at the same time waits for the first's commit here, then
        // inserts nothing: both read the first's key.
        sqlx::query("insert into instance_keys (name, key) values ($1, $2) on conflict (name) do nothing")
            .bind(name)
            .bind(fresh)
            .execute(&self.pool)
            .await?;
        sqlx::query_scalar("select key from instance_keys where name = $1").bind(name).fetch_one(&self.pool).await
    }

    async fn probe(&self, at: i64) -> super::Result<i64> {
        // One transaction: another replica's probe waits on the row, so the value read back is
        // this write's, and a commit the server cannot make is this check's error.
        let mut tx = self.pool.begin().await?;
        sqlx::query(
            "insert into storage_probe (id, at) values (1, $1) on conflict (id) do update set at = excluded.at",
        )
        .bind(at)
        .execute(&mut *tx)
        .await?;
        let written = sqlx::query_scalar("select at from storage_probe where id = 1").fetch_one(&mut *tx).await?;
        tx.commit().await?;
        Ok(written)
    }
}

/// A transaction on the PostgreSQL pool.
pub struct PgTx(sqlx::Transaction<'static, sqlx::Postgres>);

#[async_trait]
impl super::Transaction for PgTx {
    async fn commit(self: Box<Self>) -> super::Result<()> {
        self.0.commit().await
    }
}

/// Connects to the database at `url` and brings its schema up to date. sqlx's migrator holds
/// a PostgreSQL advisory lock while it runs, so replicas starting together migrate one at a time.
pub async fn open(url: &str) -> Result<PgPool, sqlx::Error> {
    let options: PgConnectOptions = url.parse()?;
    // Which replica a connection is, in `pg_stat_activity` (unless the URL names it).
    let options = match options.get_application_name() {
        Some(_) => options,
        None => options.application_name(&format!("warren (pid {})", std::process::id())),
    };
    // Polls, intakes, moves, the pages and the API at once; three replicas take 30 of
    // PostgreSQL's default 100.
    let pool = PgPoolOptions::new().max_connections(10).connect_with(options).await?;
    sqlx::migrate!("./migrations/postgres").run(&pool).await?;
    Ok(pool)
}

/// The store over an open PostgreSQL pool.
pub fn store(pool: PgPool) -> super::Store {
    Arc::new(Postgres::new(pool))
}
