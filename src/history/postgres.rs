//! warren's database on PostgreSQL (issue 33): its schema (`migrations/postgres/`) and the copy
//! of an existing SQLite database into it, the first step of a move to replicas. warren does not
//! run on PostgreSQL yet; the copy is what that move starts from, and `tests/schema.rs` keeps the
//! two schemas alike, which is what lets the copy go column by column.

use std::collections::BTreeMap;

use futures_util::TryStreamExt;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::{QueryBuilder, Row};

use super::Db;

/// The tables in an order that copies a row after the rows it refers to.
const TABLES: &[&str] = &[
    "brokers",
    "queues",
    "queue_samples",
    "broker_samples",
    "queue_rollups_1m",
    "queue_rollups_1h",
    "broker_rollups_1m",
    "broker_rollups_1h",
    "rollup_progress",
    "node_samples",
    "vhost_topology",
    "roles_worked_queues",
    "alert_rules",
    "alert_states",
    "alert_history",
    "silences",
    "notification_log",
    "notification_outbox",
    "users",
    "sessions",
    "api_tokens",
    "audit_log",
    "audit_messages",
    "custody_queues",
    "custody_messages",
    "dlq_snapshots",
    "storage_probe",
    "instance_keys",
    "login_failures",
    "leases",
    "broker_listings",
    "advisor_acknowledgements",
];

/// Rows per insert: the widest table has 32 columns and an insert takes at most 65,535 values.
const BATCH: usize = 500;

#[derive(Debug, thiserror::Error)]
pub enum CopyError {
    #[error("{0}")]
    Database(#[from] sqlx::Error),
    #[error("the PostgreSQL schema: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error("{table} in PostgreSQL already holds {rows} rows: the copy goes into an empty database only")]
    NotEmpty { table: String, rows: i64 },
    #[error("{0}")]
    Schema(String),
    #[error("{table}: {copied} rows read from SQLite, but PostgreSQL counts {counted}")]
    Count { table: String, copied: u64, counted: i64 },
}

/// Connects to the PostgreSQL database at `url` and brings its schema up to date. sqlx's
/// migrator holds a PostgreSQL advisory lock while it runs, so replicas starting together
/// migrate one at a time.
pub async fn open(url: &str) -> Result<PgPool, CopyError> {
    let options: PgConnectOptions = url.parse()?;
    let pool = PgPoolOptions::new().max_connections(4).connect_with(options).await?;
    sqlx::migrate!("./migrations/postgres").run(&pool).await?;
    Ok(pool)
}

/// A column as PostgreSQL types it; the copy reads SQLite's value as that type.
#[derive(Debug, Clone, Copy)]
enum Kind {
    Integer,
    Boolean,
    Real,
    Text,
    Bytes,
}

/// Copies every table of `sqlite` into `pg`, which must be empty, in one transaction on each side:
/// SQLite's is one read snapshot (warren may go on writing), PostgreSQL's commits all or nothing.
/// Returns the rows copied per table, each checked against PostgreSQL's count before the commit.
pub async fn copy_from_sqlite(sqlite: &Db, pg: &PgPool) -> Result<BTreeMap<&'static str, u64>, CopyError> {
    let columns = columns(pg).await?;
    let mut read = sqlite.begin().await?;
    // A table this list does not name would be left behind without a word.
    let tables: Vec<String> = sqlx::query_scalar(
        "select name from sqlite_master where type = 'table' and name not like 'sqlite_%' and name <> '_sqlx_migrations'",
    )
    .fetch_all(&mut *read)
    .await?;
    let unknown: std::collections::BTreeSet<&String> =
        tables.iter().chain(columns.keys()).filter(|t| !TABLES.contains(&t.as_str())).collect();
    if !unknown.is_empty() {
        return Err(CopyError::Schema(format!("the copy does not know the tables {unknown:?}")));
    }
    let mut write = pg.begin().await?;
    let mut copied = BTreeMap::new();
    for &table in TABLES {
        let rows: i64 = sqlx::query_scalar(&format!("select count(*) from {table}")).fetch_one(&mut *write).await?;
        if rows > 0 {
            return Err(CopyError::NotEmpty { table: table.into(), rows });
        }
        let columns =
            columns.get(table).ok_or_else(|| CopyError::Schema(format!("PostgreSQL has no table {table}")))?;
        let names = columns.iter().map(|(name, _)| name.as_str()).collect::<Vec<_>>().join(", ");
        let select = format!("select {names} from {table}");
        let mut stream = sqlx::query(&select).fetch(&mut *read);
        let mut batch = Vec::with_capacity(BATCH);
        let mut count = 0u64;
        loop {
            let row = stream.try_next().await?;
            let done = row.is_none();
            if let Some(row) = row {
                batch.push(row);
            }
            if batch.len() == BATCH || (done && !batch.is_empty()) {
                insert(&mut write, table, &names, columns, &batch).await?;
                // Rows read from SQLite's snapshot, checked below against PostgreSQL's count.
                count += batch.len() as u64;
                batch.clear();
            }
            if done {
                break;
            }
        }
        drop(stream);
        let counted: i64 = sqlx::query_scalar(&format!("select count(*) from {table}")).fetch_one(&mut *write).await?;
        if counted != count as i64 {
            return Err(CopyError::Count { table: table.into(), copied: count, counted });
        }
        // An identity column goes on after the highest id copied, not from 1.
        if columns.iter().any(|(name, kind)| name == "id" && matches!(kind, Kind::Integer)) {
            let sequence: Option<String> = sqlx::query_scalar("select pg_get_serial_sequence($1, 'id')")
                .bind(table)
                .fetch_one(&mut *write)
                .await?;
            if let Some(sequence) = sequence {
                sqlx::query(&format!("select setval($1, coalesce((select max(id) from {table}), 0) + 1, false)"))
                    .bind(sequence)
                    .execute(&mut *write)
                    .await?;
            }
        }
        copied.insert(table, count);
    }
    write.commit().await?;
    read.rollback().await?;
    Ok(copied)
}

