//! `GET /metrics`: the live numbers in the Prometheus text format (version 0.0.4), so warren is
//! a drop-in exporter. A value the broker did not give is left out (Prometheus reads an absent
//! sample as "no data"), never written as 0. The oldest-message age carries its source as a
//! label, which makes warren the exporter that gives an age for quorum queues.

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;

use crate::metrics::QueueView;
use crate::state::{AppState, BrokerLive};

pub fn router() -> Router<AppState> {
    Router::new().route("/metrics", get(metrics))
}

async fn metrics(State(state): State<AppState>) -> impl IntoResponse {
    let brokers = state.live.snapshot();
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], render(&brokers))
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

pub fn render(brokers: &[BrokerLive]) -> String {
    let mut out = String::with_capacity(4096);
    // A broker that is down has no current queue numbers: export none rather than stale ones
    // that look fresh (warren_broker_up says why they are missing).
    let queues: Vec<&QueueView> =
        brokers.iter().filter(|b| b.status.up == Some(true)).flat_map(|b| b.queues.iter()).collect();
    for (name, help, value) in QUEUE_FAMILIES {
        header(&mut out, &Family { name, help });
        for q in &queues {
            if let Some(v) = value(q) {
                sample(
                    &mut out,
                    name,
                    &[("broker", &q.broker), ("vhost", &q.vhost), ("queue", &q.name), ("type", &q.kind)],
                    v,
                );
            }
        }
    }
    let age = Family {
        name: "warren_queue_oldest_message_age_seconds",
        help: "Age of the oldest message; source is exact (broker timestamp) or estimated (warren's FIFO estimate); lower_bound=true means older than this.",
    };
    header(&mut out, &age);
    for q in &queues {
        if let Some(v) = q.oldest_age_secs {
            let lower = if q.oldest_age_lower_bound { "true" } else { "false" };
            let labels = [
                ("broker", &*q.broker),
                ("vhost", &*q.vhost),
                ("queue", &*q.name),
                ("type", &*q.kind),
                ("source", q.oldest_age_source.as_str()),
                ("lower_bound", lower),
            ];
            sample(&mut out, age.name, &labels, v);
        }
    }

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
    header(&mut out, &Family { name: "warren_build_info", help: "warren's version." });
    sample(&mut out, "warren_build_info", &[("version", env!("CARGO_PKG_VERSION"))], 1.0);
    out
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
    ("warren_node_fd_total", "File descriptor limit.", |n| n.fd_total.map(|v| v as f64)),
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
    type Total = fn(&crate::poller::CallTotals) -> f64;
    let counters: &[(&str, &str, Total)] = &[
        ("warren_broker_calls_total", "HTTP calls warren made to the broker, per endpoint.", |t| t.calls as f64),
        ("warren_broker_call_errors_total", "Calls that failed, per endpoint.", |t| t.errors as f64),
        ("warren_broker_call_seconds_total", "Time spent waiting for the broker's answers, per endpoint.", |t| {
            t.seconds
        }),
        ("warren_broker_call_bytes_total", "Bytes of the broker's answers, per endpoint.", |t| t.bytes as f64),
    ];
    for (name, help, value) in counters {
        out.push_str(&format!("# HELP {name} {help}\n# TYPE {name} counter\n"));
        for b in brokers {
            for (endpoint, totals) in &b.load.totals {
                let (source, endpoint) = endpoint.split_once(' ').unwrap_or(("", endpoint));
                sample(out, name, &[("broker", &b.name), ("source", source), ("endpoint", endpoint)], value(totals));
            }
        }
    }
    type LoadValue = fn(&crate::poller::BrokerLoad, chrono::DateTime<chrono::Utc>) -> Option<f64>;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }
}
