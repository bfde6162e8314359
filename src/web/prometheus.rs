//! `GET /metrics`: the live numbers in the Prometheus text format (version 0.0.4), so warren is
//! a drop-in exporter. A value the broker did not give is left out (Prometheus reads an absent
//! sample as "no data"), never written as 0.
//!
//! As Prometheus expects (issue 36, case 7; `promtool check metrics` is clean, tested): what the
//! broker counts is exported as counters (`*_total`), so `rate()` and `increase()` work, beside
//! warren's own rate gauges; a series' labels never change (how the oldest-message age was
//! derived is a gauge of its own, not a label that would start a new series when an estimate
//! becomes exact); the call counters name endpoints as templates (`/api/queues/:vhost`), not
//! vhosts; the answer is gzipped when asked; `process_*` metrics and the build's commit are in.

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;

use crate::alerts::Metric;
use crate::live::BrokerLive;
use crate::metrics::QueueView;
use crate::state::AppState;

pub fn router() -> Router<AppState> {
    // A scrape of thousands of queues is megabytes of text that compresses about tenfold.
    Router::new().route("/metrics", get(metrics)).layer(tower_http::compression::CompressionLayer::new())
}

async fn metrics(State(state): State<AppState>) -> impl IntoResponse {
    let brokers = state.live.snapshot();
    let mut text = render(&brokers);
    let advice = advice_of(&state, &brokers).await;
    render_advisor(&mut text, &advice);
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], text)
}

/// Each broker's advice, and whether its acknowledgements could be read.
async fn advice_of(state: &AppState, brokers: &[BrokerLive]) -> Vec<(crate::advisor::Advice, bool)> {
    let mut all = Vec::with_capacity(brokers.len());
    for live in brokers {
        // As the advisor's page: the same stored history, so that both count the same findings.
        let settings = match crate::web::brokers::advisor::settings(state, live, live.queues.iter()).await {
            Ok(settings) => settings,
            Err(e) => {
                tracing::warn!(broker = %live.name, error = %e, "the advisor's stored inputs could not be read");
                crate::advisor::Settings::of(state.broker_config(&live.name))
            }
        };
        let mut advice = crate::advisor::advise(live, Some(&state.snapshots), &settings, chrono::Utc::now());
        let read = match state.store.acknowledgements(&live.name).await {
            Ok(acks) => {
                crate::advisor::acknowledge::apply(&mut advice, &acks);
                true
            }
            Err(e) => {
                tracing::warn!(broker = %live.name, error = %e, "the advisor's acknowledgements could not be read");
                false
            }
        };
        all.push((advice, read));
    }
    all
}

/// `warren_advisor_findings{broker,rule,severity}`: the advisor's findings now, every rule and
/// severity of each broker (0 included, so a series does not vanish when a finding clears),
/// except the rules that did not run for lack of an input (no data, not 0); acknowledged ones
/// included. `warren_advisor_findings_acknowledged{broker,rule,severity}`: of those, the
/// acknowledged ones, a series of its own rather than a label of the first, so that the first
/// keeps counting every finding as before (an acknowledgement is an opinion, not a fix) and
/// open = findings - acknowledged; absent where the acknowledgements could not be read.
fn render_advisor(out: &mut String, all: &[(crate::advisor::Advice, bool)]) {
    let families = [
        Family {
            name: "warren_advisor_findings",
            help: "Findings of the advisor by rule and severity (docs/advisor.md); absent where the rule's inputs are unknown.",
        },
        Family {
            name: "warren_advisor_findings_acknowledged",
            help: "Of warren_advisor_findings, those acknowledged with their evidence unchanged (docs/advisor.md).",
        },
    ];
    for (family, acknowledged) in families.iter().zip([false, true]) {
        header(out, family);
        for (advice, read) in all {
            if acknowledged && !read {
                continue;
            }
            for rule in crate::advisor::RULES.iter().filter(|r| advice.ran(r.id)) {
                for severity in crate::advisor::Severity::ALL {
                    let n = advice
                        .findings
                        .iter()
                        .filter(|x| x.rule == rule.id && x.severity == severity && (!acknowledged || x.acknowledged()))
                        .count();
                    let labels =
                        [("broker", advice.broker.as_str()), ("rule", rule.id), ("severity", severity.as_str())];
                    sample(out, family.name, &labels, n as f64);
                }
            }
        }
    }
}

/// Escapes a label value: backslash, double quote and newline (the format's three escapes).
fn escape(value: &str) -> String {
    value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

struct Family<'a> {
    name: &'a str,
    help: &'a str,
}

