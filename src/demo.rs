//! `warren demo`: live traffic on a broker so a newcomer sees every number on the dashboard move.
//!
//! Everything lives in one vhost (`warren-demo` by default) so `cleanup` can remove it in one call:
//!
//! ```text
//! orders (direct) --order.created--> orders.fulfillment (classic, work queue, consumer rejects ~15%)
//!                 --order.created--> orders.audit       (classic, consumer slower than inflow)
//!                 --order.backfill-> orders.fulfillment (legacy publisher: no timestamp property)
//!                 --order.alert----> orders.alerts      (quorum, no consumer)
//! a failed order: the consumer republishes it, with confirms, to orders.retry (fanout) ->
//!                orders.fulfillment.retry (TTL 5 s, then dead-lettered back to orders.fulfillment
//!                via the default exchange), with the error in `x-exception-message`
//! after 3 retries the consumer rejects it: orders.fulfillment --dead-letter--> orders.dlx (fanout)
//!                -> orders.fulfillment.dlq
//! ```
//!
//! This is the delayed-retry shape real frameworks declare (DOMAIN.md §8): the final DLQ is the
//! fulfillment queue's dead-letter target, so the topology says truthfully which queue feeds it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, bail, Context};
use futures_util::stream::FuturesUnordered;
use futures_util::StreamExt;
use lapin::message::Delivery;
use lapin::options::{
    BasicAckOptions, BasicCancelOptions, BasicConsumeOptions, BasicPublishOptions, BasicQosOptions, BasicRejectOptions,
    ConfirmSelectOptions, ExchangeDeclareOptions, QueueBindOptions, QueueDeclareOptions,
};
use lapin::types::{AMQPValue, FieldTable, LongString};
use lapin::uri::{AMQPScheme, AMQPUri};
use lapin::{
    BasicProperties, Channel, Confirmation, Connection, ConnectionProperties, Consumer, ExchangeKind, PublisherConfirm,
};
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use rand::Rng;
use tokio::task::{JoinError, JoinSet};
use tokio::time::MissedTickBehavior;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

/// Where the demo runs. Built by the caller from warren's broker config.
#[derive(Debug, Clone)]
pub struct DemoTarget {
    /// Management API base, e.g. `http://127.0.0.1:15672`; a trailing slash is tolerated.
    pub management_url: String,
    pub user: String,
    pub password: String,
    /// AMQP URL of the broker; its vhost part is ignored and replaced by `vhost`.
    pub amqp_url: String,
    /// Demo vhost, `warren-demo` by default. Created by `run`, deleted by `cleanup`.
    pub vhost: String,
}

const ORDERS_EXCHANGE: &str = "orders";
const RETRY_EXCHANGE: &str = "orders.retry";
const DLX_EXCHANGE: &str = "orders.dlx";
const FULFILLMENT_QUEUE: &str = "orders.fulfillment";
const AUDIT_QUEUE: &str = "orders.audit";
const ALERTS_QUEUE: &str = "orders.alerts";
const RETRY_QUEUE: &str = "orders.fulfillment.retry";
const DLQ: &str = "orders.fulfillment.dlq";
const CREATED_KEY: &str = "order.created";
const ALERT_KEY: &str = "order.alert";
const BACKFILL_KEY: &str = "order.backfill";

/// (queue, exchange, routing key). Fanout exchanges ignore the key.
const BINDINGS: [(&str, &str, &str); 6] = [
    (FULFILLMENT_QUEUE, ORDERS_EXCHANGE, CREATED_KEY),
    (FULFILLMENT_QUEUE, ORDERS_EXCHANGE, BACKFILL_KEY),
    (AUDIT_QUEUE, ORDERS_EXCHANGE, CREATED_KEY),
    (ALERTS_QUEUE, ORDERS_EXCHANGE, ALERT_KEY),
    (RETRY_QUEUE, RETRY_EXCHANGE, ""),
    (DLQ, DLX_EXCHANGE, ""),
];

