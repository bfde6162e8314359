//! Alerts: rules, states and their deliveries, history, silences, the outbox and the delivery
//! log, with the transactions an evaluation and a delivery write in.

use std::time::Duration;

use chrono::{DateTime, Utc};
use warren::alerts::store::{self, Silence, Source};
use warren::alerts::{AlertKey, AlertPhase, AlertState, Metric, Rule, Transition};
use warren::storage::alerts::{LogRow, NewOutboxRow};
use warren::storage::Store;

crate::conformance!(
    rules_are_saved_replaced_and_deleted,
    an_alert_counts_as_notified_once_its_latest_queued_notification_was_accepted,
    history_pages_newest_first_keeps_values_exactly_and_is_pruned,
    silences_round_up_end_early_and_list,
    the_outbox_keeps_order_and_attempts_and_a_dropped_transaction_writes_nothing,
    the_delivery_log_pages_and_prunes,
    an_evaluation_replaces_only_the_states_of_its_own_brokers,
);

fn at(secs: i64) -> DateTime<Utc> {
    DateTime::from_timestamp(1_700_000_000 + secs, 0).unwrap()
}

fn rule(id: &str, threshold: f64) -> Rule {
    let mut rule = store::builtin_node_rules().into_iter().next().expect("a built-in node rule");
    rule.id = id.to_string();
    rule.threshold = Some(threshold);
    rule
}

async fn rules_are_saved_replaced_and_deleted(store: &Store) {
    store::save_rule(store, &rule("b-rule", 1.0)).await.unwrap();
    store::save_rule(store, &rule("a-rule", 2.0)).await.unwrap();
    store::save_rule(store, &rule("b-rule", 0.000_123_456_789_012_345_67)).await.unwrap();
    let rules = store::api_rules(store).await.unwrap();
    let read: Vec<_> = rules.iter().map(|r| (r.id.as_str(), r.threshold)).collect();
    assert_eq!(read, [("a-rule", Some(2.0)), ("b-rule", Some(0.000_123_456_789_012_345_67))], "by id, replaced, exact");
    assert_eq!(rules[0], rule("a-rule", 2.0), "the whole rule round-trips");

    // A definition this warren cannot read (another version's) is skipped, not an error.
    store.save_rule("c-rule", "{\"not\": \"a rule\"}", 0).await.unwrap();
    assert_eq!(store::api_rules(store).await.unwrap().len(), 2);

    let all = store::all_rules(&[], store).await.unwrap();
    assert!(all.iter().any(|r| r.source == Source::Api && r.rule.id == "a-rule"));
    assert!(all.iter().any(|r| r.source == Source::Builtin && r.rule.metric == Metric::BrokerUnreachable));

    assert!(store::delete_rule(store, "a-rule").await.unwrap());
    assert!(!store::delete_rule(store, "a-rule").await.unwrap());
    assert!(store::api_rules(store).await.unwrap().iter().all(|r| r.id != "a-rule"));
}

async fn an_alert_counts_as_notified_once_its_latest_queued_notification_was_accepted(store: &Store) {
    let key = AlertKey::broker("b");
    let state = AlertState {
        rule_id: "r".into(),
        key: key.clone(),
        phase: AlertPhase::Firing,
        active_since: at(0),
        fired_at: Some(at(0)),
        false_since: None,
        last_value: Some(1047.0),
        observed_at: at(0),
    };
    let write = |queued_at: Option<DateTime<Utc>>| {
        let state = state.clone();
        async move {
            let mut tx = store.begin().await.unwrap();
            store::record(&mut *tx, &[], &[(state, queued_at)], &evaluates(["b"])).await.unwrap();
            tx.commit().await.unwrap();
        }
    };
    let stored = || async {
        store::states(store).await.unwrap().into_iter().map(|s| (s.queued_at, s.delivered_at)).collect::<Vec<_>>()
    };
    let deliver = |planned: i64, delivered: i64| {
        let key = key.clone();
        async move {
            let mut tx = store.begin().await.unwrap();
            store::mark_delivered(&mut *tx, "r", &key, at(planned), at(delivered)).await.unwrap();
            tx.commit().await.unwrap();
        }
    };

    write(Some(at(0))).await;
    assert_eq!(stored().await, [(Some(at(0)), None)], "queued, not yet notified");
    assert_eq!(store::states(store).await.unwrap()[0].state, state, "the state round-trips");
    deliver(0, 3).await;
    assert_eq!(stored().await, [(Some(at(0)), Some(at(3)))]);
    write(Some(at(0))).await;
    assert_eq!(stored().await, [(Some(at(0)), Some(at(3)))], "a later evaluation keeps the delivery");
    // A reminder is queued; the firing accepted late by a slow channel is not it.
    write(Some(at(100))).await;
    deliver(0, 104).await;
    assert_eq!(stored().await, [(Some(at(100)), Some(at(3)))]);
    deliver(100, 101).await;
    assert_eq!(stored().await, [(Some(at(100)), Some(at(101)))]);
    // A delivery acknowledged out of order never moves it back.
    deliver(100, 90).await;
    assert_eq!(stored().await, [(Some(at(100)), Some(at(101)))]);
    // Resolved: the state goes, and a new firing of the same alert starts untold.
    let mut tx = store.begin().await.unwrap();
    store::record(&mut *tx, &[], &[], &evaluates(["b"])).await.unwrap();
    tx.commit().await.unwrap();
    assert_eq!(stored().await, []);
    write(None).await;
    deliver(100, 200).await;
    assert_eq!(stored().await, [(None, None)], "an old episode's delivery does not count");
}

