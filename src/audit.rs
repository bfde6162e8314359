//! The audit log: who did what to which queue, who logged in, who changed accounts or alert
//! settings, when, and how it ended.
//!
//! Entries have a [`Kind`], so a view can show broker actions without the logins around them,
//! and every view pages through the whole log by id ([`list`]). Failed logins are aggregated
//! ([`login_failed`]): anyone who can reach the login form can fail to log in, and a row per
//! attempt let them bury real actions (520 rows in 1.7 s).
//!
//! The fates of the messages a move touched are the dead-letter code's, in `dlq::audit`.

use serde::Serialize;
use sqlx::Row;

use crate::history::Db;

/// What an entry is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// A move, delete or purge on a broker.
    Action,
    /// A login: one row per success, one aggregated row per source, name and minute for failures.
    Login,
    /// A user or API token added, removed or changed.
    Account,
    /// An alert rule created, edited or deleted, a silence set or ended, or a test notification
    /// sent: the settings of the alerts page, as `Account` is the access page's.
    Alerts,
}

impl Kind {
    pub const ALL: [Kind; 4] = [Kind::Action, Kind::Login, Kind::Account, Kind::Alerts];

    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Action => "action",
            Kind::Login => "login",
            Kind::Account => "account",
            Kind::Alerts => "alerts",
        }
    }

    pub fn parse(text: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.as_str() == text)
    }
}

/// One action as it starts.
pub struct Entry<'a> {
    pub actor: &'a str,
    pub broker: &'a str,
    pub vhost: &'a str,
    pub queue: &'a str,
    pub action: &'a str,
    pub request: String,
}

/// Records a broker action before it runs; returns its id for `finish`. The id comes only once
/// the row is committed: `insert ... returning` hands its row over before the statement ends, and
/// on a full disk a requeue ran with an id whose commit had failed (issue 16, case 7).
pub async fn start(db: &Db, entry: Entry<'_>) -> Result<i64, sqlx::Error> {
    let done = sqlx::query(
        "insert into audit_log (at, kind, actor, broker, vhost, queue, action, request, outcome)
         values (?, 'action', ?, ?, ?, ?, ?, ?, 'started')",
    )
    .bind(chrono::Utc::now().timestamp())
    .bind(entry.actor)
    .bind(entry.broker)
    .bind(entry.vhost)
    .bind(entry.queue)
    .bind(entry.action)
    .bind(entry.request)
    .execute(db)
    .await?;
    let id = done.last_insert_rowid();
    // One line per action for the log collector; the request (filters, edits) stays in the
    // audit log, where roles decide who reads it.
    tracing::info!(
        audit_id = id,
        actor = entry.actor,
        broker = entry.broker,
        vhost = entry.vhost,
        queue = entry.queue,
        action = entry.action,
        "action started"
    );
    Ok(id)
}

/// Records an account change that was made (`user add`, `token revoke`, ...), by `actor`.
pub async fn account(db: &Db, actor: &str, action: &str, request: &serde_json::Value) -> Result<i64, sqlx::Error> {
    // Not `returning id`: see `start`.
    let done = sqlx::query(
        "insert into audit_log (at, kind, actor, broker, vhost, queue, action, request, outcome)
         values (?, 'account', ?, '', '', '', ?, ?, 'done')",
    )
    .bind(chrono::Utc::now().timestamp())
    .bind(actor)
    .bind(action)
    .bind(request.to_string())
    .execute(db)
    .await?;
    let id = done.last_insert_rowid();
    tracing::info!(audit_id = id, actor, action, "account changed");
    Ok(id)
}

/// A change to the alerts' settings as it is recorded: `action` says what (`rule add`, `rule
/// edit`, `rule delete`, `silence add`, `silence end`, `test notification`), `request` names what
/// it was about, `detail` says it in words for the page. Written once the change was made (or,
/// for a test notification, tried): a refused change changed nothing.
pub struct AlertsChange<'a> {
    pub actor: &'a str,
    pub action: &'a str,
    pub request: serde_json::Value,
    /// `done`, or `failed` for a test notification that was not delivered.
    pub outcome: &'a str,
    pub detail: String,
}