/// One `order.created` per tick = 20 msg/s; alerts and backfill every 10th tick = 2 msg/s each.
const PUBLISH_TICK: Duration = Duration::from_millis(50);
const SIDE_STREAM_EVERY_TICKS: u64 = 10;
/// Beyond this many unconfirmed publishes the broker is struggling: stop adding load.
const MAX_UNCONFIRMED: usize = 500;
const RETRY_DELAY_MS: i32 = 5_000;
const MAX_RETRIES: i64 = 3;
const FULFILLMENT_PREFETCH: u16 = 10;
/// One order in twenty can never be fulfilled, so the DLQ grows by about 1 msg/s.
const POISON_SKU: &str = "GIFT-CARD-LEGACY";
const POISON_SHARE: f64 = 0.05;
/// Transient failures: together with poison orders about 15% of first deliveries are rejected.
const TRANSIENT_FAILURE_SHARE: f64 = 0.10;
/// ~15 msg/s against 20 msg/s inflow, so the audit backlog grows by ~5 msg/s.
const AUDIT_WORK_TIME: Duration = Duration::from_millis(66);
const AUDIT_PREFETCH: u16 = 20;
const PROGRESS_EVERY: Duration = Duration::from_secs(10);
const HTTP_TIMEOUT: Duration = Duration::from_secs(10);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Ctrl-C must feel immediate: tasks get this long, then the connection close gets the same.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(1);
const PERSISTENT: u8 = 2;

/// A vhost name may contain '/', so encode everything but RFC 3986 unreserved characters.
const PATH_SEGMENT: &AsciiSet = &NON_ALPHANUMERIC.remove(b'-').remove(b'.').remove(b'_').remove(b'~');

/// Counters behind the progress line; shared by all demo tasks.
#[derive(Default)]
struct Progress {
    published: AtomicU64,
    publish_failures: AtomicU64,
    acked: AtomicU64,
    retried: AtomicU64,
    dead_lettered: AtomicU64,
}

impl Progress {
    fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    fn log(&self, when: &str) {
        info!(
            "demo {when}: published {}, acked {}, retried {}, dead-lettered {}, publish failures {}",
            self.published.load(Ordering::Relaxed),
            self.acked.load(Ordering::Relaxed),
            self.retried.load(Ordering::Relaxed),
            self.dead_lettered.load(Ordering::Relaxed),
            self.publish_failures.load(Ordering::Relaxed),
        );
    }
}

/// Declares the vhost and topology, then publishes and consumes until `shutdown` is cancelled; then closes connections cleanly.
pub async fn run(target: &DemoTarget, shutdown: CancellationToken) -> anyhow::Result<()> {
    let http = management_client()?;
    prepare_vhost(&http, target).await?;
    let connection = tokio::select! {
        () = shutdown.cancelled() => return Ok(()),
        connection = connect(target) => connection?,
    };
    let outcome = drive_traffic(&connection, &target.vhost, shutdown).await;
    close_connection(&connection).await;
    outcome
}

