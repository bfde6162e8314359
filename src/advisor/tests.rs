//! The rules over hand-made live states, without a broker (tests/advisor.rs runs them against
//! real ones).

use std::sync::Arc;

use chrono::Utc;
use serde_json::{json, Map, Value};

use super::*;
use crate::metrics::{QueueNames, QueueView};

pub fn queue(name: &str, kind: &str) -> QueueView {
    let names = QueueNames {
        broker: "b".into(),
        vhost: "v".into(),
        name: name.into(),
        kind: kind.into(),
        state: Some("running".into()),
    };
    let mut q = QueueView::unknown(names, Utc::now());
    q.durable = Some(true);
    q.exclusive = Some(false);
    q.ready = Some(0);
    q.unacked = Some(0);
    q.total = Some(0);
    q.consumers = Some(0);
    q
}

fn map(v: Value) -> Arc<Map<String, Value>> {
    Arc::new(v.as_object().cloned().unwrap())
}

fn broker(version: &str, queues: Vec<QueueView>) -> BrokerLive {
    let mut live: BrokerLive = crate::live::Live::new(&["b".to_string()]).broker("b").unwrap();
    live.status.rabbitmq_version = Some(version.into());
    live.status.last_success = Some(Utc::now());
    live.queues = Arc::new(queues);
    live
}

fn rules_fired(live: &BrokerLive) -> Vec<(&'static str, String)> {
    let advice = advise(live, None, &Settings { hold_limit_secs: 60.0, ..Settings::default() }, Utc::now());
    advice.findings.iter().map(|f| (f.rule, f.queue.clone().unwrap_or_default())).collect()
}

#[test]
fn a_well_configured_quorum_queue_raises_nothing() {
    let mut q = queue("orders", "quorum");
    q.arguments = map(json!({"x-queue-type": "quorum", "x-dead-letter-exchange": "",
        "x-dead-letter-routing-key": "orders.dlq", "x-dead-letter-strategy": "at-least-once",
        "x-overflow": "reject-publish", "x-max-length": 1000}));
    let mut dlq = queue("orders.dlq", "classic");
    dlq.arguments = map(json!({"x-message-ttl": 86400000}));
    for version in ["3.10.8", "4.3.6"] {
        assert_eq!(rules_fired(&broker(version, vec![q.clone(), dlq.clone()])), vec![], "{version}");
    }
}

#[test]
fn a_quorum_queue_without_dlx_drops_past_the_limit_on_4x_and_warns_on_3x() {
    let q = queue("orders", "quorum");
    let on4 = advise(
        &broker("4.0.5", vec![q.clone()]),
        None,
        &Settings { hold_limit_secs: 60.0, ..Settings::default() },
        Utc::now(),
    );
    let f = &on4.findings[0];
    assert_eq!((f.rule, f.severity), (rules::QUORUM_WITHOUT_DLX, Severity::Critical));
    assert!(f
        .evidence
        .iter()
        .any(|e| e.what == "delivery limit" && e.value == "20" && e.source == "RabbitMQ 4.x default"));
    let policy = f.fix.policy.as_ref().unwrap();
    assert_eq!(policy.definition["dead-letter-routing-key"], "orders.dlq");
    let on3 = advise(
        &broker("3.10.8", vec![q.clone()]),
        None,
        &Settings { hold_limit_secs: 60.0, ..Settings::default() },
        Utc::now(),
    );
    assert_eq!(on3.findings[0].severity, Severity::Warning);
    // Unknown version and nothing configured: silent, and said so.
    let mut unknown = broker("", vec![q]);
    unknown.status.rabbitmq_version = None;
    let advice = advise(&unknown, None, &Settings { hold_limit_secs: 60.0, ..Settings::default() }, Utc::now());
    assert!(advice.findings.iter().all(|f| f.rule != rules::QUORUM_WITHOUT_DLX));
    assert!(!advice.ran(rules::QUORUM_WITHOUT_DLX));
}

