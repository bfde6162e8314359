//! Issue 33, must-have 1: one schema on two backends. `migrations/sqlite/` builds warren's SQLite
//! database step by step; `migrations/postgres/` builds the same schema on PostgreSQL. This
//! applies both, to a new SQLite file and to a new database of the machine's PostgreSQL
//! (127.0.0.1:5432, read with `psql`), and compares what they built: the tables, each table's
//! columns in order with their types, nullability and defaults, primary keys, unique
//! constraints, foreign keys and named indexes. A migration added to one folder without its
//! twin in the other fails here.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

use sqlx::Row;

mod common;

/// A column as both backends describe it, in SQLite's words.
#[derive(Debug, PartialEq, Eq, Clone)]
struct Column {
    name: String,
    /// `integer`, `text`, `blob` or `real`; PostgreSQL's bigint and boolean are `integer`.
    kind: String,
    not_null: bool,
    /// The default as a literal (`0`, `'held'`), without casts; booleans as 0 and 1.
    default: Option<String>,
}

#[derive(Debug, Default, PartialEq, Eq)]
struct Schema {
    columns: BTreeMap<String, Vec<Column>>,
    primary_keys: BTreeMap<String, Vec<String>>,
    /// Per table, the column lists that are unique by a constraint (not a named index).
    uniques: BTreeMap<String, BTreeSet<Vec<String>>>,
    /// (table, column, referenced table, referenced column, on delete).
    foreign_keys: BTreeSet<(String, String, String, String, String)>,
    /// Named indexes: name -> (table, columns, unique, partial).
    indexes: BTreeMap<String, (String, Vec<String>, bool, bool)>,
}

async fn sqlite_schema() -> Schema {
    let dir = tempfile::tempdir().unwrap();
    let db = warren::history::open(&dir.path().join("warren.db")).await.unwrap();
    let mut schema = Schema::default();
    let tables: Vec<String> = sqlx::query_scalar(
        "select name from sqlite_master where type = 'table' and name not like 'sqlite_%' and name != '_sqlx_migrations'",
    )
    .fetch_all(&db)
    .await
    .unwrap();
    for table in tables {
        let mut columns = Vec::new();
        let mut key = Vec::new();
        for row in
            sqlx::query(&format!("select name, type, \"notnull\", dflt_value, pk from pragma_table_info('{table}')"))
                .fetch_all(&db)
                .await
                .unwrap()
        {
            let name: String = row.get(0);
            let pk: i64 = row.get(4);
            if pk > 0 {
                key.push((pk, name.clone()));
            }
            columns.push(Column {
                name,
                kind: row.get::<String, _>(1).to_lowercase(),
                // A primary key's columns hold no NULL on PostgreSQL; warren never writes one.
                not_null: row.get::<i64, _>(2) == 1 || pk > 0,
                default: row.get::<Option<String>, _>(3),
            });
        }
        key.sort();
        if !key.is_empty() {
            schema.primary_keys.insert(table.clone(), key.into_iter().map(|(_, c)| c).collect());
        }
        schema.columns.insert(table.clone(), columns);
        for row in sqlx::query(&format!("select name, \"unique\", origin, partial from pragma_index_list('{table}')"))
            .fetch_all(&db)
            .await
            .unwrap()
        {
            let index: String = row.get(0);
            let origin: String = row.get(2);
            let columns: Vec<String> =
                sqlx::query_scalar(&format!("select name from pragma_index_info('{index}') order by seqno"))
                    .fetch_all(&db)
                    .await
                    .unwrap();
            match origin.as_str() {
                "u" => {
                    schema.uniques.entry(table.clone()).or_default().insert(columns);
                }
                "c" => {
                    let unique = row.get::<i64, _>(1) == 1;
                    let partial = row.get::<i64, _>(3) == 1;
                    schema.indexes.insert(index, (table.clone(), columns, unique, partial));
                }
                _ => {} // the primary key's own index
            }
        }
        for row in sqlx::query(&format!(
            "select \"table\", \"from\", \"to\", on_delete from pragma_foreign_key_list('{table}')"
        ))
        .fetch_all(&db)
        .await
        .unwrap()
        {
            schema.foreign_keys.insert((table.clone(), row.get(1), row.get(0), row.get(2), row.get(3)));
        }
    }
    db.close().await;
    schema
}

