//! Reading the cluster's nodes every poll (`broker::nodes`): one small call, counted with the
//! other cheap calls on the broker page, its answer kept in the live state and in the history.

use chrono::{DateTime, Utc};

use super::{timed, PollCalls, PollError, Poller};
use crate::broker::management::Overview;
use crate::broker::nodes::{Node, RawNode, DISK_READINGS_KEEP_SECS, NODE_COLUMNS};
use crate::history;

impl Poller {
    /// Reads `/api/nodes`, keeps the answer (`self.nodes`) and writes it to the history; returns
    /// the bytes read. A failed read does not fail the poll: the queues are still worth having,
    /// and the nodes page says how old its nodes are and why.
    pub(super) async fn read_nodes(
        &mut self,
        overview: &Overview,
        now: DateTime<Utc>,
        calls: &mut PollCalls,
    ) -> Result<usize, PollError> {
        if !self.nodes_seeded {
            // The disk prediction's readings survive a restart: seeded once from the history.
            let since = now.timestamp() - DISK_READINGS_KEEP_SECS;
            let mut seed = std::collections::HashMap::<String, std::collections::VecDeque<(i64, u64)>>::new();
            for (node, ts, free) in history::nodes::disk_free_since(&self.store, self.broker_id, since).await? {
                seed.entry(node).or_default().push_back((ts, free));
            }
            self.nodes.disk_free_readings = std::sync::Arc::new(seed);
            self.nodes_seeded = true;
        }
        let path = format!("api/nodes?columns={NODE_COLUMNS}");
        let call = self.client.get::<Vec<RawNode>>(&path);
        match timed(&mut self.load, &mut calls.cheap, "management", "/api/nodes", call).await {
            Ok((raw, size)) => {
                let answering = overview
                    .node
                    .as_deref()
                    .map(|n| (n, overview.rabbitmq_version.as_deref(), overview.erlang_version.as_deref()));
                let nodes: Vec<Node> = raw.into_iter().map(|r| Node::from_raw(r, answering)).collect();
                let fence = self.lease()?;
                if !history::nodes::write(&self.store, self.broker_id, now.timestamp(), &nodes, fence.as_ref()).await? {
                    return Err(PollError::LeaseLost);
                }
                self.nodes.observe(nodes, now);
                Ok(size)
            }
            Err(error) => {
                tracing::warn!(broker = %self.broker.name, %error, "reading the nodes failed");
                self.nodes.error = Some(error.to_string());
                Ok(0)
            }
        }
    }
}
