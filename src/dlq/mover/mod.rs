//! Moving messages out of a dead-letter queue without ever losing one (DOMAIN.md §6).
//!
//! The only way messages leave a queue here: consume with manual acks, publish the chosen
//! message on a channel in confirm mode with `mandatory`, and ack the original delivery only
//! after the broker confirmed the copy and did not return it as unroutable. Everything not
//! moved is returned to the queue (consumer cancelled first, then one multiple nack), so a
//! crash at any point leaves each message in the source, in the target, or (between the
//! confirm and the ack) in both: at-least-once, never lost.
//!
//! One file per idea; the imports between them point down this list:
//! - `connection`: the AMQP connection to a vhost (the broker's TLS), names as AMQP takes them,
//!   and `MoveError`.
//! - `queue`: a queue as a whole: its ready messages, giving back what was read in order, purge.
//! - `plan`: what to move where, and the plans refused before anything is read.
//! - `report`: what a move did, and its live counters and journal (`Progress`).
//! - `peeked`: a delivery as a snapshot keeps it (payload, properties as JSON) and its identity.
//! - `headers`: what a dead letter's headers say (where it died, where it came from), and the
//!   properties of its copy.
//! - `peek`: a snapshot's read of a queue's head, all given back in order.
//! - `moving`: the move: read, publish with confirms, ack each original after its confirm.
//! - `aside`: where a message read and not moved goes (back at the end, or the holding queue),
//!   and each message's fate recorded. It adds methods to `moving`'s `Mover`, and `moving` names
//!   nothing of it.
//!
//! Everything other code names is re-exported here, as `dlq::mover::...`.

mod aside;
mod connection;
mod headers;
mod moving;
mod peek;
mod peeked;
mod plan;
mod queue;
mod report;

pub use connection::{connect, short_name, MoveError};
pub use headers::{last_death_queue, original_route, replay_properties, REPLAY_HEADER};
pub use moving::move_messages;
pub use peek::{peek, Peeked};
pub use peeked::{peeked, peeked_parts};
pub use plan::{Plan, Selection, Target, Wanted};
pub(in crate::dlq) use queue::ready_sizes;
pub use queue::{purge, queue_ready, ready_count};
pub use report::{Failed, Held, MoveReport, Moved, Progress, ProgressCounts};