fn header(out: &mut String, f: &Family<'_>) {
    out.push_str(&format!("# HELP {} {}\n# TYPE {} gauge\n", f.name, f.help, f.name));
}

fn counter_header(out: &mut String, f: &Family<'_>) {
    out.push_str(&format!("# HELP {} {}\n# TYPE {} counter\n", f.name, f.help, f.name));
}

fn sample(out: &mut String, name: &str, labels: &[(&str, &str)], value: f64) {
    let labels: Vec<String> = labels.iter().map(|(k, v)| format!("{k}=\"{}\"", escape(v))).collect();
    out.push_str(&format!("{name}{{{}}} {value}\n", labels.join(",")));
}

type QueueValue = fn(&QueueView) -> Option<f64>;

const QUEUE_FAMILIES: &[(&str, &str, QueueValue)] = &[
    ("warren_queue_messages_ready", "Messages ready for delivery.", |q| q.ready.map(|v| v as f64)),
    ("warren_queue_messages_unacked", "Messages delivered and not yet acknowledged.", |q| q.unacked.map(|v| v as f64)),
    ("warren_queue_consumers", "Consumers attached to the queue.", |q| q.consumers.map(|v| v as f64)),
    ("warren_queue_publish_rate", "Messages published into the queue per second.", |q| q.publish_rate),
    ("warren_queue_deliver_rate", "Messages delivered (or fetched) per second.", |q| q.deliver_rate),
    ("warren_queue_ack_rate", "Messages acknowledged per second.", |q| q.ack_rate),
    ("warren_queue_redeliver_rate", "Messages redelivered per second.", |q| q.redeliver_rate),
    (
        "warren_queue_inflow_rate",
        "Messages arriving per second: the publish counter, or for a queue dead-letter routing feeds, depth change plus acks (a lower bound).",
        |q| q.inflow_rate,
    ),
    ("warren_queue_backlog_growth_rate", "Change of the queue's total depth per second.", |q| q.backlog_growth_rate),
    // The health signals the queue pages show, with the values alert rules compare
    // (`alerts::value`), so that a page, a rule and a Prometheus query agree (issue 31, case 2).
    (
        "warren_queue_time_to_drain_seconds",
        "Seconds the backlog takes to drain at current rates; absent while it does not drain.",
        |q| crate::alerts::value(Metric::TimeToDrainSecs, q),
    ),
    (
        "warren_queue_redelivery_share",
        "Share of deliveries that were redeliveries, 0..1; absent while warren's own reads are in the rates.",
        |q| crate::alerts::value(Metric::RedeliveryShare, q),
    ),
    (
        "warren_queue_hung_consumer_seconds",
        "How long unacked messages have been held with no ack while others wait (a hung consumer); 0 when none is.",
        |q| crate::alerts::value(Metric::HungConsumerSecs, q),
    ),
    (
        "warren_queue_holding_seconds",
        "How long unacked messages have been held with no ack and none ready (as scheduled messages are); 0 when none are.",
        |q| crate::alerts::value(Metric::HoldingSecs, q),
    ),
    (
        "warren_queue_redelivery_loop_seconds",
        "How long deliveries have come back with nothing acked (poison messages going round); 0 when they do not.",
        |q| crate::alerts::value(Metric::RedeliveryLoopSecs, q),
    ),
    (
        "warren_queue_own_reads",
        "1 while warren's own reads of the queue (a snapshot, a move) are in its delivery and redelivery counts and rates.",
        |q| Some(if q.own_reads { 1.0 } else { 0.0 }),
    ),
    (
        "warren_queue_custody_messages",
        "Dead letters of the queue in warren's custody (taken off the broker, not yet replayed); absent without custody.",
        |q| q.custody_held.map(|v| v as f64),
    ),
    (
        "warren_queue_custody_intake_stopped",
        "1 when the intake of the queue's custody stopped (its dead letters stay in the broker; the DLQ page says why); absent without an intake.",
        |q| q.custody_intake_stopped.map(|s| if s { 1.0 } else { 0.0 }),
    ),
];

