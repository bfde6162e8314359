//! The one way warren puts a message on a broker (issue 29, must-have 1): moves and requeues,
//! the holding queue, custody's replays, releases and edits all publish through [`Publisher`].
//!
//! A copy is published with `mandatory` on a channel in confirm mode. It is safe only when the
//! broker acked it and did not return it as unroutable; a nack is a failure with the reason
//! every path gives ([`super::target::refused_by_broker`]). Copies go in batches: one batch is
//! published while the batch before awaits its confirms, so the broker's confirm latency does
//! not stop the stream. Whoever publishes acks an original (or marks a record replayed) only for
//! a copy [`Settled`] with `Ok`.
//!
//! The checks before the first publish (the target exists, keeps what it is given, may be
//! written to, would not strand its copies) are `target::Targets`, shared by the same paths.

use std::sync::Arc;

use lapin::message::BasicReturnMessage;
use lapin::options::{BasicPublishOptions, ConfirmSelectOptions};
use lapin::types::{AMQPValue, ShortString};
use lapin::{BasicProperties, Channel, Confirmation, Connection, PublisherConfirm};

/// How a returned message is told apart from the other copies in flight. lapin hands a return
/// to whichever confirmation resolves next, and a multiple ack resolves several in arbitrary
/// order (measured: 50 unroutable copies in flight, 7 confirmations carried a return), so the
/// return itself has to say whose it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Identify {
    /// By exchange, routing key and body: every copy in flight that matches counts as returned,
    /// which can at worst leave a delivered copy's original in its queue (a duplicate), never
    /// settle a copy that was lost.
    Content,
    /// By the value of this header, which each copy carries uniquely (custody's record id).
    Header(&'static str),
}

/// A publish whose frames are queued for lapin's IO thread and not yet written.
type Sending = std::pin::Pin<Box<dyn std::future::Future<Output = lapin::Result<PublisherConfirm>> + Send + Sync>>;

/// A copy's confirmation: still to come, or what the broker said.
enum Confirm {
    /// Its frames are not written yet (`Publisher::send`).
    Sending(Sending),
    Waiting(PublisherConfirm),
    /// Acked (`Ok`), or refused with the reason.
    Came(Result<(), String>),
}

/// A copy published and not yet settled; `key` is what its publisher needs back.
struct Outgoing<K> {
    key: K,
    to: String,
    exchange: String,
    routing_key: String,
    data: Arc<Vec<u8>>,
    /// Its value of the [`Identify::Header`] header.
    marker: Option<String>,
    confirm: Confirm,
    /// A returned message matched it (`Publisher::match_returns`).
    returned: bool,
}

/// A copy whose fate is known: `Ok` when the broker confirmed it and did not return it, else why
/// not. Its body comes back too, for a publisher that sets the original aside on a failure.
pub struct Settled<K> {
    pub key: K,
    pub to: String,
    pub data: Arc<Vec<u8>>,
    pub outcome: Result<(), String>,
}

/// A confirm-mode channel and the copies published on it that are not settled yet.
pub struct Publisher<K> {
    channel: Channel,
    identify: Identify,
    /// The batch being published.
    in_flight: Vec<Outgoing<K>>,
    /// Body bytes of `in_flight`.
    in_flight_bytes: usize,
    /// The batch before it, published and awaiting its confirms.
    previous: Vec<Outgoing<K>>,
    /// Returned copies not yet matched to the copy they came from.
    returns: Vec<BasicReturnMessage>,
}

impl<K> Publisher<K> {
    /// Opens a channel of its own (a return is then this publisher's, never mistaken for
    /// another's) in confirm mode.
    pub async fn open(connection: &Connection, identify: Identify) -> lapin::Result<Publisher<K>> {
        let channel = connection.create_channel().await?;
        channel.confirm_select(ConfirmSelectOptions::default()).await?;
        Ok(Publisher {
            channel,
            identify,
            in_flight: Vec::new(),
            in_flight_bytes: 0,
            previous: Vec::new(),
            returns: Vec::new(),
        })
    }

    /// Its channel, for declarations that go with the publishing (the holding queue's).
    pub fn channel(&self) -> &Channel {
        &self.channel
    }

    /// Copies not settled yet (both batches).
    pub fn unsettled(&self) -> usize {
        self.in_flight.len() + self.previous.len()
    }

    /// Copies and body bytes of the batch being published.
    pub fn batch(&self) -> (usize, usize) {
        (self.in_flight.len(), self.in_flight_bytes)
    }

