//! Custody's records (`dlq::custody`, `dlq::transfer`): kept whole whatever a message holds,
//! found by the same filters, claimed and deleted by one caller only, on both backends.

use std::collections::{BTreeSet, HashMap};

use base64::Engine;
use lapin::types::{AMQPValue, FieldTable, LongString};
use lapin::BasicProperties;
use warren::dlq::budget::Matchers;
use warren::dlq::custody::{self, Switch};
use warren::dlq::message::Filter;
use warren::dlq::transfer::{self, Line};
use warren::storage::custody::{Deleted, NewRecord};
use warren::storage::Store;

crate::conformance!(
    intake_keeps_hostile_messages_whole,
    a_redelivered_message_is_flagged_only_when_custody_holds_it,
    filters_find_the_same_records,
    counts_groups_and_switches_read_back,
    a_claimed_record_is_neither_claimed_again_nor_deleted,
    concurrent_claims_and_deletes_take_each_record_once,
    only_a_dead_replicas_claims_are_handed_back,
    a_recreated_queue_counts_only_its_own_replays,
    ticked_records_not_held_here_are_named,
);

/// Claims from before replicas recorded none: they count as a dead replica's. Made with the
/// backend's own pool, since every claim through the interface names its replica.
mod before_replicas {
    use super::*;

    crate::conformance!(with_pool: a_claim_that_names_no_replica_is_handed_back);

    async fn a_claim_that_names_no_replica_is_handed_back(store: &Store, pool: &crate::Pool) {
        import(store, &[line("m-0", &[], b"{}"), line("m-1", &[], b"{}")]).await;
        let ids = all_ids(store).await;
        let replicas = crate::Replicas::start(store).await;
        assert_eq!(store.claim_records("audit-1", replicas.live.id(), &ids).await.unwrap(), ids);
        let forget = format!("update custody_messages set claimed_by = null where id = {}", ids[0]);
        match pool {
            crate::Pool::Sqlite(pool) => sqlx::query(&forget).execute(pool).await.map(|_| ()),
            crate::Pool::Postgres(pool) => sqlx::query(&forget).execute(pool).await.map(|_| ()),
        }
        .unwrap();
        assert_eq!(custody::recover(store, "r-survivor").await.unwrap(), 1);
        let records = store.custody_records_by_id(&ids).await.unwrap();
        assert_eq!(records.iter().map(|r| r.state.as_str()).collect::<Vec<_>>(), ["held", "claimed"]);
    }
}

const QUEUE: (&str, &str, &str) = ("local", "/ä", "orders.dlq");
const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

/// A message as an import line: exact properties, headers `headers` (text values as long
/// strings), message id `id`.
fn line(id: &str, headers: &[(&str, AMQPValue)], body: &[u8]) -> String {
    let mut table = FieldTable::default();
    for (name, value) in headers {
        table.insert((*name).into(), value.clone());
    }
    let properties = BasicProperties::default().with_message_id(id.into()).with_headers(table);
    let line = Line {
        exchange: "dlx".into(),
        routing_key: "rk".into(),
        amqp_properties: Some(B64.encode(custody::encode_properties(&properties).unwrap())),
        body: B64.encode(body),
        ..Line::default()
    };
    serde_json::to_string(&line).unwrap()
}

fn text(value: &str) -> AMQPValue {
    AMQPValue::LongString(LongString::from(value.as_bytes().to_vec()))
}

/// Keeps `lines` as an import does (all in one transaction).
async fn import(store: &Store, lines: &[String]) {
    let text = lines.join("\n");
    let adding = transfer::check_lines(&text).unwrap();
    let kept = custody::import(store, &[], QUEUE, adding, transfer::batches(&text)).await.unwrap();
    assert_eq!(kept, lines.len());
}

/// The message ids of the records `filter` matches, and how many it counts.
async fn found(store: &Store, filter: Filter) -> (BTreeSet<String>, usize) {
    let keeper = custody::Custody::new(store.clone(), storage());
    let listing = custody::list(store, &keeper, QUEUE, &filter, None, 1_000, &Matchers::new().request()).await.unwrap();
    let ids = listing.records.iter().map(|r| r.message_id.clone().unwrap_or_default()).collect();
    (ids, listing.matching)
}

/// The storage health of a file that does not exist: the listing reads none of it.
fn storage() -> std::sync::Arc<warren::history::storage::Storage> {
    std::sync::Arc::new(warren::history::storage::Storage::new(std::path::Path::new("/nonexistent/warren.db")))
}