/// Records a change to the alerts' settings (kind `alerts`).
pub async fn alerts(db: &Db, change: AlertsChange<'_>) -> Result<i64, sqlx::Error> {
    // Not `returning id`: see `start`.
    let done = sqlx::query(
        "insert into audit_log (at, kind, actor, broker, vhost, queue, action, request, outcome, detail)
         values (?, 'alerts', ?, '', '', '', ?, ?, ?, ?)",
    )
    .bind(chrono::Utc::now().timestamp())
    .bind(change.actor)
    .bind(change.action)
    .bind(change.request.to_string())
    .bind(change.outcome)
    .bind(&change.detail)
    .execute(db)
    .await?;
    let id = done.last_insert_rowid();
    tracing::info!(
        audit_id = id,
        actor = change.actor,
        action = change.action,
        outcome = change.outcome,
        "alert settings changed"
    );
    Ok(id)
}

/// Records a successful login of `name` from `peer` (the client's address): one row each, as
/// only someone with an account can make them.
pub async fn login_succeeded(db: &Db, name: &str, peer: &str) -> Result<(), sqlx::Error> {
    let done = sqlx::query(
        "insert into audit_log (at, kind, actor, source, broker, vhost, queue, action, request, outcome)
         values (?, 'login', ?, ?, '', '', '', 'login', ?, 'done')",
    )
    .bind(chrono::Utc::now().timestamp())
    .bind(name)
    .bind(peer)
    .bind(serde_json::json!({ "peer": peer }).to_string())
    .execute(db)
    .await?;
    tracing::info!(audit_id = done.last_insert_rowid(), actor = name, peer, "login");
    Ok(())
}

/// Attempted names a source gets a row of its own for, per minute; its further names share one
/// row ([`OTHER_NAMES`]), so trying one password against many names adds no more rows than that.
pub const NAMES_PER_SOURCE: i64 = 5;
/// Rows failed logins get per minute in all; then every further source and name shares one row
/// ([`OTHER_SOURCES`]). At most `ROWS_PER_MINUTE + 1` rows a minute whatever the number of
/// attacking addresses, a few tens of thousands a day.
pub const ROWS_PER_MINUTE: i64 = 40;
/// The name of the row that counts a source's attempts beyond [`NAMES_PER_SOURCE`] names.
pub const OTHER_NAMES: &str = "(other names)";
/// The source of the row that counts a minute's attempts beyond [`ROWS_PER_MINUTE`] rows.
pub const OTHER_SOURCES: &str = "(other sources)";

/// Counts a failed login (`throttled`: refused before the password was checked) of the name
/// typed (already shortened: it is hostile input) from `source` (an IPv4 address, or an IPv6
/// client's /64 as the throttle keys it, since one host has the whole /64 to choose from). The
/// attempt adds to its minute's row for that source and name, or creates it, never a row of its
/// own. The caps are read before the upsert, not in one transaction: concurrent attempts can
/// exceed them by the number of requests in flight, which is bounded and harmless.
pub async fn login_failed(db: &Db, name: &str, source: &str, throttled: bool, now: i64) -> Result<(), sqlx::Error> {
    let bucket = now.div_euclid(60);
    let (source, name) = failed_login_row(db, bucket, source, name).await?;
    sqlx::query(
        "insert into audit_log
             (at, last_at, bucket, kind, actor, source, broker, vhost, queue, action, request, outcome, detail, throttled)
         values (?, ?, ?, 'login', ?, ?, '', '', '', 'login', ?, 'failed', ?, ?)
         on conflict (bucket, source, actor) where bucket is not null
         do update set attempts = attempts + 1, throttled = throttled + excluded.throttled,
             last_at = max(last_at, excluded.last_at)",
    )
    .bind(now)
    .bind(now)
    .bind(bucket)
    .bind(&name)
    .bind(&source)
    .bind(serde_json::json!({ "peer": source }).to_string())
    .bind("unknown user, wrong password or disabled account, or refused by the throttle before the check")
    .bind(i64::from(throttled))
    .execute(db)
    .await?;
    // The source only: the name typed is hostile input, and a password typed as a name is
    // a secret (the audit log keeps it for admins).
    tracing::info!(source, throttled, "login failed");
    Ok(())
}

