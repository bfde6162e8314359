//! The RabbitMQ Prometheus plugin as a source of per-queue numbers (DOMAIN.md §7): depth,
//! consumers and head timestamp on every version, per-queue delivery and publish counters from
//! 4.0. It serves them for a fraction of the broker CPU of a management listing (PERF.md), so
//! the poller reads depth from here every poll and asks the management API only for what only
//! it has.
//!
//! The parser reads only what warren needs from the text format and survives hostile label
//! values: RabbitMQ 3.10 writes queue names into labels without escaping them (a name with a `"`
//! or a `\` breaks the line's syntax), 4.x escapes them. A line that cannot be read unambiguously
//! is skipped and counted, never guessed.

use std::collections::HashMap;
use std::time::Duration;

use crate::broker::management::{encode_segment, BrokerError};
use crate::config::BrokerConfig;

/// Depth: asked by every scrape.
pub const DEPTH_FAMILY: &str = "queue_coarse_metrics";
/// Consumers per queue. It reads the plugin's largest table (the one `queue_metrics` reads):
/// measured on 4.0.5 at 10,000 queues, 0.11 broker CPU-s per scrape against 0.08 for depth.
pub const CONSUMER_FAMILY: &str = "queue_consumer_count";
/// What a Prometheus server scraping the plugin for queue depth and consumers asks (the
/// reference `benches/broker_cost.rs` measures warren against).
pub const FAMILIES: &[&str] = &[DEPTH_FAMILY, CONSUMER_FAMILY];
/// Head timestamps are only in `queue_metrics` (16 more series per queue; the plugin then skips
/// `queue_consumer_count`, which reads the same table). Measured at 10,000 queues it costs the
/// broker about 4x the scrape above (benches/README.md), so it is asked only when configured.
pub const HEAD_TIMESTAMP_FAMILY: &str = "queue_metrics";
/// Per-queue counters, RabbitMQ 4.0 and later only.
pub const COUNTER_FAMILIES: &[&str] = &["queue_delivery_metrics", "queue_exchange_metrics"];

/// Which families a scrape asks for beyond depth (`queue_coarse_metrics`, always).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Families {
    /// `queue_consumer_count`.
    pub consumers: bool,
    /// The per-queue counters (4.0 and later).
    pub counters: bool,
    /// `queue_metrics` (consumers too).
    pub head_timestamps: bool,
}

/// One queue's numbers from a scrape. `None`: the scrape had no sample for it.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct QueueSample {
    pub ready: Option<u64>,
    pub unacked: Option<u64>,
    pub messages: Option<u64>,
    pub consumers: Option<u64>,
    /// Seconds since the epoch; `NaN` in the scrape (no timestamped head message) is `None`,
    /// like the management API's `null`.
    pub head_ts: Option<f64>,
    /// 4.x counters, summed over exchanges (publish) or delivery modes (deliver_get is
    /// deliver + deliver_no_ack + get + get_no_ack, as in the management API).
    pub publish: Option<u64>,
    pub deliver_get: Option<u64>,
    pub ack: Option<u64>,
    pub redeliver: Option<u64>,
}

/// What one scrape said.
#[derive(Debug, Clone, Default)]
pub struct Scrape {
    /// By (vhost, queue). A queue whose labels decode differently with and without escapes is
    /// stored under both readings; the caller looks up the names it knows from the management API.
    pub queues: HashMap<(String, String), QueueSample>,
    /// The scrape has per-queue counters: 4.x with the counter families asked for. A queue
    /// without counter rows then has had no such event yet (0).
    pub has_counters: bool,
    /// The head-timestamp family was asked for: a queue without a head timestamp has none.
    pub has_head_timestamps: bool,
    /// Consumers were asked for (`queue_consumer_count` or `queue_metrics`): a scrape without
    /// them says nothing about consumers, and `QueueSample::consumers` is `None`.
    pub has_consumers: bool,
    /// Sample lines that could not be read unambiguously (skipped).
    pub skipped_lines: usize,
    /// Queues in the scrape (lines of `queue_messages`), to notice queues the caller does not know.
    pub queue_count: usize,
    /// Which broker answered (`rabbitmq_identity_info`, in every answer of the plugin since
    /// 3.8): checked against the management API before any number is used.
    pub identity: Option<Identity>,
}

