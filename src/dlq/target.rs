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
//! - it cannot be checked (the management API does not answer): nothing is sent on a guess.
//!
//! A target that refuses publishes when full (`reject-publish`) is fine: it nacks the copy, and
//! every path treats a nack as a failure that leaves the message where it was
//! ([`refused_by_broker`]).

use std::collections::HashMap;

use crate::broker::management::ManagementClient;
use crate::broker::policies::{self, Overflow};

/// The checked targets of one vhost, each asked of the broker once per action.
pub struct Targets {
    management: ManagementClient,
    vhost: String,
    accept_drop_head: bool,
    checked: HashMap<String, Result<(), String>>,
}

impl Targets {
    pub fn new(management: ManagementClient, vhost: &str, accept_drop_head: bool) -> Targets {
        Targets { management, vhost: vhost.to_string(), accept_drop_head, checked: HashMap::new() }
    }

    /// Whether copies may go to queue `name` through the default exchange; `Err` says why not in
    /// words for the user, and that nothing was sent there.
    pub async fn check(&mut self, name: &str) -> Result<(), String> {
        if let Some(known) = self.checked.get(name) {
            return known.clone();
        }
        let checked = match policies::queue_now(&self.management, &self.vhost, name).await {
            Ok(None) => Err(format!("no queue named {name:?} in this vhost; nothing was sent there")),
            Err(e) => Err(format!("could not check the target {name:?} (management API: {e}); nothing was sent there")),
            Ok(Some(queue)) => match policies::overflow(&queue) {
                Overflow::DropHead { limit } if !self.accept_drop_head => Err(format!(
                    "{name:?} holds {limit} and drops its oldest when full (overflow drop-head): the broker would \
                     confirm copies and then drop messages; confirm the risk (accept_drop_head) or pick another target"
                )),
                _ => Ok(()),
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

/// Why a copy the broker nacked is not moved: the words every path reports.
pub fn refused_by_broker(to: &str) -> String {
    format!(
        "the broker refused the copy sent to {to} (nack): a full target that rejects publishes (overflow \
         reject-publish), or one that could not store it"
    )
}