/// The brokers an evaluation is for.
fn evaluates<const N: usize>(brokers: [&str; N]) -> std::collections::BTreeSet<String> {
    brokers.into_iter().map(String::from).collect()
}

/// With several replicas, each evaluation stores the states of the brokers it evaluates and
/// leaves the others' alone: an alert of broker c survives b's evaluation without it.
async fn an_evaluation_replaces_only_the_states_of_its_own_brokers(store: &Store) {
    let state = |broker: &str| AlertState {
        rule_id: "r".into(),
        key: AlertKey::broker(broker),
        phase: AlertPhase::Firing,
        active_since: DateTime::from_timestamp(0, 0).unwrap(),
        fired_at: None,
        false_since: None,
        last_value: None,
        observed_at: DateTime::from_timestamp(0, 0).unwrap(),
    };
    let mut tx = store.begin().await.unwrap();
    store::record(&mut *tx, &[], &[(state("b"), None), (state("c"), None)], &evaluates(["b", "c"])).await.unwrap();
    tx.commit().await.unwrap();
    let mut tx = store.begin().await.unwrap();
    store::record(&mut *tx, &[], &[], &evaluates(["b"])).await.unwrap();
    tx.commit().await.unwrap();
    let left: Vec<String> = store::states(store).await.unwrap().into_iter().map(|s| s.state.key.broker).collect();
    assert_eq!(left, ["c"], "b's alert ended, c's is another replica's");
}

fn transition(rule_id: &str, at_secs: i64, value: Option<f64>) -> Transition {
    Transition {
        rule_id: rule_id.into(),
        key: AlertKey::broker("b"),
        from: AlertPhase::Pending,
        to: AlertPhase::Firing,
        value,
        at: DateTime::from_timestamp(at_secs, 0).unwrap(),
        note: Some("queue deleted \u{2014} \"q\"".into()),
    }
}

async fn history_pages_newest_first_keeps_values_exactly_and_is_pruned(store: &Store) {
    let values = [Some(0.1 + 0.2), None, Some(1.797_693_134_862_315_7e308), Some(-0.0)];
    let mut tx = store.begin().await.unwrap();
    let transitions: Vec<_> =
        (0..4).map(|i| (transition(&format!("r{i}"), 1_000 * (i + 1), values[i as usize]), i == 1)).collect();
    store::record(&mut *tx, &transitions, &[], &evaluates(["b"])).await.unwrap();
    tx.commit().await.unwrap();

    let newest = store::history(store, None, 10).await.unwrap();
    assert_eq!(newest.iter().map(|h| h.rule_id.as_str()).collect::<Vec<_>>(), ["r3", "r2", "r1", "r0"]);
    assert_eq!(newest.iter().rev().map(|h| h.value).collect::<Vec<_>>(), values);
    assert_eq!(newest.iter().map(|h| h.silenced).collect::<Vec<_>>(), [false, false, true, false]);
    let first = &newest[3];
    assert_eq!((first.from.as_str(), first.to.as_str()), ("pending", "firing"));
    assert_eq!(first.note.as_deref(), Some("queue deleted \u{2014} \"q\""));
    assert_eq!(first.key, serde_json::to_value(AlertKey::broker("b")).unwrap());
    assert_eq!(first.at, DateTime::from_timestamp(1_000, 0).unwrap());
    let older = store::history(store, Some(newest[1].id), 10).await.unwrap();
    assert_eq!(older.iter().map(|h| h.rule_id.as_str()).collect::<Vec<_>>(), ["r1", "r0"]);
    assert_eq!(store::history(store, None, 1).await.unwrap().len(), 1);

    assert_eq!(store::prune_history(store, 2_500).await.unwrap(), 2);
    assert_eq!(store::history(store, None, 10).await.unwrap().len(), 2);
}