/// The node and cluster a Prometheus endpoint says it serves.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Identity {
    pub node: String,
    pub cluster: String,
}

impl Identity {
    /// Whether this endpoint serves the broker the management API describes: the same cluster
    /// name, and (when the nodes are known) one of its nodes. The error says what each side said.
    pub fn check(&self, cluster: Option<&str>, nodes: &[String]) -> Result<(), BrokerError> {
        let same_cluster = cluster.is_none_or(|c| c == self.cluster);
        let its_node = nodes.is_empty() || nodes.contains(&self.node);
        if same_cluster && its_node {
            return Ok(());
        }
        Err(BrokerError::OtherBroker {
            said_cluster: self.cluster.clone(),
            said_node: self.node.clone(),
            cluster: cluster.unwrap_or("(not said)").to_string(),
            nodes: if nodes.is_empty() { String::new() } else { format!(" and nodes {}", nodes.join(", ")) },
        })
    }
}

/// `rabbitmq_identity_info{rabbitmq_node="…",rabbitmq_cluster="…",…} 1`: the node and cluster.
fn identity_line(labels: &str) -> Option<Identity> {
    let labels = labels.strip_prefix('{')?;
    let mut identity = Identity::default();
    let mut rest = labels;
    while let Some((name, after)) = rest.split_once("=\"") {
        // A value ends at the first quote not escaped by a backslash.
        let mut value = String::new();
        let mut chars = after.char_indices();
        let mut end = None;
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => match chars.next() {
                    Some((_, 'n')) => value.push('\n'),
                    Some((_, other)) => value.push(other),
                    None => return None,
                },
                '"' => {
                    end = Some(i);
                    break;
                }
                c => value.push(c),
            }
        }
        let end = end?;
        match name.trim_start_matches(',') {
            "rabbitmq_node" => identity.node = value,
            "rabbitmq_cluster" => identity.cluster = value,
            _ => {}
        }
        rest = &after[end + 1..];
    }
    (!identity.node.is_empty() && !identity.cluster.is_empty()).then_some(identity)
}

/// Which field a metric name fills.
#[derive(Clone, Copy)]
enum Field {
    Ready,
    Unacked,
    Messages,
    Consumers,
    HeadTs,
    Publish,
    DeliverGet,
    Ack,
    Redeliver,
}

fn field_of(metric: &str) -> Option<Field> {
    let name = metric.strip_prefix("rabbitmq_detailed_").or_else(|| metric.strip_prefix("rabbitmq_"))?;
    Some(match name {
        "queue_messages_ready" => Field::Ready,
        "queue_messages_unacked" => Field::Unacked,
        "queue_messages" => Field::Messages,
        "queue_consumers" => Field::Consumers,
        "queue_head_message_timestamp" => Field::HeadTs,
        "queue_exchange_messages_published_total" => Field::Publish,
        "queue_messages_delivered_ack_total"
        | "queue_messages_delivered_total"
        | "queue_get_ack_total"
        | "queue_get_total" => Field::DeliverGet,
        "queue_messages_acked_total" => Field::Ack,
        "queue_messages_redelivered_total" => Field::Redeliver,
        _ => return None,
    })
}

