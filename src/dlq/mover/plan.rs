//! What to move where: which messages (`Selection`), where to (`Target`), from what kind of
//! queue (`Plan`), and the plans refused before anything is read.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use super::connection::MoveError;

/// Which messages to move.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "snake_case")]
pub enum Selection {
    /// The messages a snapshot showed, by identity (`message::identity`): the move takes
    /// exactly those wherever they are by then, gives back anything else it reads, and reports
    /// a selected message it did not find (issue 16, case 5: positions counted at the time of
    /// the move picked messages the user never saw).
    Messages(Vec<Wanted>),
    /// Every message the queue holds when the move starts.
    All,
    /// Every message the queue holds when the move starts that matches the filter; the others
    /// are read and given back in order.
    Matching(Box<crate::dlq::message::Filter>),
}

/// One message a selection names: the token the snapshot showed for it, which message it is,
/// and where the snapshot showed it.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, utoipa::ToSchema)]
pub struct Wanted {
    /// As the snapshot showed it (`SnapshotMessage::fingerprint`): what a report names.
    pub fingerprint: String,
    /// `message::identity`, what the move compares with each delivery; never shown (a digest
    /// of the content).
    #[serde(skip)]
    pub identity: String,
    /// Its position in the snapshot (1 = the oldest).
    pub position: usize,
    pub message_id: Option<String>,
}

/// Where moved messages go.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Default, utoipa::ToSchema)]
#[schema(as = MoveTarget)]
#[serde(rename_all = "snake_case")]
pub enum Target {
    /// The queue the message last died in (`last_death_queue`), through the default exchange.
    #[default]
    OriginalQueue,
    /// The exchange the message was first published to, with its original routing key. Every
    /// other queue bound to that key gets a copy too (DOMAIN.md §6): only on explicit request.
    OriginalExchange,
    /// A queue the user names, through the default exchange.
    Queue(String),
    /// Nowhere: the selected messages are deleted (acked without a copy). Only on request.
    Discard,
}

/// What to move where, and what the source queue is.
#[derive(Debug, Clone)]
pub struct Plan {
    pub selection: Selection,
    pub target: Target,
    /// The source's delivery limit when it is a quorum queue that has one.
    pub delivery_limit: Option<i64>,
    /// Quorum queues need messages given back one at a time to keep their order.
    pub quorum: bool,
    /// The user accepted that a target which drops its oldest messages when full may drop
    /// some (`policies::Overflow::DropHead`); without it such a target is refused.
    pub accept_drop_head: bool,
    /// Queues where copies would stay for good, with why (`target::stranding`, from the last
    /// poll), which the user did not accept: refused like any target that fails its check.
    /// Empty when the request accepted that risk.
    pub stranding: HashMap<String, String>,
}

impl Plan {
    /// Refuses, before anything is read, a plan that could make the broker drop messages: on a
    /// quorum queue with a delivery limit, every message read and given back counts toward the
    /// limit (DOMAIN.md §5), so only plans that move every message they read are allowed.
    pub fn check(&self) -> Result<(), MoveError> {
        match &self.selection {
            Selection::Messages(w) if w.is_empty() || w.iter().any(|w| w.position == 0) => {
                return Err(MoveError::Refused("positions start at 1 and at least one message is needed".into()))
            }
            Selection::Messages(w) if w.len() > MAX_POSITIONS => {
                return Err(MoveError::Refused(format!("at most {MAX_POSITIONS} messages at once")))
            }
            _ => {}
        }
        let Some(limit) = self.delivery_limit else { return Ok(()) };
        let reads_past_unmoved = match &self.selection {
            Selection::Messages(w) => {
                let last = w.iter().map(|w| w.position).max().expect("checked not empty");
                !(1..=last).all(|n| w.iter().any(|w| w.position == n))
            }
            Selection::Matching(filter) => !filter.is_empty(),
            Selection::All => false,
        };
        if reads_past_unmoved {
            return Err(MoveError::Refused(format!(
                "this quorum queue has a delivery limit of {limit}: reading past a message without moving it \
                 would count toward that limit and could make the broker drop it; move the head messages in order \
                 or all of them"
            )));
        }
        Ok(())
    }
}

/// Selections are bounded by what a snapshot shows.
const MAX_POSITIONS: usize = 10_000;
