//! Moving messages out of a dead-letter queue without ever losing one (DOMAIN.md §6).
//!
//! The only way messages leave a queue here: consume with manual acks, publish the chosen
//! message on a channel in confirm mode with `mandatory`, and ack the original delivery only
//! after the broker confirmed the copy and did not return it as unroutable. Everything not
//! moved is returned to the queue (consumer cancelled first, then one multiple nack), so a
//! crash at any point leaves each message in the source, in the target, or (between the
//! confirm and the ack) in both: at-least-once, never lost.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use lapin::message::Delivery;
use lapin::options::{
    BasicAckOptions, BasicCancelOptions, BasicConsumeOptions, BasicGetOptions, BasicNackOptions, BasicQosOptions,
    QueueDeclareOptions,
};
use lapin::types::{AMQPValue, FieldTable, ShortString};
use lapin::uri::AMQPUri;
use lapin::{BasicProperties, Connection, ConnectionProperties};
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use super::fates::Fate;
use super::holding::{self, Holding};
use super::publish::{Identify, Publisher, Settled};
use super::target::{copy_would_differ, Targets};
use crate::broker::management::ManagementClient;
use crate::config::BrokerConfig;

/// warren's own replay counter: 4.x no longer interprets an `x-death` header that a client
/// re-publishes (DOMAIN.md §4), so the number of replays is kept in a header of warren's own.
pub const REPLAY_HEADER: &str = "x-warren-replay-count";

/// Messages read ahead by a whole-queue move (the consumer's prefetch), at most: two batches of
/// copies in flight ([`CONFIRM_WINDOW`]), so the next batch is read and published while the
/// broker confirms the one before.
const PREFETCH: u16 = 2 * CONFIRM_WINDOW as u16;
/// Message bytes a move holds at once, about: what the prefetch window brings in and the copies
/// awaiting their confirm (each kept to match returns). A count alone let 250 messages of
/// 100 MB each into memory at once.
const MOVE_MEMORY: usize = 64 * 1024 * 1024;
/// The prefetch when the queue's message bytes are unknown (management API unreachable, or a
/// broker without message stats): small, since nothing says the messages are.
const PREFETCH_UNKNOWN_SIZE: u16 = 8;
/// Copies in one batch: a batch's originals are acked once every copy of it is confirmed, while
/// the next batch is already being published (two batches in flight at most).
const CONFIRM_WINDOW: usize = 500;
/// A whole-queue move stops after this many messages could not be moved: each one stays unacked
/// (in the prefetch window) until the end, and so many failures mean something is wrong.
const MAX_FAILURES: usize = 100;

/// Which messages to move.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "snake_case")]
pub enum Selection {
    /// The messages a snapshot showed, by identity (`message::identity`): the move takes
    /// exactly those wherever they are by then, gives back anything else it reads, and reports
    /// a selected message it did not find (issue 16, case 5: positions counted at the time of
    /// the move picked messages the user never saw).
    Messages(Vec<Wanted>),
    /// Every message the queue holds when the move starts.
    All,
    /// Every message the queue holds when the move starts that matches the filter; the others
    /// are read and given back in order.
    Matching(Box<super::message::Filter>),
}

/// One message a selection names: the token the snapshot showed for it, which message it is,
/// and where the snapshot showed it.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
pub struct Wanted {
    /// As the snapshot showed it (`SnapshotMessage::fingerprint`): what a report names.
    pub fingerprint: String,
    /// `message::identity`, what the move compares with each delivery; never shown (a digest
    /// of the content).
    #[serde(skip)]
    pub identity: String,
    /// Its position in the snapshot (1 = the oldest).
    pub position: usize,
    pub message_id: Option<String>,
}

/// Where moved messages go.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Default)]
#[serde(rename_all = "snake_case")]
pub enum Target {
    /// The queue the message last died in (`last_death_queue`), through the default exchange.
    #[default]
    OriginalQueue,
    /// The exchange the message was first published to, with its original routing key. Every
    /// other queue bound to that key gets a copy too (DOMAIN.md §6): only on explicit request.
    OriginalExchange,
    /// A queue the user names, through the default exchange.
    Queue(String),
    /// Nowhere: the selected messages are deleted (acked without a copy). Only on request.
    Discard,
}
/// Empties a queue (AMQP queue.purge); returns how many messages it held.
pub async fn purge(broker: &BrokerConfig, vhost: &str, queue: &str) -> Result<u32, MoveError> {
    let connection = connect(broker, vhost).await?;
    let outcome = async {
        let channel = connection.create_channel().await?;
        let purged = channel.queue_purge(short_name("the queue", queue)?, Default::default()).await?;
        channel.close(200, "done".into()).await?;
        Ok::<u32, MoveError>(purged)
    }
    .await;
    if let Err(e) = connection.close(200, "done".into()).await {
        tracing::warn!(error = %e, "closing the purge's AMQP connection");
    }
    outcome
}

#[derive(Debug, Clone, Serialize)]
pub struct Moved {
    pub position: usize,
    pub message_id: Option<String>,
    /// Where the copy went: a queue, or `exchange "x", key "k"`; empty for deleted messages.
    pub to_queue: String,
}

