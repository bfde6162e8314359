//! The numbers over hand-made windows: Little's law on steady ones, the labels on unsteady ones,
//! and unknown (never 0) where an input is.

use chrono::Utc;

use super::*;
use crate::metrics::{AgeSource, QueueNames, QueueView};

fn view() -> QueueView {
    let names =
        QueueNames { broker: "b".into(), vhost: "v".into(), name: "q".into(), kind: "classic".into(), state: None };
    let mut q = QueueView::unknown(names, Utc::now());
    q.ready = Some(40);
    q.unacked = Some(4);
    q.total = Some(44);
    q.deliver_rate = Some(20.0);
    q.ack_rate = Some(20.0);
    q.redeliver_rate = Some(0.0);
    q
}

fn point(ts: i64, ready: i64, unacked: i64, deliver: f64, ack: f64, redeliver: f64) -> QueuePoint {
    QueuePoint {
        ts,
        ready: Some(ready),
        unacked: Some(unacked),
        consumers: Some(1),
        publish_rate: Some(deliver),
        deliver_rate: Some(deliver),
        ack_rate: Some(ack),
        redeliver_rate: Some(redeliver),
        oldest_age_secs: None,
        oldest_age_estimated: false,
    }
}

/// A steady queue: 40 ready and 4 unacked, 20 msg/s through, 1 in 10 deliveries a redelivery.
fn steady_window() -> Vec<QueuePoint> {
    (0..30).map(|i| point(i, 40 + (i % 2), 4, 20.0, 20.0, 2.0)).collect()
}

#[test]
fn littles_law_over_a_steady_window() {
    let n = queue_numbers(&view(), &steady_window(), 30, &[]);
    assert_eq!(n.steady_state.unsteady, None);
    assert_eq!(n.wait_secs.standing, Standing::Known);
    assert!((n.wait_secs.value.unwrap() - 40.5 / 20.0).abs() < 1e-9, "{:?}", n.wait_secs);
    assert!(n.wait_secs.derived.starts_with("Little's law: ready 40.5"), "{}", n.wait_secs.derived);
    assert!((n.processing_secs.value.unwrap() - 0.2).abs() < 1e-9);
    assert!(n.processing_secs.derived.contains("prefetch buffer"));
    assert!((n.retry_share.value.unwrap() - 0.1).abs() < 1e-9);
}

#[test]
fn a_filling_queue_is_unreliable_and_says_what_moved() {
    let window: Vec<QueuePoint> = (0..30).map(|i| point(i, 10 * i, 4, 20.0, 20.0, 0.0)).collect();
    let n = queue_numbers(&view(), &window, 30, &[]);
    let why = n.steady_state.unsteady.clone().expect("not steady");
    assert!(why.contains("ready ranged 0–290"), "{why}");
    for number in [&n.wait_secs, &n.processing_secs, &n.retry_share] {
        assert_eq!(number.standing, Standing::Unreliable, "{number:?}");
        assert!(number.reason.as_deref().unwrap().starts_with("unreliable: not in steady state"), "{number:?}");
        assert!(number.value.is_some(), "an unreliable number is still shown");
    }
}

#[test]
fn changing_rates_are_unsteady_too() {
    let window: Vec<QueuePoint> = (0..30).map(|i| point(i, 40, 4, 10.0 + i as f64, 20.0, 0.0)).collect();
    let why = steadiness(&window, 30).unsteady.expect("rates moved");
    assert!(why.contains("delivery rate ranged 10.0–39.0 msg/s"), "{why}");
    // A handful of messages and a trickle: noise, not a change of state.
    let small: Vec<QueuePoint> = (0..30).map(|i| point(i, i % 4, 1, 0.2 * (i % 3) as f64, 0.3, 0.0)).collect();
    assert_eq!(steadiness(&small, 30).unsteady, None);
}

#[test]
fn too_few_samples_fall_back_to_the_view_and_say_so() {
    let window: Vec<QueuePoint> = steady_window().into_iter().take(3).collect();
    let n = queue_numbers(&view(), &window, 30, &[]);
    assert_eq!(n.steady_state.unsteady.as_deref(), Some("too few samples: 3 of 5 in the last 30 s"));
    assert_eq!(n.wait_secs.standing, Standing::Unreliable);
    // No stored sample at all: the last poll's values, never steady.
    let n = queue_numbers(&view(), &[], 30, &[]);
    assert_eq!(n.wait_secs.value, Some(2.0));
    assert!(n.wait_secs.derived.contains("the last poll's values"), "{}", n.wait_secs.derived);
    assert_eq!(n.wait_secs.standing, Standing::Unreliable);
}

