//! Dead letters: the browser of a queue's dead letters (`page.rs`, its snapshot as
//! `snapshot_view.rs` shows it, one message on `message_page.rs`), requeues, moves and purges
//! (`requeue.rs` on the page, `actions.rs` in the API), custody (`custody_forms.rs` on the page,
//! `custody_api.rs` in the API), snapshots in the API (`snapshot.rs`), and following a move
//! (`jobs.rs`).
//!
//! The files import one way, pages and API handlers above what they share: `moves.rs` (starting
//! a move or purge, the queues it would strand), `custody.rs` (custody's actions, audited),
//! `search.rs` (searches within a budget), `snapshot_view.rs`. No handler file imports another
//! handler file, except that the page takes its snapshot with `snapshot.rs`'s `take`.

use axum::routing::{get, post};
use axum::Router;

use crate::state::AppState;

mod actions;
mod custody;
pub mod custody_api;
mod custody_forms;
mod jobs;
mod message_page;
mod moves;
mod page;
mod requeue;
mod search;
pub(crate) mod snapshot;
mod snapshot_view;

pub use requeue::{parse_requeue_form, RequeueForm};
pub use snapshot::TakeRequest;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/dlq/{broker}/{vhost}/{queue}", get(page::page))
        .route("/dlq/{broker}/{vhost}/{queue}/snapshot", post(page::take_form))
        .route("/dlq/{broker}/{vhost}/{queue}/requeue", post(requeue::requeue_form))
        .route("/dlq/{broker}/{vhost}/{queue}/custody/replay", post(custody_forms::custody_replay_form))
        .route("/dlq/{broker}/{vhost}/{queue}/custody/start", post(custody_forms::custody_start_form))
        .route("/dlq/{broker}/{vhost}/{queue}/custody/release", post(custody_forms::custody_release_form))
        .route("/dlq/{broker}/{vhost}/{queue}/messages/{position}", get(message_page::message_page))
        .route("/dlq/{broker}/{vhost}/{queue}/messages/{position}/payload", get(message_page::download))
        .route("/dlq/{broker}/{vhost}/{queue}/custody/{id}", get(message_page::custody_record_page))
        .route("/dlq/{broker}/{vhost}/{queue}/custody/{id}/payload", get(message_page::custody_payload))
        .route("/dlq/{broker}/{vhost}/{queue}/custody/{id}/edit", post(custody_forms::custody_edit_form))
        .route("/dlq/{broker}/{vhost}/{queue}/custody/{id}/delete", post(custody_forms::custody_delete_form))
        .merge(snapshot::router())
        .merge(actions::router())
        .merge(custody_api::router())
        .merge(jobs::router())
}
