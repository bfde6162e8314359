//! The advisor's rules: ids, titles and why each matters (docs/advisor.md says the same at
//! length). An id never changes once released: alerts, dashboards and acknowledgements name it.

use super::Severity;

/// One rule of the advisor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
pub struct Rule {
    pub id: &'static str,
    /// Its usual severity (some findings are raised or lowered by what the evidence shows).
    pub severity: Severity,
    pub title: &'static str,
    /// Why it matters, in two sentences.
    pub why: &'static str,
    /// Set for the arguments and policies that RabbitMQ 4.x refuses or removed.
    pub upgrade_blocker: bool,
}

const fn rule(id: &'static str, severity: Severity, title: &'static str, why: &'static str) -> Rule {
    Rule { id, severity, title, why, upgrade_blocker: false }
}

const fn blocker(id: &'static str, title: &'static str, why: &'static str) -> Rule {
    Rule { id, severity: Severity::Warning, title, why, upgrade_blocker: true }
}

pub const CLASSIC_MIRRORING: &str = "classic-mirroring-policy";
pub const QUEUE_MODE: &str = "queue-mode-set";
pub const QUEUE_VERSION_1: &str = "queue-version-1";
pub const TRANSIENT: &str = "transient-non-exclusive-queue";
pub const QUORUM_WITHOUT_DLX: &str = "quorum-without-dlx";
pub const DELIVERY_LIMIT_OFF: &str = "quorum-delivery-limit-off";
pub const AT_MOST_ONCE: &str = "quorum-dlx-at-most-once";
pub const AT_LEAST_ONCE_FALLBACK: &str = "quorum-at-least-once-without-reject-publish";
pub const DROP_HEAD: &str = "drop-head-on-work-queue";
pub const LIMIT_REACHED: &str = "length-limit-reached";
pub const AUTO_ACK: &str = "auto-ack-consumer";
pub const UNLIMITED_PREFETCH: &str = "unlimited-prefetch";
pub const PREFETCH_ABOVE_PROCESSING: &str = "prefetch-far-above-processing";
pub const NO_CONFIRMS: &str = "publish-without-confirms";
pub const MIXED_TTLS: &str = "retry-queue-mixed-ttls";
pub const DLQ_UNBOUNDED: &str = "dlq-without-owner-or-retention";
pub const SINGLE_HOLDER: &str = "unacked-held-by-one-connection";