/// The (source, name) of the row a failed login counts in: its own, else its source's
/// [`OTHER_NAMES`] row, else the minute's [`OTHER_SOURCES`] row.
async fn failed_login_row(db: &Db, bucket: i64, source: &str, name: &str) -> Result<(String, String), sqlx::Error> {
    let row = sqlx::query(
        "select
             exists (select 1 from audit_log where bucket = ?1 and source = ?2 and actor = ?3) as own,
             exists (select 1 from audit_log where bucket = ?1 and source = ?2 and actor = ?4) as other_names,
             (select count(*) from audit_log where bucket = ?1 and source = ?2 and actor != ?4) as names,
             (select count(*) from audit_log where bucket = ?1) as rows",
    )
    .bind(bucket)
    .bind(source)
    .bind(name)
    .bind(OTHER_NAMES)
    .fetch_one(db)
    .await?;
    let (own, other_names): (bool, bool) = (row.try_get("own")?, row.try_get("other_names")?);
    let (names, rows): (i64, i64) = (row.try_get("names")?, row.try_get("rows")?);
    let room = rows < ROWS_PER_MINUTE;
    Ok(if own || (names < NAMES_PER_SOURCE && room) {
        (source.to_string(), name.to_string())
    } else if other_names || room {
        (source.to_string(), OTHER_NAMES.to_string())
    } else {
        (OTHER_SOURCES.to_string(), OTHER_NAMES.to_string())
    })
}

/// One entry by id.
pub async fn get(db: &Db, id: i64) -> Result<Option<Record>, sqlx::Error> {
    let sql = format!("select {COLUMNS} from audit_log where id = ?");
    let rows = sqlx::query(&sql).bind(id).fetch_all(db).await?;
    Ok(records(&rows)?.pop())
}

/// What a caller who is not an admin sees instead of an account name.
pub const HIDDEN: &str = "(hidden)";

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Record {
    pub id: i64,
    pub kind: Kind,
    /// Unix seconds; for an aggregated failed-login row, its first attempt.
    #[serde(flatten, serialize_with = "crate::times::at")]
    #[schema(schema_with = crate::times::schema::at)]
    pub at: i64,
    /// Who acted; for a login, the name typed.
    pub actor: String,
    pub broker: String,
    pub vhost: String,
    pub queue: String,
    pub action: String,
    pub request: serde_json::Value,
    pub outcome: String,
    pub moved: i64,
    pub failed: i64,
    pub message_ids: serde_json::Value,
    pub detail: Option<String>,
    /// Logins: the client's address (for aggregated failures an IPv6 client's /64).
    pub source: Option<String>,
    /// Attempts counted in this row: more than 1 only for aggregated failed logins.
    pub attempts: i64,
    /// Of those, how many the throttle refused before checking the password.
    pub throttled: i64,
    /// Aggregated rows: unix seconds of the latest attempt.
    #[serde(flatten, serialize_with = "crate::times::last_at")]
    #[schema(schema_with = crate::times::schema::last_at)]
    pub last_at: Option<i64>,
}

impl Record {
    /// Hides every account name in the entry except `own_actor` (the caller's own, which they
    /// know): who acted, and the user or token an account change was about. Account names help
    /// a password guesser, which is why only admins may list users; the audit log must not list
    /// them either.
    pub fn hide_account_names(&mut self, own_actor: &str) {
        if self.actor != own_actor {
            self.actor = HIDDEN.to_string();
        }
        if self.kind == Kind::Account {
            if let Some(name) = self.request.get_mut("name") {
                *name = serde_json::Value::String(HIDDEN.to_string());
            }
        }
    }
}

/// Which part of the log to read: newest first, `per_page` entries below `before` or just
/// above `after` (ids, from a previous page's [`Listing`]), of one kind or all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Page {
    pub kind: Option<Kind>,
    pub before: Option<i64>,
    pub after: Option<i64>,
    pub per_page: i64,
}

/// A page of entries, newest first, and the cursors of the pages around it.
#[derive(Debug)]
pub struct Listing {
    pub records: Vec<Record>,
    /// `before` for the next older page, if there are older entries.
    pub older: Option<i64>,
    /// `after` for the next newer page, if there are newer entries.
    pub newer: Option<i64>,
}

/// Reads one page by id, so paging stays put while new entries arrive (an aggregated row keeps
/// the id of its first attempt).
pub async fn list(db: &Db, page: &Page) -> Result<Listing, sqlx::Error> {
    let kind = if page.kind.is_some() { " and kind = ?" } else { "" };
    // Just above `after` means the lowest ids above it: read upwards, then turn the page round.
    let order = if page.after.is_some() { "asc" } else { "desc" };
    let sql = format!("select {COLUMNS} from audit_log where id < ? and id > ?{kind} order by id {order} limit ?");
    let mut query = sqlx::query(&sql).bind(page.before.unwrap_or(i64::MAX)).bind(page.after.unwrap_or(0));
    if let Some(k) = page.kind {
        query = query.bind(k.as_str());
    }
    let mut records = records(&query.bind(page.per_page).fetch_all(db).await?)?;
    if page.after.is_some() {
        records.reverse();
    }
    // The ids the page spans; an empty page spans its cursor.
    let (highest, lowest) = match (records.first(), records.last()) {
        (Some(first), Some(last)) => (first.id, last.id),
        _ => (
            page.before.map(|b| b - 1).or(page.after).unwrap_or(i64::MAX),
            page.after.map(|a| a.saturating_add(1)).or(page.before).unwrap_or(0),
        ),
    };
    let any_beyond = |comparison: &'static str, id: i64| async move {
        let sql = format!("select exists (select 1 from audit_log where id {comparison} ?{kind})");
        let mut query = sqlx::query_scalar::<_, bool>(&sql).bind(id);
        if let Some(k) = page.kind {
            query = query.bind(k.as_str());
        }
        query.fetch_one(db).await
    };
    let newer = any_beyond(">", highest).await?;
    let older = any_beyond("<", lowest).await?;
    Ok(Listing { records, older: older.then_some(lowest), newer: newer.then_some(highest) })
}