/// What the broker counts per queue, cumulative since the queue (or its node) started.
const QUEUE_COUNTERS: &[(&str, &str, QueueValue)] = &[
    ("warren_queue_published_total", "Messages published into the queue, as the broker counts them.", |q| {
        q.counters.publish.map(|v| v as f64)
    }),
    (
        "warren_queue_delivered_total",
        "Messages delivered (or fetched) from the queue, as the broker counts them.",
        |q| q.counters.deliver.map(|v| v as f64),
    ),
    ("warren_queue_acknowledged_total", "Messages acknowledged, as the broker counts them.", |q| {
        q.counters.ack.map(|v| v as f64)
    }),
    ("warren_queue_redelivered_total", "Messages redelivered, as the broker counts them.", |q| {
        q.counters.redeliver.map(|v| v as f64)
    }),
];

/// How the oldest-message age was derived, each a gauge of its own so the age's series keeps
/// its labels when an estimate becomes exact.
const AGE_FAMILIES: &[(&str, &str, QueueValue)] = &[
    (
        "warren_queue_oldest_message_age_seconds",
        "Age of the oldest message: exact from the broker's head timestamp, or warren's FIFO estimate (see the two gauges below).",
        |q| q.oldest_age_secs,
    ),
    (
        "warren_queue_oldest_message_age_estimated",
        "1 when the oldest-message age is warren's FIFO estimate, 0 when it is the broker's head timestamp.",
        |q| {
            q.oldest_age_secs?;
            Some(if q.oldest_age_source == crate::metrics::AgeSource::Exact { 0.0 } else { 1.0 })
        },
    ),
    (
        "warren_queue_oldest_message_age_lower_bound",
        "1 when the oldest message is older than the age given (the estimate reaches back only as far as warren's history).",
        |q| {
            q.oldest_age_secs?;
            Some(if q.oldest_age_lower_bound { 1.0 } else { 0.0 })
        },
    ),
];

fn queue_samples(out: &mut String, name: &str, queues: &[&QueueView], value: QueueValue) {
    for q in queues {
        if let Some(v) = value(q) {
            sample(out, name, &[("broker", &q.broker), ("vhost", &q.vhost), ("queue", &q.name), ("type", &q.kind)], v);
        }
    }
}

pub fn render(brokers: &[BrokerLive]) -> String {
    let mut out = String::with_capacity(4096);
    // A broker that is down has no current queue numbers: export none rather than stale ones
    // that look fresh (warren_broker_up says why they are missing).
    let queues: Vec<&QueueView> =
        brokers.iter().filter(|b| b.status.up == Some(true)).flat_map(|b| b.queues.iter()).collect();
    for (name, help, value) in QUEUE_FAMILIES.iter().chain(AGE_FAMILIES) {
        header(&mut out, &Family { name, help });
        queue_samples(&mut out, name, &queues, *value);
    }
    for (name, help, value) in QUEUE_COUNTERS {
        counter_header(&mut out, &Family { name, help });
        queue_samples(&mut out, name, &queues, *value);
    }
    render_vhost_counters(&mut out, brokers);

    header(
        &mut out,
        &Family { name: "warren_broker_up", help: "1 if the last poll of the broker succeeded, 0 if it failed." },
    );
    for b in brokers {
        if let Some(up) = b.status.up {
            sample(&mut out, "warren_broker_up", &[("broker", &b.name)], if up { 1.0 } else { 0.0 });
        }
    }
    let failures = Family {
        name: "warren_broker_consecutive_poll_failures",
        help: "Failed polls of the broker since its last successful one.",
    };
    header(&mut out, &failures);
    for b in brokers {
        sample(&mut out, failures.name, &[("broker", &b.name)], b.status.consecutive_failures as f64);
    }
    header(
        &mut out,
        &Family { name: "warren_broker_poll_duration_seconds", help: "Duration of the last successful poll." },
    );
    for b in brokers {
        if let Some(ms) = b.status.last_poll_ms {
            sample(&mut out, "warren_broker_poll_duration_seconds", &[("broker", &b.name)], ms as f64 / 1000.0);
        }
    }
    header(
        &mut out,
        &Family {
            name: "warren_broker_last_success_timestamp_seconds",
            help: "Unix time of the last successful poll.",
        },
    );
    for b in brokers {
        if let Some(t) = b.status.last_success {
            sample(
                &mut out,
                "warren_broker_last_success_timestamp_seconds",
                &[("broker", &b.name)],
                t.timestamp() as f64,
            );
        }
    }
    type BrokerValue = fn(&BrokerLive) -> Option<f64>;
    let broker_families: &[(&str, &str, BrokerValue)] = &[
        ("warren_broker_publish_rate", "Messages published per second in the watched vhosts.", |b| {
            b.rates.publish_rate
        }),
        ("warren_broker_confirm_rate", "Publisher confirms per second in the watched vhosts.", |b| {
            b.rates.confirm_rate
        }),
        ("warren_broker_ack_rate", "Acknowledgements per second in the watched vhosts.", |b| b.rates.ack_rate),
        ("warren_broker_deliver_rate", "Deliveries per second in the watched vhosts.", |b| b.rates.deliver_rate),
        ("warren_broker_redeliver_rate", "Redeliveries per second in the watched vhosts.", |b| b.rates.redeliver_rate),
        ("warren_broker_unroutable_rate", "Unroutable publishes (returned or dropped) per second.", |b| {
            b.rates.unroutable_rate
        }),
        // From the last client listing (`warren_broker_clients_age_seconds` says how old).
        ("warren_broker_connections", "Connections in the watched vhosts, from the last connections listing.", |b| {
            b.clients.as_ref().and_then(|c| c.connections.count()).map(|n| n as f64)
        }),
        ("warren_broker_channels", "Channels in the watched vhosts, from the last channels listing.", |b| {
            b.clients.as_ref().and_then(|c| c.channels.count()).map(|n| n as f64)
        }),
        (
            "warren_broker_blocked_connections",
            "Connections in state blocked or blocking (resource alarm or flow control), from the last connections listing.",
            |b| b.clients.as_ref().and_then(|c| c.blocked_connections()).map(|n| n as f64),
        ),
        ("warren_broker_connection_churn_rate", "Connections opened plus closed per second, broker-wide.", |b| {
            b.connection_churn_per_sec
        }),
        ("warren_broker_clients_age_seconds", "Age of the last listing of connections, channels and consumers.", |b| {
            b.clients.as_ref().map(|c| (chrono::Utc::now() - c.listed_at).num_milliseconds() as f64 / 1000.0)
        }),
    ];
    for (name, help, value) in broker_families {
        header(&mut out, &Family { name, help });
        for b in brokers {
            if let Some(v) = value(b) {
                sample(&mut out, name, &[("broker", &b.name)], v);
            }
        }
    }
    render_load(&mut out, brokers);
    render_nodes(&mut out, brokers);
    header(&mut out, &Family { name: "warren_up", help: "warren is running." });
    out.push_str("warren_up 1\n");
    header(&mut out, &Family { name: "warren_build_info", help: "warren's version and the commit it was built from." });
    sample(
        &mut out,
        "warren_build_info",
        &[("version", env!("CARGO_PKG_VERSION")), ("commit", env!("WARREN_BUILD_COMMIT"))],
        1.0,
    );
    render_process(&mut out);
    out
}