async fn silences_round_up_end_early_and_list(store: &Store) {
    let now = Utc::now();
    let silence = |rule_id: Option<&str>, until: DateTime<Utc>| Silence {
        id: 0,
        rule_id: rule_id.map(str::to_string),
        key: Some(AlertKey::broker("b")),
        until,
        comment: "maintenance: the 'orders' cluster".into(),
        created_by: "ada".into(),
        created_at: at(0),
    };
    let later = now + chrono::Duration::milliseconds(3_600_400);
    let a = store::add_silence(store, &silence(Some("r"), later)).await.unwrap();
    let past = store::add_silence(store, &silence(None, now - chrono::Duration::seconds(60))).await.unwrap();
    assert!(past > a);

    let active = store::silences(store, true).await.unwrap();
    assert_eq!(active.iter().map(|s| s.id).collect::<Vec<_>>(), [a]);
    let read = &active[0];
    assert_eq!(read.until.timestamp(), later.timestamp() + 1, "rounded up to the second");
    assert_eq!((read.rule_id.as_deref(), read.key.as_ref()), (Some("r"), Some(&AlertKey::broker("b"))));
    assert_eq!(
        (read.comment.as_str(), read.created_by.as_str(), read.created_at),
        ("maintenance: the 'orders' cluster", "ada", at(0))
    );
    assert_eq!(store::silences(store, false).await.unwrap().iter().map(|s| s.id).collect::<Vec<_>>(), [past, a]);

    // Ending one that already ended keeps its end; ending a live one ends it now.
    let ended_at = store::silences(store, false).await.unwrap()[0].until;
    assert!(store::expire_silence(store, past).await.unwrap());
    assert_eq!(store::silences(store, false).await.unwrap()[0].until, ended_at);
    assert!(store::expire_silence(store, a).await.unwrap());
    assert!(store::silences(store, true).await.unwrap().is_empty());
    assert!(!store::expire_silence(store, a + past + 100).await.unwrap());
}

fn outbox_row<'a>(channel: &'a str, notification: &'a str, due: i64) -> NewOutboxRow<'a> {
    NewOutboxRow {
        channel_id: channel,
        channel_name: "The pager",
        kind: "firing",
        rule_id: "r",
        alert_key: "{\"broker\":\"b\"}",
        notification,
        next_attempt_at: due,
        created_at: 1_700_000_000,
    }
}