/// Runs `sql` in `database` with psql and returns its rows, fields split on `|`.
fn psql(database: &str, sql: &str) -> Vec<Vec<String>> {
    let output = Command::new("psql")
        .args(["-h", "127.0.0.1", "-U", "postgres", "-d", database, "-X", "-v", "ON_ERROR_STOP=1", "-q", "-At"])
        .args(["-c", sql])
        .output()
        .expect("psql, PostgreSQL's client, is installed (.ci/run installs it)");
    assert!(output.status.success(), "psql in {database}: {sql}\n{}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .filter(|l| !l.is_empty())
        .map(|l| l.split('|').map(str::to_string).collect())
        .collect()
}

/// A PostgreSQL default in SQLite's words: `'held'::text` is `'held'`, `false` is `0`.
fn default_as_sqlite(default: &str) -> String {
    let literal = default.split("::").next().unwrap();
    match literal {
        "false" => "0".into(),
        "true" => "1".into(),
        other => other.into(),
    }
}

fn postgres_schema(database: &str) -> Schema {
    let mut dir: Vec<_> = std::fs::read_dir("migrations/postgres").unwrap().map(|e| e.unwrap().path()).collect();
    dir.sort();
    assert!(!dir.is_empty(), "migrations/postgres holds the schema");
    for file in dir {
        let sql = std::fs::read_to_string(&file).unwrap();
        psql(database, &sql);
    }
    let mut schema = Schema::default();
    for row in psql(
        database,
        "select table_name, column_name, data_type, is_nullable, coalesce(column_default, ''), is_identity
         from information_schema.columns where table_schema = 'public' order by table_name, ordinal_position",
    ) {
        let kind = match row[2].as_str() {
            "bigint" | "boolean" => "integer",
            "text" => "text",
            "bytea" => "blob",
            "double precision" => "real",
            other => panic!("{}.{}: a type warren's SQLite schema has no twin for: {other}", row[0], row[1]),
        };
        schema.columns.entry(row[0].clone()).or_default().push(Column {
            name: row[1].clone(),
            kind: kind.into(),
            not_null: row[3] == "NO",
            // An identity column is SQLite's row id, which has no default either.
            default: (!row[4].is_empty() && row[5] != "YES").then(|| default_as_sqlite(&row[4])),
        });
    }
    let constraint_columns = |kind: &str| {
        psql(
            database,
            &format!(
                "select c.conrelid::regclass::text, c.conname, a.attname from pg_constraint c
                 cross join lateral unnest(c.conkey) with ordinality as k(attnum, position)
                 join pg_attribute a on a.attrelid = c.conrelid and a.attnum = k.attnum
                 where c.contype = '{kind}' and c.connamespace = 'public'::regnamespace
                 order by c.conname, k.position"
            ),
        )
    };
    let mut by_constraint: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    for row in constraint_columns("p") {
        by_constraint.entry((row[0].clone(), row[1].clone())).or_default().push(row[2].clone());
    }
    for ((table, _), columns) in std::mem::take(&mut by_constraint) {
        schema.primary_keys.insert(table, columns);
    }
    for row in constraint_columns("u") {
        by_constraint.entry((row[0].clone(), row[1].clone())).or_default().push(row[2].clone());
    }
    for ((table, _), columns) in by_constraint {
        schema.uniques.entry(table).or_default().insert(columns);
    }
    for row in psql(
        database,
        "select c.conrelid::regclass::text, a.attname, c.confrelid::regclass::text, f.attname,
                case c.confdeltype when 'c' then 'CASCADE' when 'a' then 'NO ACTION' else c.confdeltype::text end
         from pg_constraint c
         join pg_attribute a on a.attrelid = c.conrelid and a.attnum = c.conkey[1]
         join pg_attribute f on f.attrelid = c.confrelid and f.attnum = c.confkey[1]
         where c.contype = 'f' and c.connamespace = 'public'::regnamespace",
    ) {
        schema.foreign_keys.insert((row[0].clone(), row[1].clone(), row[2].clone(), row[3].clone(), row[4].clone()));
    }
    // Named indexes: those that back no constraint.
    for row in psql(
        database,
        "select i.relname, t.relname, x.indisunique, x.indpred is not null,
                (select string_agg(a.attname, ',' order by k.position)
                 from unnest(x.indkey) with ordinality as k(attnum, position)
                 join pg_attribute a on a.attrelid = t.oid and a.attnum = k.attnum)
         from pg_index x join pg_class i on i.oid = x.indexrelid join pg_class t on t.oid = x.indrelid
         where t.relnamespace = 'public'::regnamespace
           and not exists (select 1 from pg_constraint c where c.conindid = x.indexrelid)",
    ) {
        let columns = row[4].split(',').map(str::to_string).collect();
        schema.indexes.insert(row[0].clone(), (row[1].clone(), columns, row[2] == "t", row[3] == "t"));
    }
    schema
}

#[tokio::test]
async fn the_postgres_migrations_build_the_schema_the_sqlite_ones_do() {
    let sqlite = sqlite_schema().await;
    // A database of its own, so the test runs beside others.
    let database = format!("warren_schema_{}", std::process::id());
    psql("postgres", &format!("drop database if exists {database}"));
    psql("postgres", &format!("create database {database}"));
    let postgres = postgres_schema(&database);
    psql("postgres", &format!("drop database {database}"));

    let tables = |s: &Schema| s.columns.keys().cloned().collect::<BTreeSet<_>>();
    assert_eq!(tables(&postgres), tables(&sqlite), "the same tables");
    assert!(sqlite.columns.len() >= 28, "the schema was read: {:?}", tables(&sqlite));
    for (table, columns) in &sqlite.columns {
        assert_eq!(&postgres.columns[table], columns, "the columns of {table}");
    }
    assert_eq!(postgres.primary_keys, sqlite.primary_keys, "primary keys");
    assert_eq!(postgres.uniques, sqlite.uniques, "unique constraints");
    assert_eq!(postgres.foreign_keys, sqlite.foreign_keys, "foreign keys");
    assert_eq!(postgres.indexes, sqlite.indexes, "named indexes");
}

/// Runs `sql` in `database` and returns its rows with every value as text: NULL as `␀`, so an
/// empty text and a missing value differ, and values may hold `|` or a line break.
fn psql_rows(database: &str, sql: &str) -> Vec<Vec<String>> {
    let output = Command::new("psql")
        .args(["-h", "127.0.0.1", "-U", "postgres", "-d", database, "-X", "-v", "ON_ERROR_STOP=1", "-q", "-At"])
        .args(["-P", "null=␀", "-F", "\u{1f}", "-R", "\u{1e}", "-c", sql])
        .output()
        .expect("psql runs");
    assert!(output.status.success(), "psql: {sql}\n{}", String::from_utf8_lossy(&output.stderr));
    let text = String::from_utf8(output.stdout).unwrap();
    let text = text.strip_suffix('\n').unwrap_or(&text);
    text.split('\u{1e}').filter(|r| !r.is_empty()).map(|r| r.split('\u{1f}').map(str::to_string).collect()).collect()
}

/// A SQLite value as text, in the same words as `psql_rows` gives PostgreSQL's: integers and
/// flags as digits, reals in Rust's shortest exact form, blobs as lower-case hex.
fn sqlite_text(row: &sqlx::sqlite::SqliteRow, i: usize) -> String {
    use sqlx::{TypeInfo, ValueRef};
    let raw = row.try_get_raw(i).unwrap();
    if raw.is_null() {
        return "␀".into();
    }
    match raw.type_info().name() {
        "INTEGER" => row.get::<i64, _>(i).to_string(),
        "REAL" => format!("{:?}", row.get::<f64, _>(i)),
        "BLOB" => row.get::<Vec<u8>, _>(i).iter().map(|b| format!("{b:02x}")).collect(),
        _ => row.get::<String, _>(i),
    }
}

/// Issue 33, must-have 1: `warren copy-to-postgres` copies a database warren wrote (a few polls
/// of a real broker) and the rows a short run does not write (custody with binary bodies and
/// flags, a throttled login count, a real alert value, node flags, accounts) into an empty
/// PostgreSQL database, every table value for value; it refuses a database that is not empty,
/// and ids go on after the copied ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn warren_copy_to_postgres_copies_every_row_value_for_value() {
    let vhost = common::TestVhost::create("pgcopy").await;
    let connection = vhost.connect().await;
    let channel = vhost.channel(&connection).await;
    common::declare(&channel, "orders", false).await;
    common::publish(&channel, "orders", 3, Default::default()).await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("warren.db");
    let warren = common::Warren::start_with_database(
        &path,
        &format!("[[brokers]]\nname = \"local\"\nvhosts_include = [{:?}]\npoll_interval_secs = 1\n", vhost.name),
    )
    .await;
    let queue = format!("/api/v1/queues/local/{}/orders", warren::broker::management::encode_segment(&vhost.name));
    common::wait_for("two polls of orders", std::time::Duration::from_secs(30), || async {
        let (status, body) = warren.get_json(&format!("{queue}/history?range=15m")).await;
        let points = body["points"].as_array().map_or(0, Vec::len);
        if status == 200 && points >= 2 {
            Ok(())
        } else {
            Err(format!("{status}: {body}"))
        }
    })
    .await;
    warren.stop().await;
    connection.close(0, "done".into()).await.ok();

    let db = warren::history::open(&path).await.unwrap();
    for insert in [
        "insert into custody_messages (broker, vhost, queue, received_at, exchange, routing_key, properties,
             properties_json, body, size, message_id, reason, original_queue, error, redelivered, state, body_nul)
         values ('local', 'v', 'work.dlq', 1796634513, '', 'work', x'00ff10', '{\"headers\":{}}', x'00ff7b227c227d0a',
             11, 'm|1', 'rejected', 'work', 'Über: pw=x\ny', 1, 'held', 1),
         ('local', 'v', 'work.dlq', 1796634514, 'dlx', '', x'', '{}', x'', 0, null, null, null, null, 0, 'replayed', null)",
        "insert into audit_log (at, actor, broker, vhost, queue, action, request, outcome, kind, source, attempts,
             throttled, last_at, bucket)
         values (1099511627776, 'mallory', '', '', '', 'login', '{}', 'failed', 'login', '192.0.2.9', 12, 3, 1059, 16)",
        "insert into audit_messages (audit_id, position, message_id, outcome, detail)
         values ((select max(id) from audit_log), 0, 'm1', 'moved', 'to orders')",
        "insert into alert_history (at, rule_id, alert_key, from_phase, to_phase, value, note, silenced)
         values (1000, 'deep', '{}', 'ok', 'firing', 3.3333333333333335, null, 1)",
        "insert into node_samples (broker_id, node, ts, running, mem_alarm, disk_free_alarm, mem_used)
         values ((select min(id) from brokers), 'rabbit@a', 1000, 1, 0, null, 123)",
        "insert into users (name, role, password_hash, created_at, disabled) values ('ada', 'admin', 'h', 1, 0)",
        "insert into sessions (id_hash, user_name, csrf_token, created_at, expires_at, last_seen_at)
         values ('s', 'ada', 'c', 1, 2, 1)",
    ] {
        sqlx::query(insert).execute(&db).await.unwrap();
    }
    db.close().await;

    let database = format!("warren_copy_{}", std::process::id());
    psql("postgres", &format!("drop database if exists {database}"));
    psql("postgres", &format!("create database {database}"));
    let url = format!("postgres://postgres@127.0.0.1:5432/{database}");
    let copy = || {
        Command::new(env!("CARGO_BIN_EXE_warren"))
            .args(["copy-to-postgres", &url, "--database"])
            .arg(&path)
            .output()
            .unwrap()
    };
    let first = copy();
    assert!(first.status.success(), "{}", String::from_utf8_lossy(&first.stderr));
    let said = String::from_utf8_lossy(&first.stdout);
    assert!(said.contains("custody_messages: 2 rows") && said.contains("counted on both sides"), "{said}");

    let db = warren::history::open(&path).await.unwrap();
    let mut compared = 0;
    let tables = psql_rows(&database, "select table_name from information_schema.tables where table_schema = 'public'");
    for table in tables.iter().map(|t| t[0].as_str()).filter(|t| *t != "_sqlx_migrations") {
        let columns = psql_rows(
            &database,
            &format!(
                "select column_name, data_type from information_schema.columns where table_name = '{table}'
                 order by ordinal_position"
            ),
        );
        let names = columns.iter().map(|c| c[0].as_str()).collect::<Vec<_>>().join(", ");
        let mut from_sqlite: Vec<Vec<String>> = sqlx::query(&format!("select {names} from {table}"))
            .fetch_all(&db)
            .await
            .unwrap()
            .iter()
            .map(|row| (0..columns.len()).map(|i| sqlite_text(row, i)).collect())
            .collect();
        let as_text = columns
            .iter()
            .map(|c| match c[1].as_str() {
                "boolean" => format!("{}::int::text", c[0]),
                "bytea" => format!("encode({}, 'hex')", c[0]),
                _ => format!("{}::text", c[0]),
            })
            .collect::<Vec<_>>()
            .join(", ");
        let mut from_postgres = psql_rows(&database, &format!("select {as_text} from {table}"));
        for row in &mut from_postgres {
            for (value, column) in row.iter_mut().zip(&columns) {
                if column[1] == "double precision" && value != "␀" {
                    *value = format!("{:?}", value.parse::<f64>().unwrap());
                }
            }
        }
        from_sqlite.sort();
        from_postgres.sort();
        assert_eq!(from_postgres, from_sqlite, "{table}");
        compared += from_sqlite.len();
    }
    db.close().await;
    assert!(compared > 10, "the copy held rows: {compared}");
    for table in ["queue_samples", "broker_samples", "queues", "custody_messages", "users", "sessions"] {
        assert_ne!(psql_rows(&database, &format!("select count(*) from {table}"))[0][0], "0", "{table}");
    }

    // Copied into again: refused, and nothing added.
    let again = copy();
    assert!(!again.status.success());
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("already holds"),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
    assert_eq!(psql_rows(&database, "select count(*) from custody_messages")[0][0], "2");
    // A new row's id follows the copied ones.
    psql(
        &database,
        "insert into audit_log (at, actor, broker, vhost, queue, action, request, outcome)
         values (1, 'new', '', '', '', 'x', '{}', 'done')",
    );
    let next = psql_rows(
        &database,
        "select (select id from audit_log where actor = 'new') > (select max(id) from audit_log where actor <> 'new')",
    );
    assert_eq!(next[0][0], "t", "the new id is past every copied one");
    psql("postgres", &format!("drop database {database}"));
}
