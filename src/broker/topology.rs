//! Dead-letter routing from the topology (DOMAIN.md §4): where each queue's dead letters go, and
//! which queues are dead-letter queues, from arguments, effective policies and bindings, never
//! from names.

mod roles;
pub mod routing;

use std::borrow::Cow;
use std::collections::HashMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

pub use roles::{error_name_hint, message_ttl_ms, observed_role, plain_role, QueueRole, Seen};

/// One binding, as `/api/bindings/{vhost}?columns=...` lists it (and as warren stores it:
/// `history::last_known`).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub struct Binding {
    pub source: String,
    pub destination: String,
    pub destination_type: String,
    #[serde(default)]
    pub routing_key: String,
    /// The binding's arguments when it has any (a headers exchange matches on them); `None`
    /// for the usual empty ones, so that a vhost's thousands of plain bindings carry no map.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments: Option<Map<String, Value>>,
}

/// The bindings of a vhost whose source is a named exchange. The listing also holds the default
/// exchange's implicit binding of every queue (source ""): routing by name needs none of them
/// (`Routes::reachable`), so they are skipped while parsing instead of being kept, one per queue
/// (7 MB at 50,000 queues).
#[derive(Debug, Clone, Default)]
pub struct ExchangeBindings(pub Vec<Binding>);

impl<'de> Deserialize<'de> for ExchangeBindings {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        /// A binding read without copying its strings, unless they hold escapes.
        #[derive(Deserialize)]
        struct Row<'a> {
            #[serde(borrow)]
            source: std::borrow::Cow<'a, str>,
            #[serde(borrow)]
            destination: std::borrow::Cow<'a, str>,
            #[serde(borrow)]
            destination_type: std::borrow::Cow<'a, str>,
            #[serde(default, borrow)]
            routing_key: std::borrow::Cow<'a, str>,
            /// Read as any value: an odd one (3.x writes an empty proplist as `[]`) is no
            /// reason to lose the vhost's whole topology.
            #[serde(default)]
            arguments: Value,
        }
        struct Rows;
        impl<'de> serde::de::Visitor<'de> for Rows {
            type Value = ExchangeBindings;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a list of bindings")
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut kept = Vec::new();
                while let Some(row) = seq.next_element::<Row>()? {
                    if !row.source.is_empty() {
                        kept.push(Binding {
                            source: row.source.into_owned(),
                            destination: row.destination.into_owned(),
                            destination_type: row.destination_type.into_owned(),
                            routing_key: row.routing_key.into_owned(),
                            arguments: match row.arguments {
                                Value::Object(map) if !map.is_empty() => Some(map),
                                _ => None,
                            },
                        });
                    }
                }
                Ok(ExchangeBindings(kept))
            }
        }
        deserializer.deserialize_seq(Rows)
    }
}

/// One exchange, as `/api/exchanges/{vhost}?columns=name,type` lists it.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub struct Exchange {
    pub name: String,
    #[serde(rename = "type")]
    pub kind: String,
}

/// A vhost's bindings and exchanges.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
pub struct VhostTopology {
    pub bindings: Vec<Binding>,
    pub exchanges: Vec<Exchange>,
}

/// Where a queue's dead letters go.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct DeadLetterTarget {
    /// The dead-letter exchange ("" is the default exchange).
    pub exchange: String,
    /// `x-dead-letter-routing-key`; without it the message keeps its own routing keys.
    pub routing_key: Option<String>,
    /// `arguments` or `policy`: where the setting comes from.
    pub configured_by: &'static str,
    /// Queues the dead letters can reach through that exchange's bindings. Empty means they are
    /// dropped: the exchange routes them nowhere (or does not exist). `None`: the bindings are
    /// not known (yet).
    pub queues: Option<Vec<String>>,
}

