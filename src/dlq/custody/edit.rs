//! An edited copy of one held record: an admin changes its body or headers, and the copy is
//! published with confirms and `mandatory` under the same claim a replay makes, so no replay
//! takes the record meanwhile, and marked replayed only once confirmed.

use std::collections::HashMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::copy::{decode_properties, encode_properties, with_custody_id, CUSTODY_ID_HEADER};
use super::replay::{claim, settle, CustodyTarget};
use crate::broker::management::ManagementClient;
use crate::config::BrokerConfig;
use crate::dlq::mover::{connect, peeked_parts};
use crate::dlq::publish::{Identify, Publisher};
use crate::dlq::target::Targets;
use crate::storage::custody::StoredMessage;
use crate::storage::Store;

/// An admin's change to one record, replayed as a new copy (issue 18, must-have 5; off unless
/// the queue's `[[custody]]` rule says `edit = true`).
#[derive(Debug, Clone, Default, Deserialize, Serialize, utoipa::ToSchema)]
#[schema(as = CustodyEdit)]
pub struct Edit {
    /// The new body, as text; none: unchanged.
    #[serde(default)]
    pub body: Option<String>,
    /// Every header, as the browser shows them (a header left as it was keeps its AMQP type);
    /// none: unchanged.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub headers: Option<serde_json::Map<String, serde_json::Value>>,
    #[serde(default)]
    pub target: CustodyTarget,
    /// As [`ReplayRequest::accept_drop_head`](super::ReplayRequest::accept_drop_head).
    #[serde(default)]
    pub accept_drop_head: bool,
    /// As [`ReplayRequest::accept_stranding`](super::ReplayRequest::accept_stranding).
    #[serde(default)]
    pub accept_stranding: bool,
}

/// What an edit changed: each header added, changed or removed (name, before, after), and the
/// body before and after when it changed (as text, lossy for bytes that are not UTF-8).
#[derive(Debug, Clone, Default, Serialize, utoipa::ToSchema)]
#[schema(as = CustodyEditDiff)]
pub struct EditDiff {
    pub headers: Vec<(String, Option<serde_json::Value>, Option<serde_json::Value>)>,
    pub body: Option<(String, String)>,
}

/// Publishes an edited copy of held record `id` to its target (checked first), with confirms
/// and `mandatory`. The record is claimed first, so no replay takes it meanwhile; once the copy
/// is confirmed it is marked replayed (`replayed_to` says it was an edited copy) and kept like
/// any replayed record. Returns where the copy went and what changed.
pub async fn edit_and_replay(
    store: &Store,
    broker: &BrokerConfig,
    (vhost, queue): (&str, &str),
    id: i64,
    edit: &Edit,
    (job, replica, stranding): (&str, &str, HashMap<String, String>),
) -> Result<(String, EditDiff), String> {
    let StoredMessage { record, properties, body: old_body, .. } = store
        .custody_message((&broker.name, vhost, queue), id)
        .await
        .map_err(|e| e.to_string())?
        .ok_or_else(|| format!("no record {id} in the custody of {queue:?}"))?;
    if record.state != "held" {
        return Err(format!("record {id} is {}: only a held record is edited and replayed", record.state));
    }
    let old = decode_properties(&properties)?;
    let to = match &edit.target {
        CustodyTarget::Queue(name) => name.clone(),
        CustodyTarget::OriginalQueue => record
            .original_queue
            .ok_or("no x-death or framework header names the queue it died in: name a target queue")?,
    };
    if to == queue {
        return Err("its target is this queue, which is in custody".to_string());
    }
    let old_shown = peeked_parts(("", ""), false, &old, &[], 0).properties;
    let empty = serde_json::Map::new();
    let old_headers_shown = old_shown.get("headers").and_then(|h| h.as_object()).unwrap_or(&empty);
    let mut diff = EditDiff::default();
    let mut properties = old.clone();
    if let Some(new) = &edit.headers {
        let table =
            crate::dlq::readable::headers_edited(&old.headers().clone().unwrap_or_default(), old_headers_shown, new)?;
        let mut names: Vec<&String> = old_headers_shown.keys().chain(new.keys()).collect();
        names.sort();
        names.dedup();
        for name in names {
            let (before, after) = (old_headers_shown.get(name), new.get(name));
            if before != after {
                diff.headers.push((name.clone(), before.cloned(), after.cloned()));
            }
        }
        properties = properties.with_headers(table);
    }
    let body = match &edit.body {
        Some(text) if text.as_bytes() != old_body.as_slice() => {
            diff.body = Some((String::from_utf8_lossy(&old_body).into_owned(), text.clone()));
            text.clone().into_bytes()
        }
        _ => old_body,
    };
    encode_properties(&properties)?;

    // The same checks as every other path that puts messages back (`target`): a full target that
    // drops its oldest would confirm the copy and drop another message (issue 29, case 1).
    let mut targets = Targets::new(ManagementClient::new(broker), vhost, edit.accept_drop_head).refusing(stranding);
    targets.check(&to).await?;
    let connection = connect(broker, vhost).await.map_err(|e| e.to_string())?;
    if claim(store, (job, replica), &[id]).await.map_err(|e| e.to_string())?.is_empty() {
        let _ = connection.close(200, "claimed elsewhere".into()).await;
        return Err(format!("record {id} was claimed by another replay meanwhile"));
    }
    let published = async {
        let mut publisher =
            Publisher::open(&connection, Identify::Header(CUSTODY_ID_HEADER)).await.map_err(|e| e.to_string())?;
        let route = ("", to.as_str(), to.clone());
        let settled = publisher.send_one((), route, Arc::new(body), with_custody_id(properties, id)).await;
        publisher.close("edited copy replayed").await;
        settled?.outcome
    }
    .await;
    let _ = connection.close(200, "edited copy replayed".into()).await;
    match published {
        Ok(()) => {
            settle(store, &[(id, format!("{to} (an edited copy)"))], &[]).await.map_err(|e| e.to_string())?;
            Ok((to, diff))
        }
        Err(why) => {
            settle(store, &[], &[id]).await.map_err(|e| e.to_string())?;
            Err(why)
        }
    }
}