/// Every rule, upgrade blockers first, then in the order of issue 35's list.
pub const RULES: &[Rule] = &[
    blocker(
        CLASSIC_MIRRORING,
        "Classic mirroring policy (ha-*)",
        "Classic queue mirroring was removed in RabbitMQ 4.0, which refuses a policy with ha-* keys, so these queues \
         lose their replicas on upgrade. Replicated data belongs in quorum queues (or streams) instead.",
    ),
    blocker(
        QUEUE_MODE,
        "Queue mode (lazy) set",
        "x-queue-mode and the queue-mode policy key are deprecated: classic queues v2 keep messages on disk anyway, \
         and RabbitMQ 4.x ignores the setting and refuses it where the deprecated feature is denied. Declarations \
         that still send it fail once that happens.",
    ),
    blocker(
        QUEUE_VERSION_1,
        "Classic queue version 1",
        "The version 1 storage of classic queues is gone in 4.x: RabbitMQ 4.3 refuses x-queue-version=1 (measured on \
         4.3.6). A client that declares it cannot start after the upgrade.",
    ),
    blocker(
        TRANSIENT,
        "Transient non-exclusive queue",
        "Non-durable queues that are not exclusive are a deprecated feature (transient_nonexcl_queues) of 4.x, to be \
         refused. Their messages are lost on any node restart, which is rarely what a shared queue wants.",
    ),
    rule(
        QUORUM_WITHOUT_DLX,
        Severity::Critical,
        "Quorum queue without a dead-letter target",
        "A quorum queue drops a message once it was delivered more often than its delivery limit (20 by default from \
         RabbitMQ 4.0), and rejected or expired messages too. Without a dead-letter exchange they are gone without \
         a trace.",
    ),
    rule(
        DELIVERY_LIMIT_OFF,
        Severity::Warning,
        "Delivery limit turned off, with redeliveries",
        "With the delivery limit off, a message that crashes its consumer is redelivered for ever and blocks or slows \
         the queue. The redeliveries seen show that this is happening, not only possible.",
    ),
    rule(
        AT_MOST_ONCE,
        Severity::Warning,
        "Quorum dead-lettering at most once",
        "A quorum queue dead-letters at most once by default: a dead letter that cannot be routed or confirmed at \
         that moment is dropped. Where the DLQ matters, at-least-once dead-lettering keeps it until the target \
         confirms.",
    ),
    rule(
        AT_LEAST_ONCE_FALLBACK,
        Severity::Critical,
        "At-least-once dead-lettering without reject-publish",
        "At-least-once dead-lettering needs overflow reject-publish: with any other overflow the broker silently \
         falls back to at-most-once. The queue says at-least-once but dead letters can still be lost.",
    ),
    rule(
        DROP_HEAD,
        Severity::Warning,
        "Length limit that drops the oldest messages of a work queue",
        "A full queue with overflow drop-head discards its oldest messages to take new ones, and the publisher's \
         confirm says nothing of it. On a work queue that means unprocessed work disappears, silently when there is \
         no dead-letter target.",
    ),
    rule(
        LIMIT_REACHED,
        Severity::Critical,
        "Length limit reached",
        "The queue holds as many messages as its limit allows, so its overflow behaviour applies to every new \
         message now. Drop-head discards the oldest, reject-publish refuses publishers.",
    ),
    rule(
        AUTO_ACK,
        Severity::Critical,
        "Automatic acknowledgement on a queue that dead-letters or retries",
        "A consumer with automatic acknowledgement owns each message as soon as it is sent, so a crash loses what it \
         held and it can never reject a message. The queue's dead-letter or retry routing never sees its failures.",
    ),
    rule(
        UNLIMITED_PREFETCH,
        Severity::Warning,
        "Unlimited prefetch",
        "A consumer with no prefetch limit is sent every ready message at once: one consumer takes the whole backlog, \
         others starve, and its memory grows with the queue. A crash then hands the whole backlog back at once.",
    ),
    rule(
        PREFETCH_ABOVE_PROCESSING,
        Severity::Notice,
        "Prefetch far above what the consumer processes",
        "A consumer is sent up to its prefetch at once, so in a burst it takes many times what it acknowledges in \
         one processing time while its peers idle, and those messages wait in its buffer. A crash then hands them \
         all back at once, to be delivered again.",
    ),
    rule(
        NO_CONFIRMS,
        Severity::Warning,
        "Channels publishing without confirms",
        "Without publisher confirms a publisher cannot know whether the broker accepted a message: one lost in a \
         connection drop, a full queue or an alarm is never retried. Confirms are the publisher's half of \
         at-least-once delivery.",
    ),
    rule(
        MIXED_TTLS,
        Severity::Warning,
        "Retry queue with different per-message TTLs",
        "A queue expires only the message at its head, so a message with a short TTL waits behind one with a long \
         TTL (head-of-line blocking): short retry delays become as long as the longest. Retries then pile up behind one slow message.",
    ),
    rule(
        DLQ_UNBOUNDED,
        Severity::Warning,
        "Dead-letter queue without consumer or retention",
        "A dead-letter queue nobody consumes and nothing bounds grows for ever and ends in a memory or disk alarm that \
         stops every publisher. It needs an owner who looks, or a retention (TTL or length limit) that says how long \
         failures matter.",
    ),
    rule(
        SINGLE_HOLDER,
        Severity::Warning,
        "All unacked messages held by one connection",
        "One connection holds every unacknowledged message of the queue and has acknowledged none for longer than \
         the hold limit. If it hangs, that work waits until the connection closes, and the queue looks calm \
         meanwhile.",
    ),
];

pub fn rule_by_id(id: &str) -> Option<&'static Rule> {
    RULES.iter().find(|r| r.id == id)
}
