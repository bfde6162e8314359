//! The advisor's acknowledgements (`storage::Acknowledgements`, issue 35): one per finding
//! (broker, rule, vhost, subject), replaced by a second, listed per broker, and removed once.

use warren::storage::acknowledgements::Acknowledgement;
use warren::storage::Store;

crate::conformance!(one_acknowledgement_per_finding_replaced_listed_and_removed, text_is_kept_as_given);

fn ack(broker: &str, rule: &str, subject: &str, fingerprint: &str, reason: &str) -> Acknowledgement {
    Acknowledgement {
        broker: broker.into(),
        rule: rule.into(),
        vhost: "/".into(),
        subject: subject.into(),
        fingerprint: fingerprint.into(),
        reason: reason.into(),
        actor: "alice".into(),
        at: 1_765_000_000,
    }
}

async fn one_acknowledgement_per_finding_replaced_listed_and_removed(store: &Store) {
    assert_eq!(store.acknowledgements("main").await.unwrap(), vec![]);
    let first = ack("main", "quorum-without-dlx", "orders", "aaaa", "known");
    store.acknowledge(&first).await.unwrap();
    store.acknowledge(&ack("main", "auto-ack-consumer", "orders", "bbbb", "idempotent")).await.unwrap();
    store.acknowledge(&ack("other", "quorum-without-dlx", "orders", "cccc", "elsewhere")).await.unwrap();
    // The same finding again: replaced, with the new fingerprint, reason and actor.
    let again = Acknowledgement {
        actor: "bob".into(),
        at: first.at + 60,
        ..ack("main", "quorum-without-dlx", "orders", "dddd", "still known")
    };
    store.acknowledge(&again).await.unwrap();
    let listed = store.acknowledgements("main").await.unwrap();
    assert_eq!(listed, vec![ack("main", "auto-ack-consumer", "orders", "bbbb", "idempotent"), again.clone()]);
    // Another vhost is another finding.
    let other_vhost = Acknowledgement { vhost: "prod".into(), ..first.clone() };
    store.acknowledge(&other_vhost).await.unwrap();
    assert_eq!(store.acknowledgements("main").await.unwrap().len(), 3);

    let removed = store.unacknowledge("main", "quorum-without-dlx", "/", "orders").await.unwrap();
    assert_eq!(removed, Some(again));
    assert_eq!(store.unacknowledge("main", "quorum-without-dlx", "/", "orders").await.unwrap(), None, "once");
    assert_eq!(store.acknowledgements("main").await.unwrap().len(), 2);
    assert_eq!(store.acknowledgements("other").await.unwrap().len(), 1, "another broker's stay");
}

async fn text_is_kept_as_given(store: &Store) {
    // What the web layer lets through is stored byte for byte: quotes, HTML, non-ASCII.
    let reason = "it's <b>fine</b> \"really\" — 100 % ✓";
    let subject = "queue with 'quotes' and ünïcode";
    store.acknowledge(&ack("main", "drop-head-on-work-queue", subject, "0123456789abcdef", reason)).await.unwrap();
    let listed = store.acknowledgements("main").await.unwrap();
    assert_eq!((listed[0].subject.as_str(), listed[0].reason.as_str()), (subject, reason));
}