#[test]
fn upgrade_blockers_name_their_source() {
    let mut lazy = queue("lazy", "classic");
    lazy.arguments = map(json!({"x-queue-mode": "lazy"}));
    let mut v1 = queue("v1", "classic");
    v1.policy = Some("old".into());
    v1.effective_policy = map(json!({"queue-version": 1, "ha-mode": "all", "max-length": 5}));
    let mut transient = queue("tmp", "classic");
    transient.durable = Some(false);
    let mut exclusive = queue("mine", "classic");
    exclusive.durable = Some(false);
    exclusive.exclusive = Some(true);
    let advice = advise(
        &broker("3.10.8", vec![lazy, v1, transient, exclusive]),
        None,
        &Settings { hold_limit_secs: 60.0, ..Settings::default() },
        Utc::now(),
    );
    let fired: Vec<(&str, &str)> = advice.findings.iter().map(|f| (f.rule, f.queue.as_deref().unwrap())).collect();
    assert!(fired.contains(&(rules::QUEUE_MODE, "lazy")), "{fired:?}");
    assert!(fired.contains(&(rules::QUEUE_VERSION_1, "v1")), "{fired:?}");
    assert!(fired.contains(&(rules::CLASSIC_MIRRORING, "v1")), "{fired:?}");
    assert!(fired.contains(&(rules::TRANSIENT, "tmp")), "{fired:?}");
    assert!(!fired.iter().any(|(_, q)| *q == "mine"), "an exclusive queue is fine");
    let ha = advice.findings.iter().find(|f| f.rule == rules::CLASSIC_MIRRORING).unwrap();
    assert_eq!(ha.evidence[0].source, "policy old");
    assert!(ha.blocks_upgrade.as_deref().unwrap().contains("4.0"));
    let fix = ha.fix.policy.as_ref().unwrap();
    assert!(!fix.definition.contains_key("ha-mode") && fix.definition.contains_key("max-length"));
    let lazy = advice.findings.iter().find(|f| f.rule == rules::QUEUE_MODE).unwrap();
    assert!(lazy.fix.policy.is_none() && lazy.fix.summary.contains("argument"));
}

#[test]
fn at_least_once_without_reject_publish_is_a_fallback() {
    let mut q = queue("orders", "quorum");
    q.arguments = map(json!({"x-dead-letter-exchange": "dlx", "x-dead-letter-strategy": "at-least-once"}));
    assert_eq!(rules_fired(&broker("4.3.6", vec![q.clone()])), vec![(rules::AT_LEAST_ONCE_FALLBACK, "orders".into())]);
    q.arguments = map(json!({"x-dead-letter-exchange": "dlx"}));
    assert_eq!(rules_fired(&broker("4.3.6", vec![q])), vec![(rules::AT_MOST_ONCE, "orders".into())]);
}

#[test]
fn drop_head_on_a_worked_queue_and_a_full_queue() {
    let mut q = queue("work", "classic");
    q.arguments = map(json!({"x-max-length": 3}));
    q.consumers = Some(1);
    q.ready = Some(3);
    let fired = rules_fired(&broker("3.10.8", vec![q.clone()]));
    assert_eq!(fired, vec![(rules::DROP_HEAD, "work".into()), (rules::LIMIT_REACHED, "work".into())]);
    q.arguments = map(json!({"x-max-length": 3, "x-overflow": "reject-publish"}));
    q.ready = Some(2);
    assert_eq!(rules_fired(&broker("3.10.8", vec![q])), vec![]);
}

#[test]
fn redeliveries_with_the_limit_off() {
    let mut q = queue("q", "quorum");
    q.arguments = map(json!({"x-dead-letter-exchange": "dlx", "x-delivery-limit": -1,
        "x-dead-letter-strategy": "at-least-once", "x-overflow": "reject-publish"}));
    q.counters.redeliver = Some(4);
    assert_eq!(rules_fired(&broker("4.3.6", vec![q.clone()])), vec![(rules::DELIVERY_LIMIT_OFF, "q".into())]);
    q.counters.redeliver = Some(0);
    assert_eq!(rules_fired(&broker("4.3.6", vec![q])), vec![]);
}