const COLUMNS: &str = "id, kind, at, actor, broker, vhost, queue, action, request, outcome, moved, failed, \
     message_ids, detail, source, attempts, throttled, last_at";

fn records(rows: &[sqlx::sqlite::SqliteRow]) -> Result<Vec<Record>, sqlx::Error> {
    let json = |text: String| serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text));
    rows.iter()
        .map(|r| {
            let kind: String = r.try_get("kind")?;
            Ok(Record {
                id: r.try_get("id")?,
                kind: Kind::parse(&kind).ok_or_else(|| sqlx::Error::Decode(format!("audit kind {kind:?}").into()))?,
                at: r.try_get("at")?,
                actor: r.try_get("actor")?,
                broker: r.try_get("broker")?,
                vhost: r.try_get("vhost")?,
                queue: r.try_get("queue")?,
                action: r.try_get("action")?,
                request: json(r.try_get("request")?),
                outcome: r.try_get("outcome")?,
                moved: r.try_get("moved")?,
                failed: r.try_get("failed")?,
                message_ids: json(r.try_get("message_ids")?),
                detail: r.try_get("detail")?,
                source: r.try_get("source")?,
                attempts: r.try_get("attempts")?,
                throttled: r.try_get("throttled")?,
                last_at: r.try_get("last_at")?,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn test_db() -> (tempfile::TempDir, Db) {
        let dir = tempfile::tempdir().unwrap();
        let db = crate::history::open(&dir.path().join("warren.db")).await.unwrap();
        (dir, db)
    }

    fn newest(kind: Option<Kind>, per_page: i64) -> Page {
        Page { kind, before: None, after: None, per_page }
    }

    async fn purge(db: &Db, queue: &str) -> i64 {
        let entry = Entry { actor: "otto", broker: "b", vhost: "v", queue, action: "purge", request: "{}".into() };
        start(db, entry).await.unwrap()
    }

    /// A minute's start, so that a test's attempts all fall in one minute.
    const MINUTE: i64 = 1_800_000_000 / 60 * 60;

    #[tokio::test]
    async fn failed_logins_share_a_row_per_source_name_and_minute() {
        let (_dir, db) = test_db().await;
        for i in 0..520 {
            login_failed(&db, "ada", "192.0.2.7", i >= 5, MINUTE + i % 60).await.unwrap();
        }
        login_failed(&db, "ada", "192.0.2.7", true, MINUTE + 60).await.unwrap();
        login_failed(&db, "ada", "192.0.2.8", false, MINUTE + 60).await.unwrap();
        let rows = list(&db, &newest(None, 100)).await.unwrap().records;
        let counts: Vec<_> = rows
            .iter()
            .map(|r| (r.actor.as_str(), r.source.as_deref(), r.attempts, r.throttled, r.at, r.last_at))
            .collect();
        assert_eq!(
            counts,
            [
                ("ada", Some("192.0.2.8"), 1, 0, MINUTE + 60, Some(MINUTE + 60)),
                ("ada", Some("192.0.2.7"), 1, 1, MINUTE + 60, Some(MINUTE + 60)),
                ("ada", Some("192.0.2.7"), 520, 515, MINUTE, Some(MINUTE + 59)),
            ]
        );
        assert!(rows.iter().all(|r| r.kind == Kind::Login && r.outcome == "failed" && r.action == "login"));
    }

    #[tokio::test]
    async fn many_names_and_many_sources_add_a_bounded_number_of_rows() {
        let (_dir, db) = test_db().await;
        // One source trying one password against many names.
        for i in 0..520 {
            login_failed(&db, &format!("user{i}"), "192.0.2.7", false, MINUTE).await.unwrap();
        }
        let rows = list(&db, &newest(None, 500)).await.unwrap().records;
        assert_eq!(rows.len() as i64, NAMES_PER_SOURCE + 1);
        assert_eq!((rows[0].actor.as_str(), rows[0].attempts), (OTHER_NAMES, 520 - NAMES_PER_SOURCE));
        assert_eq!(rows.last().unwrap().actor, "user0");

        // Many sources: the minute's rows are capped, the rest share one row.
        for i in 0..200 {
            login_failed(&db, "ada", &format!("198.51.100.{i}"), false, MINUTE).await.unwrap();
        }
        let rows = list(&db, &newest(None, 500)).await.unwrap().records;
        assert_eq!(rows.len() as i64, ROWS_PER_MINUTE + 1);
        let overflow = &rows[0];
        assert_eq!((overflow.source.as_deref(), overflow.actor.as_str()), (Some(OTHER_SOURCES), OTHER_NAMES));
        assert_eq!(rows.iter().map(|r| r.attempts).sum::<i64>(), 720);
        // The next minute starts afresh.
        login_failed(&db, "ada", "198.51.100.199", false, MINUTE + 60).await.unwrap();
        assert_eq!(list(&db, &newest(None, 1)).await.unwrap().records[0].source.as_deref(), Some("198.51.100.199"));
    }

    #[tokio::test]
    async fn pages_reach_every_entry_of_a_kind_both_ways() {
        let (_dir, db) = test_db().await;
        let mut actions = Vec::new();
        for i in 0..7 {
            actions.push(purge(&db, &format!("q{i}")).await);
            account(&db, "ada", "user add", &serde_json::json!({"name": format!("u{i}")})).await.unwrap();
            login_succeeded(&db, "ada", "192.0.2.7").await.unwrap();
        }
        actions.reverse();

        let mut page = newest(Some(Kind::Action), 3);
        let mut seen = Vec::new();
        let mut pages = Vec::new();
        loop {
            let listing = list(&db, &page).await.unwrap();
            assert!(listing.records.iter().all(|r| r.kind == Kind::Action && r.action == "purge"));
            seen.extend(listing.records.iter().map(|r| r.id));
            pages.push(listing.records.iter().map(|r| r.id).collect::<Vec<_>>());
            assert_eq!(listing.newer.is_some(), pages.len() > 1, "page {}", pages.len());
            match listing.older {
                Some(before) => page = Page { before: Some(before), ..page },
                None => break,
            }
        }
        assert_eq!(seen, actions, "every action once, newest first");
        assert_eq!(pages.len(), 3);

        // Back up from the last page: the same pages, still newest first within each.
        let mut page = Page { before: None, after: list(&db, &page).await.unwrap().newer, ..page };
        for expected in pages.iter().rev().skip(1) {
            let listing = list(&db, &page).await.unwrap();
            assert_eq!(&listing.records.iter().map(|r| r.id).collect::<Vec<_>>(), expected);
            match listing.newer {
                Some(after) => page = Page { after: Some(after), ..page },
                None => break,
            }
        }

        assert_eq!(list(&db, &newest(Some(Kind::Account), 100)).await.unwrap().records.len(), 7);
        assert_eq!(list(&db, &newest(None, 100)).await.unwrap().records.len(), 21);
        let empty = list(&db, &Page { before: Some(1), ..newest(None, 10) }).await.unwrap();
        assert!(empty.records.is_empty() && empty.older.is_none() && empty.newer == Some(0));
    }

    #[tokio::test]
    async fn account_names_can_be_hidden_except_the_callers_own() {
        let (_dir, db) = test_db().await;
        purge(&db, "orders").await;
        account(&db, "ada", "token add", &serde_json::json!({"name": "ci", "role": "viewer", "id": 3})).await.unwrap();
        login_succeeded(&db, "vera", "192.0.2.7").await.unwrap();
        login_failed(&db, "mallory", "192.0.2.9", false, MINUTE).await.unwrap();
        let mut rows = list(&db, &newest(None, 10)).await.unwrap().records;
        rows.iter_mut().for_each(|r| r.hide_account_names("vera"));
        let actors: Vec<&str> = rows.iter().map(|r| r.actor.as_str()).collect();
        assert_eq!(actors, [HIDDEN, "vera", HIDDEN, HIDDEN]);
        assert_eq!(rows[2].request, serde_json::json!({"name": HIDDEN, "role": "viewer", "id": 3}));
        assert_eq!(rows[0].source.as_deref(), Some("192.0.2.9"), "addresses are not account names");
    }
}