type VhostCounter = fn(&crate::metrics::BrokerCounters) -> Option<u64>;

/// What the broker counts per vhost (confirms and unroutable returns exist only per vhost).
fn render_vhost_counters(out: &mut String, brokers: &[BrokerLive]) {
    let families: &[(&str, &str, VhostCounter)] = &[
        ("warren_vhost_published_total", "Messages published in the vhost, as the broker counts them.", |c| c.publish),
        ("warren_vhost_confirmed_total", "Publisher confirms sent in the vhost.", |c| c.confirm),
        ("warren_vhost_acknowledged_total", "Acknowledgements in the vhost.", |c| c.ack),
        ("warren_vhost_delivered_total", "Deliveries (and fetches) in the vhost.", |c| c.deliver),
        ("warren_vhost_redelivered_total", "Redeliveries in the vhost.", |c| c.redeliver),
        ("warren_vhost_unroutable_total", "Publishes that reached no queue (returned or dropped) in the vhost.", |c| {
            c.unroutable
        }),
    ];
    for (name, help, value) in families {
        counter_header(out, &Family { name, help });
        for b in brokers.iter().filter(|b| b.status.up == Some(true)) {
            for v in &b.vhosts {
                if let Some(n) = value(&v.counters) {
                    sample(out, name, &[("broker", &b.name), ("vhost", &v.name)], n as f64);
                }
            }
        }
    }
}

