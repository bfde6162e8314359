//! Effective policies for listings that do not carry them. With the metrics collector off
//! (4.x, `management_agent.disable_metrics_collector = true`) a queue listing names each
//! queue's policy but has no `effective_policy_definition` (DOMAIN.md §8), and dead-letter
//! routing, limits and the delivery limit are often set by policy. warren reads the vhost's
//! policies and operator policies and resolves them the way the broker does.

use std::collections::HashMap;
use std::sync::Arc;

use serde::Deserialize;
use serde_json::{Map, Value};

use crate::broker::management::{encode_segment, BrokerError, ManagementClient, RawQueue};

/// One policy or operator policy as `/api/policies/{vhost}` lists it.
#[derive(Debug, Clone, Deserialize)]
pub struct Policy {
    pub name: String,
    #[serde(default)]
    pub pattern: String,
    #[serde(rename = "apply-to", default)]
    pub apply_to: String,
    #[serde(default)]
    pub priority: i64,
    #[serde(default)]
    pub definition: Map<String, Value>,
}

/// Keys where an operator policy and a user policy that both set them resolve to the smaller
/// value (the broker's merge for operator policies, `rabbit_policy`); any other key of an
/// operator policy applies only where the user policy does not set it.
const LOWER_WINS: &[&str] = &[
    "expires",
    "message-ttl",
    "max-length",
    "max-length-bytes",
    "max-in-memory-length",
    "max-in-memory-bytes",
    "delivery-limit",
];

/// The policy of `policies` the broker applies to queue `name`: the matching one of highest
/// priority (a pattern this regex engine cannot read matches nothing).
fn matching<'a>(policies: &[(&'a Policy, Option<regex::Regex>)], name: &str, kind: &str) -> Option<&'a Policy> {
    policies
        .iter()
        .filter(|(p, re)| applies_to_queue(p, kind) && re.as_ref().is_some_and(|re| re.is_match(name)))
        .max_by_key(|(p, _)| p.priority)
        .map(|(p, _)| *p)
}

/// Whether a policy applies to a queue of this type.
fn applies_to_queue(policy: &Policy, kind: &str) -> bool {
    match policy.apply_to.as_str() {
        "" | "all" | "queues" => true,
        "classic_queues" => kind == "classic",
        "quorum_queues" => kind == "quorum",
        "streams" => kind == "stream",
        _ => false,
    }
}

/// The definition in force: the user policy's, with the operator policy merged in.
pub fn merge(user: Option<&Map<String, Value>>, operator: Option<&Map<String, Value>>) -> Map<String, Value> {
    let mut merged = user.cloned().unwrap_or_default();
    for (key, value) in operator.into_iter().flatten() {
        match merged.get(key) {
            None => {
                merged.insert(key.clone(), value.clone());
            }
            Some(mine) if LOWER_WINS.contains(&key.as_str()) => {
                if let (Some(a), Some(b)) = (mine.as_f64(), value.as_f64()) {
                    if b < a {
                        merged.insert(key.clone(), value.clone());
                    }
                }
            }
            Some(_) => {}
        }
    }
    merged
}

