//! The checks every path that puts messages back into the broker makes before its first publish:
//! a move or requeue (`mover`), a custody replay, an edited copy and a release (`custody`). One
//! set of rules, so that a path added later cannot forget one (issue 29, case 1: custody replayed
//! 1,000 records into a queue holding at most 100 and marked all 1,000 replayed; the broker kept
//! the newest 100).
//!
//! A target is refused when:
//! - it does not exist: a publish through the default exchange to a missing queue is confirmed
//!   and returned, and some paths only learn that from the return;
//! - it holds a length or byte limit with overflow `drop-head` (the broker's default): the broker
//!   confirms every copy and then drops the oldest messages to make room (DOMAIN.md §8), so a
//!   confirm no longer means the copy is kept. Only a user who confirmed that risk
//!   (`accept_drop_head`) may send there;
//! - copies would stay there for good (`stranding`: a wait queue whose expiry no longer applies
//!   to a dead letter), as the last poll saw it, and the user did not accept that;
//! - it cannot be checked (the management API does not answer): nothing is sent on a guess;
//! - the broker does not let warren's user write to the exchange the copies go through (for a
//!   queue, the default exchange, which the broker checks as `amq.default`: measured on 3.10.8).
//!   Only an administrator may read permissions (`/api/permissions/{vhost}/{user}` answers 401
//!   to a `monitoring` user); for any other user the broker's own refusal is the check: it
//!   closes the channel at the first publish, before anything is acked, and the action fails
//!   with its words.
//!
//! A target that refuses publishes when full (`reject-publish`) is fine: it nacks the copy, and
//! every path treats a nack as a failure that leaves the message where it was
//! ([`refused_by_broker`]).

use std::collections::HashMap;

use lapin::types::{AMQPValue, FieldTable};
use lapin::BasicProperties;
use serde::Deserialize;

use crate::broker::management::{encode_segment, BrokerError, ManagementClient};
use crate::broker::policies::{self, Overflow};

/// The checked targets of one vhost, each asked of the broker once per action.
pub struct Targets {
    management: ManagementClient,
    vhost: String,
    accept_drop_head: bool,
    /// Queues refused because copies would stay there for good (`stranding`), with why.
    stranding: HashMap<String, String>,
    checked: HashMap<String, Result<(), String>>,
    /// What warren's user may write in the vhost, asked once.
    write: Option<Write>,
}

/// What the broker lets warren's user write in the vhost.
enum Write {
    /// Its write permission: a regular expression the broker matches anywhere in a resource's
    /// name (as `re:run`). An empty one is a synonym for `^$`: nothing.
    Pattern(regex::Regex),
    /// No permissions in the vhost at all.
    Nothing,
    /// Not known: the management user may not read permissions, or Rust's regex does not read
    /// the pattern. The broker's refusal at the first publish is then the check.
    Unknown,
}

#[derive(Deserialize)]
struct Permission {
    write: String,
}

impl Targets {
    pub fn new(management: ManagementClient, vhost: &str, accept_drop_head: bool) -> Targets {
        Targets {
            management,
            vhost: vhost.to_string(),
            accept_drop_head,
            stranding: HashMap::new(),
            checked: HashMap::new(),
            write: None,
        }
    }

    /// Refuses the queues of `stranding` (queue name to why copies would stay there for good).
    pub fn refusing(mut self, stranding: HashMap<String, String>) -> Targets {
        self.stranding = stranding;
        self
    }

    /// Whether warren's user may publish to `exchange` ("" is the default exchange); `Err` says
    /// why not, and that nothing was sent.
    pub async fn check_write(&mut self, exchange: &str) -> Result<(), String> {
        let resource = if exchange.is_empty() { "amq.default" } else { exchange };
        if self.write.is_none() {
            self.write = Some(self.read_write_permission().await);
        }
        let user = self.management.user();
        match self.write.as_ref().expect("set above") {
            Write::Pattern(pattern) if !pattern.is_match(resource) => Err(format!(
                "the broker does not let warren's user {user:?} write to the exchange {resource:?} in this vhost \
                 (its write permission is {:?}); nothing was sent",
                pattern.as_str()
            )),
            Write::Nothing => Err(format!(
                "warren's user {user:?} has no permissions in this vhost, so the broker would refuse every copy; \
                 nothing was sent"
            )),
            _ => Ok(()),
        }
    }

