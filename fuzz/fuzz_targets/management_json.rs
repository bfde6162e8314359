//! Management API answers as warren reads them (`/api/overview`, `/api/vhosts`, a page of
//! `/api/queues`, `/api/bindings`, `/api/exchanges`, the "get messages" answer), and what the
//! poller derives from them without I/O: counters and rates, queue views with their health
//! signals, and the dead-letter analysis over the listed arguments, policies and bindings.
//! The input is one response body; every shape is tried on it.
#![no_main]

use std::collections::HashSet;

use chrono::{DateTime, Utc};
use libfuzzer_sys::fuzz_target;
use serde_json::{Map, Value};
use warren::broker::management::{Overview, PeekedMessage, QueuePage, RawQueue, VhostEntry};
use warren::broker::topology::{self, Exchange, ExchangeBindings, QueueConfig, VhostTopology};
use warren::metrics::{self, BrokerCounters};

fuzz_target!(|body: &[u8]| {
    let now = DateTime::<Utc>::from_timestamp(1_700_000_000, 0).unwrap();
    if let Ok(overview) = serde_json::from_slice::<Overview>(body) {
        let counters = BrokerCounters::from_overview(overview.message_stats.as_ref(), true);
        metrics::broker_rates(&BrokerCounters::default(), &counters, 5.0);
    }
    if let Ok(vhosts) = serde_json::from_slice::<Vec<VhostEntry>>(body) {
        let counters: Vec<_> =
            vhosts.iter().map(|v| BrokerCounters::from_overview(v.message_stats.as_ref(), true)).collect();
        for pair in counters.windows(2) {
            metrics::broker_rates(&pair[0], &pair[1], 5.0);
        }
    }
    if let Ok(page) = serde_json::from_slice::<QueuePage>(body) {
        derive(page.items, now);
    }
    if let Ok(queues) = serde_json::from_slice::<Vec<RawQueue>>(body) {
        derive(queues, now);
    }
    if let Ok(ExchangeBindings(bindings)) = serde_json::from_slice::<ExchangeBindings>(body) {
        route(bindings);
    }
    let _ = serde_json::from_slice::<Vec<Exchange>>(body);
    if let Ok(messages) = serde_json::from_slice::<Vec<PeekedMessage>>(body) {
        for (i, message) in messages.into_iter().enumerate() {
            let summary = warren::dlq::message::summarize(i + 1, String::new(), message);
            warren::dlq::message::render_payload(&summary.message);
        }
    }
});

/// What a poll makes of a listing: views (each against the previous queue's counters, as if it
/// were the same queue's last poll), health, and the dead-letter analysis.
fn derive(queues: Vec<RawQueue>, now: DateTime<Utc>) {
    let configs: Vec<(String, Map<String, Value>, Map<String, Value>)> = queues
        .iter()
        .map(|q| {
            let map = |m: &Option<std::sync::Arc<Map<String, Value>>>| m.as_deref().cloned().unwrap_or_default();
            (q.name.clone(), map(&q.arguments), map(&q.effective_policy_definition))
        })
        .collect();
    let mut previous = None;
    let mut previous_total: Option<u64> = None;
    for raw in queues {
        let counters = metrics::queue_counters(&raw, true);
        warren::broker::policies::delivery_limit_4x(&raw);
        warren::broker::policies::overflow(&raw);
        let mut view = metrics::queue_view("local", raw, true, previous.as_ref().map(|c| (c, 5.0)), now);
        // The poller's backlog growth: two depths 5 s apart.
        let growth = view.total.zip(previous_total).map(|(now, then)| (now as f64 - then as f64) / 5.0);
        metrics::apply_health(&mut view, Some((60.0, 3)), growth, 30.0);
        metrics::derive_inflow(&mut view);
        previous = Some(counters);
        previous_total = view.total;
    }
    let queues: Vec<QueueConfig<'_>> = configs
        .iter()
        .map(|(name, arguments, effective_policy)| QueueConfig { name, arguments, effective_policy, consumers: None })
        .collect();
    topology::analyse(&queues, None);
    topology::analyse(&queues, Some(&VhostTopology::default()));
}

/// The dead-letter analysis over listed bindings: every bound exchange is tried as each exchange
/// type, with a queue dead-lettering into it under each binding's routing key.
fn route(bindings: Vec<topology::Binding>) {
    let sources: HashSet<&str> = bindings.iter().map(|b| b.source.as_str()).collect();
    for kind in ["topic", "direct", "fanout", "headers"] {
        let exchanges = sources.iter().map(|s| Exchange { name: s.to_string(), kind: kind.to_string() }).collect();
        let topology = VhostTopology { bindings: bindings.clone(), exchanges };
        let arguments: Vec<(String, Map<String, Value>)> = bindings
            .iter()
            .enumerate()
            .map(|(i, b)| {
                let mut args = Map::new();
                args.insert("x-dead-letter-exchange".into(), Value::String(b.source.clone()));
                args.insert("x-dead-letter-routing-key".into(), Value::String(b.routing_key.clone()));
                (format!("source-{i}"), args)
            })
            .collect();
        let empty = Map::new();
        let queues: Vec<QueueConfig<'_>> = arguments
            .iter()
            .map(|(name, arguments)| QueueConfig { name, arguments, effective_policy: &empty, consumers: None })
            .collect();
        topology::analyse(&queues, Some(&topology));
    }
    for pattern in bindings.iter().take(8) {
        for key in bindings.iter().take(8) {
            let (pattern, key) = (&pattern.routing_key, &key.routing_key);
            assert_eq!(topology::topic_matches(pattern, key), topic_reference(pattern, key), "{pattern:?} {key:?}");
        }
    }
}

/// Topic matching by dynamic programming over (pattern words, key words), to check the fast one.
fn topic_reference(pattern: &str, key: &str) -> bool {
    fn words(s: &str) -> Vec<&str> {
        if s.is_empty() {
            Vec::new()
        } else {
            s.split('.').collect()
        }
    }
    let (p, k) = (words(pattern), words(key));
    // matched[i][j]: the first i pattern words match the first j key words.
    let mut matched = vec![vec![false; k.len() + 1]; p.len() + 1];
    matched[0][0] = true;
    for i in 1..=p.len() {
        for j in 0..=k.len() {
            matched[i][j] = match p[i - 1] {
                "#" => matched[i - 1][j] || (j > 0 && matched[i][j - 1]),
                w => j > 0 && (w == "*" || w == k[j - 1]) && matched[i - 1][j - 1],
            };
        }
    }
    matched[p.len()][k.len()]
}