/// Parses the queue families of a `/metrics/detailed` answer.
pub fn parse(text: &str) -> Scrape {
    let mut scrape = Scrape::default();
    // Nearly every line is `name{vhost="v",queue="q"} value` without escapes: those are read in
    // place, and each queue's key is copied once at the end instead of once per line (four to
    // eight lines per queue; at 50,000 queues that was millions of small allocations a scrape).
    let mut plain: HashMap<(&str, &str), QueueSample> = HashMap::new();
    for line in text.lines() {
        let line = line.trim_end_matches('\r');
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let name_end = line.find(['{', ' ']).unwrap_or(line.len());
        if &line[..name_end] == "rabbitmq_identity_info" {
            scrape.identity = identity_line(&line[name_end..]);
            continue;
        }
        let Some(field) = field_of(&line[..name_end]) else { continue };
        if let Some((vhost, queue, value)) = plain_line(&line[name_end..]) {
            apply(plain.entry((vhost, queue)).or_default(), field, value);
            count_line(&mut scrape, field);
            continue;
        }
        let Some((keys, value)) = queue_line(&line[name_end..]) else {
            scrape.skipped_lines += 1;
            continue;
        };
        count_line(&mut scrape, field);
        for key in keys {
            apply(scrape.queues.entry(key).or_default(), field, value);
        }
    }
    scrape.queues.reserve(plain.len());
    for ((vhost, queue), sample) in plain {
        // A name is plain on every line or on none, so this key is new; merged all the same.
        let into = scrape.queues.entry((vhost.to_string(), queue.to_string())).or_default();
        merge(into, &sample);
    }
    scrape
}

fn count_line(scrape: &mut Scrape, field: Field) {
    if matches!(field, Field::Publish | Field::DeliverGet | Field::Ack | Field::Redeliver) {
        scrape.has_counters = true;
    }
    if matches!(field, Field::Messages) {
        scrape.queue_count += 1;
    }
}

fn merge(into: &mut QueueSample, from: &QueueSample) {
    let sum = |a: Option<u64>, b: Option<u64>| match (a, b) {
        (Some(a), Some(b)) => Some(a.saturating_add(b)),
        (a, b) => a.or(b),
    };
    into.ready = from.ready.or(into.ready);
    into.unacked = from.unacked.or(into.unacked);
    into.messages = from.messages.or(into.messages);
    into.consumers = from.consumers.or(into.consumers);
    into.head_ts = from.head_ts.or(into.head_ts);
    into.publish = sum(into.publish, from.publish);
    into.deliver_get = sum(into.deliver_get, from.deliver_get);
    into.ack = sum(into.ack, from.ack);
    into.redeliver = sum(into.redeliver, from.redeliver);
}

/// `{vhost="v",queue="q"} value` with no backslash or quote in either name and none after the
/// labels: the common line, read without copying. Anything else is left to `queue_line`
/// (escapes, other labels, and 3.10's unescaped quotes, which can make a line ambiguous).
fn plain_line(rest: &str) -> Option<(&str, &str, f64)> {
    let (vhost, rest) = rest.strip_prefix("{vhost=\"")?.split_once("\",queue=\"")?;
    let (queue, after) = rest.split_once("\"}")?;
    let clean = |s: &str| !s.contains(['\\', '"']);
    if !(clean(vhost) && clean(queue) && !after.contains('"')) {
        return None;
    }
    Some((vhost, queue, parse_value(after)?))
}

fn apply(sample: &mut QueueSample, field: Field, value: f64) {
    // Counts are whole and non-negative; anything else (NaN, Inf) is no value. A count past u64
    // reads as u64::MAX (`as` saturates), and so does a sum past it.
    let count = (value.is_finite() && value >= 0.0).then_some(value as u64);
    let add = |slot: &mut Option<u64>| {
        if let Some(c) = count {
            *slot = Some(slot.unwrap_or(0).saturating_add(c));
        }
    };
    match field {
        Field::Ready => sample.ready = count,
        Field::Unacked => sample.unacked = count,
        Field::Messages => sample.messages = count,
        Field::Consumers => sample.consumers = count,
        Field::HeadTs => sample.head_ts = value.is_finite().then_some(value),
        Field::Publish => add(&mut sample.publish),
        Field::DeliverGet => add(&mut sample.deliver_get),
        Field::Ack => add(&mut sample.ack),
        Field::Redeliver => add(&mut sample.redeliver),
    }
}