/// One vhost's policies and operator policies, ready to resolve its queues' effective policy.
pub struct Resolver<'a> {
    by_name: HashMap<&'a str, &'a Policy>,
    /// The user policies with their patterns compiled, for a queue whose listing does not say
    /// which applies (`effective_now`).
    users: Vec<(&'a Policy, Option<regex::Regex>)>,
    /// With their patterns compiled; a pattern this regex engine cannot read matches nothing.
    operators: Vec<(&'a Policy, Option<regex::Regex>)>,
}

impl<'a> Resolver<'a> {
    pub fn new(policies: &'a [Policy], operators: &'a [Policy]) -> Self {
        Resolver {
            by_name: policies.iter().map(|p| (p.name.as_str(), p)).collect(),
            users: policies.iter().map(|p| (p, regex::Regex::new(&p.pattern).ok())).collect(),
            // The broker matches patterns anywhere in the name, as `regex` does.
            operators: operators.iter().map(|p| (p, regex::Regex::new(&p.pattern).ok())).collect(),
        }
    }

    /// Operator policies whose pattern could not be read (the caller logs them).
    pub fn unreadable(&self) -> usize {
        self.operators.iter().filter(|(_, re)| re.is_none()).count()
    }

    /// The operator policy the broker applies to `name`: the matching one of highest priority.
    fn operator_for(&self, name: &str, kind: &str) -> Option<&'a Policy> {
        matching(&self.operators, name, kind)
    }

    /// The effective policy of `queue` as the policies stand now, matched by pattern: the
    /// management database names a queue's policy seconds after it was set, which is too late
    /// for a check made before a move.
    pub fn effective_now(&self, queue: &mut RawQueue) {
        let kind = queue.kind.as_deref().unwrap_or("classic");
        let user = matching(&self.users, &queue.name, kind).map(|p| &p.definition);
        let operator = self.operator_for(&queue.name, kind).map(|p| &p.definition);
        queue.effective_policy_definition = Some(Arc::new(merge(user, operator)));
    }

    /// Fills in each listed queue's effective policy. Queues that already have one (a listing
    /// with stats) are left as the broker said.
    pub fn apply(&self, queues: &mut [RawQueue]) {
        for q in queues.iter_mut() {
            if q.effective_policy_definition.as_ref().is_some_and(|d| !d.is_empty()) {
                continue;
            }
            // A metadata listing (`disable_stats`) names no policy: matched by pattern then.
            if q.policy.is_none() {
                let kind = q.kind.as_deref().unwrap_or("classic");
                q.policy = matching(&self.users, &q.name, kind).map(|p| p.name.clone());
            }
            let user = q.policy.as_deref().and_then(|name| self.by_name.get(name)).map(|p| &p.definition);
            let operator = self.operator_for(&q.name, q.kind.as_deref().unwrap_or("classic")).map(|p| &p.definition);
            if user.is_none() && operator.is_none() {
                continue;
            }
            q.effective_policy_definition = Some(Arc::new(merge(user, operator)));
        }
    }
}

/// One queue as the broker says now, its effective policy resolved from the policies as they
/// stand (4.x without the metrics collector answers no policy at all, and 3.x's management
/// database names a new policy seconds late). `None`: no such queue. For decisions that must
/// not rest on the last poll (a policy applied a moment ago).
pub async fn queue_now(client: &ManagementClient, vhost: &str, name: &str) -> Result<Option<RawQueue>, BrokerError> {
    let path = format!("api/queues/{}/{}", encode_segment(vhost), encode_segment(name));
    let mut queue: RawQueue = match client.get(&path).await {
        Ok((queue, _)) => queue,
        Err(BrokerError::Http { status: 404, .. }) => return Ok(None),
        Err(e) => return Err(e),
    };
    let (user, _) = client.policies("policies", vhost).await?;
    let (operator, _) = client.policies("operator-policies", vhost).await?;
    Resolver::new(&user, &operator).effective_now(&mut queue);
    Ok(Some(queue))
}

/// What a queue does with a message that arrives when it is full.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Overflow {
    /// No length limit.
    Unlimited,
    /// It drops (or dead-letters) its oldest messages to make room: a publish into it is
    /// confirmed, and some message is gone. `limit` says which limit, in words.
    DropHead { limit: String },
    /// It refuses the publish (a nack to a publisher in confirm mode).
    RejectPublish { limit: String },
}

/// A queue's overflow behaviour from its arguments and effective policy. Where both set a
/// limit the lower one applies, as in the broker; the argument's `x-overflow` wins over the
/// policy's `overflow`; without either the broker drops the head.
pub fn overflow(queue: &RawQueue) -> Overflow {
    let empty = Map::new();
    let args = queue.arguments.as_deref().unwrap_or(&empty);
    let policy = queue.effective_policy_definition.as_deref().unwrap_or(&empty);
    overflow_of(args, policy)
}

/// As [`overflow`], from a queue's arguments and effective policy.
pub fn overflow_of(args: &Map<String, Value>, policy: &Map<String, Value>) -> Overflow {
    let limit = |arg: &str, key: &str| {
        [args.get(arg), policy.get(key)].into_iter().flatten().filter_map(Value::as_i64).filter(|n| *n >= 0).min()
    };
    let mut limits = Vec::new();
    if let Some(n) = limit("x-max-length", "max-length") {
        limits.push(format!("at most {n} messages"));
    }
    if let Some(n) = limit("x-max-length-bytes", "max-length-bytes") {
        limits.push(format!("at most {n} bytes of messages"));
    }
    if limits.is_empty() {
        return Overflow::Unlimited;
    }
    let limit = limits.join(" and ");
    let mode = args.get("x-overflow").or_else(|| policy.get("overflow")).and_then(Value::as_str).unwrap_or("drop-head");
    match mode {
        "reject-publish" | "reject-publish-dlx" => Overflow::RejectPublish { limit },
        _ => Overflow::DropHead { limit },
    }
}

