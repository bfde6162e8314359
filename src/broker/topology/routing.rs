//! What routes into one queue, from the stored topology: the bindings whose destination is the
//! queue, and one level of exchange-to-exchange bindings above each of their exchanges. The
//! default exchange routes to every queue by its name and is listed as such (its implicit
//! bindings are not kept: `ExchangeBindings`). Where the queue's dead letters go is the
//! dead-letter analysis's (`DeadLetterTarget`), not repeated here.

use serde::Serialize;
use serde_json::{Map, Value};

use super::VhostTopology;

/// One binding into the queue (or, in `upstream`, into the exchange of such a binding).
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct Route {
    /// The source exchange.
    pub exchange: String,
    /// Its type (`direct`, `topic`, `fanout`, `headers`, ...); `None` when the exchange listing
    /// did not name it (deleted since the bindings were read).
    pub kind: Option<String>,
    pub routing_key: String,
    /// The binding's arguments (a headers exchange matches on them), when it has any.
    pub arguments: Option<Map<String, Value>>,
    /// Exchanges bound to `exchange` (exchange-to-exchange bindings), one level up; always
    /// empty inside `upstream` itself.
    #[schema(no_recursion)]
    pub upstream: Vec<Route>,
}

/// Exchange-to-exchange bindings make cycles possible, and a vhost may bind thousands of
/// exchanges to one: the page lists at most this many per level and says how many more.
pub const MAX_ROUTES: usize = 200;

/// The bindings that route into `queue`, sorted by exchange and key, each with the exchanges
/// bound to its exchange (one level). Returns the routes and how many were left out past
/// `MAX_ROUTES` (at either level).
pub fn routes_into(topology: &VhostTopology, queue: &str) -> (Vec<Route>, usize) {
    let kind = |name: &str| topology.exchanges.iter().find(|e| e.name == name).map(|e| e.kind.clone());
    let route = |b: &super::Binding| Route {
        exchange: b.source.clone(),
        kind: kind(&b.source),
        routing_key: b.routing_key.clone(),
        arguments: b.arguments.clone(),
        upstream: Vec::new(),
    };
    let mut left_out = 0;
    let mut into: Vec<&super::Binding> =
        topology.bindings.iter().filter(|b| b.destination_type == "queue" && b.destination == queue).collect();
    into.sort_by(|a, b| (&a.source, &a.routing_key).cmp(&(&b.source, &b.routing_key)));
    if into.len() > MAX_ROUTES {
        left_out += into.len() - MAX_ROUTES;
        into.truncate(MAX_ROUTES);
    }
    let routes = into
        .into_iter()
        .map(|b| {
            let mut upstream: Vec<&super::Binding> = topology
                .bindings
                .iter()
                .filter(|u| u.destination_type == "exchange" && u.destination == b.source)
                .collect();
            upstream.sort_by(|a, b| (&a.source, &a.routing_key).cmp(&(&b.source, &b.routing_key)));
            if upstream.len() > MAX_ROUTES {
                left_out += upstream.len() - MAX_ROUTES;
                upstream.truncate(MAX_ROUTES);
            }
            Route { upstream: upstream.into_iter().map(route).collect(), ..route(b) }
        })
        .collect();
    (routes, left_out)
}

#[cfg(test)]
mod tests {
    use super::super::{Binding, Exchange};
    use super::*;

    fn binding(source: &str, destination: &str, kind: &str, key: &str) -> Binding {
        Binding {
            source: source.into(),
            destination: destination.into(),
            destination_type: kind.into(),
            routing_key: key.into(),
            arguments: None,
        }
    }

    #[test]
    fn bindings_into_a_queue_with_one_level_of_exchanges_above() {
        let mut headers = binding("by-header", "orders", "queue", "");
        headers.arguments = serde_json::json!({"x-match": "all", "region": "eu"}).as_object().cloned();
        let topology = VhostTopology {
            bindings: vec![
                binding("events", "orders", "queue", "order.#"),
                binding("ingress", "events", "exchange", "order.created"),
                binding("edge", "ingress", "exchange", ""),
                binding("events", "audit", "queue", "#"),
                headers,
                // A cycle: events bound back to itself through ingress must not loop.
                binding("events", "ingress", "exchange", "loop"),
            ],
            exchanges: vec![
                Exchange { name: "events".into(), kind: "topic".into() },
                Exchange { name: "ingress".into(), kind: "direct".into() },
            ],
        };
        let (routes, left_out) = routes_into(&topology, "orders");
        assert_eq!(left_out, 0);
        let summary: Vec<(&str, Option<&str>, &str, Vec<&str>)> = routes
            .iter()
            .map(|r| {
                (
                    r.exchange.as_str(),
                    r.kind.as_deref(),
                    r.routing_key.as_str(),
                    r.upstream.iter().map(|u| u.exchange.as_str()).collect(),
                )
            })
            .collect();
        assert_eq!(
            summary,
            [("by-header", None, "", vec![]), ("events", Some("topic"), "order.#", vec!["ingress"])],
            "one level up only: edge (bound to ingress) is not listed"
        );
        assert_eq!(routes[1].upstream[0].routing_key, "order.created");
        assert_eq!(routes[1].upstream[0].kind.as_deref(), Some("direct"));
        assert_eq!(routes[0].arguments.as_ref().unwrap()["region"], "eu");
        assert!(routes_into(&topology, "nobody").0.is_empty());
    }

    #[test]
    fn a_huge_fan_in_is_cut_and_counted() {
        let bindings = (0..MAX_ROUTES + 7).map(|i| binding(&format!("x{i}"), "q", "queue", "")).collect();
        let (routes, left_out) = routes_into(&VhostTopology { bindings, exchanges: Vec::new() }, "q");
        assert_eq!((routes.len(), left_out), (MAX_ROUTES, 7));
    }
}