    /// Publishes a copy with `mandatory`, without waiting for lapin to write it: the first poll
    /// takes the copy's confirm tag and queues its frames, in the order of the calls, and only
    /// the write is left. Waiting for each write in turn cost a hand-over to lapin's IO thread
    /// and back per message. `to` is how reports name where it went. An error means the channel
    /// failed: nothing sent since the last settle is safe.
    pub async fn send(
        &mut self,
        key: K,
        (exchange, routing_key, to): (&str, &str, String),
        data: Arc<Vec<u8>>,
        properties: BasicProperties,
    ) -> lapin::Result<()> {
        let marker = match self.identify {
            Identify::Header(name) => header_value(&properties, name),
            Identify::Content => None,
        };
        let confirm = match (ShortString::try_new(exchange), ShortString::try_new(routing_key)) {
            (Ok(exchange), Ok(routing_key)) => {
                let (channel, body) = (self.channel.clone(), data.clone());
                let mut sending: Sending = Box::pin(async move {
                    let options = BasicPublishOptions { mandatory: true, ..Default::default() };
                    channel.basic_publish(exchange, routing_key, options, &body, properties).await
                });
                match futures_util::poll!(&mut sending) {
                    std::task::Poll::Ready(confirm) => Confirm::Waiting(confirm?),
                    std::task::Poll::Pending => Confirm::Sending(sending),
                }
            }
            // lapin's conversion would panic; the broker could not route it anyway. This copy
            // fails alone, nothing is sent.
            _ => Confirm::Came(Err(format!(
                "the exchange or routing key of the copy sent to {to} is longer than the 255 bytes AMQP allows"
            ))),
        };
        self.in_flight_bytes += data.len();
        self.in_flight.push(Outgoing {
            key,
            to,
            exchange: exchange.to_string(),
            routing_key: routing_key.to_string(),
            data,
            marker,
            confirm,
            returned: false,
        });
        Ok(())
    }

    /// Ends the batch being published: the batch before it is settled and handed back, and this
    /// one awaits its confirms while the next is published.
    pub async fn end_batch(&mut self) -> lapin::Result<Vec<Settled<K>>> {
        let settled = self.settle_previous().await?;
        self.previous = std::mem::take(&mut self.in_flight);
        self.in_flight_bytes = 0;
        // A batch whose confirms were all ready already never returned to the runtime: let the
        // pages and the checkpoints run between two batches.
        tokio::task::yield_now().await;
        Ok(settled)
    }

    /// Settles every copy in flight.
    pub async fn settle_all(&mut self) -> lapin::Result<Vec<Settled<K>>> {
        let mut settled = self.end_batch().await?;
        settled.extend(self.settle_previous().await?);
        Ok(settled)
    }

    /// Publishes one copy and waits for its fate: for paths that send one message at a time (the
    /// holding queue, an edited record). Copies already in flight are settled with it and
    /// dropped, so call it only on a publisher used that way.
    pub async fn send_one(
        &mut self,
        key: K,
        route: (&str, &str, String),
        data: Arc<Vec<u8>>,
        properties: BasicProperties,
    ) -> Result<Settled<K>, String> {
        self.send(key, route, data, properties).await.map_err(|e| e.to_string())?;
        let settled = self.settle_all().await.map_err(|e| e.to_string())?;
        settled.into_iter().last().ok_or_else(|| "its confirmation never came".to_string())
    }

    pub async fn close(self, why: &str) {
        if let Err(e) = self.channel.close(200, why.into()).await {
            tracing::debug!(error = %e, "closing a publisher's channel");
        }
    }

    /// Waits for the confirms of the previous batch and says what became of each copy.
    ///
    /// The broker sends a copy's return before its ack, so once every copy of this batch is
    /// confirmed, the return of each of them is on a confirmation that has come: one of this
    /// batch, or one of the batch being published that came already; both are read.
    async fn settle_previous(&mut self) -> lapin::Result<Vec<Settled<K>>> {
        let mut batch = std::mem::take(&mut self.previous);
        for outgoing in &mut batch {
            outgoing.confirmed(&mut self.returns).await?;
        }
        for outgoing in &mut self.in_flight {
            outgoing.confirmed_yet(&mut self.returns)?;
        }
        if self.in_flight.is_empty() {
            // Nothing else is in flight: whatever lapin kept aside is this batch's.
            self.returns.extend(self.channel.wait_for_confirms().await?);
        }
        self.match_returns(&mut batch);
        Ok(batch
            .into_iter()
            .map(|o| {
                let outcome = match (o.confirm, o.returned) {
                    (Confirm::Came(Ok(())), false) => Ok(()),
                    (Confirm::Came(Ok(())), true) => Err(format!("unroutable: nothing took the copy sent to {}", o.to)),
                    (Confirm::Came(Err(why)), _) => Err(why),
                    // Awaited above.
                    (Confirm::Sending(_) | Confirm::Waiting(_), _) => Err("its confirmation never came".to_string()),
                };
                Settled { key: o.key, to: o.to, data: o.data, outcome }
            })
            .collect())
    }