/// The (vhost, queue) readings of a sample line's labels and its value. `rest` starts at the
/// `{` (or the space before the value).
fn queue_line(rest: &str) -> Option<(Vec<(String, String)>, f64)> {
    // Labels that parse but are followed by more than a value (and a timestamp) ended early: a
    // 3.10 name holding `"} `; the unescaped reading below is the one left.
    if let Some((labels, Some(value))) = strict_labels(rest).map(|(labels, after)| (labels, parse_value(after))) {
        let find = |key: &str| labels.iter().find(|(k, _, _)| k == key);
        let (_, vhost, raw_vhost) = find("vhost")?;
        let (_, queue, raw_queue) = find("queue")?;
        let mut keys = vec![(vhost.clone(), queue.clone())];
        // 3.10 does not escape: `a\nb` in the scrape may be the literal name `a\nb`.
        if (raw_vhost, raw_queue) != (vhost, queue) {
            keys.push((raw_vhost.clone(), raw_queue.clone()));
        }
        return Some((keys, value));
    }
    // Unescaped quotes (3.10): only the plain `{vhost="…",queue="…"} value` layout can be split,
    // and only when the separator occurs exactly once.
    let inner_end = rest.rfind("} ")?;
    let value = parse_value(&rest[inner_end + 1..])?;
    let inner = rest.strip_prefix("{vhost=\"")?.get(..inner_end - "{vhost=\"".len())?.strip_suffix('"')?;
    let mut parts = inner.split("\",queue=\"");
    let (vhost, queue) = (parts.next()?, parts.next()?);
    if parts.next().is_some() {
        return None;
    }
    Some((vec![(vhost.to_string(), queue.to_string())], value))
}

/// Labels by the format's rules: `{k="v",…}` with `\\`, `\"` and `\n` escapes. Returns each
/// label as (key, decoded value, raw value) and the text after the `}`.
type Label = (String, String, String);
fn strict_labels(rest: &str) -> Option<(Vec<Label>, &str)> {
    let mut s = rest.strip_prefix('{')?;
    let mut labels = Vec::new();
    loop {
        if let Some(after) = s.strip_prefix('}') {
            return Some((labels, after));
        }
        let eq = s.find('=')?;
        let key = s[..eq].trim().to_string();
        s = s[eq + 1..].strip_prefix('"')?;
        let (mut value, mut end) = (String::new(), None);
        let mut chars = s.char_indices();
        while let Some((i, c)) = chars.next() {
            match c {
                '"' => {
                    end = Some(i);
                    break;
                }
                '\\' => match chars.next()? {
                    (_, 'n') => value.push('\n'),
                    (_, other) => value.push(other),
                },
                c => value.push(c),
            }
        }
        let end = end?;
        labels.push((key, value, s[..end].to_string()));
        s = &s[end + 1..];
        if let Some(after) = s.strip_prefix(',') {
            s = after;
        } else if !s.starts_with('}') {
            return None;
        }
    }
}

/// The sample value: the first token after the labels. An optional timestamp (whole
/// milliseconds) may follow; anything else means the labels did not end where they seemed to (a
/// 3.10 queue name with `"} ` in it), and the line is not read this way.
fn parse_value(after: &str) -> Option<f64> {
    let mut tokens = after.split_whitespace();
    let value = match tokens.next()? {
        "NaN" => f64::NAN,
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        t => t.parse().ok()?,
    };
    if tokens.next().is_some_and(|ts| ts.parse::<i64>().is_err()) || tokens.next().is_some() {
        return None;
    }
    Some(value)
}