#[test]
fn without_a_client_listing_the_client_rules_are_unknown() {
    let advice =
        advise(&broker("3.10.8", vec![]), None, &Settings { hold_limit_secs: 60.0, ..Settings::default() }, Utc::now());
    for rule in [rules::AUTO_ACK, rules::UNLIMITED_PREFETCH, rules::NO_CONFIRMS, rules::SINGLE_HOLDER] {
        assert!(!advice.ran(rule), "{rule}");
    }
    assert!(advice.ran(rules::QUEUE_MODE));
}

#[test]
fn every_rule_has_a_unique_id_and_two_sentences() {
    let mut ids: Vec<&str> = RULES.iter().map(|r| r.id).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), RULES.len());
    for r in RULES {
        assert_eq!(r.why.matches(". ").count() + 1, 2, "{}: {}", r.id, r.why);
    }
}

#[test]
fn a_publisher_is_judged_once_its_channel_stats_settled() {
    use crate::broker::clients::{Channel, Connection};
    use crate::live::clients::{ClientsLive, Listed};
    let listed_at = Utc::now();
    let clients = |connected_secs_ago: i64| {
        let connection: Connection = serde_json::from_value(json!({"name": "c1", "vhost": "v"})).unwrap();
        let connection = Connection { connected_at: Some(listed_at.timestamp() - connected_secs_ago), ..connection };
        let channel: Channel =
            serde_json::from_value(json!({"name": "c1 (1)", "vhost": "v", "confirm": false})).unwrap();
        let channel = Channel { connection: Some("c1".into()), published: Some(10), ..channel };
        ClientsLive {
            listed_at,
            every_secs: 10.0,
            cost_secs: 0.0,
            connections: Listed::known(vec![connection]),
            channels: Listed::known(vec![channel]),
            consumers: Listed::known(vec![]),
        }
    };
    for (age, fires) in [(5, false), (60, true)] {
        let mut live = broker("4.0.5", vec![]);
        live.clients = Some(Arc::new(clients(age)));
        let advice = advise(&live, None, &Settings { hold_limit_secs: 60.0, ..Settings::default() }, Utc::now());
        let found = advice.findings.iter().any(|f| f.rule == rules::NO_CONFIRMS);
        assert_eq!(found, fires, "a connection {age} s old: {:?}", advice.findings);
        assert!(advice.ran(rules::NO_CONFIRMS));
    }
}

#[test]
fn a_prefetch_far_above_what_the_consumer_processes() {
    use crate::broker::clients::Consumer;
    use crate::live::clients::{ClientsLive, Listed};
    let consumer = |prefetch: u64| Consumer {
        queue: "work".into(),
        vhost: "v".into(),
        consumer_tag: Some("w1".into()),
        channel: Some("c1 (1)".into()),
        connection: Some("c1".into()),
        peer_host: None,
        peer_port: None,
        prefetch_count: Some(prefetch),
        ack_required: Some(true),
        activity_status: Some("up".into()),
        exclusive: Some(false),
    };
    let fired = |prefetch: u64, ready: u64, unacked: u64| {
        let mut q = queue("work", "classic");
        (q.consumers, q.ready, q.unacked, q.ack_rate) = (Some(1), Some(ready), Some(unacked), Some(5.0));
        let mut live = broker("3.10.8", vec![q]);
        live.clients = Some(Arc::new(ClientsLive {
            listed_at: Utc::now(),
            every_secs: 10.0,
            cost_secs: 0.0,
            connections: Listed::known(vec![]),
            channels: Listed::known(vec![]),
            consumers: Listed::known(vec![consumer(prefetch)]),
        }));
        let advice = advise(&live, None, &Settings { hold_limit_secs: 60.0, ..Settings::default() }, Utc::now());
        assert!(advice.ran(rules::PREFETCH_ABOVE_PROCESSING));
        advice.findings.into_iter().find(|f| f.rule == rules::PREFETCH_ABOVE_PROCESSING)
    };
    // 5 msg/s, 2 held: 0.4 s of processing, 2 messages acknowledged in it; 1000 is 500 times that.
    let f = fired(1000, 0, 2).expect("fires");
    assert!(f.evidence.iter().any(|e| e.what == "processing time" && e.value.starts_with("0.40 s")), "{f:?}");
    assert!(f.fix.summary.contains("10 or so"), "{}", f.fix.summary);
    // Within ten times, or at most the floor of 100: fine.
    assert!(fired(100, 0, 2).is_none());
    assert!(fired(150, 0, 20).is_none());
    // A backlog fills every prefetch: what the consumer holds then says nothing of its work.
    assert!(fired(1000, 50, 1000).is_none());
}