/// The standard `process_*` metrics of this process, from `/proc` (Linux); left out where
/// `/proc` does not answer.
fn render_process(out: &mut String) {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else { return };
    // The fields after the command name, which is in parentheses and may hold spaces.
    let Some(fields) = stat.rsplit_once(')').map(|(_, rest)| rest.split_whitespace().collect::<Vec<_>>()) else {
        return;
    };
    let field = |n: usize| fields.get(n - 3).and_then(|f| f.parse::<f64>().ok());
    let ticks = clock_ticks();
    let page = 4096.0;
    if let (Some(utime), Some(stime)) = (field(14), field(15)) {
        counter_header(
            out,
            &Family { name: "process_cpu_seconds_total", help: "Total user and system CPU time spent in seconds." },
        );
        out.push_str(&format!("process_cpu_seconds_total {}\n", (utime + stime) / ticks));
    }
    if let Some(vsize) = field(23) {
        header(out, &Family { name: "process_virtual_memory_bytes", help: "Virtual memory size in bytes." });
        out.push_str(&format!("process_virtual_memory_bytes {vsize}\n"));
    }
    if let Some(rss) = field(24) {
        header(out, &Family { name: "process_resident_memory_bytes", help: "Resident memory size in bytes." });
        out.push_str(&format!("process_resident_memory_bytes {}\n", rss * page));
    }
    let boot = std::fs::read_to_string("/proc/stat")
        .ok()
        .and_then(|s| s.lines().find_map(|l| l.strip_prefix("btime ")).and_then(|t| t.trim().parse::<f64>().ok()));
    if let (Some(boot), Some(start)) = (boot, field(22)) {
        header(
            out,
            &Family {
                name: "process_start_time_seconds",
                help: "Start time of the process since unix epoch in seconds.",
            },
        );
        out.push_str(&format!("process_start_time_seconds {}\n", boot + start / ticks));
    }
    if let Ok(fds) = std::fs::read_dir("/proc/self/fd") {
        header(out, &Family { name: "process_open_fds", help: "Number of open file descriptors." });
        out.push_str(&format!("process_open_fds {}\n", fds.count()));
    }
    let max_fds = std::fs::read_to_string("/proc/self/limits").ok().and_then(|l| {
        l.lines()
            .find(|l| l.starts_with("Max open files"))
            .and_then(|l| l.split_whitespace().nth(3))
            .and_then(|n| n.parse::<f64>().ok())
    });
    if let Some(max) = max_fds {
        header(out, &Family { name: "process_max_fds", help: "Maximum number of open file descriptors." });
        out.push_str(&format!("process_max_fds {max}\n"));
    }
}

/// Clock ticks per second of `/proc` times: 100 on every Linux this runs on (the kernel's
/// USER_HZ is fixed at 100 for user space on x86 and arm).
fn clock_ticks() -> f64 {
    100.0
}

type NodeValue = fn(&crate::broker::nodes::Node) -> Option<f64>;

const NODE_FAMILIES: &[(&str, &str, NodeValue)] = &[
    ("warren_node_running", "1 if the broker lists the node as running, 0 if not.", |n| {
        n.running.map(|r| if r { 1.0 } else { 0.0 })
    }),
    ("warren_node_mem_used_bytes", "Memory the node uses.", |n| n.mem_used.map(|v| v as f64)),
    ("warren_node_mem_limit_bytes", "The node's memory high watermark: publishers are blocked above it.", |n| {
        n.mem_limit.map(|v| v as f64)
    }),
    ("warren_node_disk_free_bytes", "Free disk on the node's data directory.", |n| n.disk_free.map(|v| v as f64)),
    ("warren_node_disk_free_limit_bytes", "Free-disk limit: publishers are blocked below it.", |n| {
        n.disk_free_limit.map(|v| v as f64)
    }),
    ("warren_node_fd_used", "File descriptors in use.", |n| n.fd_used.map(|v| v as f64)),
    // Not `_total`: that suffix means a counter.
    ("warren_node_fd_limit", "File descriptor limit.", |n| n.fd_total.map(|v| v as f64)),
    ("warren_node_mem_alarm", "1 while the node's memory alarm is on.", |n| {
        n.mem_alarm.map(|a| if a { 1.0 } else { 0.0 })
    }),
    ("warren_node_disk_alarm", "1 while the node's free-disk alarm is on.", |n| {
        n.disk_free_alarm.map(|a| if a { 1.0 } else { 0.0 })
    }),
    (
        "warren_node_partitions",
        "Nodes this node reports a network partition with.",
        crate::broker::nodes::partition_count,
    ),
];

/// The cluster's nodes, of brokers whose last poll succeeded (a down broker's nodes are not
/// current); what a broker did not give is left out.
fn render_nodes(out: &mut String, brokers: &[BrokerLive]) {
    let up: Vec<&BrokerLive> = brokers.iter().filter(|b| b.status.up == Some(true)).collect();
    for (name, help, value) in NODE_FAMILIES {
        header(out, &Family { name, help });
        for b in &up {
            for n in &b.nodes.nodes {
                if let Some(v) = value(n) {
                    sample(out, name, &[("broker", &b.name), ("node", &n.name)], v);
                }
            }
        }
    }
}

