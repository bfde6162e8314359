//! Custody (issue 18): warren takes a DLQ's messages into its own database, where they are read,
//! grouped and filtered without touching the broker (no delivery budget spent, no 1,000-message
//! bound, no race with consumers), and replayed from there.
//!
//! The invariants, each where it is kept:
//! - **Intake never loses a message** (`intake`): a delivery is acked only after its row is
//!   committed (SQLite's `synchronous = FULL`, or PostgreSQL); a commit that fails, or the size budget, stops intake
//!   and hands the batch back to the broker unacked. At worst a duplicate.
//! - **A record is replayed once** (`replay`): claimed first (`held` -> `claimed`, guarded by
//!   the state), marked `replayed` only after its copy's confirm came without a return; a record
//!   left `claimed` by a crash goes back to `held` at the next start. At worst a duplicate.
//! - **What a copy carries is what was taken in** (`copy`): the AMQP-encoded properties (header
//!   types kept) and the body, with the record's id in a header.
//!
//! One file per idea; the imports between them point down this list:
//! - `copy`: the stored encoding of a message's properties, and the copy's custody-id header.
//! - `switch`: which queues are in custody (the rules, an admin's switch) and on what terms.
//! - `store`: a message as a row, rows written in one durable transaction (intake's batches,
//!   imports) and taken out (delete, retention).
//! - `search`: the records a filter matches, in the store and on the budget's threads.
//!
//! The SQL is the store's (`storage::custody`, one implementation per backend); what decides
//! stays here.
//! - `intake`: consuming a queue into the store, acking only what was committed; `Custody`, the
//!   handle of every intake.
//! - `listing`: counts, triage groups and records as the pages and the API show them.
//! - `replay`: claiming, publishing with confirms, marking replayed; `recover` after a crash.
//! - `edit`: an admin's edited copy of one record, replayed under the same claim.
//!
//! Everything other code names is re-exported here, as `dlq::custody::...`.

mod copy;
mod edit;
mod intake;
mod listing;
mod replay;
mod search;
mod store;
mod switch;

pub(in crate::dlq) use copy::with_custody_id;
pub use copy::{decode_properties, encode_properties, CUSTODY_ID_HEADER};
pub use edit::{edit_and_replay, Edit, EditDiff};
pub use intake::{start_intakes, Custody, IntakeState};
pub use listing::{counts_by_queue, error_groups, list, message, Counts, Group, Listing, Variant, VARIANTS_SHOWN};
pub use replay::{recover, replay, CustodySelection, CustodyTarget, ReplayReport, ReplayRequest, ReplayRun};
pub(in crate::dlq) use search::matching;
pub use search::{not_held, Record, SearchError};
pub(in crate::dlq) use store::kept;
pub use store::{delete, fill_error_groups, import, prune_replayed, DeleteError, ImportError, Taken};
pub use switch::{budget, editable, in_custody, is_in_custody, payload_role, rule_for, set_switch, switches, Switch};