/// Every table's columns in PostgreSQL, in order, with the kind of value each takes.
async fn columns(pg: &PgPool) -> Result<BTreeMap<String, Vec<(String, Kind)>>, CopyError> {
    let rows = sqlx::query(
        "select table_name::text, column_name::text, data_type::text from information_schema.columns
         where table_schema = current_schema() and table_name <> '_sqlx_migrations'
         order by table_name, ordinal_position",
    )
    .fetch_all(pg)
    .await?;
    let mut tables: BTreeMap<String, Vec<(String, Kind)>> = BTreeMap::new();
    for row in rows {
        let (table, column, data_type): (String, String, String) = (row.get(0), row.get(1), row.get(2));
        let kind = match data_type.as_str() {
            "bigint" => Kind::Integer,
            "boolean" => Kind::Boolean,
            "double precision" => Kind::Real,
            "text" => Kind::Text,
            "bytea" => Kind::Bytes,
            other => {
                return Err(CopyError::Schema(format!("{table}.{column} is {other}, a type the copy does not know")))
            }
        };
        tables.entry(table).or_default().push((column, kind));
    }
    Ok(tables)
}

/// Inserts SQLite's `rows` into `table`, each value read as its PostgreSQL column's kind.
async fn insert(
    write: &mut sqlx::PgConnection,
    table: &str,
    names: &str,
    columns: &[(String, Kind)],
    rows: &[sqlx::sqlite::SqliteRow],
) -> Result<(), CopyError> {
    let mut insert = QueryBuilder::new(format!("insert into {table} ({names}) "));
    let mut failed = None;
    insert.push_values(rows, |mut values, row| {
        for (i, (column, kind)) in columns.iter().enumerate() {
            let read = match kind {
                Kind::Integer => row.try_get::<Option<i64>, _>(i).map(|v| values.push_bind(v)).map(drop),
                // SQLite keeps a flag as 0 or 1.
                Kind::Boolean => {
                    row.try_get::<Option<i64>, _>(i).map(|v| values.push_bind(v.map(|v| v != 0))).map(drop)
                }
                Kind::Real => row.try_get::<Option<f64>, _>(i).map(|v| values.push_bind(v)).map(drop),
                Kind::Text => row.try_get::<Option<String>, _>(i).map(|v| values.push_bind(v)).map(drop),
                Kind::Bytes => row.try_get::<Option<Vec<u8>>, _>(i).map(|v| values.push_bind(v)).map(drop),
            };
            if let Err(e) = read {
                failed.get_or_insert_with(|| CopyError::Schema(format!("{table}.{column}: {e}")));
                values.push_bind(None::<i64>);
            }
        }
    });
    if let Some(e) = failed {
        return Err(e);
    }
    insert.build().execute(&mut *write).await?;
    Ok(())
}
