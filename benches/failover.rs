//! Failover time of replicas on PostgreSQL (issue 33): three warren processes on one database
//! share `WARREN_BENCH_BROKERS` brokers (default 3, each the local broker under its own name);
//! the holder of the first broker is killed with SIGKILL, and the time until another replica has
//! polled that broker is measured; a new replica takes the dead one's place, and again, for
//! `WARREN_BENCH_ROUNDS` kills (default 5), at lease times of 15 s (the default) and 5 s.
//!
//! `cargo bench --bench failover` (RabbitMQ with the management plugin at 127.0.0.1:15672,
//! guest/guest; PostgreSQL at 127.0.0.1:5432 as postgres with trust authentication). It makes
//! the database `warren_bench_failover` and drops it at the end. Results also go to
//! `target/bench-failover.json` (or `$WARREN_BENCH_JSON`).

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use sqlx::Connection;

#[allow(dead_code)]
#[path = "support/broker.rs"]
mod support;

use support::{env_or, MANAGEMENT};

const ADMIN: &str = "postgres://postgres@127.0.0.1:5432/postgres";
const DATABASE: &str = "warren_bench_failover";

async fn admin(sql: &str) {
    let mut conn = sqlx::PgConnection::connect(ADMIN).await.expect("PostgreSQL at 127.0.0.1:5432");
    sqlx::query(sql).execute(&mut conn).await.unwrap_or_else(|e| panic!("{sql}: {e}"));
}

struct Replica {
    child: Child,
    base: String,
}

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn start(dir: &std::path::Path, brokers: usize, lease_secs: u64) -> Replica {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let mut toml = format!(
        "listen = \"127.0.0.1:{port}\"\ndatabase_url = \"postgres://postgres@127.0.0.1:5432/{DATABASE}\"\n\
         lease_secs = {lease_secs}\n"
    );
    for i in 0..brokers {
        toml.push_str(&format!(
            "[[brokers]]\nname = \"b{i}\"\nmanagement_url = \"{MANAGEMENT}\"\nvhosts_include = [\"/\"]\n\
             poll_interval_secs = 1\n"
        ));
    }
    let config = dir.join(format!("{port}.toml"));
    std::fs::write(&config, toml).unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_warren"))
        .arg("--config")
        .arg(&config)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("warren starts");
    let replica = Replica { child, base: format!("http://127.0.0.1:{port}") };
    let started = Instant::now();
    while reqwest::get(format!("{}/healthz", replica.base)).await.map(|r| r.status().is_success()).ok() != Some(true) {
        assert!(started.elapsed() < Duration::from_secs(60), "a replica did not start");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    replica
}

/// The pid of the live holder of `lease`, once one holds it.
async fn holder(lease: &str) -> u32 {
    let url = format!("postgres://postgres@127.0.0.1:5432/{DATABASE}");
    loop {
        let mut conn = sqlx::PgConnection::connect(&url).await.unwrap();
        let holder: Option<String> = sqlx::query_scalar(
            "select holder from leases where name = $1 and expires_at > (extract(epoch from clock_timestamp()) * 1000)::bigint",
        )
        .bind(lease)
        .fetch_optional(&mut conn)
        .await
        .unwrap();
        if let Some(holder) = holder {
            return holder.split("(pid ").nth(1).unwrap().split(',').next().unwrap().parse().unwrap();
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Whether replica `r` polls broker `name` itself and polled it after `since`.
async fn polls_since(r: &Replica, name: &str, since: chrono::DateTime<chrono::Utc>) -> bool {
    let Ok(response) = reqwest::get(format!("{}/api/v1/brokers", r.base)).await else { return false };
    let Ok(brokers) = response.json::<Value>().await else { return false };
    let Some(b) = brokers.as_array().and_then(|a| a.iter().find(|b| b["name"] == name)) else { return false };
    let last = b["status"]["last_success"].as_str().and_then(|t| t.parse::<chrono::DateTime<chrono::Utc>>().ok());
    b["status"]["polled_by"].is_null() && last.is_some_and(|t| t > since)
}

async fn run(brokers: usize, rounds: usize, lease_secs: u64) -> Vec<f64> {
    admin(&format!("drop database if exists {DATABASE} with (force)")).await;
    admin(&format!("create database {DATABASE}")).await;
    let dir = tempfile::tempdir().unwrap();
    let mut replicas = Vec::new();
    for _ in 0..3 {
        replicas.push(start(dir.path(), brokers, lease_secs).await);
    }
    let mut times = Vec::new();
    for round in 0..rounds {
        // Settled: every replica up a few lease rounds.
        tokio::time::sleep(Duration::from_secs(lease_secs)).await;
        let pid = holder("broker:b0").await;
        let victim = replicas.iter().position(|r| r.child.id() == pid).expect("a replica of this run holds b0");
        let killed_at = chrono::Utc::now();
        let started = Instant::now();
        replicas.remove(victim);
        loop {
            let mut taken = false;
            for r in &replicas {
                taken |= polls_since(r, "b0", killed_at).await;
            }
            if taken {
                break;
            }
            assert!(started.elapsed() < Duration::from_secs(120), "b0 was not taken over");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let secs = started.elapsed().as_secs_f64();
        println!("  lease {lease_secs:>2} s, kill {}: b0 polled again after {secs:.1} s", round + 1);
        times.push(secs);
        replicas.push(start(dir.path(), brokers, lease_secs).await);
    }
    drop(replicas);
    admin(&format!("drop database if exists {DATABASE} with (force)")).await;
    times
}

fn summary(times: &[f64]) -> Value {
    let mut sorted = times.to_vec();
    sorted.sort_by(f64::total_cmp);
    json!({"runs": times, "min": sorted.first(), "median": sorted.get(sorted.len() / 2), "max": sorted.last()})
}

#[tokio::main]
async fn main() {
    let brokers = env_or("WARREN_BENCH_BROKERS", 3);
    let rounds = env_or("WARREN_BENCH_ROUNDS", 5);
    println!("failover: 3 replicas, {brokers} brokers, {rounds} kills per lease time");
    let mut results = serde_json::Map::new();
    for lease_secs in [15, 5] {
        let times = run(brokers, rounds, lease_secs).await;
        let s = summary(&times);
        println!(
            "lease {lease_secs:>2} s: min {:.1} s, median {:.1} s, max {:.1} s",
            s["min"].as_f64().unwrap(),
            s["median"].as_f64().unwrap(),
            s["max"].as_f64().unwrap()
        );
        results.insert(format!("lease_{lease_secs}s"), s);
    }
    let path = std::env::var("WARREN_BENCH_JSON").unwrap_or_else(|_| "target/bench-failover.json".into());
    std::fs::write(&path, serde_json::to_string_pretty(&Value::Object(results)).unwrap()).unwrap();
}