fn set(ids: &[&str]) -> BTreeSet<String> {
    ids.iter().map(|s| s.to_string()).collect()
}

/// Every record's id, oldest first.
async fn all_ids(store: &Store) -> Vec<i64> {
    let keeper = custody::Custody::new(store.clone(), storage());
    let budget = Matchers::new().request();
    let listing = custody::list(store, &keeper, QUEUE, &Filter::default(), None, 100_000, &budget).await.unwrap();
    listing.records.iter().map(|r| r.id).collect()
}

/// A message id, header values, an error and a body with NULs, bytes that are not UTF-8 and
/// megabytes of payload: kept on both backends, body and properties byte for byte (text
/// columns with U+FFFD for a NUL on PostgreSQL), and found by a search past the NUL.
async fn intake_keeps_hostile_messages_whole(store: &Store) {
    let mut body = b"\xff\xfe start \0 after the nul: CARD declined \x80".to_vec();
    body.extend(std::iter::repeat_n(b'x', 3 << 20));
    let headers = [
        ("x-nul", text("a\0b")),
        ("x-first-death-reason", text("rejected")),
        ("x-first-death-queue", text("orders\0eu")),
        ("x-exception-message", text("bad \0 sku")),
        ("x-bytes", AMQPValue::ByteArray(vec![0, 159, 146].into())),
        ("x-\"quoted\\", text("\\u0000 is not a nul")),
    ];
    import(store, &[line("m\0x", &headers, &body)]).await;
    // Intake's own write (one transaction per batch), beside the import's.
    let record = NewRecord {
        exchange: "dlx\0",
        routing_key: "rk",
        properties: b"\x00\x01raw",
        properties_json: r#"{"headers":{"x-n":"\u0000"}}"#,
        body: b"\0",
        size: 6,
        message_id: Some("n\0"),
        reason: None,
        original_queue: None,
        error: Some("e\0"),
        error_group: Some("e\0"),
        redelivered: false,
        fingerprint: "f\0",
    };
    store.keep_records(QUEUE, 1_765_000_000, &[record]).await.unwrap();

    let ids = all_ids(store).await;
    assert_eq!(ids.len(), 2);
    let nul = if store.backend() == "postgres" { "\u{FFFD}" } else { "\0" };
    let (record, shown, kept_body) = custody::message(store, QUEUE, ids[0]).await.unwrap().unwrap();
    assert_eq!(kept_body, body, "the body byte for byte");
    assert_eq!(record.message_id.as_deref(), Some(format!("m{nul}x").as_str()));
    assert_eq!(record.original_queue.as_deref(), Some(format!("orders{nul}eu").as_str()));
    assert_eq!(record.reason.as_deref(), Some("rejected"));
    assert_eq!(record.size, body.len() as u64);
    assert_eq!(shown.message.properties["headers"]["x-nul"], serde_json::json!("a\0b"), "read from the exact bytes");

    let exported = transfer::export_lines(store, &ids).await.unwrap();
    let back: Line = serde_json::from_str(&exported[0]).unwrap();
    assert_eq!(B64.decode(back.body).unwrap(), body);
    let properties = custody::decode_properties(&B64.decode(back.amqp_properties.unwrap()).unwrap()).unwrap();
    assert_eq!(properties.message_id().as_ref().map(|m| m.as_str()), Some("m\0x"), "the raw properties kept");
    let raw: Line = serde_json::from_str(&exported[1]).unwrap();
    assert_eq!(B64.decode(raw.amqp_properties.unwrap()).unwrap(), b"\x00\x01raw");
    assert_eq!(raw.exchange, format!("dlx{nul}"));

    // Text past the NUL, ignoring ASCII case; a header's value with a NUL, by part.
    assert_eq!(found(store, Filter::with_text("card DECLINED")).await.1, 1);
    assert_eq!(found(store, Filter::with_text("after the nul")).await.1, 1);
    let header = filter(&[("header", "x-nul"), ("header_value", "A")]);
    assert_eq!(found(store, header).await.1, 1);
    let header = filter(&[("header", "x-n")]);
    assert_eq!(found(store, header).await.1, 1, "a header of the intake's own row");
    let header = filter(&[("header", "x-\"quoted\\"), ("header_value", "\\u0000 IS")]);
    assert_eq!(found(store, header).await.1, 1, "an escaped backslash is no NUL");
    assert_eq!(found(store, Filter::with_error("BAD")).await.1, 1);
    let regex = filter(&[("regex", "nul: CARD")]);
    assert_eq!(found(store, regex).await.1, 1);
}