    /// Flags the copies in flight that the returns collected so far came from: those of `batch`
    /// and of the batch being published.
    fn match_returns(&mut self, batch: &mut [Outgoing<K>]) {
        for r in std::mem::take(&mut self.returns) {
            let mut matched = false;
            for outgoing in batch.iter_mut().chain(self.in_flight.iter_mut()) {
                if outgoing.same_as(&r, self.identify) {
                    outgoing.returned = true;
                    matched = true;
                }
            }
            if !matched {
                // Cannot tell which copy came back: none in flight counts as safe.
                tracing::warn!(exchange = %r.delivery.exchange, "a returned copy matched none in flight");
                batch.iter_mut().chain(self.in_flight.iter_mut()).for_each(|o| o.returned = true);
            }
        }
    }
}

impl<K> Outgoing<K> {
    /// Waits for the broker's confirmation; a returned message lapin attached to it goes to
    /// `returns`.
    async fn confirmed(&mut self, returns: &mut Vec<BasicReturnMessage>) -> lapin::Result<()> {
        if let Confirm::Sending(sending) = &mut self.confirm {
            self.confirm = Confirm::Waiting(sending.await?);
        }
        if let Confirm::Waiting(confirm) = &mut self.confirm {
            let confirmation = confirm.await?;
            self.confirm = Confirm::Came(self.outcome(confirmation, returns));
        }
        Ok(())
    }

    /// Takes the confirmation if it has come already, without waiting. A copy whose publish was
    /// not awaited yet holds its confirmation inside that future, so it is polled too: a return
    /// that lapin attached there would otherwise be missed.
    fn confirmed_yet(&mut self, returns: &mut Vec<BasicReturnMessage>) -> lapin::Result<()> {
        if let Confirm::Sending(sending) = &mut self.confirm {
            if let Some(sent) = futures_util::FutureExt::now_or_never(sending) {
                self.confirm = Confirm::Waiting(sent?);
            }
        }
        if let Confirm::Waiting(confirm) = &mut self.confirm {
            if let Some(confirmation) = futures_util::FutureExt::now_or_never(confirm) {
                self.confirm = Confirm::Came(self.outcome(confirmation?, returns));
            }
        }
        Ok(())
    }

    fn outcome(&self, confirmation: Confirmation, returns: &mut Vec<BasicReturnMessage>) -> Result<(), String> {
        match confirmation {
            Confirmation::Ack(r) => {
                returns.extend(r);
                Ok(())
            }
            Confirmation::Nack(r) => {
                returns.extend(r);
                Err(super::target::refused_by_broker(&self.to))
            }
            Confirmation::NotRequested => Err("publisher confirms are not enabled".to_string()),
        }
    }

    fn same_as(&self, r: &BasicReturnMessage, identify: Identify) -> bool {
        match identify {
            Identify::Content => {
                r.delivery.exchange.as_str() == self.exchange
                    && r.delivery.routing_key.as_str() == self.routing_key
                    && r.delivery.data == *self.data
            }
            Identify::Header(name) => {
                self.marker.is_some() && header_value(&r.delivery.properties, name) == self.marker
            }
        }
    }
}

/// A header's value as text, for the header kinds warren writes.
fn header_value(properties: &BasicProperties, name: &str) -> Option<String> {
    match properties.headers().as_ref()?.inner().get(name)? {
        AMQPValue::LongString(s) => Some(s.to_string()),
        AMQPValue::ShortString(s) => Some(s.as_str().to_string()),
        AMQPValue::LongLongInt(n) => Some(n.to_string()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lapin::types::{FieldTable, LongString};

    #[test]
    fn a_header_marker_reads_the_kinds_warren_writes() {
        let mut headers = FieldTable::default();
        headers.insert("x-id".into(), AMQPValue::LongString(LongString::from("42")));
        headers.insert("x-n".into(), AMQPValue::LongLongInt(7));
        headers.insert("x-f".into(), AMQPValue::Boolean(true));
        let p = BasicProperties::default().with_headers(headers);
        assert_eq!(header_value(&p, "x-id").as_deref(), Some("42"));
        assert_eq!(header_value(&p, "x-n").as_deref(), Some("7"));
        assert_eq!(header_value(&p, "x-f"), None);
        assert_eq!(header_value(&p, "x-missing"), None);
        assert_eq!(header_value(&BasicProperties::default(), "x-id"), None);
    }
}