#[test]
fn a_dlq_is_flagged_by_its_growth_over_the_window() {
    let mut dlq = queue("orders.dlq", "classic");
    dlq.dead_letters.is_dlq = true;
    dlq.total = Some(30);
    let live = broker("3.10.8", vec![dlq]);
    let with_then = |then: Option<Option<(i64, u64)>>| {
        let mut settings = Settings { hold_limit_secs: 60.0, dlq_growth_window_secs: 172_800.0, ..Settings::default() };
        if let Some(then) = then {
            settings.stored.dlq_depth_then.insert(("v".into(), "orders.dlq".into()), then);
        }
        let advice = advise(&live, None, &settings, Utc::now());
        advice.findings.into_iter().find(|f| f.rule == rules::DLQ_UNBOUNDED)
    };
    // Higher than two days ago: growing, a warning with both depths.
    let f = with_then(Some(Some((1_700_000_000, 12)))).expect("growing");
    assert_eq!(f.severity, Severity::Warning);
    let growth = f.evidence.iter().find(|e| e.what == "growth").unwrap();
    assert_eq!(growth.value, "12 → 30 messages since 2 d ago");
    assert!(growth.source.starts_with("stored history (depth at 2023-11-14T22:13:20"), "{}", growth.source);
    // Not higher: drained by someone, or nothing dies any more.
    assert!(with_then(Some(Some((1_700_000_000, 30)))).is_none());
    // No depth from then (a young history), or not read: messages nobody reads, growth unknown.
    for then in [Some(None), None] {
        let f = with_then(then).expect("flagged, growth unknown");
        assert_eq!(f.severity, Severity::Notice);
        assert!(f.evidence.iter().any(|e| e.what == "growth" && e.value.starts_with("not yet known")), "{f:?}");
    }
}

#[test]
fn ttls_are_read_from_the_x_death_of_records_in_custody() {
    let record = |ttl: Value| {
        json!({"headers": {"x-death": [
        {"queue": "work.wait", "reason": "expired", "original-expiration": ttl, "count": 1},
        {"queue": "work", "reason": "rejected", "count": 1}]}})
    };
    let records = [record(json!("100")), record(json!("200")), record(json!("100")), json!({"expiration": "5"})];
    let ttls = ttls_from_custody(records.iter());
    assert_eq!(ttls.len(), 1, "only entries with an original expiration: {ttls:?}");
    assert_eq!(ttls["work.wait"], [("100".to_string(), 2), ("200".to_string(), 1)].into_iter().collect());

    // The rule reads them for the wait queue, which holds nothing now.
    let mut settings = Settings { hold_limit_secs: 60.0, ..Settings::default() };
    settings.stored.custody_ttls.insert(("v".into(), "work.wait".into()), (ttls["work.wait"].clone(), 3));
    let live = broker("3.10.8", vec![queue("work.wait", "classic")]);
    let advice = advise(&live, None, &settings, Utc::now());
    let f = advice.findings.iter().find(|f| f.rule == rules::MIXED_TTLS).expect("mixed TTLs from custody");
    assert_eq!(f.evidence[0].value, "100 ms, 200 ms");
    assert_eq!(f.evidence[0].source, "3 records in warren's custody");
    assert_eq!((f.evidence[1].value.as_str(), f.evidence[1].counter), ("100 ms ×2, 200 ms ×1", true));
}