/// Dead-letter facts of one queue.
#[derive(Debug, Clone, Default, PartialEq, Serialize, utoipa::ToSchema)]
pub struct DeadLetterInfo {
    /// A terminal dead-letter queue: some queue's dead letters end here (`role` is `dlq`). False
    /// for the work and wait queues of a retry loop, though each receives dead letters.
    pub is_dlq: bool,
    /// What the queue is for (see `roles`).
    pub role: QueueRole,
    /// Why warren gives it that role, in words an operator can check against the topology.
    pub role_reason: Cow<'static, str>,
    /// The `work` role rests only on the queue having a dead-letter exchange: no consumers now
    /// or seen before, and no wait queue feeding it, say that it processes messages. Such a
    /// queue may be the wait queue of a retry topology whose work queue nobody consumes
    /// (`dlq::target::stranding`).
    #[serde(skip)]
    pub work_unconfirmed: bool,
    /// `None`: the queue has no dead-letter exchange, so rejected, expired and overflowing
    /// messages are destroyed.
    /// Boxed: most queues have none, and every view carries the field (120 bytes inline).
    pub dead_letter_target: Option<Box<DeadLetterTarget>>,
    /// For a DLQ: the queues whose dead-letter exchange routes here (its configured feeders).
    /// A wait queue that passes messages back for another try is not one of them.
    pub dead_letter_sources: Vec<String>,
    /// Where the messages warren last read in it came from (the queue each died or failed in),
    /// with counts: the feeders observed, which may differ from the configured ones.
    pub observed_sources: Vec<(String, usize)>,
    /// When `observed_sources` were read, in words.
    pub observed_at: Option<String>,
    /// Unix seconds of the newest death of the head message read then (`Seen::head_died_at`):
    /// the oldest dead letter's death, as of that read.
    #[serde(flatten, serialize_with = "crate::times::observed_head_died_at")]
    #[schema(schema_with = crate::times::schema::observed_head_died_at)]
    pub observed_head_died_at: Option<i64>,
}

impl DeadLetterInfo {
    /// The facts of a queue that no dead-letter routing touches.
    pub fn plain(consumers: Option<u64>) -> Self {
        let (role, role_reason) = plain_role(consumers);
        DeadLetterInfo { role, role_reason, ..Default::default() }
    }

    /// Adds what warren saw in the queue's messages when it last read them (`seen`), and the
    /// hint its name gives. The messages decide only where the topology does not: a queue no
    /// dead-letter routing touches (issue 17, must-have 3: an application's error queue).
    pub fn observe(&mut self, name: &str, seen: Option<&Seen>) {
        if let Some(seen) = seen {
            self.observed_sources = seen.origins.clone();
            self.observed_at = Some(seen.at.clone());
            self.observed_head_died_at = seen.head_died_at;
        }
        let untouched = self.dead_letter_target.is_none() && self.dead_letter_sources.is_empty();
        if !untouched || !matches!(self.role, QueueRole::Unknown | QueueRole::Work) {
            return;
        }
        if let Some((role, reason)) = seen.and_then(observed_role) {
            let consumed = if self.role == QueueRole::Work { " (something consumes it now)" } else { "" };
            self.role = role;
            self.role_reason = format!("{reason}{consumed}").into();
            self.is_dlq = true;
        } else if let (QueueRole::Unknown, Some(mark)) = (self.role, error_name_hint(name)) {
            let read =
                if seen.is_some() { "its messages read do not say so" } else { "browse it to see what it holds" };
            self.role_reason =
                format!("{}; named like an error or parking queue ({mark:?}): a hint only, {read}", self.role_reason)
                    .into();
        }
    }
}

fn string(map: &Map<String, Value>, key: &str) -> Option<String> {
    map.get(key).and_then(Value::as_str).map(str::to_string)
}

/// The queue's dead-letter exchange and routing key. A queue argument wins over a policy key
/// (RabbitMQ resolves `dead-letter-exchange` with the argument taking precedence).
pub fn dead_letter_config(
    arguments: &Map<String, Value>,
    effective_policy: &Map<String, Value>,
) -> Option<(String, Option<String>, &'static str)> {
    if let Some(exchange) = string(arguments, "x-dead-letter-exchange") {
        let key = string(arguments, "x-dead-letter-routing-key")
            .or_else(|| string(effective_policy, "dead-letter-routing-key"));
        return Some((exchange, key, "arguments"));
    }
    let exchange = string(effective_policy, "dead-letter-exchange")?;
    let key =
        string(arguments, "x-dead-letter-routing-key").or_else(|| string(effective_policy, "dead-letter-routing-key"));
    Some((exchange, key, "policy"))
}

/// AMQP topic matching: `*` is one word, `#` zero or more.
///
/// `#` is a run of words like `*` in a glob, so this is glob matching over words: on a mismatch
/// only the last `#` seen takes one more word, and nothing before it is ever retried. Trying
/// every split for every `#` (as a recursive match does) takes exponential time on a key of many
/// `#` words, and anyone who may bind a queue chooses the keys that the poller analyses.
pub fn topic_matches(pattern: &str, key: &str) -> bool {
    let p: Vec<&str> = if pattern.is_empty() { Vec::new() } else { pattern.split('.').collect() };
    let k: Vec<&str> = if key.is_empty() { Vec::new() } else { key.split('.').collect() };
    let (mut pi, mut ki) = (0, 0);
    // The last `#` and the first key word it does not cover yet.
    let mut hash: Option<(usize, usize)> = None;
    while ki < k.len() {
        match p.get(pi) {
            Some(&"#") => {
                hash = Some((pi, ki));
                pi += 1;
            }
            Some(&w) if w == "*" || w == k[ki] => {
                pi += 1;
                ki += 1;
            }
            _ => match hash {
                Some((h, covered)) => {
                    hash = Some((h, covered + 1));
                    pi = h + 1;
                    ki = covered + 1;
                }
                None => return false,
            },
        }
    }
    p[pi..].iter().all(|&w| w == "#")
}

