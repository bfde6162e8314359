//! Who may do what, and what they did: the gate every request passes (`gate.rs`), logging in
//! and out (`login.rs`), accounts and API tokens (`accounts.rs`), and the audit log as a page
//! and in the API (`audit.rs`). The files import one way: `accounts` uses `login`'s reading of
//! an authentication error; none imports `gate`, which only `web/mod.rs` layers on the routes.

use axum::Router;

use crate::state::AppState;

pub mod accounts;
pub mod audit;
mod gate;
mod login;

pub use gate::gate;
pub use login::safe_next;

pub fn router() -> Router<AppState> {
    Router::new().merge(login::router()).merge(accounts::router()).merge(audit::router())
}