/// warren's own cost to each broker: its calls (counters per endpoint), the cadences in force,
/// and how old the numbers shown are.
fn render_load(out: &mut String, brokers: &[BrokerLive]) {
    type Total = fn(&crate::live::CallTotals) -> f64;
    let counters: &[(&str, &str, Total)] = &[
        ("warren_broker_calls_total", "HTTP calls warren made to the broker, per endpoint.", |t| t.calls as f64),
        ("warren_broker_call_errors_total", "Calls that failed, per endpoint.", |t| t.errors as f64),
        ("warren_broker_call_seconds_total", "Time spent waiting for the broker's answers, per endpoint.", |t| {
            t.seconds
        }),
        ("warren_broker_call_bytes_total", "Bytes of the broker's answers, per endpoint.", |t| t.bytes as f64),
    ];
    for (name, help, value) in counters {
        counter_header(out, &Family { name, help });
        for b in brokers {
            // Per endpoint template, summed over vhosts: a vhost name is no endpoint, and each
            // vhost would be a series of its own.
            let mut by_template: std::collections::BTreeMap<(&str, String), f64> = Default::default();
            for (endpoint, totals) in &b.load.totals {
                let (source, endpoint) = endpoint.split_once(' ').unwrap_or(("", endpoint));
                *by_template.entry((source, endpoint_template(endpoint))).or_default() += value(totals);
            }
            for ((source, endpoint), v) in by_template {
                sample(out, name, &[("broker", &b.name), ("source", source), ("endpoint", &endpoint)], v);
            }
        }
    }
    type LoadValue = fn(&crate::live::BrokerLoad, chrono::DateTime<chrono::Utc>) -> Option<f64>;
    let gauges: &[(&str, &str, LoadValue)] = &[
        (
            "warren_broker_poll_interval_seconds",
            "Poll interval in force (stretched when the broker is slow).",
            |l, _| Some(l.interval_secs),
        ),
        ("warren_broker_stats_interval_seconds", "Interval of the message stats listing (queue rates).", |l, _| {
            Some(l.stats_interval_secs)
        }),
        ("warren_broker_estimated_load_cores", "warren's estimated share of one broker core.", |l, _| l.estimated_load),
        ("warren_broker_cpu_budget_cores", "The configured budget, as a share of one broker core.", |l, _| {
            Some(l.budget)
        }),
        ("warren_broker_depth_age_seconds", "Age of the depth and consumer numbers shown.", |l, now| {
            l.depth_sampled_at.map(|t| (now - t).num_milliseconds() as f64 / 1000.0)
        }),
        ("warren_broker_rates_age_seconds", "Age of the counters behind the queue rates shown.", |l, now| {
            l.rates_sampled_at.map(|t| (now - t).num_milliseconds() as f64 / 1000.0)
        }),
        ("warren_broker_prometheus_source_up", "1 when depth comes from the Prometheus plugin, 0 when not.", |l, _| {
            l.prometheus.available.map(|a| if a { 1.0 } else { 0.0 })
        }),
    ];
    let now = chrono::Utc::now();
    for (name, help, value) in gauges {
        header(out, &Family { name, help });
        for b in brokers {
            if let Some(v) = value(&b.load, now) {
                sample(out, name, &[("broker", &b.name)], v);
            }
        }
    }
}

/// An endpoint as a template: `/api/queues/my-vhost` is `/api/queues/:vhost` (no braces: naive
/// parsers of the format read a `}` in a label value as the end of the labels).
fn endpoint_template(endpoint: &str) -> String {
    const PER_VHOST: &[&str] = &["queues", "policies", "operator-policies", "bindings", "exchanges"];
    match endpoint.strip_prefix("/api/").and_then(|rest| rest.split_once('/')) {
        Some((kind, _)) if PER_VHOST.contains(&kind) => format!("/api/{kind}/:vhost"),
        _ => endpoint.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_name_no_vhost() {
        assert_eq!(endpoint_template("/api/queues/orders%2Fprod"), "/api/queues/:vhost");
        assert_eq!(endpoint_template("/api/operator-policies/v"), "/api/operator-policies/:vhost");
        assert_eq!(endpoint_template("/api/overview"), "/api/overview");
        assert_eq!(endpoint_template("/api/connections/username"), "/api/connections/username");
        assert_eq!(endpoint_template("/metrics/detailed"), "/metrics/detailed");
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }
}