/// Bindings by source exchange, and exchange types, for routing lookups.
struct Routes<'a> {
    by_source: HashMap<&'a str, Vec<&'a Binding>>,
    kinds: HashMap<&'a str, &'a str>,
}

impl<'a> Routes<'a> {
    fn new(topology: &'a VhostTopology) -> Self {
        let mut by_source: HashMap<&str, Vec<&Binding>> = HashMap::new();
        // The default exchange's implicit binding of every queue is listed with source "": it is
        // routed by name below, so those (one per queue) are skipped here.
        for b in topology.bindings.iter().filter(|b| !b.source.is_empty()) {
            by_source.entry(b.source.as_str()).or_default().push(b);
        }
        let kinds = topology.exchanges.iter().map(|e| (e.name.as_str(), e.kind.as_str())).collect();
        Routes { by_source, kinds }
    }

    /// Queues reachable from `exchange` with `routing_key` (None: any key the message may
    /// carry). Follows exchange-to-exchange bindings, with a depth limit against cycles.
    fn reachable(&self, exchange: &str, routing_key: Option<&str>, depth: u8, out: &mut Vec<String>) {
        if exchange.is_empty() {
            // The default exchange routes to the queue named by the routing key.
            if let Some(key) = routing_key {
                out.push(key.to_string());
            }
            return;
        }
        if depth > 4 {
            return;
        }
        let kind = self.kinds.get(exchange).copied().unwrap_or("direct");
        for b in self.by_source.get(exchange).into_iter().flatten() {
            let matches = match (kind, routing_key) {
                (_, None) | ("fanout", _) | ("headers", _) => true,
                ("topic", Some(key)) => topic_matches(&b.routing_key, key),
                (_, Some(key)) => b.routing_key == key,
            };
            if !matches {
                continue;
            }
            if b.destination_type == "queue" {
                out.push(b.destination.clone());
            } else {
                self.reachable(&b.destination, routing_key, depth + 1, out);
            }
        }
    }
}

/// A queue as the analysis needs it.
pub struct QueueConfig<'a> {
    pub name: &'a str,
    pub arguments: &'a Map<String, Value>,
    pub effective_policy: &'a Map<String, Value>,
    /// Consumers in the latest listing (`None`: not given): the one observation the roles read.
    pub consumers: Option<u64>,
}