#[test]
fn unknown_inputs_give_unknown_never_zero() {
    let mut q = view();
    q.deliver_rate = None;
    let n = queue_numbers(&q, &[], 30, &[]);
    for number in [&n.wait_secs, &n.processing_secs, &n.retry_share] {
        assert_eq!((number.value, number.standing), (None, Standing::Unknown), "{number:?}");
        assert!(number.reason.is_some());
    }
    // Known inputs, no traffic: still no 0 s wait.
    let idle: Vec<QueuePoint> = (0..10).map(|i| point(i, 0, 0, 0.0, 0.0, 0.0)).collect();
    let n = queue_numbers(&view(), &idle, 30, &[]);
    assert_eq!(n.wait_secs.value, None);
    assert_eq!(
        n.processing_secs.reason.as_deref(),
        Some("nothing was acknowledged in the window (no traffic, or consumers with automatic acknowledgement)")
    );
    assert_eq!(n.retry_share.value, None);
    // Held without acks: unknown, and why.
    let held: Vec<QueuePoint> = (0..10).map(|i| point(i, 0, 5, 0.0, 0.0, 0.0)).collect();
    assert!(queue_numbers(&view(), &held, 30, &[]).processing_secs.reason.unwrap().contains("hung"));
}

#[test]
fn a_queue_that_delivers_nothing_waits_at_least_its_head_age() {
    let mut q = view();
    q.oldest_age_secs = Some(95.0);
    q.oldest_age_source = AgeSource::Exact;
    let stuck: Vec<QueuePoint> = (0..10).map(|i| point(i, 40, 0, 0.0, 0.0, 0.0)).collect();
    let n = queue_numbers(&q, &stuck, 30, &[]);
    assert_eq!(n.wait_secs.value, Some(95.0));
    assert_eq!(n.wait_secs.standing, Standing::Unreliable);
    assert!(n.wait_secs.reason.unwrap().contains("lower bound"));
}

#[test]
fn own_reads_make_the_rates_unreliable() {
    let mut q = view();
    q.own_reads = true;
    let n = queue_numbers(&q, &steady_window(), 30, &[]);
    assert_eq!(n.retry_share.standing, Standing::Unreliable);
    assert!(n.retry_share.reason.unwrap().contains("warren's own reads"));
}

#[test]
fn dead_letters_are_the_depth_of_its_dead_letter_queues() {
    let mut q = view();
    assert_eq!(queue_numbers(&q, &[], 30, &[]).dead_letters.value, None, "no DLX: unknown, not 0");
    q.dead_letters.dead_letter_target = Some(Box::new(crate::broker::topology::DeadLetterTarget {
        exchange: String::new(),
        routing_key: Some("q.dlq".into()),
        configured_by: "arguments",
        queues: Some(vec!["q.dlq".into()]),
    }));
    let mut dlq = view();
    dlq.name = "q.dlq".into();
    dlq.total = Some(7);
    let n = queue_numbers(&q, &[], 30, &[dlq.clone()]);
    assert_eq!(n.dead_letters.value, Some(7.0));
    dlq.total = None;
    assert_eq!(queue_numbers(&q, &[], 30, &[dlq]).dead_letters.standing, Standing::Unknown);
}

#[test]
fn samples_at_the_end_of_the_window_only_are_too_few() {
    // Rates known for the last 10 s of 30 only (a rate window just filled): steady-looking, not
    // known to be steady.
    let late: Vec<QueuePoint> = (20..30).map(|i| point(i, 40, 4, 20.0, 20.0, 0.0)).collect();
    let steady = steadiness(&late, 30);
    assert_eq!(
        steady.unsteady.as_deref(),
        Some("the samples with depth and rates known cover only 9 s of the last 30 s")
    );
    assert_eq!(steadiness(&steady_window(), 30).covered_secs, 29);
}

#[test]
fn the_window_holds_enough_polls() {
    assert_eq!(window_secs(1), 30);
    assert_eq!(window_secs(10), 60);
}