/// A record of intake's with a body of `{}` and nothing else but its fingerprint.
fn bare_record(fingerprint: &str, redelivered: bool) -> NewRecord<'_> {
    NewRecord {
        exchange: "",
        routing_key: "rk",
        properties: b"",
        properties_json: "{}",
        body: b"{}",
        size: 2,
        message_id: None,
        reason: None,
        original_queue: None,
        error: None,
        error_group: None,
        redelivered,
        fingerprint,
    }
}

async fn a_redelivered_message_is_flagged_only_when_custody_holds_it(store: &Store) {
    let record = bare_record;
    // 4.3 marks every first delivery from a quorum DLQ redelivered: not a duplicate yet.
    store.keep_records(QUEUE, 1, &[record("a", true)]).await.unwrap();
    store.keep_records(QUEUE, 2, &[record("a", true), record("b", false)]).await.unwrap();
    store.keep_records(("local", "/ä", "other.dlq"), 3, &[record("b", true)]).await.unwrap();
    let keeper = custody::Custody::new(store.clone(), storage());
    let budget = Matchers::new().request();
    let listing = custody::list(store, &keeper, QUEUE, &Filter::default(), None, 10, &budget).await.unwrap();
    let flags: Vec<bool> = listing.records.iter().map(|r| r.redelivered).collect();
    assert_eq!(flags, [false, true, false]);
    let other = ("local", "/ä", "other.dlq");
    let listing = custody::list(store, &keeper, other, &Filter::default(), None, 10, &budget).await.unwrap();
    assert!(!listing.records[0].redelivered, "another queue's record is another message");
}

