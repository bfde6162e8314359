//! Where the pages are: the paths one wing writes to link to another's pages, kept here so a
//! page links to a queue, its dead letters or a broker's nodes without importing the wing that
//! serves them. Paths are warren's own; `AppState::href` and the templates' `base` put the base
//! path of `public_url` before them.

use crate::broker::management::encode_segment;

/// Where a queue's page is.
pub fn queue_href(broker: &str, vhost: &str, name: &str) -> String {
    format!("/queues/{}/{}/{}", encode_segment(broker), encode_segment(vhost), encode_segment(name))
}

/// Where a queue's dead-letter browser is.
pub fn dlq_href(broker: &str, vhost: &str, queue: &str) -> String {
    format!("/dlq/{}/{}/{}", encode_segment(broker), encode_segment(vhost), encode_segment(queue))
}

/// Where a broker's nodes page is.
pub fn nodes_href(broker: &str) -> String {
    format!("/brokers/{}/nodes", encode_segment(broker))
}