/// Dead-letter facts and roles of the queues of one vhost. Only queues with a dead-letter
/// exchange or that receive dead letters have an entry; every other queue has
/// `DeadLetterInfo::plain` (no DLX, not a DLQ). Without a topology (bindings not fetched yet, or the fetch failed) the configured
/// targets are still reported, with unknown routing.
pub fn analyse(queues: &[QueueConfig<'_>], topology: Option<&VhostTopology>) -> HashMap<String, DeadLetterInfo> {
    analyse_with(queues, topology, &|_| None)
}

/// `analyse`, with what warren observed and stored beside one listing's consumers: `worked_at`
/// gives, for a queue warren has seen with consumers while it was not a dead-letter queue, when
/// that was (in words). Such a queue keeps its work role when its consumers die or before they
/// connect (issue 31, must-have 4).
pub fn analyse_with(
    queues: &[QueueConfig<'_>],
    topology: Option<&VhostTopology>,
    worked_at: &dyn Fn(&str) -> Option<String>,
) -> HashMap<String, DeadLetterInfo> {
    let routes = topology.map(Routes::new);
    let mut info: HashMap<String, DeadLetterInfo> = HashMap::new();
    // Many queues share one dead-letter exchange and key: route each pair once.
    let mut routed: HashMap<(String, Option<String>), Vec<String>> = HashMap::new();
    for q in queues {
        let Some((exchange, routing_key, configured_by)) = dead_letter_config(q.arguments, q.effective_policy) else {
            continue;
        };
        let targets = routes.as_ref().map(|routes| {
            routed
                .entry((exchange.clone(), routing_key.clone()))
                .or_insert_with(|| {
                    let mut targets = Vec::new();
                    // Without a dead-letter routing key a message keeps its own keys, which may be any.
                    routes.reachable(&exchange, routing_key.as_deref(), 0, &mut targets);
                    targets.sort();
                    targets.dedup();
                    targets
                })
                .clone()
        });
        info.entry(q.name.to_string()).or_default().dead_letter_target =
            Some(Box::new(DeadLetterTarget { exchange, routing_key, configured_by, queues: targets }));
    }
    // Roles need every queue's consumers and TTL, also those of queues without a DLX that
    // dead letters reach.
    let nodes: Vec<roles::Node<'_>> = queues
        .iter()
        .map(|q| roles::Node {
            name: q.name,
            targets: info.get(q.name).and_then(|i| i.dead_letter_target.as_ref()).and_then(|t| t.queues.as_deref()),
            ttl_ms: message_ttl_ms(q.arguments, q.effective_policy),
            consumers: q.consumers,
            worked_at: worked_at(q.name),
            limited: !matches!(
                crate::broker::policies::overflow_of(q.arguments, q.effective_policy),
                crate::broker::policies::Overflow::Unlimited
            ),
        })
        .collect();
    let classified: Vec<(String, roles::Classified)> =
        roles::classify(&nodes).into_iter().map(|(name, c)| (name.to_string(), c)).collect();
    drop(nodes);
    // Queues with a DLX whose routing is not known yet (bindings not read) or reaches no queue:
    // only consumers say anything about them. Those in the graph get their role below.
    for q in queues {
        if let Some(i) = info.get_mut(q.name) {
            i.role = plain_role(q.consumers).0;
            let consumed = if i.role == QueueRole::Work { "has consumers; " } else { "" };
            i.role_reason = match i.dead_letter_target.as_deref() {
                Some(DeadLetterTarget { exchange, queues: None, .. }) => {
                    format!("{consumed}where its dead letters go (exchange {exchange:?}) is not known yet").into()
                }
                Some(DeadLetterTarget { exchange, .. }) => {
                    format!("{consumed}its dead-letter exchange {exchange:?} routes them to no queue").into()
                }
                None => plain_role(q.consumers).1,
            };
        }
    }
    for (name, c) in classified {
        let i = info.entry(name).or_default();
        i.is_dlq = c.role == QueueRole::Dlq;
        i.role = c.role;
        i.role_reason = c.reason;
        i.work_unconfirmed = c.work_unconfirmed;
        i.dead_letter_sources = c.dlq_sources;
    }
    info
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn map(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn default_exchange_bindings_are_skipped_while_parsing() {
        // As RabbitMQ 3.10 lists them with `columns=`: the implicit default-exchange binding of
        // each queue, a named exchange's binding, and one with an escaped routing key.
        let body = br#"[
            {"source":"","destination":"orders","destination_type":"queue","routing_key":"orders"},
            {"source":"dlx","destination":"orders.dlq","destination_type":"queue","routing_key":"orders"},
            {"source":"dlx","destination":"odd","destination_type":"queue","routing_key":"a\"b"},
            {"source":"events","destination":"dlx","destination_type":"exchange"}
        ]"#;
        let ExchangeBindings(kept) = serde_json::from_slice(body).unwrap();
        let rows: Vec<_> = kept.iter().map(|b| (&*b.source, &*b.destination, &*b.routing_key)).collect();
        assert_eq!(rows, [("dlx", "orders.dlq", "orders"), ("dlx", "odd", "a\"b"), ("events", "dlx", "")]);
        assert!(serde_json::from_slice::<ExchangeBindings>(b"{}").is_err(), "not a list is an error");
    }

    fn binding(source: &str, queue: &str, key: &str) -> Binding {
        Binding {
            source: source.into(),
            destination: queue.into(),
            destination_type: "queue".into(),
            routing_key: key.into(),
            arguments: None,
        }
    }

    #[test]
    fn finds_dlqs_from_arguments_and_policies() {
        let empty = Map::new();
        let by_arg = map(json!({"x-dead-letter-exchange": "dlx"}));
        let by_policy = map(json!({"dead-letter-exchange": "dlx", "dead-letter-routing-key": "failed"}));
        let topology = VhostTopology {
            bindings: vec![binding("dlx", "orders.dlq", "orders"), binding("dlx", "failed.dlq", "failed")],
            exchanges: vec![Exchange { name: "dlx".into(), kind: "direct".into() }],
        };
        let queues = [
            QueueConfig { name: "orders", arguments: &by_arg, effective_policy: &empty, consumers: None },
            QueueConfig { name: "payments", arguments: &empty, effective_policy: &by_policy, consumers: None },
            QueueConfig { name: "orders.dlq", arguments: &empty, effective_policy: &empty, consumers: None },
            QueueConfig { name: "failed.dlq", arguments: &empty, effective_policy: &empty, consumers: None },
            QueueConfig { name: "plain", arguments: &empty, effective_policy: &empty, consumers: None },
        ];
        let info = analyse(&queues, Some(&topology));
        // Without a routing key, any binding of a direct DLX may receive the message.
        let orders = info["orders"].dead_letter_target.as_ref().unwrap();
        assert_eq!(orders.queues.as_deref(), Some(&["failed.dlq".to_string(), "orders.dlq".to_string()][..]));
        let payments = info["payments"].dead_letter_target.as_ref().unwrap();
        assert_eq!((payments.configured_by, payments.queues.clone()), ("policy", Some(vec!["failed.dlq".to_string()])));
        // Without bindings the configured target is still known, its routing is not.
        let unknown = analyse(&queues, None);
        assert_eq!(unknown["payments"].dead_letter_target.as_ref().unwrap().queues, None);
        assert!(unknown.values().all(|i| !i.is_dlq));
        assert!(info["failed.dlq"].is_dlq && info["orders.dlq"].is_dlq);
        assert_eq!(info["failed.dlq"].dead_letter_sources, vec!["orders", "payments"]);
        assert!(!info.contains_key("plain"), "no DLX and not a DLQ: the default facts");
    }

    #[test]
    fn default_exchange_and_topics() {
        let empty = Map::new();
        let to_retry = map(json!({"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "work.retry"}));
        let info = analyse(
            &[
                QueueConfig { name: "work", arguments: &to_retry, effective_policy: &empty, consumers: None },
                QueueConfig { name: "work.retry", arguments: &empty, effective_policy: &empty, consumers: None },
            ],
            Some(&VhostTopology::default()),
        );
        assert!(info["work.retry"].is_dlq);
        // A delay queue that dead-letters back to the work queue makes a retry loop: neither
        // is a DLQ.
        let back = map(json!({"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "work"}));
        let info = analyse(
            &[
                QueueConfig { name: "work", arguments: &to_retry, effective_policy: &empty, consumers: None },
                QueueConfig { name: "work.retry", arguments: &back, effective_policy: &empty, consumers: None },
            ],
            Some(&VhostTopology::default()),
        );
        assert!(!info["work.retry"].is_dlq && !info["work"].is_dlq);
        assert!(topic_matches("orders.#", "orders.eu.created"));
        assert!(topic_matches("*.created", "orders.created"));
        assert!(!topic_matches("*.created", "orders.eu.created"));
        assert!(topic_matches("#", ""));
    }

    /// A timeout of the `management_json` fuzz target: a binding key of many `#` words against a
    /// long routing key took exponential time (15 of each took seconds, 30 hung the poller's
    /// topology analysis; a binding key may hold over a hundred).
    #[test]
    fn topic_matching_takes_linear_time() {
        let hashes = vec!["#"; 15].join(".");
        let words = vec!["a"; 15].join(".");
        let started = std::time::Instant::now();
        assert!(!topic_matches(&format!("{hashes}.z"), &words));
        assert!(topic_matches(&format!("{hashes}.a"), &words));
        assert!(started.elapsed() < std::time::Duration::from_secs(1), "took {:?}", started.elapsed());
        for (pattern, key, matches) in [
            ("#", "", true),
            ("#", "a.b", true),
            ("a.#", "a", true),
            ("#.a", "a", true),
            ("a.#.b", "a.b", true),
            ("a.#.b", "a.x.y.b", true),
            ("a.#.b", "a.x.y.c", false),
            ("*", "", false),
            ("*", "a", true),
            ("*.*", "a", false),
            ("#.*", "a", true),
            ("#.*", "", false),
            ("a.*.#", "a", false),
            ("a.*.#", "a.b", true),
            ("#.b.#.c", "a.b.x.b.c", true),
            ("#.b.#.c", "a.b.x.b.d", false),
            ("", "", true),
            ("", "a", false),
            ("a", "", false),
            ("a..b", "a..b", true),
        ] {
            assert_eq!(topic_matches(pattern, key), matches, "{pattern:?} against {key:?}");
        }
    }

    #[test]
    fn argument_wins_over_policy() {
        let args = map(json!({"x-dead-letter-exchange": "from-args"}));
        let policy = map(json!({"dead-letter-exchange": "from-policy"}));
        assert_eq!(dead_letter_config(&args, &policy).unwrap().0, "from-args");
    }
}
