//! Threshold alerts: rules over per-queue values and broker reachability, evaluated like
//! Prometheus alerting rules. This module is the pure core: the rule model and its validation,
//! the values rules compare, and the evaluator's state machine. Storing rules and states,
//! running the evaluator after each poll and sending notifications live elsewhere.
//!
//! # Rules
//!
//! A [`Rule`] says which queues it watches ([`Scope`]: broker, vhost and queue globs, queue
//! type, DLQs only), which [`Metric`], the condition (`comparator` and `threshold`), how long the
//! condition must hold before the alert fires (`for_secs`), how long a firing alert keeps firing
//! after the condition stopped holding (`keep_firing_for_secs`), a [`Severity`] and an optional
//! description template. The same serde shape is the JSON in the database and a `[[alerts]]`
//! table in the TOML file. [`Rule::validate`] reports problems by field.
//!
//! Patterns are globs (`*`, `?`), or regular expressions written `/.../` that must match the
//! whole name.
//!
//! # Alerts and their phases
//!
//! An alert is one rule applied to one queue (or one broker, for `broker_unreachable`),
//! identified by an [`AlertKey`]. Each evaluation moves it through the Prometheus phases:
//!
//! - inactive → pending when the condition holds; pending → firing once it has held for
//!   `for_secs` (at the first evaluation at or after that, never before; `for_secs = 0` fires at
//!   once, inactive → firing);
//! - pending → inactive when the condition stops holding before that, silently;
//! - firing → resolved once the condition has not held for `keep_firing_for_secs`, counted from
//!   the first evaluation that saw it false; a true reading in between starts that count over,
//!   so a value flapping around the threshold keeps the alert firing.
//!
//! Only pending and firing alerts are kept. [`Transition::notifies`] tells which changes are
//! news (to firing, to resolved).
//!
//! # Missing data
//!
//! A value the broker did not give (`None`: unknown, never 0, as everywhere in `metrics`) and the queues
//! of a broker that does not answer are missing data: the alert neither fires nor resolves, it
//! holds its phase. Its timers keep their start times rather than freeze, as Prometheus keeps
//! an alert's `ActiveAt`: a pending alert whose condition holds again after a gap fires if
//! `for_secs` has passed since it became pending, and a firing alert that reads false again
//! after a gap resolves if `keep_firing_for_secs` has passed since its first false reading.
//! Warren cannot see inside the gap and assumes the condition kept its last known state. While a
//! broker is down its `broker_unreachable` alerts advance instead, so the outage is reported
//! once, by the rule written for it, not as every queue alert at once.
//!
//! # Alerts that end without their condition
//!
//! A firing alert resolves (a pending one goes back to inactive) with a note when its queue is
//! deleted (absent from, or marked deleted in, the queue list of a broker that is up), when its
//! rule is removed, and when the rule no longer covers it (edited scope, queue no longer a
//! DLQ). A broker absent from the input (not polled yet) ends nothing.
//!
//! # Restarts
//!
//! [`AlertState`] is serde: the caller persists [`Evaluator::states`] and rebuilds with
//! [`Evaluator::restore`], after which a firing alert stays firing without a second
//! notification. Only the DLQ inflow readings are not persisted (see [`InflowTracker`]).

mod eval;
pub mod nodes;
pub mod notify;
mod rule;
pub mod runner;
pub mod store;
mod template;
mod value;

pub use eval::{AlertKey, AlertPhase, AlertState, BrokerInput, BrokerValues, Evaluator, Transition};
pub(crate) use rule::id_and_name_problems;
pub use rule::{Comparator, FieldError, Metric, Rule, Scope, Severity, MAX_DURATION_SECS};
pub use template::PLACEHOLDERS;
pub use value::{broker_values, value, InflowTracker};

#[cfg(test)]
mod eval_tests;
#[cfg(test)]
mod testing;
