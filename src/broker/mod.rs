//! What the broker says: the clients of RabbitMQ's management API, its Prometheus plugin and
//! its topology (bindings, exchanges, dead-letter routing), and the shapes they answer in.
//! Which of them a poll calls, and for which metric, is the poller's plan
//! (`poller::PollPlan`); nothing here decides cadence or keeps history.

pub mod clients;
pub mod exchanges;
pub mod management;
pub mod nodes;
pub mod policies;
pub mod prometheus;
pub mod topology;