/// A message that could not go back to the source without being dropped, kept in the
/// source's holding queue instead (`holding`).
#[derive(Debug, Clone, Serialize)]
pub struct Held {
    pub position: usize,
    pub message_id: Option<String>,
    pub queue: String,
    /// Its `x-delivery-count` when read: at the source's delivery limit.
    pub delivery_count: i64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Failed {
    pub position: usize,
    pub message_id: Option<String>,
    pub reason: String,
}

/// What a move did. Every message read and not in `moved` went back to the source queue, or,
/// where giving it back would have been its last delivery, to the holding queue (`held`).
#[derive(Debug, Clone, Serialize, Default)]
pub struct MoveReport {
    pub moved: Vec<Moved>,
    pub failed: Vec<Failed>,
    /// Messages read and not moved that are now in the source's holding queue (failed ones
    /// too: those are also in `failed`).
    pub held: Vec<Held>,
    /// Messages read and returned to the source (not selected, or failed).
    pub returned: usize,
    /// Selected messages the move did not find (taken by someone else, or moved further back
    /// than it read), as the snapshot showed them.
    pub not_found: Vec<Wanted>,
    /// The user (or warren's shutdown) stopped the move before it read everything.
    pub cancelled: bool,
    /// Why the move stopped early, when it did.
    pub stopped: Option<String>,
    /// Ready messages left in the source queue at the end (new arrivals included).
    pub left: Option<u32>,
    /// How the move was made, when that needs saying.
    pub note: Option<String>,
}

/// Live counters of a running move, read by the progress page while the move runs, and the
/// journal of what became of each message, which the audit log takes in at every checkpoint.
#[derive(Debug, Default)]
pub struct Progress {
    /// Messages the move expects to read (the queue's depth when it started, or the last
    /// position asked for).
    pub expected: AtomicU64,
    pub read: AtomicU64,
    pub moved: AtomicU64,
    pub failed: AtomicU64,
    journal: std::sync::Mutex<Vec<Fate>>,
}

impl Progress {
    /// The fates recorded since the last call, oldest first.
    pub fn take_journal(&self) -> Vec<Fate> {
        std::mem::take(&mut *self.journal.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// Returns fates that could not be written, ahead of those recorded since.
    pub fn put_back(&self, mut fates: Vec<Fate>) {
        let mut journal = self.journal.lock().unwrap_or_else(|p| p.into_inner());
        fates.append(&mut journal);
        *journal = fates;
    }

    /// Counts and journals what a replay from custody settled, each (record, message id, where
    /// it went or why not); positions number the records in the order they settled.
    pub(super) fn settled(&self, failed: &[(i64, Option<String>, String)], replayed: &[(i64, Option<String>, String)]) {
        for (outcome, counter, records) in [("failed", &self.failed, failed), ("moved", &self.moved, replayed)] {
            for (_, message_id, detail) in records {
                let position = self.read.fetch_add(1, Ordering::Relaxed) as usize + 1;
                Progress::add(counter);
                self.record(Fate::new(position, message_id.as_deref(), outcome, detail));
            }
        }
    }

    fn record(&self, fate: Fate) {
        self.journal.lock().unwrap_or_else(|p| p.into_inner()).push(fate);
    }

    pub fn counts(&self) -> ProgressCounts {
        ProgressCounts {
            expected: self.expected.load(Ordering::Relaxed),
            read: self.read.load(Ordering::Relaxed),
            moved: self.moved.load(Ordering::Relaxed),
            failed: self.failed.load(Ordering::Relaxed),
        }
    }

    fn add(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq, Eq)]
pub struct ProgressCounts {
    pub expected: u64,
    pub read: u64,
    pub moved: u64,
    pub failed: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum MoveError {
    #[error("cannot connect to the broker over AMQP: {0}")]
    Connect(String),
    #[error("AMQP error: {}", amqp_words(.0))]
    Amqp(#[from] lapin::Error),
    #[error("{0}")]
    Refused(String),
}

/// lapin's words, with what a closed channel most often means: the broker closes a channel
/// that makes a publish or read its user may not make, and the operation that meets the closed
/// channel reports only its state, while the broker's reason went to whichever call was in
/// flight (measured: either is what the job sees, by a race).
fn amqp_words(e: &lapin::Error) -> String {
    match e.kind() {
        lapin::ErrorKind::InvalidChannelState(..) => format!(
            "{e}: the broker closed the channel, most often because it refused a publish or read warren's user \
             may not make (write permission on the target's exchange, amq.default for a queue; read on the \
             source); the broker's log names the reason"
        ),
        _ => e.to_string(),
    }
}

/// `name` (a queue, exchange or routing key) as an AMQP short string, or why it cannot be one:
/// lapin's conversion panics past 255 bytes, and names come from URLs and forms.
pub fn short_name(what: &str, name: &str) -> Result<ShortString, MoveError> {
    ShortString::try_new(name)
        .map_err(|_| MoveError::Refused(format!("{what} is {} bytes long; an AMQP name holds at most 255", name.len())))
}

/// What to move where, and what the source queue is.
#[derive(Debug, Clone)]
pub struct Plan {
    pub selection: Selection,
    pub target: Target,
    /// The source's delivery limit when it is a quorum queue that has one.
    pub delivery_limit: Option<i64>,
    /// Quorum queues need messages given back one at a time to keep their order.
    pub quorum: bool,
    /// The user accepted that a target which drops its oldest messages when full may drop
    /// some (`policies::Overflow::DropHead`); without it such a target is refused.
    pub accept_drop_head: bool,
    /// Queues where copies would stay for good, with why (`target::stranding`, from the last
    /// poll), which the user did not accept: refused like any target that fails its check.
    /// Empty when the request accepted that risk.
    pub stranding: HashMap<String, String>,
}

impl Plan {
    /// Refuses, before anything is read, a plan that could make the broker drop messages: on a
    /// quorum queue with a delivery limit, every message read and given back counts toward the
    /// limit (DOMAIN.md §5), so only plans that move every message they read are allowed.
    pub fn check(&self) -> Result<(), MoveError> {
        match &self.selection {
            Selection::Messages(w) if w.is_empty() || w.iter().any(|w| w.position == 0) => {
                return Err(MoveError::Refused("positions start at 1 and at least one message is needed".into()))
            }
            Selection::Messages(w) if w.len() > MAX_POSITIONS => {
                return Err(MoveError::Refused(format!("at most {MAX_POSITIONS} messages at once")))
            }
            _ => {}
        }
        let Some(limit) = self.delivery_limit else { return Ok(()) };
        let reads_past_unmoved = match &self.selection {
            Selection::Messages(w) => {
                let last = w.iter().map(|w| w.position).max().expect("checked not empty");
                !(1..=last).all(|n| w.iter().any(|w| w.position == n))
            }
            Selection::Matching(filter) => !filter.is_empty(),
            Selection::All => false,
        };
        if reads_past_unmoved {
            return Err(MoveError::Refused(format!(
                "this quorum queue has a delivery limit of {limit}: reading past a message without moving it \
                 would count toward that limit and could make the broker drop it; move the head messages in order \
                 or all of them"
            )));
        }
        Ok(())
    }
}

/// Selections are bounded by what a snapshot shows.
const MAX_POSITIONS: usize = 10_000;

/// Connects to `vhost` with the broker's credentials. Over `amqps://` with the broker's AMQP
/// TLS (`tls::EndpointTls`): the same trust store as its HTTP clients, not lapin's default (the
/// operating system's store), and the client certificate when one is set.
pub async fn connect(broker: &BrokerConfig, vhost: &str) -> Result<Connection, MoveError> {
    use lapin::tcp::{AMQPUriTcpExt as _, RustlsConnector};
    let mut uri: AMQPUri = broker.amqp_url.parse().map_err(|e: String| {
        MoveError::Connect(format!("amqp_url is not valid: {}", e.replace(&broker.amqp_url, "<url>")))
    })?;
    uri.vhost = vhost.to_string();
    uri.authority.userinfo.username = broker.user.clone();
    uri.authority.userinfo.password = broker.password.expose().to_string();
    let properties = ConnectionProperties::default().with_connection_name("warren-dlq-mover".into());
    let tls = broker.tls.amqp.clone();
    let connector = Arc::new(RustlsConnector::from(tls.shared_config()));
    let runtime = lapin::runtime::default_runtime()?;
    let (host, port, amqps) =
        (uri.authority.host.clone(), uri.authority.port, uri.scheme == lapin::uri::AMQPScheme::AMQPS);
    // What lapin's own `connect_with_config` does (connect, then the TLS handshake, on the
    // runtime), with warren's rustls configuration instead of lapin's default one.
    let connected = Connection::connector(
        uri,
        runtime,
        async move |uri: AMQPUri, runtime| {
            let amqps = uri.scheme == lapin::uri::AMQPScheme::AMQPS;
            let plain = AMQPUri { scheme: lapin::uri::AMQPScheme::AMQP, ..uri.clone() };
            let stream = plain.connect_async(&runtime).await?;
            if !amqps {
                return Ok(stream);
            }
            Ok(stream.into_rustls(&connector, &uri.authority.host).await?)
        },
        properties,
    );
    let error = match tokio::time::timeout(Duration::from_secs(10), connected).await {
        Err(_) => return Err(MoveError::Connect(format!("{} timed out", broker.amqp_url))),
        Ok(Ok(connection)) => return Ok(connection),
        Ok(Err(error)) => error,
    };
    let problem = match tls.explain(&error) {
        Some(problem) => Some(problem),
        None if amqps && matches!(error.kind(), lapin::ErrorKind::IOError(_)) => tls.diagnose(&host, port).await,
        None => None,
    };
    Err(MoveError::Connect(format!("{}: {}", broker.amqp_url, problem.unwrap_or_else(|| error.to_string()))))
}

fn headers(delivery: &Delivery) -> Option<&std::collections::BTreeMap<ShortString, AMQPValue>> {
    delivery.properties.headers().as_ref().map(FieldTable::inner)
}

fn as_text(value: &AMQPValue) -> Option<String> {
    match value {
        AMQPValue::LongString(s) => Some(String::from_utf8_lossy(s.as_bytes()).into_owned()),
        AMQPValue::ShortString(s) => Some(s.as_str().to_string()),
        _ => None,
    }
}

fn header_string(delivery: &Delivery, key: &str) -> Option<String> {
    as_text(headers(delivery)?.get(key)?)
}

fn header_count(delivery: &Delivery, key: &str) -> i64 {
    properties_count(&delivery.properties, key)
}

/// A quorum queue's count of a message's returns so far (`x-delivery-count`; absent before the
/// first).
fn delivery_count(properties: &BasicProperties) -> i64 {
    properties_count(properties, "x-delivery-count")
}

fn properties_count(properties: &BasicProperties, key: &str) -> i64 {
    match properties.headers().as_ref().and_then(|h| h.inner().get(key)) {
        Some(AMQPValue::LongLongInt(n)) => *n,
        Some(AMQPValue::LongInt(n)) => i64::from(*n),
        Some(AMQPValue::ShortInt(n)) => i64::from(*n),
        Some(AMQPValue::LongUInt(n)) => i64::from(*n),
        _ => 0,
    }
}

/// The queue whose dead-lettering put the message where it is: `x-last-death-queue` (3.13+),
/// else the newest `x-death` entry (the array is newest first), else `x-first-death-queue`.
/// Not the first death: in a delayed-retry topology the first death is the expiry in the wait
/// queue, and a copy sent there stays for ever, its per-message TTL stripped (DOMAIN.md §8).
pub fn last_death_queue(delivery: &Delivery) -> Option<String> {
    let headers = headers(delivery)?;
    let newest_entry = || match headers.get("x-death")? {
        AMQPValue::FieldArray(deaths) => match deaths.as_slice().first()? {
            AMQPValue::FieldTable(t) => t.inner().get("queue").and_then(as_text),
            _ => None,
        },
        _ => None,
    };
    headers
        .get("x-last-death-queue")
        .and_then(as_text)
        .or_else(newest_entry)
        .or_else(|| header_string(delivery, "x-first-death-queue"))
        .filter(|q| !q.is_empty())
}

/// Where the application says a message it republished into an error queue came from
/// (`framework::origin`), for a message the broker never dead-lettered: an `x-death` wins.
fn app_origin(delivery: &Delivery) -> Option<super::framework::Origin> {
    if headers(delivery).is_some_and(|h| h.contains_key("x-death")) {
        return None;
    }
    let properties = properties_json(&delivery.properties);
    super::framework::origin(properties.get("headers").and_then(serde_json::Value::as_object))
}

/// The exchange and routing key a dead-lettered message was first published with: the
/// `x-death` entry of its first-death queue holds the original routing keys. Public, like
/// `replay_properties`, for the fuzz targets: both read headers anyone can publish.
pub fn original_route(delivery: &Delivery) -> Option<(String, String)> {
    let first_queue = header_string(delivery, "x-first-death-queue")?;
    let AMQPValue::FieldArray(deaths) = headers(delivery)?.get("x-death")? else { return None };
    let death = deaths.as_slice().iter().find_map(|d| match d {
        AMQPValue::FieldTable(t) if t.inner().get("queue").and_then(as_text).as_deref() == Some(&first_queue) => {
            Some(t.inner())
        }
        _ => None,
    })?;
    let exchange = death.get("exchange").and_then(as_text)?;
    let AMQPValue::FieldArray(keys) = death.get("routing-keys")? else { return None };
    let key = keys.as_slice().first().and_then(as_text)?;
    Some((exchange, key))
}

/// Why the copy cannot be published, if its content header would not fit one frame of the
/// connection's `frame_max`: a content header is never split, and the broker closes the whole
/// connection over a larger frame. The original may be larger than that (the broker adds
/// `x-death` when it dead-letters a message and sends a frame over its own `frame_max`); the
/// copy leaves the broker's headers out, so most such messages fit again.
fn copy_too_large(copy: &BasicProperties, frame_max: u32) -> Option<String> {
    let size = match lapin::content_header_frame_size(copy) {
        Ok(size) => size,
        Err(e) => return Some(format!("its properties cannot be encoded again ({e}); it stays in this queue")),
    };
    (size > frame_max as usize).then(|| {
        format!(
            "its headers take {size} bytes in a content-header frame, over the broker's frame_max of {frame_max} \
             bytes (a header is never split into frames): the broker would refuse the copy; it stays in this queue"
        )
    })
}

/// The properties of the copy: the original's, without the broker's bookkeeping headers, with
/// warren's replay counter raised.
pub fn replay_properties(delivery: &Delivery) -> BasicProperties {
    let mut headers = holding::copied_headers(&delivery.properties);
    // The counter comes with the message, so its publisher chose it: at the limit it stays there.
    let count = header_count(delivery, REPLAY_HEADER).saturating_add(1);
    headers.insert(ShortString::from(REPLAY_HEADER), AMQPValue::LongLongInt(count));
    delivery.properties.clone().with_headers(headers)
}

/// Moves messages of `queue` in `vhost` as `plan` says. `progress` is updated as messages
/// move; `cancel` stops reading (messages already delivered to warren are still handled).
pub async fn move_messages(
    broker: &BrokerConfig,
    vhost: &str,
    queue: &str,
    plan: &Plan,
    progress: &Progress,
    cancel: &CancellationToken,
) -> Result<MoveReport, MoveError> {
    plan.check()?;
    let prefetch = match plan.selection {
        Selection::All => consumer_prefetch(broker, vhost, queue).await,
        _ => 1, // reads with basic.get: no window
    };
    let connection = connect(broker, vhost).await?;
    let outcome = async {
        let management = ManagementClient::new(broker);
        let mut mover = Mover::open(&connection, management, vhost, queue, plan, progress, prefetch).await?;
        mover.run(cancel).await?;
        mover.finish().await
    }
    .await;
    if let Err(e) = connection.close(200, "done".into()).await {
        tracing::warn!(error = %e, "closing the mover's AMQP connection");
    }
    outcome
}

/// The prefetch for a consumer that reads `queue` whole: as many messages of the queue's
/// average size as fit in [`MOVE_MEMORY`] (from the management API's `message_bytes_ready`).
async fn consumer_prefetch(broker: &BrokerConfig, vhost: &str, queue: &str) -> u16 {
    match ready_sizes(broker, vhost, queue).await {
        Ok(Some((n, bytes))) => prefetch_for(n, bytes),
        Ok(None) => PREFETCH_UNKNOWN_SIZE,
        Err(e) => {
            tracing::warn!(error = %e, queue, "message sizes unknown; the move reads a few at a time");
            PREFETCH_UNKNOWN_SIZE
        }
    }
}

/// A queue's ready messages and their bytes, as the management API counts them (it lags behind
/// the queue by a few seconds); `None` where it does not say (no statistics kept).
pub(super) async fn ready_sizes(
    broker: &BrokerConfig,
    vhost: &str,
    queue: &str,
) -> Result<Option<(u64, u64)>, crate::broker::management::BrokerError> {
    #[derive(Deserialize)]
    struct Sizes {
        messages_ready: Option<u64>,
        message_bytes_ready: Option<u64>,
    }
    let path = format!(
        "api/queues/{}/{}?columns=messages_ready,message_bytes_ready",
        crate::broker::management::encode_segment(vhost),
        crate::broker::management::encode_segment(queue)
    );
    let (sizes, _) = ManagementClient::new(broker).get::<Sizes>(&path).await?;
    Ok(sizes.messages_ready.zip(sizes.message_bytes_ready))
}

/// Prefetch for `messages` ready holding `bytes` in all.
fn prefetch_for(messages: u64, bytes: u64) -> u16 {
    let average = (bytes / messages.max(1)).max(1);
    (MOVE_MEMORY as u64 / average).clamp(1, u64::from(PREFETCH)) as u16
}

/// What the mover keeps of one original delivery (`tag` on the source channel) while its copy
/// is in flight: the publisher hands it back with the copy's fate.
struct Copy {
    tag: u64,
    position: usize,
    message_id: Option<String>,
    /// The original's, to hold it if the copy fails (`Mover::set_aside`).
    properties: BasicProperties,
}

/// Where a message read and not moved went.
enum Aside {
    /// It goes back to the source at the end of the move.
    Kept,
    /// It is in this holding queue, its original acked.
    Held(String),
    /// Giving it back will be its last delivery, and holding it failed: why.
    AtLimit(String),
}

/// An original delivery as the mover sets it aside: its tag on the source channel, and what a
/// copy of it needs.
#[derive(Clone, Copy)]
struct Original<'d> {
    tag: u64,
    data: &'d [u8],
    properties: &'d BasicProperties,
}

impl<'d> Original<'d> {
    fn of(delivery: &'d Delivery) -> Self {
        Original { tag: delivery.delivery_tag, data: &delivery.data, properties: &delivery.properties }
    }

    /// Its `message_id`, or else the id its framework's format holds (Celery's `id` header,
    /// dramatiq's body): what the report and the audit log record.
    fn message_id(&self) -> Option<String> {
        let property = self.properties.message_id().as_ref().map(|s| s.as_str().to_string());
        property.filter(|id| !id.is_empty()).or_else(|| {
            let headers = self.properties.headers().as_ref().map(|t| table_json(t, 0));
            let headers = headers.as_ref().and_then(serde_json::Value::as_object);
            super::framework::recognise(headers, self.data).and_then(|app| app.id)
        })
    }
}

/// Where one message goes.
enum Route {
    Publish { exchange: String, routing_key: String, label: String },
    Discard,
}

/// One move in progress: the source channel (reads and acks), the publisher channel (confirm
/// mode), two batches of copies awaiting confirms, and the deliveries to give back at the end.
struct Mover<'a> {
    connection: &'a Connection,
    queue: &'a str,
    /// `queue` as lapin takes it (checked once, `short_name`).
    queue_name: ShortString,
    plan: &'a Plan,
    progress: &'a Progress,
    source: lapin::Channel,
    /// Copies in flight, in two batches (`publish::Publisher`).
    publisher: Publisher<Copy>,
    prefetch: u16,
    /// While a consumer reads: its window. Copies in flight and messages kept both hold a place
    /// in it, so the copies are settled before it fills.
    window: Option<usize>,
    /// Deliveries read and not moved; returned to the source at the end, in order.
    kept: Vec<u64>,
    report: MoveReport,
    /// Set when a failure means nothing more should be read.
    stop: Option<String>,
    vhost: &'a str,
    /// Each target queue's check (`target::Targets`), made once per move.
    targets: Targets,
    /// The source's holding queue, opened when a message first needs it; or why it cannot be.
    holding: Option<Result<Holding, String>>,
    /// The selected messages not met yet (`Selection::Messages`).
    wanted: Vec<Wanted>,
    /// What is left of the time a filter's regular expression may take over the whole move
    /// (`budget::JOB`): each message is matched on a blocking thread within it.
    matching_left: Duration,
    /// The move's cancel (the user's, or warren's shutdown), which stops a match too.
    cancel: CancellationToken,
}

impl<'a> Mover<'a> {
    async fn open(
        connection: &'a Connection,
        management: ManagementClient,
        vhost: &'a str,
        queue: &'a str,
        plan: &'a Plan,
        progress: &'a Progress,
        prefetch: u16,
    ) -> Result<Mover<'a>, MoveError> {
        let queue_name = short_name("the queue", queue)?;
        let source = connection.create_channel().await?;
        let publisher = Publisher::open(connection, Identify::Content).await?;
        let mut mover = Mover {
            connection,
            queue,
            queue_name,
            plan,
            progress,
            source,
            publisher,
            prefetch,
            window: None,
            kept: Vec::new(),
            report: MoveReport::default(),
            stop: None,
            vhost,
            targets: Targets::new(management, vhost, plan.accept_drop_head).refusing(plan.stranding.clone()),
            holding: None,
            wanted: match &plan.selection {
                Selection::Messages(wanted) => wanted.clone(),
                _ => Vec::new(),
            },
            matching_left: super::budget::JOB,
            cancel: CancellationToken::new(),
        };
        match &plan.target {
            // Fail before reading anything rather than on the first copy.
            Target::Queue(name) => mover.targets.check(name).await.map_err(MoveError::Refused)?,
            Target::OriginalQueue => mover.targets.check_write("").await.map_err(MoveError::Refused)?,
            Target::OriginalExchange | Target::Discard => {}
        }
        if plan.delivery_limit.is_some() {
            holding::check_before_reading(mover.targets.management(), vhost, queue)
                .await
                .map_err(MoveError::Refused)?;
        }
        Ok(mover)
    }

    async fn run(&mut self, cancel: &CancellationToken) -> Result<(), MoveError> {
        self.cancel = cancel.clone();
        // The passive declare fails cleanly if the source does not exist, and bounds the read:
        // messages that arrive during the move are left for the next one.
        let available = ready_count(&self.source, self.queue).await? as usize;
        let to_read = match &self.plan.selection {
            // A selected message only moves toward the head as others leave, unless other
            // readers give back messages ahead of it: reading twice as far as the snapshot
            // showed it covers that, and bounds what a message that is gone costs.
            Selection::Messages(w) => w.iter().map(|w| w.position).max().unwrap_or(0).saturating_mul(2).min(available),
            Selection::All | Selection::Matching(_) => available,
        };
        // What the job page counts "moved" against: the messages selected (a read bound of twice
        // the furthest position made a finished 3-message move read "3 of 6 moved"), else the
        // messages to read.
        let expected = match &self.plan.selection {
            Selection::Messages(w) => w.len(),
            Selection::All | Selection::Matching(_) => to_read,
        };
        self.progress.expected.store(expected as u64, Ordering::Relaxed);
        if to_read == 0 {
            return Ok(());
        }
        if self.plan.selection == Selection::All {
            self.run_consumer(to_read, cancel).await
        } else {
            self.run_gets(to_read, cancel).await
        }
    }

    /// Reads with `basic.get`, one message at a time: a consumer's prefetch window refills as
    /// messages are acked, so the broker would push messages past the last one asked for, and
    /// giving those back counts toward a quorum queue's delivery limit. Selections that skip
    /// messages (by position or by filter) hold the skipped ones unacked, which would also
    /// fill a consumer's window.
    async fn run_gets(&mut self, to_read: usize, cancel: &CancellationToken) -> Result<(), MoveError> {
        self.gets_from(0, to_read, cancel).await
    }

    /// Reads with `basic.get` after `position` messages were read, up to `to_read`.
    async fn gets_from(
        &mut self,
        mut position: usize,
        to_read: usize,
        cancel: &CancellationToken,
    ) -> Result<(), MoveError> {
        while position < to_read && self.stop.is_none() {
            if cancel.is_cancelled() {
                self.report.cancelled = true;
                break;
            }
            if matches!(self.plan.selection, Selection::Messages(_)) && self.wanted.is_empty() {
                break; // every selected message was met
            }
            let Some(message) =
                self.source.basic_get(self.queue_name.clone(), BasicGetOptions { no_ack: false }).await?
            else {
                break; // the queue holds fewer messages than it did
            };
            position += 1;
            self.handle(position, message.delivery).await?;
        }
        Ok(())
    }

    /// Reads a whole queue with a consumer (much faster than one `basic.get` per message). Every
    /// message delivered is moved, so none is given back except those that fail. Those stay
    /// unacked in the consumer's window until the end; once they fill it, no delivery can come,
    /// and the rest is read with `basic.get` (which no window limits).
    async fn run_consumer(&mut self, to_read: usize, cancel: &CancellationToken) -> Result<(), MoveError> {
        self.source.basic_qos(self.prefetch, BasicQosOptions::default()).await?;
        self.window = Some(usize::from(self.prefetch));
        let mut window_full = false;
        let mut consumer = self
            .source
            .basic_consume(
                self.queue_name.clone(),
                "warren-mover".into(),
                BasicConsumeOptions::default(),
                FieldTable::default(),
            )
            .await?;
        let mut position = 0;
        while position < to_read && self.stop.is_none() {
            let next = tokio::select! {
                _ = cancel.cancelled() => { self.report.cancelled = true; break }
                next = tokio::time::timeout(Duration::from_secs(2), consumer.next()) => next,
            };
            match next {
                Ok(Some(delivery)) => {
                    position += 1;
                    self.handle(position, delivery?).await?;
                    if self.kept.len() >= usize::from(self.prefetch) {
                        window_full = true;
                        break;
                    }
                }
                Ok(None) => break, // the broker cancelled the consumer (queue deleted)
                // Nothing for 2 s: the rest was taken by another consumer, or is unacked there.
                Err(_) if ready_count(&self.source, self.queue).await? == 0 => break,
                Err(_) => {}
            }
        }
        // Stop deliveries, then handle those already sent to warren: they are moved like the
        // rest (giving them back would count toward a quorum queue's delivery limit), unless a
        // failure stopped the move, in which case they stay in the source.
        self.source.basic_cancel("warren-mover".into(), BasicCancelOptions::default()).await?;
        while let Ok(Some(delivery)) = tokio::time::timeout(Duration::from_millis(200), consumer.next()).await {
            let delivery = delivery?;
            position += 1;
            if self.stop.is_some() {
                self.set_aside(position, &delivery).await?;
            } else {
                self.handle(position, delivery).await?;
            }
        }
        self.window = None;
        if window_full && self.stop.is_none() && !self.report.cancelled {
            self.gets_from(position, to_read, cancel).await?;
        }
        Ok(())
    }

    /// Whether the move takes this delivery; for a selection by identity, the snapshot's entry
    /// it matched (taken off the list, so that each entry matches one message).
    async fn selected(&mut self, position: usize, delivery: &Delivery) -> Option<Option<Wanted>> {
        match &self.plan.selection {
            Selection::Matching(filter) if filter.regex().is_some() => {
                self.matches_in_budget(filter.as_ref().clone(), position, delivery).await.then_some(None)
            }
            Selection::All => Some(None),
            Selection::Messages(_) => {
                let identity = delivery_identity(delivery);
                let i = self.wanted.iter().position(|w| w.identity == identity)?;
                Some(Some(self.wanted.remove(i)))
            }
            // The filter reads no identity.
            Selection::Matching(filter) => filter
                .matches(&super::message::summarize(position, String::new(), peeked(delivery, usize::MAX)))
                .then_some(None),
        }
    }

    /// Whether `filter`, which holds a regular expression, matches this delivery: on a blocking
    /// thread, within what is left of the move's time for matching. Once that is spent the move
    /// stops, with the reason, and the rest stays in the queue.
    async fn matches_in_budget(
        &mut self,
        filter: super::message::Filter,
        position: usize,
        delivery: &Delivery,
    ) -> bool {
        let summary = super::message::summarize(position, String::new(), peeked(delivery, usize::MAX));
        let budget = super::budget::Budget::new(self.matching_left, &self.cancel, None);
        let started = std::time::Instant::now();
        let matched = budget.run(move |check| filter.matches_within(&summary, Some(check))).await;
        self.matching_left = self.matching_left.saturating_sub(started.elapsed());
        match matched {
            Ok(matched) => matched,
            // Cancelled: the read loop sees it before the next message.
            Err(super::budget::Stopped::Cancelled) => false,
            // Said of the move's whole budget, not of what was left of it for this message.
            Err(super::budget::Stopped::TooSlow(_)) => {
                let stopped = super::budget::Stopped::TooSlow(super::budget::JOB);
                self.stop.get_or_insert_with(|| format!("stopped at message {position}: {stopped}"));
                false
            }
        }
    }

    fn route(&self, delivery: &Delivery) -> Result<Route, String> {
        match &self.plan.target {
            Target::Discard => Ok(Route::Discard),
            Target::Queue(name) => {
                Ok(Route::Publish { exchange: String::new(), routing_key: name.clone(), label: name.clone() })
            }
            Target::OriginalQueue => last_death_queue(delivery)
                .or_else(|| app_origin(delivery).and_then(|o| o.queue))
                .map(|q| Route::Publish { exchange: String::new(), routing_key: q.clone(), label: q })
                .ok_or_else(|| {
                    "no x-death header, and no header of its framework, says which queue it died in: name a target \
                     queue"
                        .to_string()
                }),
            Target::OriginalExchange => original_route(delivery)
                .or_else(|| app_origin(delivery).and_then(|o| o.route))
                .map(|(exchange, routing_key)| Route::Publish {
                    label: format!("exchange {exchange:?}, routing key {routing_key:?}"),
                    exchange,
                    routing_key,
                })
                .ok_or_else(|| {
                    "no x-death entry, and no header of its framework, names the original exchange and routing key"
                        .to_string()
                }),
        }
    }

    fn moved(&mut self, m: Moved) {
        Progress::add(&self.progress.moved);
        self.progress.record(Fate::new(m.position, m.message_id.as_deref(), "moved", &m.to_queue));
        self.report.moved.push(m);
    }

    fn failed(&mut self, f: Failed) {
        Progress::add(&self.progress.failed);
        self.progress.record(Fate::new(f.position, f.message_id.as_deref(), "failed", &f.reason));
        self.report.failed.push(f);
    }

    fn held(&mut self, h: Held) {
        self.progress.record(Fate::new(h.position, h.message_id.as_deref(), "held", &h.queue));
        self.report.held.push(h);
    }

    /// Records a message that cannot be moved for a reason of its own (not the target's): it is
    /// set aside and the move goes on.
    async fn skip(&mut self, position: usize, original: Original<'_>, reason: String) -> Result<(), MoveError> {
        let reason = self.set_aside_failed(position, original, reason).await?;
        self.failed(Failed { position, message_id: original.message_id(), reason });
        Ok(())
    }

    /// Records a message that its target did not take: it is set aside, and a fixed target
    /// that cannot take one message will not take the next, so the move stops.
    async fn fail(&mut self, position: usize, original: Original<'_>, reason: String) -> Result<(), MoveError> {
        let detail = self.set_aside_failed(position, original, reason.clone()).await?;
        self.failed(Failed { position, message_id: original.message_id(), reason: detail });
        if matches!(self.plan.target, Target::Queue(_)) {
            self.stop.get_or_insert(reason);
        } else if self.report.failed.len() >= MAX_FAILURES {
            self.stop.get_or_insert(format!("stopped after {MAX_FAILURES} messages could not be moved"));
        }
        Ok(())
    }

    /// Sets a failed message aside; returns the failure's reason with where the message is now.
    async fn set_aside_failed(
        &mut self,
        position: usize,
        original: Original<'_>,
        reason: String,
    ) -> Result<String, MoveError> {
        Ok(match self.set_aside_original(position, original).await? {
            Aside::Kept => reason,
            Aside::Held(queue) => {
                format!("{reason}; it is in {queue:?}: giving it back would have been its last delivery")
            }
            Aside::AtLimit(why) => format!("{reason}; {why}"),
        })
    }

    /// A delivery read and not moved (not selected, or read after the move stopped).
    async fn set_aside(&mut self, position: usize, delivery: &Delivery) -> Result<(), MoveError> {
        let original = Original::of(delivery);
        if let Aside::AtLimit(reason) = self.set_aside_original(position, original).await? {
            self.failed(Failed { position, message_id: original.message_id(), reason });
        }
        Ok(())
    }

    /// Puts a message read and not moved where it is safe: back in the source at the end, unless
    /// that hand-back would be its last delivery (`holding::last_delivery`): then it is copied to
    /// the holding queue and its original acked. If holding fails, the move stops reading, so no
    /// further message is read only to meet the same end.
    async fn set_aside_original(&mut self, position: usize, original: Original<'_>) -> Result<Aside, MoveError> {
        let count = delivery_count(original.properties);
        if !holding::last_delivery(self.plan.delivery_limit, count) {
            self.kept.push(original.tag);
            self.report.returned += 1;
            return Ok(Aside::Kept);
        }
        match self.hold(original.data, original.properties).await {
            Ok(queue) => {
                self.source.basic_ack(original.tag, BasicAckOptions::default()).await?;
                let message_id = original.message_id();
                self.held(Held { position, message_id, queue: queue.clone(), delivery_count: count });
                Ok(Aside::Held(queue))
            }
            Err(e) => {
                self.kept.push(original.tag);
                self.report.returned += 1;
                let limit = self.plan.delivery_limit.unwrap_or_default();
                let why = format!(
                    "read with delivery count {count} of the limit {limit}, so the broker drops or dead-letters it \
                     when given back; holding it failed: {e}"
                );
                self.stop.get_or_insert_with(|| format!("a message at its delivery limit could not be held: {e}"));
                Ok(Aside::AtLimit(why))
            }
        }
    }

    /// Copies a message into the source's holding queue, opened on first use; returns its name.
    async fn hold(&mut self, data: &[u8], properties: &BasicProperties) -> Result<String, String> {
        if self.holding.is_none() {
            let opened = Holding::open(self.connection, self.targets.management(), self.vhost, self.queue).await;
            self.holding = Some(opened);
        }
        match self.holding.as_mut().expect("opened above") {
            Ok(holding) => holding.hold(data, properties).await.map(|()| holding.queue().to_string()),
            Err(e) => Err(e.clone()),
        }
    }

    async fn handle(&mut self, position: usize, delivery: Delivery) -> Result<(), MoveError> {
        Progress::add(&self.progress.read);
        let tag = delivery.delivery_tag;
        let Some(wanted) = self.selected(position, &delivery).await else {
            // On a queue with a delivery limit every further read costs each message one:
            // rather than search on, stop (only a selection by identity gets here, and only when
            // the queue changed since the snapshot).
            if self.plan.delivery_limit.is_some() {
                self.stop.get_or_insert_with(|| {
                    format!(
                        "message {position} of the queue is not one the snapshot showed there; reading further \
                         would count toward the queue's delivery limit: take a new snapshot"
                    )
                });
            }
            return self.set_aside(position, &delivery).await;
        };
        // What the user saw: a message selected in a snapshot is reported at its place there.
        let position = wanted.map_or(position, |w| w.position);
        let original = Original::of(&delivery);
        let message_id = original.message_id();
        match self.route(&delivery) {
            Err(reason) => self.fail(position, original, reason).await?,
            Ok(Route::Discard) => {
                self.source.basic_ack(tag, BasicAckOptions::default()).await?;
                self.moved(Moved { position, message_id, to_queue: String::new() });
            }
            Ok(Route::Publish { exchange, routing_key, label }) => {
                if let Some(reason) = copy_would_differ(&delivery.properties) {
                    return self.skip(position, original, reason).await;
                }
                // A queue named by the message itself is checked when first met.
                if exchange.is_empty() && !matches!(self.plan.target, Target::Queue(_)) {
                    if let Err(reason) = self.targets.check(&routing_key).await {
                        return self.fail(position, original, reason).await;
                    }
                }
                // The original exchange: the broker checks write permission on it.
                if !exchange.is_empty() {
                    if let Err(reason) = self.targets.check_write(&exchange).await {
                        return self.fail(position, original, reason).await;
                    }
                }
                let replay = replay_properties(&delivery);
                if let Some(reason) = copy_too_large(&replay, self.connection.configuration().frame_max()) {
                    return self.skip(position, original, reason).await;
                }
                let copy = Copy { tag, position, message_id, properties: delivery.properties };
                let route = (exchange.as_str(), routing_key.as_str(), label);
                self.publisher.send(copy, route, Arc::new(delivery.data), replay).await?;
                // Half the window per batch, so that a consumer's next batch can come while the
                // one before is confirmed; half the memory, for the same reason.
                let batch = self.window.map_or(CONFIRM_WINDOW, |w| CONFIRM_WINDOW.min(w / 2).max(1));
                let (copies, bytes) = self.publisher.batch();
                if copies >= batch || bytes >= MOVE_MEMORY / 2 {
                    self.end_batch().await?;
                }
                let unacked = self.publisher.unsettled() + self.kept.len();
                if self.window.is_some_and(|w| unacked >= w) {
                    self.settle_all().await?;
                }
            }
        }
        Ok(())
    }

    /// Ends the batch being published: the batch before it is settled, and this one awaits its
    /// confirms while the next is published.
    async fn end_batch(&mut self) -> Result<(), MoveError> {
        let settled = self.publisher.end_batch().await?;
        self.settle(settled).await
    }

    /// Settles every copy in flight.
    async fn settle_all(&mut self) -> Result<(), MoveError> {
        let settled = self.publisher.settle_all().await?;
        self.settle(settled).await
    }

    /// Acks each original whose copy the broker took and did not return as unroutable; the
    /// others are set aside as failed.
    async fn settle(&mut self, settled: Vec<Settled<Copy>>) -> Result<(), MoveError> {
        let mut safe = Vec::with_capacity(settled.len());
        for Settled { key: copy, to, data, outcome } in settled {
            match outcome {
                Ok(()) => safe.push((copy, to)),
                Err(reason) => {
                    let original = Original { tag: copy.tag, data: &data, properties: &copy.properties };
                    self.fail(copy.position, original, reason).await?
                }
            }
        }
        // Only now are the copies safe: ack their originals. One multiple ack covers every
        // unacked delivery up to its tag, so it is used only when none of those is to be kept
        // (given back at the end); the messages read after the batch have higher tags. It saves
        // one frame per message (its share of the speed-up was not measured on its own).
        let Some(last) = safe.iter().map(|(c, _)| c.tag).max() else { return Ok(()) };
        if self.kept.iter().all(|&kept| kept > last) {
            self.source.basic_ack(last, BasicAckOptions { multiple: true }).await?;
        } else {
            for (copy, _) in &safe {
                self.source.basic_ack(copy.tag, BasicAckOptions::default()).await?;
            }
        }
        for (copy, to) in safe {
            self.moved(Moved { position: copy.position, message_id: copy.message_id, to_queue: to });
        }
        Ok(())
    }

    async fn finish(mut self) -> Result<MoveReport, MoveError> {
        self.settle_all().await?;
        // Delivery tags grow in delivery order; failures were settled after later reads.
        self.kept.sort_unstable();
        if !give_back_in_order(&self.source, self.queue, &self.kept, self.plan.quorum).await? {
            self.report.note.get_or_insert_with(|| {
                "another consumer took messages while the unmoved ones were given back: their order may have changed"
                    .to_string()
            });
        }
        self.report.moved.sort_by_key(|m| m.position);
        for w in &self.wanted {
            self.progress.record(Fate::new(w.position, w.message_id.as_deref(), "not_found", ""));
        }
        self.report.not_found = std::mem::take(&mut self.wanted);
        self.report.stopped = self.stop.take();
        self.report.left = Some(ready_count(&self.source, self.queue).await?);
        self.source.close(200, "done".into()).await?;
        self.publisher.close("done").await;
        if let Some(Ok(holding)) = self.holding.take() {
            holding.close().await;
        }
        Ok(self.report)
    }
}

/// Ready messages of `queue`, or `None` when it does not exist. A failed passive declare closes
/// its channel, hence a channel of its own.
pub async fn queue_ready(connection: &Connection, queue: &str) -> Result<Option<u32>, MoveError> {
    let channel = connection.create_channel().await?;
    match ready_count(&channel, queue).await {
        Ok(n) => {
            channel.close(200, "done".into()).await?;
            Ok(Some(n))
        }
        Err(_) => Ok(None),
    }
}

/// Ready messages in `queue`, from a passive declare (live, unlike the management API's
/// statistics which lag by seconds).
pub async fn ready_count(channel: &lapin::Channel, queue: &str) -> Result<u32, MoveError> {
    let declared = channel
        .queue_declare(
            short_name("the queue", queue)?,
            QueueDeclareOptions { passive: true, ..Default::default() },
            FieldTable::default(),
        )
        .await?;
    Ok(declared.message_count())
}

/// Returns unacked deliveries to their queue, oldest first. Classic queues put a returned
/// message back in its original place, so a nack each, back to back, is enough. Quorum queues apply returns asynchronously: measured
/// on 3.10, a multiple nack, or nacks sent back to back, put part of the messages back in reverse
/// or rotated order; waiting until the queue counts each returned message keeps the order.
///
/// Returns whether the order was kept for certain: `false` when another consumer took messages
/// meanwhile (the count never reached what was given back). The waits stop then: each would
/// last its whole bound (a snapshot of 100 from a queue being drained took 168 s), and the
/// order of a queue others read from is theirs to change anyway.
async fn give_back_in_order(
    channel: &lapin::Channel,
    queue: &str,
    tags: &[u64],
    quorum: bool,
) -> Result<bool, MoveError> {
    let mut expected = ready_count(channel, queue).await?;
    if !quorum {
        for &tag in tags {
            channel.basic_nack(tag, BasicNackOptions { multiple: false, requeue: true }).await?;
        }
        // The queue applies returns after the nacks are sent: wait, so that what the caller
        // counts next includes them.
        return wait_until_counted(channel, queue, expected + tags.len() as u32).await;
    }
    let mut counted = true;
    for &tag in tags {
        channel.basic_nack(tag, BasicNackOptions { multiple: false, requeue: true }).await?;
        expected += 1;
        if counted {
            counted = wait_until_counted(channel, queue, expected).await?;
        }
    }
    Ok(counted)
}

/// Waits until `queue` holds `expected` ready messages; `false` if it did not within 2 s
/// (others consume meanwhile). The messages are back either way, only their place could differ.
async fn wait_until_counted(channel: &lapin::Channel, queue: &str, expected: u32) -> Result<bool, MoveError> {
    let deadline = std::time::Instant::now() + Duration::from_secs(2);
    loop {
        if ready_count(channel, queue).await? >= expected {
            return Ok(true);
        }
        if std::time::Instant::now() >= deadline {
            return Ok(false);
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// How long a snapshot reads at most. The give-back after it no longer waits on consumers, so
/// the answer comes within about 10 s whatever they do (issue 16, must-have 7); a broker slow
/// to serve reads (each read of a quorum queue is a log write) gets a shorter snapshot, which
/// says so.
const PEEK_READ_TIME: Duration = Duration::from_secs(8);
/// The headers and kept payloads a snapshot reads, at most: a message's headers can take up to
/// the AMQP client's frame ceiling (16 MiB, `lapin::INCOMING_FRAME_CEILING`; the broker sends
/// headers past its own frame_max when it adds `x-death`), so a count alone does not bound it.
const PEEK_MEMORY: usize = 64 * 1024 * 1024;

/// What a peek read, and why it stopped early or may show another order, when it did.
pub struct Peeked {
    pub messages: Vec<crate::broker::management::PeekedMessage>,
    /// Each message's identity (`message::identity`), computed on the whole payload.
    pub identities: Vec<String>,
    /// The messages (indices into `messages`) that are no longer in the queue: giving them back
    /// would have been their last delivery, so they are in this holding queue.
    pub held: Vec<usize>,
    pub holding_queue: Option<String>,
    pub note: Option<String>,
}

/// Reads up to `count` messages from the head of `queue` and gives them all back, in order:
/// `basic.get` without ack for each, then a nack for each, oldest first. Unlike the management API's "get
/// messages" (measured on 3.10: it scrambled the order of a quorum queue after one read), this
/// keeps the order for classic and quorum queues alike, and keeps header types. On a quorum
/// queue each read still counts as one delivery; the caller asks the user first. A message read
/// at the queue's `delivery_limit` is not given back, which would make the broker drop it: it
/// goes to the holding queue (`holding`), and the snapshot says so.
pub async fn peek(
    broker: &BrokerConfig,
    vhost: &str,
    queue: &str,
    count: usize,
    payload_limit: usize,
    delivery_limit: Option<i64>,
) -> Result<Peeked, MoveError> {
    if delivery_limit.is_some() {
        holding::check_before_reading(&ManagementClient::new(broker), vhost, queue)
            .await
            .map_err(MoveError::Refused)?;
    }
    let queue_name = short_name("the queue", queue)?;
    let connection = connect(broker, vhost).await?;
    let outcome = async {
        let channel = connection.create_channel().await?;
        let started = std::time::Instant::now();
        let mut messages = Vec::new();
        let mut tags = Vec::new();
        let mut notes = Vec::new();
        let mut held = Vec::new();
        let mut identities = Vec::new();
        let mut holding: Option<Holding> = None;
        let mut kept_bytes = 0;
        while messages.len() < count {
            if started.elapsed() >= PEEK_READ_TIME {
                notes.push(format!(
                    "stopped after {} of {count} messages: reading took longer than {} s",
                    messages.len(),
                    PEEK_READ_TIME.as_secs()
                ));
                break;
            }
            if kept_bytes >= PEEK_MEMORY {
                notes.push(format!(
                    "stopped after {} of {count} messages: their headers and payloads took more than {} MiB",
                    messages.len(),
                    PEEK_MEMORY / (1024 * 1024)
                ));
                break;
            }
            let Some(message) = channel.basic_get(queue_name.clone(), BasicGetOptions { no_ack: false }).await? else {
                break;
            };
            let delivery = message.delivery;
            kept_bytes += delivery.data.len().min(payload_limit)
                + lapin::content_header_frame_size(&delivery.properties).unwrap_or(0);
            messages.push(peeked(&delivery, payload_limit));
            identities.push(delivery_identity(&delivery));
            let count = delivery_count(&delivery.properties);
            if !holding::last_delivery(delivery_limit, count) {
                tags.push(delivery.delivery_tag);
                continue;
            }
            if holding.is_none() {
                let management = ManagementClient::new(broker);
                match Holding::open(&connection, &management, vhost, queue).await {
                    Ok(opened) => holding = Some(opened),
                    Err(e) => {
                        tags.push(delivery.delivery_tag);
                        notes.push(at_limit_not_held(messages.len(), count, &e));
                        break;
                    }
                }
            }
            let holder = holding.as_mut().expect("opened above");
            match holder.hold(&delivery.data, &delivery.properties).await {
                Ok(()) => {
                    channel.basic_ack(delivery.delivery_tag, BasicAckOptions::default()).await?;
                    held.push(messages.len() - 1);
                }
                Err(e) => {
                    tags.push(delivery.delivery_tag);
                    notes.push(at_limit_not_held(messages.len(), count, &e));
                    break;
                }
            }
        }
        let holding_queue = holding.as_ref().map(|h| h.queue().to_string());
        if let (false, Some(queue)) = (held.is_empty(), &holding_queue) {
            notes.push(format!(
                "{} of these messages had been delivered as often as the queue's delivery limit allows: giving them \
                 back would have made the broker drop them, so they are now in {queue:?}, where they can be browsed \
                 and requeued",
                held.len()
            ));
        }
        if let Some(holding) = holding {
            holding.close().await;
        }
        // Always the careful way: the caller does not say whether the queue is a quorum queue.
        if !give_back_in_order(&channel, queue, &tags, true).await? {
            notes.push(
                "another consumer took messages while the snapshot was read: they were given back, their order \
                 in the queue may differ from the snapshot's"
                    .to_string(),
            );
        }
        channel.close(200, "done".into()).await?;
        let note = (!notes.is_empty()).then(|| notes.join("; "));
        Ok::<_, MoveError>(Peeked { messages, identities, held, holding_queue, note })
    }
    .await;
    if let Err(e) = connection.close(200, "done".into()).await {
        tracing::warn!(error = %e, "closing the browser's AMQP connection");
    }
    outcome
}

/// The snapshot's note when a message read at its delivery limit could not be held: the read
/// stops there.
fn at_limit_not_held(position: usize, count: i64, error: &str) -> String {
    format!(
        "stopped at message {position}: it had been delivered {count} times, as often as the queue's delivery limit \
         allows, so giving it back makes the broker drop or dead-letter it, and holding it failed: {error}"
    )
}

/// A delivery's identity (`message::identity`), the same for the snapshot and the move.
fn delivery_identity(delivery: &Delivery) -> String {
    super::message::identity(&delivery.data, &properties_json(&delivery.properties))
}

/// A delivery as the DLQ browser keeps it: at most `payload_limit` payload bytes (text, or
/// base64 when they are not UTF-8) and the properties as JSON. Public for the fuzz targets,
/// which feed it properties and payloads read from arbitrary bytes.
pub fn peeked(delivery: &Delivery, payload_limit: usize) -> crate::broker::management::PeekedMessage {
    let route = (delivery.exchange.as_str(), delivery.routing_key.as_str());
    peeked_parts(route, delivery.redelivered, &delivery.properties, &delivery.data, payload_limit)
}

/// As `peeked`, from a message's parts: (exchange, routing key), whether the broker delivered it
/// before, its properties and its payload.
pub fn peeked_parts(
    (exchange, routing_key): (&str, &str),
    redelivered: bool,
    properties: &BasicProperties,
    data: &[u8],
    payload_limit: usize,
) -> crate::broker::management::PeekedMessage {
    use base64::Engine;
    let kept = &data[..data.len().min(payload_limit)];
    let (payload_encoding, payload) = match std::str::from_utf8(kept) {
        Ok(text) => ("string", text.to_string()),
        // A cut can split a UTF-8 sequence: keep what is valid if the rest is only that cut.
        Err(e) if e.error_len().is_none() && e.valid_up_to() + 4 > kept.len() => {
            ("string", String::from_utf8_lossy(&kept[..e.valid_up_to()]).into_owned())
        }
        Err(_) => ("base64", base64::engine::general_purpose::STANDARD.encode(kept)),
    };
    crate::broker::management::PeekedMessage {
        exchange: exchange.to_string(),
        routing_key: routing_key.to_string(),
        redelivered,
        payload_bytes: data.len() as u64,
        payload_encoding: payload_encoding.to_string(),
        payload,
        properties: properties_json(properties),
    }
}

/// Message properties as JSON, named as the management API names them.
fn properties_json(p: &BasicProperties) -> serde_json::Map<String, serde_json::Value> {
    use serde_json::Value;
    let mut map = serde_json::Map::new();
    let mut put = |key: &str, value: Option<Value>| {
        if let Some(v) = value {
            map.insert(key.to_string(), v);
        }
    };
    let s = |v: &Option<ShortString>| v.as_ref().map(|s| Value::String(s.as_str().to_string()));
    put("content_type", s(p.content_type()));
    put("content_encoding", s(p.content_encoding()));
    put("delivery_mode", p.delivery_mode().map(Value::from));
    put("priority", p.priority().map(Value::from));
    put("correlation_id", s(p.correlation_id()));
    put("reply_to", s(p.reply_to()));
    put("expiration", s(p.expiration()));
    put("message_id", s(p.message_id()));
    put("timestamp", p.timestamp().map(Value::from));
    put("type", s(p.kind()));
    put("user_id", s(p.user_id()));
    put("app_id", s(p.app_id()));
    put("headers", p.headers().as_ref().map(|h| table_json(h, 0)));
    map
}

/// Nested tables deeper than this are shown as a marker, not recursed into.
const MAX_DEPTH: usize = 32;

fn table_json(table: &FieldTable, depth: usize) -> serde_json::Value {
    if depth > MAX_DEPTH {
        return serde_json::Value::String("(nested too deep to show)".into());
    }
    serde_json::Value::Object(
        table.inner().iter().map(|(k, v)| (k.as_str().to_string(), value_json(v, depth + 1))).collect(),
    )
}

fn value_json(v: &AMQPValue, depth: usize) -> serde_json::Value {
    use serde_json::Value;
    match v {
        AMQPValue::Boolean(b) => Value::Bool(*b),
        AMQPValue::ShortShortInt(n) => Value::from(*n),
        AMQPValue::ShortShortUInt(n) => Value::from(*n),
        AMQPValue::ShortInt(n) => Value::from(*n),
        AMQPValue::ShortUInt(n) => Value::from(*n),
        AMQPValue::LongInt(n) => Value::from(*n),
        AMQPValue::LongUInt(n) => Value::from(*n),
        AMQPValue::LongLongInt(n) => Value::from(*n),
        AMQPValue::Float(f) => Value::from(*f),
        AMQPValue::Double(f) => Value::from(*f),
        AMQPValue::DecimalValue(d) => Value::String(format!("{d:?}")),
        AMQPValue::ShortString(s) => Value::String(s.as_str().to_string()),
        AMQPValue::LongString(s) => Value::String(String::from_utf8_lossy(s.as_bytes()).into_owned()),
        AMQPValue::FieldArray(a) => {
            if depth > MAX_DEPTH {
                return Value::String("(nested too deep to show)".into());
            }
            Value::Array(a.as_slice().iter().map(|v| value_json(v, depth + 1)).collect())
        }
        AMQPValue::Timestamp(t) => Value::from(*t),
        AMQPValue::FieldTable(t) => table_json(t, depth),
        AMQPValue::ByteArray(b) => Value::String(format!("{:?}", b.as_slice())),
        AMQPValue::Void => Value::Null,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// lapin 4 takes names as `ShortString`, whose conversion from `&str` panics past 255
    /// bytes: a name from a URL or a form is checked instead, with a reason.
    #[test]
    fn a_name_longer_than_amqp_allows_is_refused_with_a_reason() {
        assert_eq!(short_name("the queue", &"q".repeat(255)).unwrap().as_str().len(), 255);
        let refused = short_name("the queue", &"q".repeat(256)).unwrap_err().to_string();
        assert_eq!(refused, "the queue is 256 bytes long; an AMQP name holds at most 255");
    }

    #[test]
    fn the_prefetch_keeps_a_whole_queue_move_within_its_memory() {
        assert_eq!(prefetch_for(10_000, 10_000 * 200), PREFETCH, "small messages: the full window");
        assert_eq!(prefetch_for(100, 100 * 100 * 1024 * 1024), 1, "100 MB each: one at a time");
        assert_eq!(prefetch_for(100, 100 * 1024 * 1024), 64, "1 MB each");
        assert_eq!(prefetch_for(50, 50 * 4 * 1024 * 1024), 16);
        assert_eq!(prefetch_for(0, 0), PREFETCH, "an empty queue");
        assert_eq!(prefetch_for(1, u64::MAX), 1);
    }

    /// A crash of the `amqp_field_table` fuzz target: anyone who can publish to a DLQ chooses
    /// the replay counter, and raising `i64::MAX` overflowed (a panic in the mover's task).
    #[test]
    fn a_replay_counter_at_its_limit_stays_there() {
        let mut headers = FieldTable::default();
        headers.insert(REPLAY_HEADER.into(), AMQPValue::LongLongInt(i64::MAX));
        let copy = replay_properties(&with_headers(headers));
        let count = copy.headers().as_ref().and_then(|h| h.inner().get(REPLAY_HEADER).cloned());
        assert_eq!(count, Some(AMQPValue::LongLongInt(i64::MAX)));
    }

    fn with_headers(headers: FieldTable) -> Delivery {
        let mut delivery = Delivery::mock(1, "".into(), "final.dlq".into(), false, Vec::new());
        delivery.properties = BasicProperties::default().with_headers(headers);
        delivery
    }

    fn death(queue: &str, reason: &str) -> AMQPValue {
        let mut entry = FieldTable::default();
        entry.insert("queue".into(), AMQPValue::LongString(queue.into()));
        entry.insert("reason".into(), AMQPValue::LongString(reason.into()));
        AMQPValue::FieldTable(entry)
    }

    /// Issue 16 (6): in a delayed-retry topology the first death is the expiry in the wait
    /// queue; the requeue target is the work queue that rejected it last.
    #[test]
    fn a_message_goes_back_to_the_queue_it_last_died_in() {
        let mut headers = FieldTable::default();
        headers.insert("x-first-death-queue".into(), AMQPValue::LongString("work.wait".into()));
        headers.insert(
            "x-death".into(),
            AMQPValue::FieldArray(vec![death("work", "rejected"), death("work.wait", "expired")].into()),
        );
        assert_eq!(last_death_queue(&with_headers(headers.clone())).as_deref(), Some("work"));
        // 3.13+ names it outright.
        headers.insert("x-last-death-queue".into(), AMQPValue::LongString("work.v2".into()));
        assert_eq!(last_death_queue(&with_headers(headers)).as_deref(), Some("work.v2"));
        // Only the first-death header (a copy someone re-published without `x-death`).
        let mut headers = FieldTable::default();
        headers.insert("x-first-death-queue".into(), AMQPValue::LongString("work".into()));
        assert_eq!(last_death_queue(&with_headers(headers)).as_deref(), Some("work"));
        // Nothing says where: no target.
        let mut headers = FieldTable::default();
        headers.insert("x-death".into(), AMQPValue::LongString("not an array".into()));
        assert_eq!(last_death_queue(&with_headers(headers)), None);
    }
}
