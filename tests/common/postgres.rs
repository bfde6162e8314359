//! A PostgreSQL database of a test's own on the machine's server (127.0.0.1:5432, trust
//! authentication; `.ci/run` checks it), dropped at the end.

pub const ADMIN_URL: &str = "postgres://postgres@127.0.0.1:5432/postgres";

pub struct Database {
    pub name: String,
}

impl Database {
    pub async fn create(test: &str) -> Database {
        let name = format!("warren_it_{test}_{}", std::process::id());
        admin(&format!("drop database if exists {name} with (force)")).await;
        admin(&format!("create database {name}")).await;
        Database { name }
    }

    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:5432/{}", self.name)
    }
}

impl Drop for Database {
    fn drop(&mut self) {
        let sql = format!("drop database if exists {} with (force)", self.name);
        let _ = std::thread::spawn(move || {
            tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(admin(&sql))
        })
        .join();
    }
}

/// Runs `sql` on the server's `postgres` database.
pub async fn admin(sql: &str) {
    use sqlx::Connection;
    let mut conn = sqlx::PgConnection::connect(ADMIN_URL)
        .await
        .unwrap_or_else(|e| panic!("PostgreSQL at {ADMIN_URL} (.ci/run checks it): {e}"));
    sqlx::query(sql).execute(&mut conn).await.unwrap_or_else(|e| panic!("{sql}: {e}"));
}