async fn filters_find_the_same_records(store: &Store) {
    let spring = |message: &str| {
        vec![
            ("x-first-death-queue", text("orders")),
            ("x-first-death-reason", text("rejected")),
            ("x-exception-message", text(message)),
            ("x-exception-stacktrace", text(&format!("com.shop.SkuUnknown: {message}\n\tat x"))),
        ]
    };
    let mut tenant = spring("sku A-1 unknown");
    tenant.push(("tenant", text("ACME-eu")));
    tenant.push(("attempts", AMQPValue::LongLongInt(42)));
    let expired = vec![("x-first-death-queue", text("payments")), ("x-first-death-reason", text("expired"))];
    import(
        store,
        &[
            line("json-1", &tenant, br#"{"order": {"id": 7, "sku": "A-1", "items": [{"n": 1.5}], "gift": true}}"#),
            line("json-2", &spring("sku B-2 unknown"), br#"{"order": {"id": 8, "sku": "B-2", "gift": null}}"#),
            line("text", &expired, "Größe: the card was declined\0 50%_off".as_bytes()),
            line("binary", &expired, b"\x00\xff\x80 payload {\"order\": 7}"),
            line("quoted", &[], br#"{"order": {"sku": "say \"hi\""}, "x": "\u0041"}"#),
        ],
    )
    .await;
    let cases: Vec<(Filter, &[&str])> = vec![
        (Filter::default(), &["json-1", "json-2", "text", "binary", "quoted"]),
        (Filter::with_text("CARD WAS"), &["text"]),
        (Filter::with_text("größe"), &["text"]),
        (Filter::with_text("GRÖSSE"), &[]),
        (Filter::with_text("50%_"), &["text"]),
        (Filter::with_text("0%x"), &[]),
        (Filter::with_text("acme-EU"), &["json-1"]),
        (Filter::with_text("\"order\": 7"), &["binary"]),
        (filter(&[("reason", "expired")]), &["text", "binary"]),
        (filter(&[("original_queue", " orders ")]), &["json-1", "json-2"]),
        (Filter::with_error("SKU B"), &["json-2"]),
        (filter(&[("header", "tenant")]), &["json-1"]),
        (filter(&[("header", "tenant"), ("header_value", "eu")]), &["json-1"]),
        (filter(&[("header", "tenant"), ("header_value", "us")]), &[]),
        (filter(&[("header", "attempts"), ("header_value", "42")]), &["json-1"]),
        (filter(&[("header", "Tenant")]), &[]),
        (filter(&[("json_path", "order.sku")]), &["json-1", "json-2", "quoted"]),
        (json("order.sku", "B-2"), &["json-2"]),
        (json("order.sku", "say \"hi\""), &["quoted"]),
        (json("x", "A"), &["quoted"]),
        (json("order.id", "7"), &["json-1"]),
        (json("order.items[0].n", "1.5"), &["json-1"]),
        (json("order.gift", "true"), &["json-1"]),
        (json("order.gift", "null"), &["json-2"]),
        (json("order.items[0]", "{\"n\":1.5}"), &["json-1"]),
        (filter(&[("json_path", "order.items[1]")]), &[]),
        (filter(&[("json_path", "order..x")]), &[]),
        (filter(&[("regex", r"card \w+ declined")]), &["text"]),
        (filter(&[("regex", r"(?i)ACME-\w\w")]), &["json-1"]),
        (filter(&[("regex", r#""sku": "[AB]-\d""#)]), &["json-1", "json-2"]),
        (filter(&[("regex", "unknown"), ("reason", "rejected")]), &["json-1", "json-2"]),
    ];
    for (filter, expected) in cases {
        let (ids, matching) = found(store, filter.clone()).await;
        assert_eq!(ids, set(expected), "{}", filter.describe());
        assert_eq!(matching, expected.len(), "{}", filter.describe());
    }

    // A page after a cursor, and the count of every match.
    let ids = all_ids(store).await;
    let keeper = custody::Custody::new(store.clone(), storage());
    let budget = Matchers::new().request();
    // Each error group's filter finds its records.
    let listing = custody::list(store, &keeper, QUEUE, &Filter::default(), None, 10, &budget).await.unwrap();
    assert!(!listing.by_error.is_empty());
    for group in &listing.by_error {
        assert_eq!(found(store, filter(&[("error_group", &group.value)])).await.1, group.records, "{}", group.value);
    }
    let page = custody::list(store, &keeper, QUEUE, &Filter::default(), Some(ids[1]), 2, &budget).await.unwrap();
    assert_eq!(page.records.iter().map(|r| r.id).collect::<Vec<_>>(), ids[2..4]);
    let filter = Filter::with_error("unknown");
    let page = custody::list(store, &keeper, QUEUE, &filter, Some(ids[0]), 5, &budget).await.unwrap();
    assert_eq!((page.matching, page.records.len()), (2, 1));
}

/// A filter of these fields, as a form or the API gives it.
fn filter(fields: &[(&str, &str)]) -> Filter {
    let fields: serde_json::Map<String, serde_json::Value> =
        fields.iter().map(|(k, v)| (k.to_string(), serde_json::Value::from(*v))).collect();
    serde_json::from_value(serde_json::Value::Object(fields)).unwrap()
}

fn json(path: &str, value: &str) -> Filter {
    filter(&[("json_path", path), ("json_value", value)])
}

async fn counts_groups_and_switches_read_back(store: &Store) {
    let expired = [("x-first-death-queue", text("payments")), ("x-first-death-reason", text("expired"))];
    let error = |n: usize| {
        [
            ("x-first-death-queue", text("orders")),
            ("x-exception-message", text(&format!("customer of order {n} is null"))),
            ("x-exception-stacktrace", text(&format!("java.lang.NullPointerException: customer of order {n}"))),
        ]
    };
    import(store, &[line("a", &expired, b"12345"), line("b", &error(1), b"1"), line("c", &error(2), b"22")]).await;
    let ids = all_ids(store).await;
    assert_eq!(store.claim_records("audit-1", "r-gone", &ids[..1]).await.unwrap(), ids[..1]);

    let counts = custody::counts_by_queue(store, "local").await.unwrap();
    let c = &counts[&("/ä".to_string(), "orders.dlq".to_string())];
    assert_eq!((c.held, c.claimed, c.replayed), (2, 1, 0));
    assert!(c.bytes > 8 && c.oldest_taken_at.is_some());
    let keeper = custody::Custody::new(store.clone(), storage());
    let budget = Matchers::new().request();
    let listing = custody::list(store, &keeper, QUEUE, &Filter::default(), None, 10, &budget).await.unwrap();
    assert_eq!((listing.counts.held, listing.counts.claimed), (2, 1));
    let by_queue: HashMap<String, usize> =
        listing.by_original_queue.iter().map(|g| (g.value.clone(), g.records)).collect();
    assert_eq!(by_queue, HashMap::from([("orders".into(), 2), ("payments".into(), 1)]));
    assert_eq!(listing.by_error.len(), 1, "{:?}", listing.by_error);
    assert_eq!((listing.by_error[0].records, listing.by_error[0].variant_count), (2, 2));

    assert!(custody::switches(store, "local").await.unwrap().is_empty());
    custody::set_switch(store, "local", "/ä", "orders.dlq", Switch::On, "otto").await.unwrap();
    custody::set_switch(store, "local", "/", "x", Switch::On, "otto").await.unwrap();
    custody::set_switch(store, "local", "/", "x", Switch::Released, "anna").await.unwrap();
    let switched = custody::switches(store, "local").await.unwrap();
    assert_eq!(
        switched,
        HashMap::from([(("/ä".into(), "orders.dlq".into()), Switch::On), (("/".into(), "x".into()), Switch::Released)])
    );
    assert!(custody::is_in_custody(store, &[], "local", "/ä", "orders.dlq").await.unwrap());
}

/// A replay's claim, an edit's claim of one record, deletes and their settling: the state
/// guards on both backends.
async fn a_claimed_record_is_neither_claimed_again_nor_deleted(store: &Store) {
    let lines: Vec<String> = (0..4).map(|i| line(&format!("m-{i}"), &[], b"{}")).collect();
    import(store, &lines).await;
    let ids = all_ids(store).await;
    assert_eq!(store.claim_records("audit-1", "r-gone", &ids[..3]).await.unwrap(), ids[..3]);
    // An edit of record 2 and a second replay: neither gets what the first holds.
    assert!(store.claim_records("audit-2", "r-gone", &ids[2..3]).await.unwrap().is_empty());
    assert_eq!(store.claim_records("audit-3", "r-gone", &ids).await.unwrap(), ids[3..]);
    let d = custody::delete(store, QUEUE, ids[0]).await;
    assert!(matches!(d, Err(custody::DeleteError::NotHeld { ref state, .. }) if state == "claimed"), "{d:?}");

    // Confirmed: replayed; returned: held again; not sent: handed back when the replay ends.
    let replayed = [(ids[0], "orders".to_string()), (ids[3], "orders (an edited copy)".to_string())];
    store.settle_records(&replayed, &ids[1..2], 1_000).await.unwrap();
    assert_eq!(store.unclaim_records("audit-1").await.unwrap(), 1, "record 2 was still claimed");
    assert_eq!(store.unclaim_records("audit-1").await.unwrap(), 0);
    let d = custody::delete(store, QUEUE, ids[0]).await;
    assert!(matches!(d, Err(custody::DeleteError::NotHeld { ref state, .. }) if state == "replayed"), "{d:?}");
    assert_eq!(custody::delete(store, QUEUE, ids[1]).await.unwrap().as_deref(), Some("m-1"));
    assert!(matches!(custody::delete(store, QUEUE, ids[1]).await, Err(custody::DeleteError::NotFound(_))));
    let elsewhere = store.delete_held(("local", "/ä", "other.dlq"), ids[2]).await.unwrap();
    assert_eq!(elsewhere, Deleted::NotFound, "a record of another queue");

    // A crash leaves claims: the next start hands them back.
    assert_eq!(store.claim_records("audit-4", "r-gone", &ids).await.unwrap(), ids[2..3]);
    assert_eq!(custody::recover(store, "r-survivor").await.unwrap(), 1);
    let counts = custody::counts_by_queue(store, "local").await.unwrap();
    let c = &counts[&("/ä".to_string(), "orders.dlq".to_string())];
    assert_eq!((c.held, c.claimed, c.replayed), (1, 0, 2));
    // Retention removes replayed records only, by when they were replayed.
    assert_eq!(custody::prune_replayed(store, 1_000).await.unwrap(), 0);
    assert_eq!(custody::prune_replayed(store, 1_001).await.unwrap(), 2);
    assert_eq!(all_ids(store).await, ids[2..3]);
}

/// Replays (two claiming the same records, in other orders) and an admin deleting them, at
/// once: every record ends claimed by one replay or deleted, never two of these.
async fn concurrent_claims_and_deletes_take_each_record_once(store: &Store) {
    let lines: Vec<String> = (0..600).map(|i| line(&format!("m-{i}"), &[], b"{}")).collect();
    import(store, &lines).await;
    let ids = all_ids(store).await;
    assert_eq!(ids.len(), 600);
    let claimer = |job: &'static str, order: Vec<i64>| {
        let store = store.clone();
        tokio::spawn(async move {
            let mut got = Vec::new();
            for chunk in order.chunks(37) {
                got.extend(store.claim_records(job, "r-gone", chunk).await.unwrap());
            }
            got
        })
    };
    let reversed: Vec<i64> = ids.iter().rev().copied().collect();
    let interleaved: Vec<i64> = ids.iter().step_by(2).chain(ids.iter().skip(1).step_by(2)).copied().collect();
    let (a, b, c) = (claimer("audit-a", ids.clone()), claimer("audit-b", reversed), claimer("audit-c", interleaved));
    let deleter = {
        let (store, ids) = (store.clone(), ids.clone());
        tokio::spawn(async move {
            let mut deleted = Vec::new();
            for id in ids.iter().skip(300).chain(&ids[..300]).step_by(3) {
                match custody::delete(&store, QUEUE, *id).await {
                    Ok(_) => deleted.push(*id),
                    Err(custody::DeleteError::NotHeld { .. }) => {}
                    Err(e) => panic!("{e}"),
                }
            }
            deleted
        })
    };
    let taken = [a.await.unwrap(), b.await.unwrap(), c.await.unwrap(), deleter.await.unwrap()];
    let mut seen = BTreeSet::new();
    for id in taken.iter().flatten() {
        assert!(seen.insert(*id), "record {id} was taken twice");
    }
    assert_eq!(seen, ids.iter().copied().collect::<BTreeSet<i64>>(), "every record taken");
    let counts = custody::counts_by_queue(store, "local").await.unwrap();
    let c = &counts[&("/ä".to_string(), "orders.dlq".to_string())];
    assert_eq!((c.held, c.claimed as usize), (0, taken[..3].iter().map(Vec::len).sum()));
}

/// Several replicas on one database (issue 33): recovery hands back to held only the records
/// a dead replica claimed (its heartbeat let go at a stop, or run out after a kill). A live
/// replica's claims, and the survivor's own (even without a heartbeat), stay claimed: its
/// replay is sending them.
async fn only_a_dead_replicas_claims_are_handed_back(store: &Store) {
    let lines: Vec<String> = (0..8).map(|i| line(&format!("m-{i}"), &[], b"{}")).collect();
    import(store, &lines).await;
    let ids = all_ids(store).await;
    let replicas = crate::Replicas::start(store).await;
    assert_eq!(store.claim_records("audit-1", replicas.live.id(), &ids[..2]).await.unwrap(), ids[..2]);
    assert_eq!(store.claim_records("audit-2", replicas.stopped.id(), &ids[2..4]).await.unwrap(), ids[2..4]);
    assert_eq!(store.claim_records("audit-3", replicas.killed.id(), &ids[4..6]).await.unwrap(), ids[4..6]);
    assert_eq!(store.claim_records("audit-4", "r-survivor", &ids[6..7]).await.unwrap(), ids[6..7]);
    let states = || async {
        let records = store.custody_records_by_id(&ids).await.unwrap();
        records.into_iter().map(|r| r.state).collect::<Vec<_>>()
    };

    assert_eq!(custody::recover(store, "r-survivor").await.unwrap(), 2, "the stopped replica's");
    let c = "claimed";
    assert_eq!(states().await, [c, c, "held", "held", c, c, c, "held"], "the killed one's heartbeat is still on");
    // What was handed back is claimed again by the next replay, of a live replica.
    assert_eq!(store.claim_records("audit-5", replicas.live.id(), &ids[2..3]).await.unwrap(), ids[2..3]);

    replicas.until_killed_is_dead(store).await;
    assert_eq!(custody::recover(store, "r-survivor").await.unwrap(), 2, "the killed replica's");
    assert_eq!(states().await, [c, c, c, "held", "held", "held", c, "held"]);
    // The live replica's replay settles and hands back its own as it would have.
    store.settle_records(&[(ids[0], "orders".to_string())], &[], 1_000).await.unwrap();
    assert_eq!(store.unclaim_records("audit-1").await.unwrap(), 1);
    assert_eq!(store.unclaim_records("audit-5").await.unwrap(), 1);
    assert_eq!(states().await, ["replayed", "held", "held", "held", "held", "held", c, "held"]);
}

/// Issue 34, case 6: a queue deleted and re-created under the same name showed the old one's
/// "907 replayed". Records replayed before the poll that found the queue back are the old
/// queue's; the listing counts those replayed since.
async fn a_recreated_queue_counts_only_its_own_replays(store: &Store) {
    use warren::history::{self, PollWrite, QueueMeta};
    let (broker, vhost, queue) = QUEUE;
    let meta = QueueMeta {
        vhost: vhost.into(),
        name: queue.into(),
        kind: "classic".into(),
        durable: Some(true),
        arguments: "{}".into(),
        policy: None,
        effective_policy: "{}".into(),
    };
    let broker_id = history::broker_id(store, broker).await.unwrap();
    let poll = |ts: i64| PollWrite { broker_id, ts, ..PollWrite::default() };
    let mut first = poll(1_000);
    first.upserts.push(meta.clone());
    let id = history::write_poll(store, &first).await.unwrap()[0];

    let lines: Vec<String> = (0..5).map(|i| line(&format!("m-{i}"), &[], b"{}")).collect();
    import(store, &lines).await;
    let ids = all_ids(store).await;
    let replayed = |n: usize| -> Vec<(i64, String)> { ids[..n].iter().map(|id| (*id, "work".to_string())).collect() };
    let replayed_count = || async {
        let keeper = custody::Custody::new(store.clone(), storage());
        let budget = Matchers::new().request();
        custody::list(store, &keeper, QUEUE, &Filter::default(), None, 10, &budget).await.unwrap().counts.replayed
    };
    assert_eq!(store.claim_records("audit-1", "r-1", &ids[..3]).await.unwrap(), ids[..3]);
    store.settle_records(&replayed(3), &[], 1_500).await.unwrap();
    assert_eq!(replayed_count().await, 3, "never gone: every replay is this queue's");

    // A poll that writes the queue again (its policy changed) while it never vanished keeps its count.
    let mut changed = poll(1_600);
    changed.upserts.push(QueueMeta { policy: Some("p".into()), ..meta.clone() });
    history::write_poll(store, &changed).await.unwrap();
    assert_eq!(replayed_count().await, 3);

    // Gone at 2,000, back at 3,000: a new queue under the old name.
    let mut gone = poll(2_000);
    gone.deleted.push(id);
    history::write_poll(store, &gone).await.unwrap();
    let mut back = poll(3_000);
    back.upserts.push(meta);
    assert_eq!(history::write_poll(store, &back).await.unwrap(), vec![id], "the row is reused");
    assert_eq!(replayed_count().await, 0, "the old queue's replays are not the new one's");
    assert_eq!(store.claim_records("audit-2", "r-1", &ids[3..4]).await.unwrap(), ids[3..4]);
    store.settle_records(&[(ids[3], "work".to_string())], &[], 3_100).await.unwrap();
    assert_eq!(replayed_count().await, 1);
    let counts = custody::counts_by_queue(store, broker).await.unwrap();
    let c = &counts[&(vhost.to_string(), queue.to_string())];
    assert_eq!((c.held, c.replayed), (1, 4), "held records stay whatever the queue's history; by name, every replay");
}

/// Ticked records that this queue's custody does not hold now (another queue's, replayed, never
/// taken in) are named, in one query over their span.
async fn ticked_records_not_held_here_are_named(store: &Store) {
    let lines: Vec<String> = (0..3).map(|i| line(&format!("m-{i}"), &[], b"{}")).collect();
    import(store, &lines).await;
    let mine = all_ids(store).await;
    let other = ("local", "/ä", "other.dlq");
    store.keep_records(other, 1, &[bare_record("f", false)]).await.unwrap();
    let theirs = *store.custody_ids(other, &Default::default(), (i64::MIN, i64::MAX)).await.unwrap().first().unwrap();
    assert_eq!(store.claim_records("audit-1", "r-1", &mine[..1]).await.unwrap(), mine[..1]);
    store.settle_records(&[(mine[0], "work".to_string())], &[], 10).await.unwrap();
    let asked = [mine[1], theirs, mine[0], i64::MAX, mine[2]];
    assert_eq!(custody::not_held(store, QUEUE, &asked).await.unwrap(), vec![theirs, mine[0], i64::MAX]);
    assert!(custody::not_held(store, QUEUE, &[]).await.unwrap().is_empty());
}