async fn the_outbox_keeps_order_and_attempts_and_a_dropped_transaction_writes_nothing(store: &Store) {
    let mut tx = store.begin().await.unwrap();
    tx.insert_outbox(outbox_row("pager", "{\"n\":1}", 1_700_000_000_123)).await.unwrap();
    tx.insert_outbox(outbox_row("hook", "{\"n\":2}", 1_700_000_000_124)).await.unwrap();
    tx.insert_outbox(outbox_row("pager", "{\"n\":3}", 1_700_000_000_125)).await.unwrap();
    assert_eq!(tx.outbox_waiting("pager").await.unwrap(), 2);
    assert!(store.outbox().await.unwrap().is_empty(), "not visible before the commit");
    tx.commit().await.unwrap();

    let rows = store.outbox().await.unwrap();
    assert_eq!(
        rows.iter().map(|r| r.notification.as_str()).collect::<Vec<_>>(),
        ["{\"n\":1}", "{\"n\":2}", "{\"n\":3}"]
    );
    let oldest = store.oldest_in_outbox("pager").await.unwrap().unwrap();
    assert_eq!(
        (oldest.notification.as_str(), oldest.attempts, oldest.next_attempt_at),
        ("{\"n\":1}", 0, 1_700_000_000_123)
    );
    assert_eq!(
        (oldest.channel_name.as_str(), oldest.kind.as_str(), oldest.created_at),
        ("The pager", "firing", 1_700_000_000)
    );
    assert!(store.oldest_in_outbox("nobody").await.unwrap().is_none());

    // An attempt failed: counted, due later, and its claim ended. Then delivered: gone, with its
    // log row. (tests/conformance/outbox.rs has the claims.)
    let claimed = store.claim_outbox("pager", "me", i64::MAX, Duration::from_secs(60)).await.unwrap().unwrap();
    assert_eq!((claimed.id, claimed.claimed_by.as_deref()), (oldest.id, Some("me")));
    let mut tx = store.begin().await.unwrap();
    assert!(tx.retry_outbox(oldest.id, "me", 1, 1_700_000_060_000).await.unwrap());
    tx.commit().await.unwrap();
    let retried = store.oldest_in_outbox("pager").await.unwrap().unwrap();
    assert_eq!((retried.id, retried.attempts, retried.next_attempt_at), (oldest.id, 1, 1_700_000_060_000));
    assert_eq!((retried.claimed_by, retried.claim_expires_at), (None, None));
    let mut tx = store.begin().await.unwrap();
    tx.delete_outbox(oldest.id).await.unwrap();
    tx.insert_log(&log_row(1_700_000_061, "pager", "sent")).await.unwrap();
    tx.commit().await.unwrap();
    assert_eq!(store.oldest_in_outbox("pager").await.unwrap().unwrap().notification, "{\"n\":3}");
    assert_eq!(store.deliveries(i64::MAX, 10).await.unwrap().len(), 1);

    // A transaction dropped without its commit writes nothing: neither the delete nor the log.
    let mut tx = store.begin().await.unwrap();
    let all = tx.outbox_rows().await.unwrap();
    assert_eq!(all.len(), 2);
    for row in &all {
        tx.delete_outbox(row.id).await.unwrap();
    }
    tx.insert_log(&log_row(1_700_000_062, "pager", "dropped")).await.unwrap();
    assert!(tx.outbox_row(all[0].id).await.unwrap().is_none(), "the transaction sees its own delete");
    drop(tx);
    assert_eq!(store.outbox().await.unwrap().len(), 2);
    assert_eq!(store.deliveries(i64::MAX, 10).await.unwrap().len(), 1);
}

fn log_row(at: i64, channel: &str, outcome: &str) -> LogRow {
    LogRow {
        id: 0,
        at,
        channel_id: channel.into(),
        channel_name: "The pager".into(),
        kind: "firing".into(),
        rule_id: Some("r".into()),
        alert_key: Some("{\"broker\":\"b\"}".into()),
        attempt: 1,
        outcome: outcome.into(),
        http_status: Some(503),
        error: Some("HTTP 503 from the receiver \u{1F407}".into()),
    }
}

async fn the_delivery_log_pages_and_prunes(store: &Store) {
    for i in 0..5 {
        store.insert_log(&log_row(1_000 + i, "pager", "failed")).await.unwrap();
    }
    let mut test = log_row(2_000, "hook", "sent");
    (test.kind, test.rule_id, test.alert_key, test.http_status, test.error) = ("test".into(), None, None, None, None);
    store.insert_log(&test).await.unwrap();

    let newest = store.deliveries(i64::MAX, 3).await.unwrap();
    assert_eq!(newest.iter().map(|r| r.at).collect::<Vec<_>>(), [2_000, 1_004, 1_003]);
    assert_eq!(LogRow { id: 0, ..newest[0].clone() }, test);
    assert_eq!(LogRow { id: 0, ..newest[1].clone() }, log_row(1_004, "pager", "failed"));
    let older = store.deliveries(newest[2].id, 10).await.unwrap();
    assert_eq!(older.iter().map(|r| r.at).collect::<Vec<_>>(), [1_002, 1_001, 1_000]);
    // Through the wing: the same rows as records.
    let records = warren::alerts::notify::recent_deliveries(store, 10).await.unwrap();
    assert_eq!(records.len(), 6);
    assert_eq!((records[1].http_status, records[1].attempt), (Some(503), 1));

    assert_eq!(store.prune_log(1_003).await.unwrap(), 3);
    assert_eq!(store.deliveries(i64::MAX, 10).await.unwrap().len(), 3);
}