/// Whether a queue lets its messages or itself expire, from its arguments and effective
/// policy, in words: a message TTL (`x-message-ttl`, `message-ttl`) or a queue expiry
/// (`x-expires`, `expires`). `None`: neither.
pub fn expiry(queue: &RawQueue) -> Option<String> {
    let empty = Map::new();
    let args = queue.arguments.as_deref().unwrap_or(&empty);
    let policy = queue.effective_policy_definition.as_deref().unwrap_or(&empty);
    let set = |arg: &str, key: &str| [args.get(arg), policy.get(key)].into_iter().flatten().find_map(Value::as_i64);
    let mut found = Vec::new();
    if let Some(ms) = set("x-message-ttl", "message-ttl") {
        found.push(format!("a message TTL of {ms} ms"));
    }
    if let Some(ms) = set("x-expires", "expires") {
        found.push(format!("an expiry of {ms} ms when unused"));
    }
    (!found.is_empty()).then(|| found.join(" and "))
}

/// RabbitMQ 4.0 and later give every quorum queue a delivery limit of 20 unless an argument or
/// a policy sets another (DOMAIN.md §5).
pub const DEFAULT_DELIVERY_LIMIT_4X: i64 = 20;

/// A 4.x quorum queue's delivery limit when the listing does not say it (metrics collector
/// off): argument and policy resolved as the broker does (the smaller, unless either is
/// negative, which turns the limit off and yields to the other; measured on 4.0.5: argument
/// -1 with policy 3 is 3, argument 9 with policy 30 is 9), else the default.
pub fn delivery_limit_4x(q: &RawQueue) -> i64 {
    configured_delivery_limit(q).unwrap_or(DEFAULT_DELIVERY_LIMIT_4X)
}

/// A quorum queue's delivery limit from what a listing says of it (`None`: no limit): on 4.x
/// [`delivery_limit_4x`], before 4.0 only what an argument or a policy sets (3.x has no
/// default, and its listing never says the limit; issue 17, case 5). A negative limit is none.
pub fn delivery_limit(q: &RawQueue, since_4_0: bool) -> Option<i64> {
    let limit = if since_4_0 { Some(delivery_limit_4x(q)) } else { configured_delivery_limit(q) };
    limit.filter(|l| *l >= 0)
}

/// The delivery limit an argument or a policy sets: the lower of the two, unless either is
/// negative (no limit), which then wins, as measured on 4.0.5.
fn configured_delivery_limit(q: &RawQueue) -> Option<i64> {
    let empty = Map::new();
    let args = q.arguments.as_deref().unwrap_or(&empty);
    configured_delivery_limit_of(args, q.effective_policy_definition.as_deref().unwrap_or(&empty))
}

/// As `configured_delivery_limit`, from a queue's arguments and effective policy; negative is
/// "no limit".
pub fn configured_delivery_limit_of(args: &Map<String, Value>, policy: &Map<String, Value>) -> Option<i64> {
    let argument = args.get("x-delivery-limit").and_then(Value::as_i64);
    let policy = policy.get("delivery-limit").and_then(Value::as_i64);
    match (policy, argument) {
        (Some(p), Some(a)) if p < 0 || a < 0 => Some(p.max(a)),
        (Some(p), Some(a)) => Some(p.min(a)),
        (Some(one), None) | (None, Some(one)) => Some(one),
        (None, None) => None,
    }
}

/// Whether a broker of this version (major, minor) counts a message given back with
/// `basic.nack` and requeue, which is how warren gives back what it read, as a delivery toward a
/// quorum queue's delivery limit. Every version before 4.3 does (DOMAIN.md §5, §8). 4.3 counts
/// only failed deliveries: measured on 4.3.6 with a limit of 2, a message nacked five times
/// stayed (its `x-acquired-count` rose to 4, no `x-delivery-count` appeared), while rejecting it,
/// or closing the channel that held it unacked, dropped it on the third time (DOMAIN.md §10).
/// An unknown version counts: holding a message too early loses nothing.
pub fn hand_backs_count(version: Option<(u32, u32)>) -> bool {
    version.is_none_or(|v| v < (4, 3))
}