    async fn read_write_permission(&self) -> Write {
        let path =
            format!("api/permissions/{}/{}", encode_segment(&self.vhost), encode_segment(self.management.user()));
        match self.management.get::<Permission>(&path).await {
            Ok((p, _)) if p.write.is_empty() => Write::Pattern(regex::Regex::new("^$").expect("a valid pattern")),
            Ok((p, _)) => regex::Regex::new(&p.write).map_or(Write::Unknown, Write::Pattern),
            Err(BrokerError::Http { status: 404, .. }) => Write::Nothing,
            Err(_) => Write::Unknown,
        }
    }

    /// Whether copies may go to queue `name` through the default exchange; `Err` says why not in
    /// words for the user, and that nothing was sent there.
    pub async fn check(&mut self, name: &str) -> Result<(), String> {
        if let Some(known) = self.checked.get(name) {
            return known.clone();
        }
        if let Some(says) = self.stranding.get(name) {
            return Err(format!(
                "queue {name:?} {says}; confirm the risk (accept_stranding) or pick another target; nothing was sent \
                 there"
            ));
        }
        let checked = match policies::queue_now(&self.management, &self.vhost, name).await {
            Ok(None) => Err(format!("no queue named {name:?} in this vhost; nothing was sent there")),
            Err(e) => Err(format!("could not check the target {name:?} (management API: {e}); nothing was sent there")),
            Ok(Some(queue)) => match policies::overflow(&queue) {
                Overflow::DropHead { limit } if !self.accept_drop_head => Err(format!(
                    "{name:?} holds {limit} and drops its oldest when full (overflow drop-head): the broker would \
                     confirm copies and then drop messages; confirm the risk (accept_drop_head) or pick another target"
                )),
                _ => self.check_write("").await,
            },
        };
        self.checked.insert(name.to_string(), checked.clone());
        checked
    }

    /// The management client the checks use, for callers that ask the broker more.
    pub fn management(&self) -> &ManagementClient {
        &self.management
    }
}

/// Why copies sent to a queue would stay there for good, as the last poll saw the queue, and
/// where to send them instead. One rule for the confirmation page, which states it, and the
/// API, which refuses (409) unless the request accepts it (`accept_stranding`): issue 31,
/// case 4, where an API requeue sent a message into a wait queue it never left.
#[derive(Debug, Clone, PartialEq)]
pub struct Stranding {
    pub queue: String,
    /// The reason, in words that say what it rests on, to follow the queue's name.
    pub says: String,
    /// Where the queue's dead letters go, when that is one queue: the work queue a wait queue
    /// feeds, the suggested target.
    pub instead: Option<String>,
}

/// Whether copies moved from queue `source` to `target` would be stranded there: it is a wait
/// (retry) queue that has no message TTL of its own, so its messages leave only when their
/// per-message expiration runs out, and a dead letter has lost its expiration (the broker
/// strips it when it dead-letters: DOMAIN.md §8); or nothing consumes it and it dead-letters
/// elsewhere than back into `source`, with no TTL and no role saying it processes messages (the
/// same pattern, seen from its consumers). A work queue whose consumers are down is not
/// stranding (its messages wait for them), nor is the usual requeue from a DLQ into the queue
/// that dead-letters into it: a queue whose dead letters go only into the DLQ being read is that
/// DLQ's feeder, even when a reader on the DLQ (warren's own mover, or one a restart left
/// listed for a few seconds) made the roles call it a wait queue feeding a consumed queue.
/// Nor is a queue whose dead letters go only into dead-letter queues (`is_dlq` says which):
/// that is a work queue and its DLQ, as when records imported into another DLQ's custody go
/// back to the queue they died in.
pub fn stranding(
    source: &crate::metrics::QueueView,
    target: &crate::metrics::QueueView,
    is_dlq: &dyn Fn(&str) -> bool,
) -> Option<Stranding> {
    use crate::broker::topology::{message_ttl_ms, QueueRole};
    let info = &target.dead_letters;
    if message_ttl_ms(&target.arguments, &target.effective_policy).is_some() {
        // A queue TTL applies to every copy: they leave on their own.
        return None;
    }
    let onward: Vec<String> = info
        .dead_letter_target
        .as_ref()
        .and_then(|t| t.queues.clone())
        .unwrap_or_default()
        .into_iter()
        .filter(|q| **q != *target.name)
        .collect();
    let instead = (onward.len() == 1).then(|| onward[0].clone());
    let confirmed_work = info.role == QueueRole::Work && !info.work_unconfirmed;
    let feeds_source_dlq = source.dead_letters.role == QueueRole::Dlq && onward.iter().all(|q| **q == *source.name);
    let says = if info.role == QueueRole::Wait && !feeds_source_dlq {
        format!(
            "is a wait (retry) queue ({}); its messages leave only when their per-message expiration runs out, and \
             a dead letter has lost its expiration, so a copy sent there stays there for ever",
            info.role_reason
        )
    } else if target.consumers == Some(0) && onward.iter().any(|q| **q != *source.name && !is_dlq(q)) && !confirmed_work
    {
        format!(
            "has no consumer and dead-letters into {}: it looks like a delayed-retry wait queue, and a copy sent \
             there without its per-message expiration stays there for ever",
            onward.join(", ")
        )
    } else {
        return None;
    };
    Some(Stranding { queue: target.name.to_string(), says, instead })
}