/// One broker's Prometheus endpoint.
#[derive(Clone)]
pub struct PrometheusClient {
    http: reqwest::Client,
    pub base: reqwest::Url,
    timeout: Duration,
    /// The endpoint's TLS, to explain a failed handshake.
    tls: crate::config::tls::EndpointTls,
}

/// The endpoint as pages, logs and errors show it: credentials in the URL (a proxy in front of
/// the plugin may want them) are replaced by `****`.
pub fn shown_url(url: &reqwest::Url) -> String {
    let mut shown = url.clone();
    if !url.username().is_empty() || url.password().is_some() {
        // Setting credentials fails only for URLs that cannot have them (no host).
        let _ = shown.set_username("****");
        let _ = shown.set_password(None);
    }
    shown.to_string()
}

impl PrometheusClient {
    pub fn new(broker: &BrokerConfig, base: reqwest::Url) -> Self {
        let http = reqwest::Client::builder()
            .gzip(true)
            .connect_timeout(broker.request_timeout.min(Duration::from_secs(5)))
            .user_agent(concat!("warren/", env!("CARGO_PKG_VERSION")))
            .use_preconfigured_tls(broker.tls.prometheus.client_config())
            .build()
            .expect("TLS backend initialises");
        PrometheusClient { http, base, timeout: broker.request_timeout, tls: broker.tls.prometheus.clone() }
    }

    /// Why a request failed to get an answer: its TLS problem in words when it had one (asked
    /// of the endpoint again when the error does not carry it, `tls::EndpointTls::diagnose`).
    async fn transport_error(&self, e: reqwest::Error) -> BrokerError {
        let mut problem = self.tls.explain(&e);
        if problem.is_none() && self.base.scheme() == "https" {
            if let (Some(host), Some(port)) = (self.base.host_str(), self.base.port_or_known_default()) {
                problem = self.tls.diagnose(host, port).await;
            }
        }
        match problem {
            Some(problem) => BrokerError::Tls(format!("{}: {problem}", shown_url(&self.base))),
            None => BrokerError::Unreachable(format!("{}: {}", shown_url(&self.base), e.without_url())),
        }
    }

    /// The path and query of a scrape of these vhosts' queues.
    pub fn scrape_path(vhosts: &[String], families: Families) -> String {
        let mut path = String::from("metrics/detailed?");
        let consumers = families.consumers && !families.head_timestamps; // `queue_metrics` has them
        let families = std::iter::once(&DEPTH_FAMILY)
            .chain(if consumers { &[CONSUMER_FAMILY][..] } else { &[] })
            .chain(if families.head_timestamps { &[HEAD_TIMESTAMP_FAMILY][..] } else { &[] })
            .chain(if families.counters { COUNTER_FAMILIES } else { &[] });
        let mut params: Vec<String> = families.map(|f| format!("family={f}")).collect();
        params.extend(vhosts.iter().map(|v| format!("vhost={}", encode_segment(v))));
        path.push_str(&params.join("&"));
        path
    }