/// The delivery limit that warren's own reads of a quorum queue count toward at this moment:
/// the queue's limit from its arguments and the policies as they stand, and 4.x's default of
/// 20, on a broker that counts hand-backs (`hand_backs_count`). `None`: not a quorum queue, no
/// limit, no such queue, or a broker (4.3+) on which reading and giving back costs nothing
/// toward the limit. Read before every read of a queue, never from the last poll: a policy
/// applied half a second before three snapshots let the broker drop 5 messages (issue 16,
/// case 2).
pub async fn hand_back_limit_now(
    client: &ManagementClient,
    vhost: &str,
    name: &str,
) -> Result<Option<i64>, BrokerError> {
    let Some(queue) = queue_now(client, vhost, name).await? else { return Ok(None) };
    if queue.kind.as_deref() != Some("quorum") {
        return Ok(None);
    }
    let (overview, _) = client.get::<super::management::Overview>("api/overview?columns=rabbitmq_version").await?;
    let version = overview.major_minor();
    if !hand_backs_count(version) {
        return Ok(None);
    }
    // Unknown version: assume the newer broker's default rather than no limit. Not the answer's
    // `delivery_limit`: the management database updates it seconds late.
    let since_4_0 = version.is_none_or(|(major, _)| major >= 4);
    Ok(delivery_limit(&queue, since_4_0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Warren gives back what it read with `basic.nack`: before 4.3 that counts toward a quorum
    /// queue's delivery limit, from 4.3 on it does not (DOMAIN.md §10).
    #[test]
    fn hand_backs_count_before_4_3_only() {
        assert!(hand_backs_count(Some((3, 10))));
        assert!(hand_backs_count(Some((4, 0))));
        assert!(hand_backs_count(Some((4, 2))));
        assert!(!hand_backs_count(Some((4, 3))));
        assert!(!hand_backs_count(Some((5, 0))));
        assert!(hand_backs_count(None), "unknown: the careful answer");
        let overview: super::super::management::Overview =
            serde_json::from_value(json!({"rabbitmq_version": "4.3.6"})).unwrap();
        assert_eq!(overview.major_minor(), Some((4, 3)));
        let odd: super::super::management::Overview = serde_json::from_value(json!({"rabbitmq_version": "4"})).unwrap();
        assert_eq!(odd.major_minor(), None);
    }

    fn queue(name: &str, kind: &str, policy: Option<&str>) -> RawQueue {
        serde_json::from_value(json!({"name": name, "vhost": "/", "type": kind, "policy": policy})).unwrap()
    }

    fn policy(name: &str, pattern: &str, apply_to: &str, priority: i64, definition: Value) -> Policy {
        serde_json::from_value(json!({
            "name": name, "pattern": pattern, "apply-to": apply_to, "priority": priority, "definition": definition
        }))
        .unwrap()
    }

    #[test]
    fn the_named_policy_and_the_operator_policy_merge_as_the_broker_does() {
        let mut queues = vec![queue("orders", "quorum", Some("dlx")), queue("audit", "classic", None)];
        let policies =
            [policy("dlx", "^orders$", "queues", 0, json!({"dead-letter-exchange": "dlx", "max-length": 100}))];
        let operators = [
            policy("cap", ".*", "all", 0, json!({"max-length": 50, "delivery-limit": 5})),
            policy("quorum-only", "^orders", "quorum_queues", 1, json!({"max-length": 500, "delivery-limit": 3})),
        ];
        let resolver = Resolver::new(&policies, &operators);
        assert_eq!(resolver.unreadable(), 0);
        resolver.apply(&mut queues);
        let orders = queues[0].effective_policy_definition.as_deref().unwrap();
        // The higher-priority operator policy applies; its smaller delivery limit wins, the
        // user's smaller max-length stays.
        assert_eq!(orders.get("dead-letter-exchange"), Some(&json!("dlx")));
        assert_eq!(orders.get("max-length"), Some(&json!(100)));
        assert_eq!(orders.get("delivery-limit"), Some(&json!(3)));
        let audit = queues[1].effective_policy_definition.as_deref().unwrap();
        assert_eq!(audit.get("max-length"), Some(&json!(50)));
    }

    #[test]
    fn the_4x_delivery_limit_resolves_argument_policy_and_default() {
        let with = |args: Value, policy: Value| {
            let mut q: RawQueue =
                serde_json::from_value(json!({"name": "q", "type": "quorum", "arguments": args})).unwrap();
            q.effective_policy_definition = policy.as_object().cloned().map(Arc::new);
            delivery_limit_4x(&q)
        };
        assert_eq!(with(json!({}), json!(null)), 20);
        assert_eq!(with(json!({"x-delivery-limit": 9}), json!({"delivery-limit": 30})), 9);
        assert_eq!(with(json!({"x-delivery-limit": -1}), json!({"delivery-limit": 3})), 3);
        assert_eq!(with(json!({"x-delivery-limit": -1}), json!(null)), -1);
    }

    #[test]
    fn a_listing_with_effective_policies_is_left_alone_and_bad_patterns_match_nothing() {
        let mut q = queue("orders", "classic", Some("p"));
        q.effective_policy_definition = Some(Arc::new(json!({"max-length": 1}).as_object().unwrap().clone()));
        let mut queues = vec![q, queue("other", "classic", None)];
        let operators = [policy("broken", "(", "all", 0, json!({"max-length": 2}))];
        let resolver = Resolver::new(&[], &operators);
        assert_eq!(resolver.unreadable(), 1);
        resolver.apply(&mut queues);
        assert_eq!(queues[0].effective_policy_definition.as_deref().unwrap().get("max-length"), Some(&json!(1)));
        assert!(queues[1].effective_policy_definition.is_none());
    }

    fn limited(args: Value, policy: Value) -> RawQueue {
        let mut q: RawQueue = serde_json::from_value(serde_json::json!({"name": "t", "vhost": "/"})).unwrap();
        q.arguments = args.as_object().cloned().map(Arc::new);
        q.effective_policy_definition = policy.as_object().cloned().map(Arc::new);
        q
    }

    /// Issue 16 (4): a length-limited target that drops its head when full took 1,000
    /// confirmed copies and kept 100.
    #[test]
    fn overflow_comes_from_arguments_and_policy() {
        assert_eq!(overflow(&limited(json!({}), json!({}))), Overflow::Unlimited);
        assert_eq!(
            overflow(&limited(json!({"x-max-length": 100}), json!({}))),
            Overflow::DropHead { limit: "at most 100 messages".into() },
            "drop-head is the default"
        );
        assert_eq!(
            overflow(&limited(json!({"x-max-length": 100, "x-overflow": "reject-publish"}), json!({}))),
            Overflow::RejectPublish { limit: "at most 100 messages".into() }
        );
        assert_eq!(
            overflow(&limited(json!({}), json!({"max-length-bytes": 1000, "overflow": "reject-publish-dlx"}))),
            Overflow::RejectPublish { limit: "at most 1000 bytes of messages".into() }
        );
        assert_eq!(
            overflow(&limited(json!({"x-max-length": 100}), json!({"max-length": 10, "overflow": "reject-publish"}))),
            Overflow::RejectPublish { limit: "at most 10 messages".into() },
            "the lower limit; the policy's overflow where the argument sets none"
        );
        assert_eq!(
            overflow(&limited(
                json!({"x-overflow": "drop-head"}),
                json!({"max-length": 5, "overflow": "reject-publish"})
            )),
            Overflow::DropHead { limit: "at most 5 messages".into() },
            "the argument's overflow wins"
        );
    }

    #[test]
    fn expiry_comes_from_arguments_and_policy() {
        assert_eq!(expiry(&limited(json!({"x-max-length": 5}), json!({}))), None);
        assert_eq!(
            expiry(&limited(json!({"x-message-ttl": 500}), json!({}))).as_deref(),
            Some("a message TTL of 500 ms")
        );
        assert_eq!(
            expiry(&limited(json!({}), json!({"message-ttl": 0, "expires": 60000}))).as_deref(),
            Some("a message TTL of 0 ms and an expiry of 60000 ms when unused")
        );
    }
}