/// Why a copy published from what warren read would differ from the original, if it would:
/// the AMQP parser (vendor/amq-protocol-types) keeps headers nested past its limit as raw
/// bytes, and reads short strings that are not UTF-8 with U+FFFD in place of their bytes. A
/// U+FFFD sent as such is refused too: the message stays where it is, which is safe. The walk
/// is bounded by the parser's nesting limit. Moves leave such a message in its queue; custody
/// intake leaves it unacked in the broker (its copy in the database would differ just the same).
pub fn copy_would_differ(properties: &BasicProperties) -> Option<String> {
    use lapin::types::parsing::{has_replaced_bytes, is_beyond_nesting_limit, MAX_NESTING_DEPTH};
    fn cut(value: &AMQPValue, depth: usize) -> bool {
        is_beyond_nesting_limit(value, depth)
            || match value {
                AMQPValue::FieldTable(t) => t.inner().values().any(|v| cut(v, depth + 1)),
                AMQPValue::FieldArray(a) => a.as_slice().iter().any(|v| cut(v, depth + 1)),
                _ => false,
            }
    }
    fn replaced(value: &AMQPValue) -> bool {
        match value {
            AMQPValue::ShortString(s) => has_replaced_bytes(s),
            AMQPValue::FieldTable(t) => table_replaced(t),
            AMQPValue::FieldArray(a) => a.as_slice().iter().any(replaced),
            _ => false,
        }
    }
    fn table_replaced(table: &FieldTable) -> bool {
        table.inner().iter().any(|(k, v)| has_replaced_bytes(k) || replaced(v))
    }
    let headers = properties.headers().as_ref();
    if headers.is_some_and(|h| h.inner().values().any(|v| cut(v, 1))) {
        return Some(format!(
            "its headers nest deeper than {MAX_NESTING_DEPTH} levels: warren reads them only that far and does \
             not publish an altered copy; it stays in this queue"
        ));
    }
    let p = properties;
    let strings = [
        p.content_type(),
        p.content_encoding(),
        p.correlation_id(),
        p.reply_to(),
        p.expiration(),
        p.message_id(),
        p.kind(),
        p.user_id(),
        p.app_id(),
        p.cluster_id(),
    ];
    if strings.iter().any(|s| s.as_ref().is_some_and(has_replaced_bytes)) || headers.is_some_and(table_replaced) {
        return Some(
            "a property or header holds bytes that are not UTF-8 (or U+FFFD): warren reads them replaced and does \
             not publish an altered copy; it stays in this queue"
                .to_string(),
        );
    }
    None
}

/// Why a copy the broker nacked is not moved: the words every path reports.
pub fn refused_by_broker(to: &str) -> String {
    format!(
        "the broker refused the copy sent to {to} (nack): a full target that rejects publishes (overflow \
         reject-publish), or one that could not store it"
    )
}