    /// Scrapes the queue families of `vhosts`; returns the parsed scrape and the body's size.
    pub async fn scrape(&self, vhosts: &[String], families: Families) -> Result<(Scrape, usize), BrokerError> {
        let path = Self::scrape_path(vhosts, families);
        let url =
            self.base.join(&path).map_err(|e| BrokerError::Malformed { path: path.clone(), detail: e.to_string() })?;
        let response = match self.http.get(url).timeout(self.timeout).send().await {
            Ok(response) => response,
            Err(e) if e.is_timeout() => return Err(BrokerError::Timeout(self.timeout)),
            Err(e) => return Err(self.transport_error(e).await),
        };
        let status = response.status().as_u16();
        let body = response
            .bytes()
            .await
            .map_err(|e| BrokerError::Unreachable(format!("{}: {}", shown_url(&self.base), e.without_url())))?;
        if !(200..300).contains(&status) {
            let text = String::from_utf8_lossy(&body[..body.len().min(200)]).trim().to_string();
            return Err(BrokerError::Http { status, path: "/metrics/detailed".into(), body: text });
        }
        let text = std::str::from_utf8(&body)
            .map_err(|e| BrokerError::Malformed { path: "/metrics/detailed".into(), detail: e.to_string() })?;
        let mut scrape = parse(text);
        // Counter rows appear with a queue's first event: asked for (on 4.x), the families are
        // served even when no row exists yet.
        scrape.has_counters |= families.counters;
        scrape.has_head_timestamps = families.head_timestamps;
        scrape.has_consumers = families.consumers || families.head_timestamps;
        Ok((scrape, body.len()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(path: &str) -> String {
        let path = format!("{}/tests/fixtures/{path}", env!("CARGO_MANIFEST_DIR"));
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("fixture {path}: {e}"))
    }

    #[test]
    fn credentials_in_the_url_are_never_shown() {
        let url = reqwest::Url::parse("http://scraper:s3cret@proxy:9419/plugin/").unwrap();
        let shown = shown_url(&url);
        assert!(!shown.contains("s3cret") && !shown.contains("scraper"), "{shown}");
        assert_eq!(shown, "http://****@proxy:9419/plugin/");
        let plain = reqwest::Url::parse("http://127.0.0.1:15692/").unwrap();
        assert_eq!(shown_url(&plain), "http://127.0.0.1:15692/");
    }

    #[test]
    fn the_identity_line_says_which_broker_answered() {
        // As 3.10.8 and 4.3.6 write it (4.1 added the endpoint label).
        let text = "# TYPE rabbitmq_identity_info untyped\n\
            rabbitmq_identity_info{rabbitmq_node=\"rabbit@localhost\",rabbitmq_cluster=\"rabbit@vm\",rabbitmq_cluster_permanent_id=\"rabbitmq-cluster-id-G1Y\"} 1\n";
        let said = parse(text).identity.expect("read");
        assert_eq!(said, Identity { node: "rabbit@localhost".into(), cluster: "rabbit@vm".into() });
        let text = "rabbitmq_identity_info{rabbitmq_node=\"rabbit43@localhost\",rabbitmq_cluster=\"prod \\\"eu\\\"\",rabbitmq_endpoint=\"detailed\"} 1\n";
        assert_eq!(parse(text).identity.expect("escaped").cluster, "prod \"eu\"");
        assert_eq!(parse("rabbitmq_identity_info{rabbitmq_node=\"a\"} 1\n").identity, None, "no cluster: unread");
        assert_eq!(parse("rabbitmq_identity_info{rabbitmq_node=\"a,rabbitmq_cluster=\"b} 1\n").identity, None);
        assert_eq!(parse("").identity, None);

        let nodes = ["rabbit@localhost".to_string(), "rabbit@other".to_string()];
        assert!(said.check(Some("rabbit@vm"), &nodes).is_ok());
        assert!(said.check(Some("rabbit@vm"), &[]).is_ok(), "nodes not read yet: the cluster decides");
        let wrong = said.check(Some("rabbit43@vm"), &nodes).unwrap_err().to_string();
        assert!(
            wrong.contains("another broker") && wrong.contains("rabbit43@vm") && wrong.contains("prometheus_url"),
            "{wrong}"
        );
        // A cluster renamed alike elsewhere: the node gives it away.
        assert!(said.check(Some("rabbit@vm"), &["rabbit@elsewhere".to_string()]).is_err());
    }

    fn key(v: &str, q: &str) -> (String, String) {
        (v.to_string(), q.to_string())
    }

    /// Recorded on 3.10.8: a classic queue with 3 timestamped messages, a quorum queue with 3
    /// (no head timestamp: the line is absent), an empty queue (NaN) and a queue named
    /// `we"ird\nameq`, which 3.10 writes without escaping.
    #[test]
    fn parses_a_recorded_3_10_scrape() {
        let scrape = parse(&fixture("rabbitmq-3.10.8/prometheus-detailed-queues.txt"));
        let orders = scrape.queues[&key("light-fixture", "orders")];
        assert_eq!(
            (orders.ready, orders.unacked, orders.messages, orders.consumers),
            (Some(3), Some(0), Some(3), Some(0))
        );
        assert_eq!(orders.head_ts, Some(1700000000.0));
        let quorum = scrape.queues[&key("light-fixture", "quorum.q")];
        assert_eq!((quorum.ready, quorum.head_ts), (Some(3), None));
        let empty = scrape.queues[&key("light-fixture", "empty")];
        assert_eq!((empty.messages, empty.head_ts), (Some(0), None), "NaN is no timestamp");
        let weird = scrape.queues[&key("light-fixture", "we\"ird\\nameq")];
        assert_eq!((weird.ready, weird.consumers), (Some(0), Some(0)), "the unescaped name is read raw");
        assert!(!scrape.has_counters, "3.10 has no per-queue counters");
        assert_eq!(scrape.skipped_lines, 0);
        assert_eq!(scrape.queue_count, 4);
    }

    /// Shaped after the 4.x collector (rabbit_prometheus_collector's queue_delivery_metrics and
    /// queue_exchange_metrics, label values escaped): counters summed per queue.
    /// A crash of the `prometheus_text` fuzz target: a counter summed over exchanges overflowed.
    /// A value past u64 already reads as u64::MAX; a sum past it stays there.
    #[test]
    fn huge_counters_saturate_instead_of_overflowing() {
        let line = |exchange: &str| {
            format!("rabbitmq_detailed_queue_exchange_messages_published_total{{vhost=\"/\",queue=\"a\",exchange=\"{exchange}\"}} 1e30\n")
        };
        let plain = "rabbitmq_detailed_queue_messages_acked_total{vhost=\"/\",queue=\"a\"} 1e30\n";
        let scrape = parse(&format!("{}{}{plain}{plain}", line("x"), line("y")));
        let a = scrape.queues[&key("/", "a")];
        assert_eq!((a.publish, a.ack), (Some(u64::MAX), Some(u64::MAX)));
    }

    #[test]
    fn parses_4x_counters() {
        let scrape = parse(&fixture("rabbitmq-4.x/prometheus-detailed-queues.txt"));
        assert!(scrape.has_counters);
        let orders = scrape.queues[&key("/", "orders")];
        assert_eq!((orders.ready, orders.unacked, orders.consumers), (Some(40), Some(2), Some(1)));
        assert_eq!(orders.publish, Some(1200 + 300), "published through two exchanges");
        assert_eq!(orders.deliver_get, Some(1100 + 5 + 7 + 1), "delivered ack + no-ack + get + get no-ack");
        assert_eq!((orders.ack, orders.redeliver), (Some(1150), Some(9)));
        let escaped = scrape.queues[&key("/", "a\"b\\c\nd")];
        assert_eq!(escaped.ready, Some(5), "4.x escapes label values");
    }

    #[test]
    fn hostile_labels_are_skipped_or_read_exactly() {
        let text = "rabbitmq_detailed_queue_messages_ready{vhost=\"v\",queue=\"x\",queue=\"y\"} 1\n\
            rabbitmq_detailed_queue_messages_ready{vhost=\"v\",queue=\"a\",queue=\"b\" 1\n\
            rabbitmq_detailed_queue_messages_ready{vhost=\"v\",queue=\"p\\\"q\"} 2\n\
            rabbitmq_detailed_queue_messages_ready{vhost=\"v\",queue=\"un\"closed\",queue=\"z\"} 3\n\
            rabbitmq_detailed_queue_messages_ready{vhost=\"v\",queue=\"ok\"} notanumber\n\
            rabbitmq_detailed_queue_messages_ready{vhost=\"v\",queue=\"neg\"} -4\n\
            rabbitmq_detailed_queue_messages_ready{vhost=\"v\",queue=\"ts\"} 6 1700000000000\n\
            rabbitmq_detailed_queue_messages_ready{vhost=\"v\",queue=\"é ü\"} 7\n\
            rabbitmq_detailed_queue_messages_ready{vhost=\"v\"} 8\n\
            some_other_metric{vhost=\"v\",queue=\"other\"} 9\n";
        let scrape = parse(text);
        // Duplicate keys: the first `queue` wins (never a merged name).
        assert_eq!(scrape.queues[&key("v", "x")].ready, Some(1));
        assert_eq!(scrape.queues[&key("v", "p\"q")].ready, Some(2));
        assert_eq!(scrape.queues[&key("v", "p\\\"q")].ready, Some(2), "the raw reading is kept too");
        assert!(scrape.queues.keys().all(|(_, q)| !q.contains("closed")), "ambiguous line skipped");
        assert_eq!(scrape.queues[&key("v", "neg")].ready, None, "a negative count is no count");
        assert_eq!(scrape.queues[&key("v", "ts")].ready, Some(6));
        assert_eq!(scrape.queues[&key("v", "é ü")].ready, Some(7));
        assert!(!scrape.queues.contains_key(&key("v", "other")));
        // unclosed braces, the ambiguous 3.10 line, the bad number, the label-less line
        assert_eq!(scrape.skipped_lines, 4);
    }

    #[test]
    fn a_plain_looking_prefix_does_not_hide_an_unescaped_name() {
        // 3.10 writes the queue `n"} 3 ` unescaped: read in place, the line would say queue `n`
        // has 3 messages. Only the whole-line reading is right.
        let text = "rabbitmq_detailed_queue_messages_ready{vhost=\"v\",queue=\"n\"} 3 \"} 7\n\
            rabbitmq_detailed_queue_messages_ready{vhost=\"v\",queue=\"plain\"} 4\n\
            rabbitmq_detailed_queue_messages{vhost=\"v\",queue=\"plain\"} 5\n";
        let scrape = parse(text);
        assert_eq!(scrape.queues[&key("v", "n\"} 3 ")].ready, Some(7));
        assert!(!scrape.queues.contains_key(&key("v", "n")));
        let plain = scrape.queues[&key("v", "plain")];
        assert_eq!((plain.ready, plain.messages), (Some(4), Some(5)), "one queue's lines meet in one entry");
        assert_eq!((scrape.queue_count, scrape.skipped_lines), (1, 0));
    }

    #[test]
    fn scrape_path_asks_for_the_families_and_vhosts() {
        let consumers = Families { consumers: true, ..Families::default() };
        let path = PrometheusClient::scrape_path(&["/".into(), "a b".into()], consumers);
        assert_eq!(
            path,
            "metrics/detailed?family=queue_coarse_metrics&family=queue_consumer_count&vhost=%2F&vhost=a%20b"
        );
        let depth = PrometheusClient::scrape_path(&[], Families::default());
        assert_eq!(depth, "metrics/detailed?family=queue_coarse_metrics", "depth alone");
        let counters = Families { counters: true, ..Families::default() };
        assert!(PrometheusClient::scrape_path(&[], counters).contains("family=queue_delivery_metrics"));
        let head = Families { consumers: true, head_timestamps: true, ..Families::default() };
        let head = PrometheusClient::scrape_path(&[], head);
        assert!(head.contains("family=queue_metrics"));
        assert!(!head.contains("queue_consumer_count"), "queue_metrics has the consumers: {head}");
    }

    #[test]
    fn default_url_uses_the_management_host() {
        let url = crate::config::default_prometheus_url(&"https://rabbit.example:15671/mgmt/".parse().unwrap());
        assert_eq!(url.as_str(), "http://rabbit.example:15692/");
    }
}
