//! The advisor's acknowledged findings as stored (issue 35, must-have 2): who read a finding,
//! when, why it may stay, and the fingerprint of the evidence they read. Whether an
//! acknowledgement still applies is `advisor::acknowledge`'s: the store only keeps them.

use async_trait::async_trait;
use serde::{Serialize, Serializer};

use super::Result;

/// One acknowledged finding.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct Acknowledgement {
    pub broker: String,
    /// The rule's stable id.
    pub rule: String,
    pub vhost: String,
    /// The queue the finding is about, or its connection when it names no queue.
    pub subject: String,
    /// The fingerprint of the evidence as acknowledged (`Finding::fingerprint`).
    pub fingerprint: String,
    pub reason: String,
    /// Who acknowledged it.
    pub actor: String,
    /// When: unix seconds as stored, RFC 3339 in the API.
    #[serde(serialize_with = "rfc3339")]
    #[schema(value_type = String, format = DateTime)]
    pub at: i64,
}

fn rfc3339<S: Serializer>(at: &i64, to: S) -> std::result::Result<S::Ok, S::Error> {
    match chrono::DateTime::from_timestamp(*at, 0) {
        Some(t) => to.serialize_str(&t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)),
        None => to.serialize_none(),
    }
}

#[async_trait]
pub trait Acknowledgements {
    /// Stores `ack`, replacing an earlier acknowledgement of the same finding (broker, rule,
    /// vhost, subject).
    async fn acknowledge(&self, ack: &Acknowledgement) -> Result<()>;
    /// Removes the acknowledgement of a finding; returns it, or `None` when there was none.
    async fn unacknowledge(
        &self,
        broker: &str,
        rule: &str,
        vhost: &str,
        subject: &str,
    ) -> Result<Option<Acknowledgement>>;
    /// Every acknowledgement of `broker`, by rule, vhost and subject.
    async fn acknowledgements(&self, broker: &str) -> Result<Vec<Acknowledgement>>;
}
