//! Several warren processes on one PostgreSQL database (issue 33, must-haves 2 to 4): the
//! brokers' work divided by leases, every replica serving every broker's pages, and failover
//! when the holder of a broker is killed, paused past its lease, or cut off from the database.
//! Each replica is the real binary in a process of its own, so that it can be killed with
//! SIGKILL and paused with SIGSTOP.

mod common;

use std::collections::BTreeMap;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::postgres::Database;
use common::{encode, wait_for, TestVhost};
use serde_json::Value;

/// The lease time of the replicas under test: the default, so that the failover measured is the
/// one an operator gets.
const LEASE_SECS: u64 = 15;

/// The database server is shared by this file's tests: the test that restarts it holds the
/// write half, every other test the read half.
static DATABASE_SERVER: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());

/// Issue 33: another replica polls a dead one's brokers within 30 s.
const FAILOVER_LIMIT: Duration = Duration::from_secs(30);

struct Replica {
    child: Child,
    base: String,
    http: reqwest::Client,
}

impl Replica {
    /// Starts warren on `database` watching one broker per vhost of `vhosts` (named `b0`,
    /// `b1`, ...: each on the test broker, in its own vhost).
    /// With `tables` (alert rules, notification channels) in the configuration.
    async fn start(
        dir: &std::path::Path,
        index: usize,
        database: &Database,
        vhosts: &[String],
        tables: &str,
    ) -> Replica {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let mut toml = format!(
            "listen = \"127.0.0.1:{port}\"\ndatabase_url = {:?}\nlease_secs = {LEASE_SECS}\nalert_repeat_secs = 0\n{tables}\n",
            database.url()
        );
        for (i, vhost) in vhosts.iter().enumerate() {
            toml.push_str(&format!(
                "[[brokers]]\nname = \"b{i}\"\n{}vhosts_include = [{vhost:?}]\npoll_interval_secs = 1\n",
                common::broker().toml()
            ));
        }
        let config = dir.join(format!("replica{index}.toml"));
        std::fs::write(&config, toml).unwrap();
        let log = std::fs::File::create(dir.join(format!("replica{index}.log"))).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_warren"))
            .arg("--config")
            .arg(&config)
            .env("RUST_LOG", "warren=info")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("warren starts");
        let replica = Replica { child, base: format!("http://127.0.0.1:{port}"), http: reqwest::Client::new() };
        wait_for("the replica answers", Duration::from_secs(60), || async {
            match replica.http.get(format!("{}/healthz", replica.base)).send().await {
                Ok(r) if r.status().is_success() => Ok(()),
                other => Err(format!("{other:?}")),
            }
        })
        .await;
        replica
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    async fn brokers(&self) -> Result<Vec<Value>, String> {
        let response =
            self.http.get(format!("{}/api/v1/brokers", self.base)).send().await.map_err(|e| e.to_string())?;
        let body: Value = response.json().await.map_err(|e| e.to_string())?;
        body.as_array().cloned().ok_or_else(|| body.to_string())
    }

    /// This replica's view of broker `name`.
    async fn broker(&self, name: &str) -> Result<Value, String> {
        self.brokers().await?.into_iter().find(|b| b["name"] == name).ok_or_else(|| format!("no broker {name}"))
    }

    /// The JSON answer of `path`.
    async fn get(&self, path: &str) -> Result<Value, String> {
        let response = self.http.get(format!("{}{path}", self.base)).send().await.map_err(|e| e.to_string())?;
        response.json().await.map_err(|e| e.to_string())
    }

    fn signal(&self, signal: &str) {
        let status = Command::new("kill").args([signal, &self.pid().to_string()]).status().unwrap();
        assert!(status.success(), "kill {signal}");
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        // A paused replica is resumed first, so that SIGKILL ends it at once.
        let _ = Command::new("kill").args(["-CONT", &self.pid().to_string()]).stderr(Stdio::null()).status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The live leases of the work (not the heartbeats), by name, each with its holder's pid.
async fn holders(database: &Database) -> BTreeMap<String, u32> {
    use sqlx::Connection;
    let mut conn = sqlx::PgConnection::connect(&database.url()).await.unwrap();
    let rows: Vec<(String, String)> = sqlx::query_as(
        "select name, holder from leases
         where name not like 'replica:%' and expires_at > (extract(epoch from clock_timestamp()) * 1000)::bigint",
    )
    .fetch_all(&mut conn)
    .await
    .unwrap();
    let pid = |holder: &str| -> u32 {
        let after = holder.split("(pid ").nth(1).expect("a holder names its pid");
        after.split(',').next().unwrap().parse().unwrap()
    };
    rows.into_iter().map(|(name, holder)| (name, pid(&holder))).collect()
}

/// `n` replicas on `database`, each watching one broker per vhost of `names` with `tables` in its
/// configuration, once the brokers and the housekeeping have spread over them; with who holds what.
async fn start_replicas(
    dir: &std::path::Path,
    database: &Database,
    n: usize,
    names: &[String],
    tables: &str,
) -> (Vec<Replica>, BTreeMap<String, u32>) {
    let mut replicas = Vec::new();
    for i in 0..n {
        replicas.push(Replica::start(dir, i, database, names, tables).await);
    }
    let held = spread(database, names.len() + 1, &replicas.iter().collect::<Vec<_>>()).await;
    (replicas, held)
}

/// Waits until every broker and the housekeeping are held, spread over `live` replicas (shares
/// within one of each other); returns the holders.
async fn spread(database: &Database, work: usize, live: &[&Replica]) -> BTreeMap<String, u32> {
    wait_for("the work spread over the live replicas", Duration::from_secs(90), || async {
        let held = holders(database).await;
        let mut shares: Vec<usize> =
            live.iter().map(|r| held.values().filter(|pid| **pid == r.pid()).count()).collect();
        shares.sort();
        let even = shares.first().is_some_and(|least| shares.last().unwrap() - least <= 1);
        match held.len() == work && even && shares.iter().sum::<usize>() == work {
            true => Ok(held),
            false => Err(format!("held {held:?}, shares {shares:?}")),
        }
    })
    .await
}

/// Waits until a replica other than `gone` polls broker `name` itself and has polled it since
/// `since`; returns which replica and when it was seen.
async fn taken_over<'a>(
    replicas: &'a [Replica],
    gone: usize,
    name: &str,
    since: chrono::DateTime<chrono::Utc>,
) -> usize {
    wait_for(&format!("another replica to poll {name}"), FAILOVER_LIMIT + Duration::from_secs(30), || async {
        for (i, replica) in replicas.iter().enumerate().filter(|(i, _)| *i != gone) {
            let Ok(broker) = replica.broker(name).await else { continue };
            let status = &broker["status"];
            let success = status["last_success"].as_str().and_then(|t| t.parse::<chrono::DateTime<chrono::Utc>>().ok());
            if status["polled_by"].is_null() && status["up"] == true && success.is_some_and(|t| t > since) {
                return Ok(i);
            }
        }
        Err(format!("not yet: {:?}", replicas.iter().map(|r| r.base.clone()).collect::<Vec<_>>()))
    })
    .await
}

/// A webhook receiver on loopback that keeps every body it gets, and an Alertmanager's
/// `/api/v2/alerts` that counts the posts.
#[derive(Clone, Default)]
struct Sink {
    bodies: std::sync::Arc<std::sync::Mutex<Vec<Value>>>,
    alertmanager_posts: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl Sink {
    async fn start() -> (Sink, String) {
        let sink = Sink::default();
        let kept = sink.clone();
        let posts = sink.alertmanager_posts.clone();
        let app = axum::Router::new()
            .route(
                "/hook",
                axum::routing::post(move |axum::Json(body): axum::Json<Value>| {
                    let kept = kept.clone();
                    async move {
                        kept.bodies.lock().unwrap().push(body);
                        "ok"
                    }
                }),
            )
            .route(
                "/api/v2/alerts",
                axum::routing::post(move || {
                    posts.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    async { "" }
                }),
            );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        (sink, url)
    }

    fn alertmanager_posts(&self) -> usize {
        self.alertmanager_posts.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// How many notifications of `kind` ("firing", "resolved") came.
    fn count(&self, kind: &str) -> usize {
        self.bodies.lock().unwrap().iter().filter(|b| b["kind"] == kind).count()
    }
}

/// The rows waiting in the notification outbox.
async fn outbox(database: &Database) -> i64 {
    use sqlx::Connection;
    let mut conn = sqlx::PgConnection::connect(&database.url()).await.unwrap();
    sqlx::query_scalar("select count(*) from notification_outbox").fetch_one(&mut conn).await.unwrap()
}

async fn vhosts(test: &str, n: usize) -> Vec<TestVhost> {
    let mut vhosts = Vec::new();
    for i in 0..n {
        vhosts.push(TestVhost::create(&format!("{test}{i}")).await);
    }
    vhosts
}

/// Three replicas divide three brokers and the housekeeping; every replica shows every broker's
/// queues; `kill -9` of a broker's holder, and another polls it within 30 s (measured); the two
/// left divide the work again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_divide_the_brokers_and_a_killed_holders_brokers_move_within_30_s() {
    let _shared = DATABASE_SERVER.read().await;
    let database = Database::create("replicas_kill").await;
    let vhosts = vhosts("repkill", 3).await;
    let names: Vec<String> = vhosts.iter().map(|v| v.name.clone()).collect();
    // A queue with 7 messages in the first broker's vhost: every replica must show it.
    let connection = vhosts[0].connect().await;
    let channel = vhosts[0].channel(&connection).await;
    common::declare(&channel, "orders", false).await;
    common::publish(&channel, "orders", 7, Default::default()).await;

    let dir = tempfile::tempdir().unwrap();
    let (mut replicas, held) = start_replicas(dir.path(), &database, 3, &names, "").await;

    // Live pages on every replica: the polling one's and the others', which read the database.
    let path = format!("/api/v1/queues/b0/{}/orders", encode(&names[0]));
    for replica in &replicas {
        wait_for("every replica shows the queue's 7 messages", Duration::from_secs(60), || async {
            let queue: Value = replica
                .http
                .get(format!("{}{path}", replica.base))
                .send()
                .await
                .map_err(|e| e.to_string())?
                .json()
                .await
                .map_err(|e| e.to_string())?;
            match queue["ready"].as_u64() {
                Some(7) => Ok(()),
                _ => Err(queue.to_string()),
            }
        })
        .await;
        let broker = replica.broker("b0").await.unwrap();
        let polls = replica.pid() == held["broker:b0"];
        assert_eq!(
            broker["status"]["polled_by"].is_null(),
            polls,
            "who polls b0, as replica {} says: {broker}",
            replica.pid()
        );
    }

    // The listings too: nodes, connections and exchanges as the holder read them, on every
    // replica (the others read them from the database).
    let exchange = "repkill.events";
    channel
        .exchange_declare(exchange.into(), lapin::ExchangeKind::Topic, Default::default(), Default::default())
        .await
        .unwrap();
    let holder = replicas.iter().find(|r| r.pid() == held["broker:b0"]).unwrap();
    for replica in &replicas {
        wait_for("every replica shows b0's nodes, connections and exchanges", Duration::from_secs(60), || async {
            let nodes = replica.get("/api/v1/brokers/b0/nodes").await?;
            let connections = replica.get("/api/v1/brokers/b0/connections").await?;
            let exchanges = replica.get("/api/v1/brokers/b0/exchanges").await?;
            let node_names =
                |v: &Value| v["nodes"].as_array().map(|n| n.iter().map(|n| n["name"].clone()).collect::<Vec<_>>());
            let from_holder = holder.get("/api/v1/brokers/b0/nodes").await?;
            let has_exchange =
                exchanges["exchanges"].as_array().is_some_and(|x| x.iter().any(|x| x["name"] == exchange));
            let listed = connections["connections"].as_array().is_some_and(|c| !c.is_empty());
            match node_names(&nodes).is_some_and(|n| !n.is_empty())
                && node_names(&nodes) == node_names(&from_holder)
                && listed
                && has_exchange
            {
                true => Ok(()),
                false => Err(format!(
                    "{} shows nodes {nodes}, connections {connections}, exchanges {exchanges}",
                    replica.base
                )),
            }
        })
        .await;
    }

    // The broker's call costs and cadences are the holder's own: a follower names the holder
    // and leaves them out (never its own zeros).
    for replica in &replicas {
        let load = replica.get("/api/v1/brokers/b0").await.unwrap();
        let polls = replica.pid() == held["broker:b0"];
        assert_eq!(load["polled_by"].is_null(), polls, "{load}");
        assert_eq!(load["interval_secs"].is_number(), polls, "{load}");
    }

    // SIGKILL the holder of b0: no clean shutdown, its leases run out.
    let victim = replicas.iter().position(|r| r.pid() == held["broker:b0"]).unwrap();
    let killed_at = chrono::Utc::now();
    let started = Instant::now();
    replicas[victim].child.kill().unwrap();
    replicas[victim].child.wait().unwrap();
    let by = taken_over(&replicas, victim, "b0", killed_at).await;
    let failover = started.elapsed();
    eprintln!(
        "failover of b0 after kill -9: {:.1} s (lease {LEASE_SECS} s), taken by replica {by}",
        failover.as_secs_f64()
    );
    assert!(failover <= FAILOVER_LIMIT, "b0 was polled again after {failover:?}");

    let live: Vec<&Replica> = replicas.iter().enumerate().filter(|(i, _)| *i != victim).map(|(_, r)| r).collect();
    let after = spread(&database, 4, &live).await;
    assert!(after.values().all(|pid| *pid != replicas[victim].pid()), "{after:?}");
    connection.close(0, "done".into()).await.ok();
}

/// A holder paused with SIGSTOP past its lease: another replica takes its broker over, and once
/// resumed, the paused one polls it no more (it lost the lease; its writes would be fenced:
/// `tests/conformance/leases.rs` checks the fenced poll write itself).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_paused_past_its_lease_loses_its_broker_and_does_not_take_it_back() {
    let _shared = DATABASE_SERVER.read().await;
    let database = Database::create("replicas_stop").await;
    let vhosts = vhosts("repstop", 2).await;
    let names: Vec<String> = vhosts.iter().map(|v| v.name.clone()).collect();
    let dir = tempfile::tempdir().unwrap();
    let (replicas, held) = start_replicas(dir.path(), &database, 3, &names, "").await;
    let paused = replicas.iter().position(|r| r.pid() == held["broker:b1"]).unwrap();

    let stopped_at = chrono::Utc::now();
    let started = Instant::now();
    replicas[paused].signal("-STOP");
    let by = taken_over(&replicas, paused, "b1", stopped_at).await;
    eprintln!("failover of b1 after SIGSTOP: {:.1} s", started.elapsed().as_secs_f64());
    // Past the lease for sure, then resumed.
    tokio::time::sleep(Duration::from_secs(LEASE_SECS).saturating_sub(started.elapsed())).await;
    replicas[paused].signal("-CONT");

    // The resumed replica says another polls b1, and the lease stays with the one that took it.
    wait_for("the resumed replica to follow b1", Duration::from_secs(30), || async {
        let broker = replicas[paused].broker("b1").await?;
        match broker["status"]["polled_by"].as_str() {
            Some(holder) if holder.contains(&format!("pid {}", replicas[by].pid())) => Ok(()),
            _ => Err(broker["status"].to_string()),
        }
    })
    .await;
    for _ in 0..5 {
        assert_eq!(holders(&database).await["broker:b1"], replicas[by].pid(), "b1 stays with the replica that took it");
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// A holder's connections ended by the server (`pg_terminate_backend`): it reconnects and keeps
/// its leases, which are rows and not sessions. Then PostgreSQL itself restarted
/// (`pg_ctlcluster`): every replica recovers without an operator, every broker is polled again
/// and the work stays spread. The server restarts under the write half of `DATABASE_SERVER`, so
/// that no other test of this file runs meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_recover_from_ended_connections_and_a_postgres_restart_without_an_operator() {
    let _alone = DATABASE_SERVER.write().await;
    let database = Database::create("replicas_restart").await;
    let vhosts = vhosts("represtart", 2).await;
    let names: Vec<String> = vhosts.iter().map(|v| v.name.clone()).collect();
    let dir = tempfile::tempdir().unwrap();
    let (mut replicas, held) = start_replicas(dir.path(), &database, 3, &names, "").await;

    let holder = replicas.iter().position(|r| r.pid() == held["broker:b0"]).unwrap();
    let cut_at = chrono::Utc::now();
    common::postgres::admin(&format!(
        "select pg_terminate_backend(pid) from pg_stat_activity where application_name = 'warren (pid {})'",
        replicas[holder].pid()
    ))
    .await;
    // Polled since, by the same replica: its leases did not move.
    let by = taken_over(&replicas, usize::MAX, "b0", cut_at).await;
    assert_eq!(by, holder, "the holder whose connections ended keeps its broker");

    let restarted_at = chrono::Utc::now();
    let started = Instant::now();
    let (version, cluster) = cluster();
    let status = Command::new("pg_ctlcluster").args([&version, &cluster, "restart"]).status().unwrap();
    assert!(status.success(), "pg_ctlcluster {version} {cluster} restart");
    eprintln!("PostgreSQL restarted in {:.1} s", started.elapsed().as_secs_f64());
    for name in ["b0", "b1"] {
        let by = taken_over(&replicas, usize::MAX, name, restarted_at).await;
        eprintln!(
            "{name} polled again {:.1} s after the restart began, by replica {by}",
            started.elapsed().as_secs_f64()
        );
    }
    spread(&database, 3, &replicas.iter().collect::<Vec<_>>()).await;
    for replica in &mut replicas {
        assert!(replica.child.try_wait().unwrap().is_none(), "every replica still runs");
    }
}

/// The PostgreSQL cluster on port 5432 (`pg_lsclusters`): its version and name.
fn cluster() -> (String, String) {
    let listed = Command::new("pg_lsclusters").arg("--no-header").output().expect("pg_lsclusters (postgresql-common)");
    let text = String::from_utf8_lossy(&listed.stdout);
    let line = text.lines().map(|l| l.split_whitespace().collect::<Vec<_>>()).find(|f| f.get(2) == Some(&"5432"));
    let fields = line.unwrap_or_else(|| panic!("no PostgreSQL cluster on port 5432 in: {text}"));
    (fields[0].to_string(), fields[1].to_string())
}

/// An alert fires once and resolves once although the replica that evaluated it was killed
/// between the two: the replica that takes the broker over continues from the stored state (it
/// does not fire again), and the replicas' dispatchers share the outbox (none sends twice).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_alert_fires_once_and_resolves_once_across_a_failover() {
    let _shared = DATABASE_SERVER.read().await;
    let database = Database::create("replicas_alert").await;
    let vhosts = vhosts("repalert", 1).await;
    let names = vec![vhosts[0].name.clone()];
    let connection = vhosts[0].connect().await;
    let channel = vhosts[0].channel(&connection).await;
    common::declare(&channel, "work", false).await;
    let (sink, hook) = Sink::start().await;
    let tables = format!(
        "[[alerts]]\nid = \"deep\"\nname = \"Deep\"\nmetric = \"ready\"\ncomparator = \">\"\nthreshold = 0\n\
         severity = \"warning\"\nscope = {{ queue = \"work\" }}\n\
         [[notifications]]\nid = \"hook\"\nname = \"hook\"\ntype = \"webhook\"\nurl = {hook:?}\n\
         [[notifications]]\nid = \"am\"\nname = \"am\"\ntype = \"alertmanager\"\nurl = {:?}\nresend_secs = 1\n",
        hook.trim_end_matches("/hook")
    );
    let dir = tempfile::tempdir().unwrap();
    let (mut replicas, held) = start_replicas(dir.path(), &database, 2, &names, &tables).await;

    common::publish(&channel, "work", 3, Default::default()).await;
    wait_for("the firing notification, delivered and recorded", Duration::from_secs(60), || async {
        match (sink.count("firing"), outbox(&database).await) {
            (1, 0) => Ok(()),
            other => Err(format!("firings, outbox: {other:?}")),
        }
    })
    .await;
    // One replica re-sends the firing alert to Alertmanager every second, not each of them.
    let (before, window) = (sink.alertmanager_posts(), Duration::from_secs(8));
    tokio::time::sleep(window).await;
    let resends = sink.alertmanager_posts() - before;
    assert!((4..=10).contains(&resends), "{resends} re-sends in {window:?} at one a second from one replica");

    let victim = replicas.iter().position(|r| r.pid() == held["broker:b0"]).unwrap();
    let killed_at = chrono::Utc::now();
    replicas[victim].child.kill().unwrap();
    replicas[victim].child.wait().unwrap();
    taken_over(&replicas, victim, "b0", killed_at).await;
    // Several evaluations by the new holder, the queue still deep.
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(sink.count("firing"), 1, "the new holder did not fire again: {:?}", sink.bodies.lock().unwrap());

    channel.queue_purge("work".into(), Default::default()).await.unwrap();
    wait_for("the resolved notification", Duration::from_secs(60), || async {
        match sink.count("resolved") {
            1 => Ok(()),
            n => Err(format!("{n} resolved")),
        }
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!((sink.count("firing"), sink.count("resolved")), (1, 1), "{:?}", sink.bodies.lock().unwrap());
    // And one episode in the history, as every replica tells it: fired once, resolved once.
    let survivor = &replicas[1 - victim];
    let history: Value = survivor
        .http
        .get(format!("{}/api/v1/alerts/history", survivor.base))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let phases: Vec<&str> = history.as_array().unwrap().iter().filter_map(|h| h["to"].as_str()).collect();
    assert_eq!(phases, ["resolved", "firing"], "newest first: {history}");
    connection.close(0, "done".into()).await.ok();
}

/// Custody intake moves with its broker: the replica that holds b0 takes its dead letters into
/// custody, is killed mid-intake, and the replica that takes b0 over takes in the rest. Every id
/// ends in custody (ids compared as sets); duplicates only from the batch the kill caught between
/// its commit and its ack.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn custody_intake_killed_mid_way_is_finished_by_the_next_holder_and_loses_nothing() {
    let _shared = DATABASE_SERVER.read().await;
    use lapin::options::QueueDeclareOptions;
    const N: usize = 20_000;
    let database = Database::create("replicas_custody").await;
    let vhosts = vhosts("repcustody", 1).await;
    let names = vec![vhosts[0].name.clone()];
    let connection = vhosts[0].connect().await;
    let channel = vhosts[0].channel(&connection).await;
    let dir = tempfile::tempdir().unwrap();
    let tables = "[[custody]]\nqueue = \"*.dlq\"\n";
    let (mut replicas, held) = start_replicas(dir.path(), &database, 2, &names, tables).await;
    // The dead-letter queue appears only now, so that intake starts under watch, not while the
    // replicas were still spreading the work.
    channel
        .queue_declare(
            "work.dlq".into(),
            QueueDeclareOptions { durable: true, ..Default::default() },
            Default::default(),
        )
        .await
        .unwrap();
    // Published while intake runs: the kill comes mid-intake whichever is faster.
    let publishing = tokio::spawn({
        let channel = channel.clone();
        async move {
            publish_confirmed(&channel, "work.dlq", N, |i| {
                let properties =
                    lapin::BasicProperties::default().with_message_id(format!("c{i}").into()).with_delivery_mode(2);
                (properties, format!("{{\"n\": {i}, \"pad\": \"{}\"}}", "x".repeat(500)))
            })
            .await
        }
    });
    // Killed once the first batches are in: counted on one connection every 10 ms, as intake
    // takes thousands a second.
    let mut conn = {
        use sqlx::Connection;
        sqlx::PgConnection::connect(&database.url()).await.unwrap()
    };
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let kept: i64 = sqlx::query_scalar("select count(*) from custody_messages").fetch_one(&mut conn).await.unwrap();
        if kept >= 200 {
            break;
        }
        assert!(Instant::now() < deadline, "intake did not start: {kept} in custody");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let victim = replicas.iter().position(|r| r.pid() == held["broker:b0"]).unwrap();
    replicas[victim].child.kill().unwrap();
    replicas[victim].child.wait().unwrap();
    let at_kill = custody_count(&database).await as usize;
    publishing.await.unwrap();

    wait_for("the rest taken in by the next holder", Duration::from_secs(180), || async {
        let kept: std::collections::HashSet<String> = custody_ids(&database).await.into_iter().collect();
        match kept.len() >= N {
            true => Ok(()),
            false => Err(format!("{} of {N} in custody", kept.len())),
        }
    })
    .await;
    let in_custody = custody_ids(&database).await;
    let distinct: std::collections::HashSet<&String> = in_custody.iter().collect();
    let lost: Vec<String> = (1..=N).map(|i| format!("c{i}")).filter(|id| !distinct.contains(id)).take(20).collect();
    assert!(lost.is_empty(), "lost: {lost:?}");
    assert_eq!(distinct.len(), N, "no stranger ids");
    let duplicates = in_custody.len() - distinct.len();
    eprintln!("killed with {at_kill} in custody; at the end {} records, {duplicates} duplicates", in_custody.len());
    assert!(at_kill < N, "the kill happened mid-intake");
    assert!(duplicates <= 200, "duplicates only from one batch committed and not yet acked: {duplicates}");
    connection.close(0, "done".into()).await.ok();
}

/// Publishes messages `1..=n` to `queue`, each as `message(i)` makes it, in one stream confirmed
/// at the end.
async fn publish_confirmed(
    channel: &lapin::Channel,
    queue: &str,
    n: usize,
    message: impl Fn(usize) -> (lapin::BasicProperties, String),
) {
    channel.confirm_select(Default::default()).await.unwrap();
    let mut confirms = Vec::with_capacity(n);
    for i in 1..=n {
        let (properties, body) = message(i);
        let options = lapin::options::BasicPublishOptions::default();
        confirms
            .push(channel.basic_publish("".into(), queue.into(), options, body.as_bytes(), properties).await.unwrap());
    }
    for confirm in confirms {
        assert!(confirm.await.unwrap().is_ack());
    }
}

/// How many custody records there are.
async fn custody_count(database: &Database) -> i64 {
    use sqlx::Connection;
    let mut conn = sqlx::PgConnection::connect(&database.url()).await.unwrap();
    sqlx::query_scalar("select count(*) from custody_messages").fetch_one(&mut conn).await.unwrap()
}

/// The message id of every custody record, read from the database.
async fn custody_ids(database: &Database) -> Vec<String> {
    use sqlx::Connection;
    let mut conn = sqlx::PgConnection::connect(&database.url()).await.unwrap();
    let ids: Vec<Option<String>> =
        sqlx::query_scalar("select message_id from custody_messages").fetch_all(&mut conn).await.unwrap();
    ids.into_iter().map(Option::unwrap_or_default).collect()
}

/// A move runs on the replica that was asked for it. Killed mid-move, that replica loses no
/// message (what it held unacked goes back to the source; what it copied was confirmed by the
/// target first), and a surviving replica marks the move interrupted within a lease time or so
/// (its heartbeat ran out), where a single warren would only at its next start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_move_killed_with_its_replica_loses_nothing_and_a_survivor_marks_it_interrupted() {
    use lapin::options::QueueDeclareOptions;
    use lapin::types::{AMQPValue, FieldTable};
    let _shared = DATABASE_SERVER.read().await;
    const N: usize = 20_000;
    let database = Database::create("replicas_move").await;
    let vhosts = vhosts("repmove", 1).await;
    let names = vec![vhosts[0].name.clone()];
    let connection = vhosts[0].connect().await;
    let channel = vhosts[0].channel(&connection).await;
    // Expired at once into orders.dlq, with the broker's own x-death naming `orders`.
    let durable = QueueDeclareOptions { durable: true, ..Default::default() };
    channel.queue_declare("orders.dlq".into(), durable, FieldTable::default()).await.unwrap();
    let mut args = FieldTable::default();
    args.insert("x-dead-letter-exchange".into(), AMQPValue::LongString("".into()));
    args.insert("x-dead-letter-routing-key".into(), AMQPValue::LongString("orders.dlq".into()));
    channel.queue_declare("orders".into(), durable, args).await.unwrap();
    publish_confirmed(&channel, "orders", N, |i| {
        let properties =
            lapin::BasicProperties::default().with_message_id(format!("o{i}").into()).with_expiration("0".into());
        (properties, "{}".to_string())
    })
    .await;
    wait_for("the dead letters", Duration::from_secs(60), || async {
        match common::dead_letters::depth(&channel, "orders.dlq").await as usize {
            N => Ok(()),
            n => Err(n.to_string()),
        }
    })
    .await;

    let dir = tempfile::tempdir().unwrap();
    let (mut replicas, _) = start_replicas(dir.path(), &database, 2, &names, "").await;
    let mover = &replicas[0];
    let queue = format!("{}/api/v1/queues/b0/{}/orders.dlq", mover.base, encode(&names[0]));
    wait_for("orders.dlq listed on the replica that moves", Duration::from_secs(60), || async {
        let response = mover.http.get(&queue).send().await.map_err(|e| e.to_string())?;
        match response.status().as_u16() {
            200 => Ok(()),
            status => Err(status.to_string()),
        }
    })
    .await;
    let started: Value = mover
        .http
        .post(format!("{queue}/requeue"))
        .json(&serde_json::json!({"selection": "all"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let job = started["job"]["id"].as_i64().unwrap_or_else(|| panic!("a job: {started}"));
    // Killed once some hundreds have moved, watched closely: a requeue of thousands takes seconds.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let status: Value =
            mover.http.get(format!("{}/api/v1/jobs/{job}", mover.base)).send().await.unwrap().json().await.unwrap();
        assert_eq!(status["state"], "running", "the move ended before the test could kill it: {status}");
        if status["progress"]["moved"].as_u64().unwrap_or(0) >= 500 {
            break;
        }
        assert!(Instant::now() < deadline, "no progress: {status}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    replicas[0].child.kill().unwrap();
    replicas[0].child.wait().unwrap();

    // No message lost: every id in the source or back in `orders` (which dead-letters it into
    // the source again), duplicates only from copies confirmed and not yet acked.
    let survivor = &replicas[1];
    let entry = wait_for("the survivor to mark the move interrupted", Duration::from_secs(90), || async {
        let audit: Value =
            survivor.http.get(format!("{}/api/v1/audit", survivor.base)).send().await.unwrap().json().await.unwrap();
        let entry = audit.as_array().into_iter().flatten().find(|e| e["action"] == "requeue").cloned();
        match entry {
            Some(e) if e["outcome"] == "interrupted" => Ok(e),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    eprintln!("marked interrupted by the survivor: {entry}");
    let mut ids = common::dead_letters::drain_ids(&channel, "orders.dlq").await;
    ids.extend(common::dead_letters::drain_ids(&channel, "orders").await);
    let distinct: std::collections::HashSet<&String> = ids.iter().collect();
    let lost: Vec<String> = (1..=N).map(|i| format!("o{i}")).filter(|id| !distinct.contains(id)).take(20).collect();
    assert!(lost.is_empty(), "lost: {lost:?}");
    eprintln!("{} messages, {} duplicates", ids.len(), ids.len() - distinct.len());
    connection.close(0, "done".into()).await.ok();
}