/// Deletes the demo vhost (and so everything in it). Ok if it does not exist.
pub async fn cleanup(target: &DemoTarget) -> anyhow::Result<()> {
    let http = management_client()?;
    let url = format!("{}/api/vhosts/{}", api_base(target), encode(&target.vhost));
    let action = format!("deleting vhost '{}'", target.vhost);
    let response = http
        .delete(&url)
        .basic_auth(&target.user, Some(&target.password))
        .send()
        .await
        .with_context(|| unreachable_management(target, &action))?;
    if response.status() == reqwest::StatusCode::NOT_FOUND {
        info!("demo vhost '{}' did not exist, nothing to delete", target.vhost);
        return Ok(());
    }
    expect_success(response, target, &action).await?;
    info!("deleted demo vhost '{}'", target.vhost);
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Management API: vhost and permissions

fn management_client() -> anyhow::Result<reqwest::Client> {
    reqwest::Client::builder().timeout(HTTP_TIMEOUT).build().context("building the HTTP client for the management API")
}

fn api_base(target: &DemoTarget) -> &str {
    target.management_url.trim_end_matches('/')
}

fn encode(segment: &str) -> String {
    utf8_percent_encode(segment, PATH_SEGMENT).to_string()
}

fn unreachable_management(target: &DemoTarget, action: &str) -> String {
    format!("could not reach the management API at {} while {action}", api_base(target))
}

/// PUT of a vhost is idempotent, so a second `warren demo` reuses the first one's vhost.
async fn prepare_vhost(http: &reqwest::Client, target: &DemoTarget) -> anyhow::Result<()> {
    let vhost = encode(&target.vhost);
    let description = serde_json::json!({ "description": "warren demo traffic" });
    let action = format!("creating vhost '{}'", target.vhost);
    management_put(http, target, &format!("vhosts/{vhost}"), &description, &action).await?;

    let everything = serde_json::json!({ "configure": ".*", "write": ".*", "read": ".*" });
    let path = format!("permissions/{vhost}/{}", encode(&target.user));
    let action = format!("granting '{}' permissions on vhost '{}'", target.user, target.vhost);
    management_put(http, target, &path, &everything, &action).await?;

    // Demos before issue 17 made orders.dlx the dead-letter exchange of the audit and alerts
    // queues by this policy, so that the DLQ showed in the topology at all; it then claimed to
    // be fed by two queues that never dead-letter into it. A vhost left from such a run loses it.
    let action = format!("removing the old dead-letter policy on vhost '{}'", target.vhost);
    let response = http
        .delete(format!("{}/api/policies/{vhost}/warren-demo-dlx", api_base(target)))
        .basic_auth(&target.user, Some(&target.password))
        .send()
        .await
        .with_context(|| unreachable_management(target, &action))?;
    if response.status() == reqwest::StatusCode::NOT_FOUND {
        return Ok(());
    }
    expect_success(response, target, &action).await
}

async fn management_put(
    http: &reqwest::Client,
    target: &DemoTarget,
    path: &str,
    body: &serde_json::Value,
    action: &str,
) -> anyhow::Result<()> {
    let response = http
        .put(format!("{}/api/{path}", api_base(target)))
        .basic_auth(&target.user, Some(&target.password))
        .json(body)
        .send()
        .await
        .with_context(|| unreachable_management(target, action))?;
    expect_success(response, target, action).await
}

/// Turns a non-2xx answer into an error that tells the operator what to fix.
async fn expect_success(response: reqwest::Response, target: &DemoTarget, action: &str) -> anyhow::Result<()> {
    let status = response.status();
    if status.is_success() {
        return Ok(());
    }
    let base = api_base(target);
    let hint = match status.as_u16() {
        401 => format!("check user/password for '{}'", target.user),
        403 => format!("user '{}' needs the administrator tag", target.user),
        _ => match response.text().await {
            Ok(body) => body.chars().take(300).collect(),
            Err(error) => format!("(body unreadable: {error})"),
        },
    };
    bail!("management API at {base} answered {status} while {action}: {hint}")
}

// ---------------------------------------------------------------------------------------------
// AMQP connection and topology

/// The caller's URL names the broker; the vhost is always the demo's own.
async fn connect(target: &DemoTarget) -> anyhow::Result<Connection> {
    let mut uri: AMQPUri = target.amqp_url.parse().map_err(|error: String| {
        // The parser may echo the whole URL, password included.
        anyhow!("AMQP URL is not valid: {}", error.replace(&target.amqp_url, "<url>"))
    })?;
    uri.vhost = target.vhost.clone();
    let shown = redacted(&uri);
    let properties = ConnectionProperties::default().with_connection_name("warren-demo".into());
    let connection = tokio::time::timeout(CONNECT_TIMEOUT, Connection::connect_uri(uri, properties))
        .await
        .map_err(|_| anyhow!("connecting to RabbitMQ at {shown} timed out after {CONNECT_TIMEOUT:?}"))?
        .map_err(|error| anyhow!("could not connect to RabbitMQ at {shown}: {error}"))?;
    info!("connected to {shown}");
    Ok(connection)
}

/// The URL as it may appear in logs and errors: everything but the password.
fn redacted(uri: &AMQPUri) -> String {
    let scheme = match uri.scheme {
        AMQPScheme::AMQP => "amqp",
        AMQPScheme::AMQPS => "amqps",
    };
    let authority = &uri.authority;
    let user = &authority.userinfo.username;
    let vhost = encode(&uri.vhost);
    format!("{scheme}://{user}@{}:{}/{vhost}", authority.host, authority.port)
}

async fn close_connection(connection: &Connection) {
    match tokio::time::timeout(SHUTDOWN_GRACE, connection.close(200, "warren demo stopped".into())).await {
        Ok(Ok(())) => info!("demo connection closed"),
        Ok(Err(error)) => warn!("closing the demo connection failed: {error}"),
        Err(_) => {
            warn!("closing the demo connection took longer than {SHUTDOWN_GRACE:?}; leaving it");
        }
    }
}

async fn close_channel(channel: &Channel, role: &str) {
    if !channel.status().connected() {
        return;
    }
    if let Err(error) = channel.close(200, "warren demo stopped".into()).await {
        warn!("closing the {role} channel failed: {error}");
    }
}

/// Declares are idempotent as long as the arguments match, which they do on every run.
async fn declare_topology(channel: &Channel, vhost: &str) -> anyhow::Result<()> {
    declare_exchange(channel, ORDERS_EXCHANGE, ExchangeKind::Direct).await?;
    declare_exchange(channel, RETRY_EXCHANGE, ExchangeKind::Fanout).await?;
    declare_exchange(channel, DLX_EXCHANGE, ExchangeKind::Fanout).await?;

    // Rejected orders (those out of retries) dead-letter into the DLQ.
    let to_dlq = [("x-dead-letter-exchange", text(DLX_EXCHANGE))];
    let quorum = [("x-queue-type", text("quorum"))];
    let back_to_work = [
        ("x-message-ttl", AMQPValue::LongInt(RETRY_DELAY_MS)),
        ("x-dead-letter-exchange", text("")),
        ("x-dead-letter-routing-key", text(FULFILLMENT_QUEUE)),
    ];
    let queues: [(&str, &[(&str, AMQPValue)]); 5] = [
        (FULFILLMENT_QUEUE, &to_dlq),
        (AUDIT_QUEUE, &[]),
        (ALERTS_QUEUE, &quorum),
        (RETRY_QUEUE, &back_to_work),
        (DLQ, &[]),
    ];
    for (queue, arguments) in queues {
        declare_queue(channel, queue, arguments).await.with_context(|| {
            format!("if it exists with other arguments, run `warren demo --cleanup --vhost '{vhost}'` and retry")
        })?;
    }
    for (queue, exchange, key) in BINDINGS {
        channel
            .queue_bind(queue.into(), exchange.into(), key.into(), QueueBindOptions::default(), FieldTable::default())
            .await
            .with_context(|| format!("binding queue {queue} to exchange {exchange} with key '{key}'"))?;
    }
    Ok(())
}

async fn declare_exchange(channel: &Channel, name: &str, kind: ExchangeKind) -> anyhow::Result<()> {
    let options = ExchangeDeclareOptions { durable: true, ..Default::default() };
    channel
        .exchange_declare(name.into(), kind, options, FieldTable::default())
        .await
        .with_context(|| format!("declaring exchange {name}"))
}

async fn declare_queue(channel: &Channel, name: &str, arguments: &[(&str, AMQPValue)]) -> anyhow::Result<()> {
    let mut table = FieldTable::default();
    for (key, value) in arguments {
        table.insert((*key).into(), value.clone());
    }
    // Quorum queues must be durable; the others are too so the demo survives a broker restart.
    let options = QueueDeclareOptions { durable: true, ..Default::default() };
    channel.queue_declare(name.into(), options, table).await.with_context(|| format!("declaring queue {name}"))?;
    Ok(())
}

fn text(value: &str) -> AMQPValue {
    AMQPValue::LongString(LongString::from(value))
}

// ---------------------------------------------------------------------------------------------
// Tasks and their lifecycle

async fn drive_traffic(connection: &Connection, vhost: &str, shutdown: CancellationToken) -> anyhow::Result<()> {
    let setup = connection.create_channel().await.context("opening a channel")?;
    declare_topology(&setup, vhost).await?;
    close_channel(&setup, "setup").await;

    let progress = Arc::new(Progress::default());
    // A failing task stops the others without cancelling the caller's token.
    let stop = shutdown.child_token();
    let mut tasks = JoinSet::new();
    tasks.spawn(publish_orders(open_channel(connection).await?, progress.clone(), stop.clone()));
    tasks.spawn(fulfil_orders(
        open_channel(connection).await?,
        open_channel(connection).await?,
        progress.clone(),
        stop.clone(),
    ));
    tasks.spawn(audit_orders(open_channel(connection).await?, progress.clone(), stop.clone()));
    tasks.spawn(report_progress(progress.clone(), stop.clone()));
    info!("demo traffic running in vhost '{vhost}'; {ALERTS_QUEUE} deliberately has no consumer");

    let outcome = tokio::select! {
        // Biased: once stopping, tasks return Ok at once and must not be mistaken for early ends.
        biased;
        () = stop.cancelled() => Ok(()),
        Some(ended) = tasks.join_next() => early_end(ended, &stop),
    };
    stop.cancel();
    drain_tasks(&mut tasks).await;
    progress.log("stopped");
    outcome
}

async fn open_channel(connection: &Connection) -> anyhow::Result<Channel> {
    connection.create_channel().await.context("opening a channel")
}

/// Tasks only return when stopped, so any earlier end is a failure of the demo.
fn early_end(ended: Result<anyhow::Result<()>, JoinError>, stop: &CancellationToken) -> anyhow::Result<()> {
    match ended {
        // The caller may cancel between the task's return and this check.
        Ok(Ok(())) if stop.is_cancelled() => Ok(()),
        Ok(Ok(())) => bail!("a demo task stopped on its own before shutdown"),
        Ok(Err(error)) => Err(error),
        Err(join_error) => Err(anyhow!("a demo task crashed: {join_error}")),
    }
}

async fn drain_tasks(tasks: &mut JoinSet<anyhow::Result<()>>) {
    let deadline = tokio::time::sleep(SHUTDOWN_GRACE);
    tokio::pin!(deadline);
    loop {
        tokio::select! {
            () = &mut deadline => {
                warn!("demo tasks still busy after {SHUTDOWN_GRACE:?}; aborting them");
                tasks.abort_all();
                return;
            }
            ended = tasks.join_next() => match ended {
                None => return,
                Some(Ok(Ok(()))) => {}
                Some(Ok(Err(error))) => warn!("demo task failed while stopping: {error:#}"),
                Some(Err(join_error)) => warn!("demo task crashed while stopping: {join_error}"),
            },
        }
    }
}

async fn report_progress(progress: Arc<Progress>, stop: CancellationToken) -> anyhow::Result<()> {
    let start = tokio::time::Instant::now() + PROGRESS_EVERY;
    let mut ticker = tokio::time::interval_at(start, PROGRESS_EVERY);
    loop {
        tokio::select! {
            () = stop.cancelled() => return Ok(()),
            _ = ticker.tick() => progress.log("progress"),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Publisher

/// One message the publisher is about to send to the `orders` exchange.
struct Outgoing {
    routing_key: &'static str,
    body: Vec<u8>,
    properties: BasicProperties,
}

async fn publish_orders(channel: Channel, progress: Arc<Progress>, stop: CancellationToken) -> anyhow::Result<()> {
    let outcome = publish_until_stopped(&channel, &progress, &stop).await;
    close_channel(&channel, "publisher").await;
    outcome.context("publisher")
}

/// Confirms are awaited concurrently with new publishes: a persistent message is confirmed only
/// after the broker's fsync, and waiting for each one in turn would cap the rate well below 20/s.
async fn publish_until_stopped(channel: &Channel, progress: &Progress, stop: &CancellationToken) -> anyhow::Result<()> {
    channel.confirm_select(ConfirmSelectOptions::default()).await.context("enabling publisher confirms")?;
    // Message ids stay unique across demo runs in the same vhost.
    let run_id = chrono::Utc::now().format("%Y%m%dT%H%M%S").to_string();
    let mut ticker = tokio::time::interval(PUBLISH_TICK);
    ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut pending = FuturesUnordered::new();
    let mut tick: u64 = 0;
    loop {
        tokio::select! {
            biased;
            () = stop.cancelled() => break,
            Some(confirmation) = pending.next(), if !pending.is_empty() => {
                record_confirmation(confirmation, progress)?;
            }
            _ = ticker.tick(), if pending.len() < MAX_UNCONFIRMED => {
                tick += 1;
                for message in messages_for_tick(&run_id, tick) {
                    pending.push(publish(channel, ORDERS_EXCHANGE, message).await?);
                }
            }
        }
    }
    // Settle what is already in flight so the final counts are right, but never hold up Ctrl-C.
    let settle = async {
        while let Some(confirmation) = pending.next().await {
            record_confirmation(confirmation, progress)?;
        }
        anyhow::Ok(())
    };
    match tokio::time::timeout(SHUTDOWN_GRACE / 2, settle).await {
        Ok(settled) => settled,
        Err(_) => Ok(()),
    }
}

/// mandatory=true so a missing binding comes back as a return instead of vanishing.
async fn publish(channel: &Channel, exchange: &str, message: Outgoing) -> anyhow::Result<PublisherConfirm> {
    let options = BasicPublishOptions { mandatory: true, ..Default::default() };
    channel
        .basic_publish(exchange.into(), message.routing_key.into(), options, &message.body, message.properties)
        .await
        .with_context(|| format!("publishing to {exchange} with key {}", message.routing_key))
}

/// True only when the broker took responsibility for the message and routed it somewhere.
fn confirmed_and_routed(confirmation: lapin::Result<Confirmation>) -> anyhow::Result<bool> {
    match confirmation.context("waiting for a publisher confirm")? {
        Confirmation::Ack(None) => Ok(true),
        Confirmation::Ack(Some(returned)) => {
            warn!(
                "message returned unroutable: exchange {}, key {}",
                returned.delivery.exchange, returned.delivery.routing_key
            );
            Ok(false)
        }
        Confirmation::Nack(_) => {
            warn!("broker nacked a publish");
            Ok(false)
        }
        Confirmation::NotRequested => bail!("channel is not in confirm mode"),
    }
}

fn record_confirmation(confirmation: lapin::Result<Confirmation>, progress: &Progress) -> anyhow::Result<()> {
    if confirmed_and_routed(confirmation)? {
        Progress::bump(&progress.published);
    } else {
        Progress::bump(&progress.publish_failures);
    }
    Ok(())
}

fn messages_for_tick(run_id: &str, tick: u64) -> Vec<Outgoing> {
    // The shop stamps every order, so orders.audit (a classic queue) shows an exact age.
    let mut messages = vec![Outgoing {
        routing_key: CREATED_KEY,
        body: order_json(tick, None),
        properties: properties(format!("order-{run_id}-{tick}"), true),
    }];
    match tick % SIDE_STREAM_EVERY_TICKS {
        // Alerts come from two services, only one of which sets the timestamp.
        0 => messages.push(Outgoing {
            routing_key: ALERT_KEY,
            body: order_json(tick, Some("amount above fraud threshold")),
            properties: properties(format!("alert-{run_id}-{tick}"), tick % 20 < SIDE_STREAM_EVERY_TICKS),
        }),
        // A legacy importer never sets the timestamp, so the head of orders.fulfillment
        // is sometimes unstamped and warren has to fall back to an estimated age.
        5 => messages.push(Outgoing {
            routing_key: BACKFILL_KEY,
            body: order_json(tick, None),
            properties: properties(format!("backfill-{run_id}-{tick}"), false),
        }),
        _ => {}
    }
    messages
}

fn properties(message_id: String, stamped: bool) -> BasicProperties {
    let properties = BasicProperties::default()
        .with_message_id(message_id.into())
        .with_content_type("application/json".into())
        .with_delivery_mode(PERSISTENT)
        .with_app_id("warren-demo".into());
    if stamped {
        let now_secs = u64::try_from(chrono::Utc::now().timestamp()).unwrap_or_default();
        properties.with_timestamp(now_secs)
    } else {
        properties
    }
}

fn order_json(order_id: u64, alert: Option<&str>) -> Vec<u8> {
    let mut rng = rand::thread_rng();
    let sku =
        if rng.gen_bool(POISON_SHARE) { POISON_SKU.to_string() } else { format!("SKU-{:04}", rng.gen_range(1..400)) };
    let qty: u32 = rng.gen_range(1..6);
    let unit_cents: u32 = rng.gen_range(199..12_000);
    let amount = f64::from(qty * unit_cents) / 100.0;
    let mut order = serde_json::json!({ "order_id": order_id, "sku": sku, "qty": qty, "amount": amount });
    if let Some(alert) = alert {
        order["alert"] = alert.into();
    }
    order.to_string().into_bytes()
}

// ---------------------------------------------------------------------------------------------
// Consumers

/// The next delivery, or None once the demo is stopping.
async fn next_delivery(consumer: &mut Consumer, stop: &CancellationToken) -> anyhow::Result<Option<Delivery>> {
    tokio::select! {
        biased;
        () = stop.cancelled() => Ok(None),
        next = consumer.next() => match next {
            Some(delivery) => Ok(Some(delivery.context("receiving a delivery")?)),
            None => bail!("the broker ended the consumer on {}", consumer.queue()),
        },
    }
}

async fn start_consumer(channel: &Channel, queue: &str, prefetch: u16) -> anyhow::Result<Consumer> {
    channel
        .basic_qos(prefetch, BasicQosOptions::default())
        .await
        .with_context(|| format!("setting prefetch for {queue}"))?;
    channel
        .basic_consume(
            queue.into(),
            format!("warren-demo-{queue}").into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .with_context(|| format!("consuming from {queue}"))
}

/// Cancel first so the broker stops pushing; closing the channel then requeues what is unacked.
async fn stop_consumer(channel: &Channel, consumer: &Consumer) {
    if channel.status().connected() {
        let tag = consumer.tag();
        if let Err(error) = channel.basic_cancel(tag.clone(), BasicCancelOptions::default()).await {
            warn!("cancelling consumer on {} failed: {error}", consumer.queue());
        }
    }
    close_channel(channel, consumer.queue().as_str()).await;
}

async fn fulfil_orders(
    channel: Channel,
    retry_channel: Channel,
    progress: Arc<Progress>,
    stop: CancellationToken,
) -> anyhow::Result<()> {
    retry_channel.confirm_select(ConfirmSelectOptions::default()).await.context("enabling confirms for retries")?;
    let mut consumer = start_consumer(&channel, FULFILLMENT_QUEUE, FULFILLMENT_PREFETCH).await?;
    let outcome = async {
        while let Some(delivery) = next_delivery(&mut consumer, &stop).await? {
            fulfil(delivery, &retry_channel, &progress).await?;
        }
        anyhow::Ok(())
    }
    .await;
    stop_consumer(&channel, &consumer).await;
    close_channel(&retry_channel, "retry publisher").await;
    outcome.context("fulfillment consumer")
}

async fn fulfil(delivery: Delivery, retry_channel: &Channel, progress: &Progress) -> anyhow::Result<()> {
    if retry_count(&delivery.properties) >= MAX_RETRIES {
        return give_up(delivery, progress).await;
    }
    tokio::time::sleep(work_time()).await;
    match fulfilment_failure(&delivery.data) {
        None => {
            delivery.acker.ack(BasicAckOptions::default()).await.context("acking an order")?;
            Progress::bump(&progress.acked);
        }
        Some(reason) => {
            debug!("retrying {:?}: {reason}", delivery.properties.message_id());
            retry_later(delivery, retry_channel, progress).await?;
        }
    }
    Ok(())
}

/// requeue=false hands the message to the queue's dead-letter exchange: the DLQ. It keeps the
/// headers of its last retry, the error text among them.
async fn give_up(delivery: Delivery, progress: &Progress) -> anyhow::Result<()> {
    let reject = BasicRejectOptions { requeue: false };
    delivery.acker.reject(reject).await.context("rejecting an order out of retries")?;
    Progress::bump(&progress.dead_lettered);
    Ok(())
}

/// Confirm before ack: a crash in between duplicates the order in the retry queue, never loses it.
async fn retry_later(delivery: Delivery, channel: &Channel, progress: &Progress) -> anyhow::Result<()> {
    let mut headers = delivery.properties.headers().clone().unwrap_or_default();
    headers.insert("x-exception-message".into(), text(give_up_reason(&delivery.data)));
    headers.insert(RETRIES_HEADER.into(), AMQPValue::LongLongInt(retry_count(&delivery.properties) + 1));
    let message = Outgoing {
        routing_key: FULFILLMENT_QUEUE,
        body: delivery.data.clone(),
        properties: delivery.properties.clone().with_headers(headers),
    };
    let confirm = publish(channel, RETRY_EXCHANGE, message).await?;
    if confirmed_and_routed(confirm.await)? {
        delivery.acker.ack(BasicAckOptions::default()).await.context("acking a retried order")?;
        Progress::bump(&progress.retried);
        Ok(())
    } else {
        // Someone removed the retry queue or its binding: the DLQ keeps the order instead.
        warn!("could not send a message to {RETRY_QUEUE}; rejecting it into {DLQ}");
        give_up(delivery, progress).await
    }
}

/// The demo's own retry counter. The broker's `x-death` count is no use here: the retries are
/// republished copies, and 4.x no longer interprets an `x-death` header a client publishes
/// (DOMAIN.md §4), so the count would start again at every retry.
const RETRIES_HEADER: &str = "x-demo-retries";

/// How often the order has been sent round the retry queue.
fn retry_count(properties: &BasicProperties) -> i64 {
    properties.headers().as_ref().and_then(|headers| integer(headers.inner().get(RETRIES_HEADER)?)).unwrap_or(0)
}

fn integer(value: &AMQPValue) -> Option<i64> {
    match value {
        AMQPValue::LongLongInt(n) => Some(*n),
        AMQPValue::LongInt(n) => Some(i64::from(*n)),
        AMQPValue::LongUInt(n) => Some(i64::from(*n)),
        AMQPValue::ShortInt(n) => Some(i64::from(*n)),
        AMQPValue::Timestamp(n) => i64::try_from(*n).ok(),
        _ => None,
    }
}

fn is_poison(body: &[u8]) -> bool {
    serde_json::from_slice::<serde_json::Value>(body).is_ok_and(|order| order["sku"] == POISON_SKU)
}

/// Why processing failed this time, if it did.
fn fulfilment_failure(body: &[u8]) -> Option<&'static str> {
    if is_poison(body) {
        Some("sku not in catalogue")
    } else if rand::thread_rng().gen_bool(TRANSIENT_FAILURE_SHARE) {
        Some("warehouse API timed out")
    } else {
        None
    }
}

/// The made-up error a real consumer library would have attached (Spring's header name).
fn give_up_reason(body: &[u8]) -> &'static str {
    if is_poison(body) {
        "IllegalStateException: sku GIFT-CARD-LEGACY is not in the catalogue"
    } else {
        "TimeoutException: warehouse API did not answer within 2000 ms (3 retries)"
    }
}

fn work_time() -> Duration {
    Duration::from_millis(rand::thread_rng().gen_range(5..40))
}

async fn audit_orders(channel: Channel, progress: Arc<Progress>, stop: CancellationToken) -> anyhow::Result<()> {
    let mut consumer = start_consumer(&channel, AUDIT_QUEUE, AUDIT_PREFETCH).await?;
    let outcome = async {
        while let Some(delivery) = next_delivery(&mut consumer, &stop).await? {
            // Slower than the inflow on purpose: the audit backlog grows while everything "works".
            tokio::time::sleep(AUDIT_WORK_TIME).await;
            delivery.acker.ack(BasicAckOptions::default()).await.context("acking an audit record")?;
            Progress::bump(&progress.acked);
        }
        anyhow::Ok(())
    }
    .await;
    stop_consumer(&channel, &consumer).await;
    outcome.context("audit consumer")
}
