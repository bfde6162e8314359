//! What became of each message of a move, delete or purge (`dlq::fates`).

use warren::audit::{self, Entry};
use warren::dlq::fates::{self, Fate};
use warren::storage::Store;

crate::conformance!(
    checkpoints_count_and_the_end_lists_moved_ids_by_position,
    fates_read_back_by_position_in_the_order_written,
    an_unfinished_action_is_marked_interrupted_and_left_so,
    thousands_of_fates_are_kept_in_one_finish,
    a_message_id_with_a_nul_is_kept,
    only_a_dead_replicas_actions_are_marked_interrupted,
    on_sqlite_the_start_recovers_a_killed_process_at_once,
);

async fn requeue(store: &Store) -> i64 {
    let entry = Entry {
        actor: "otto",
        broker: "b",
        vhost: "v",
        queue: "orders.dlq",
        action: "requeue",
        request: "{}".into(),
        run_by: "r-gone",
    };
    audit::start(store, entry).await.unwrap()
}

/// A requeue's entry as replica `replica` starts it.
async fn requeue_by(store: &Store, replica: &str) -> i64 {
    let entry = Entry {
        actor: "otto",
        broker: "b",
        vhost: "v",
        queue: "q",
        action: "requeue",
        request: "{}".into(),
        run_by: replica,
    };
    audit::start(store, entry).await.unwrap()
}

fn moved(position: usize, id: &str) -> Fate {
    Fate::new(position, Some(id), "moved", "orders")
}

async fn checkpoints_count_and_the_end_lists_moved_ids_by_position(store: &Store) {
    let id = requeue(store).await;
    let failed = Fate::new(2, None, "failed", "unroutable");
    fates::checkpoint(store, id, &[moved(3, "m-3"), failed, moved(1, "m-1")]).await.unwrap();
    let running = audit::get(store, id).await.unwrap().unwrap();
    assert_eq!((running.outcome.as_str(), running.moved, running.failed), ("running", 2, 1));
    assert_eq!(running.message_ids, serde_json::json!([]), "listed once the action ends");

    let held = Fate::new(4, Some("m-4"), "held", "warren.holding");
    fates::finish(store, id, "partial", 3, 1, Some("one unroutable"), &[moved(0, "m-0"), held]).await.unwrap();
    let done = audit::get(store, id).await.unwrap().unwrap();
    assert_eq!((done.outcome.as_str(), done.moved, done.failed), ("partial", 3, 1));
    assert_eq!(done.detail.as_deref(), Some("one unroutable"));
    assert_eq!(done.message_ids, serde_json::json!(["m-0", "m-1", "m-3"]));

    // An action with no fates ends with an empty list, not a null.
    let purge = requeue(store).await;
    fates::finish(store, purge, "done", 12, 0, None, &[]).await.unwrap();
    let done = audit::get(store, purge).await.unwrap().unwrap();
    assert_eq!((done.outcome.as_str(), done.moved, done.message_ids), ("done", 12, serde_json::json!([])));
    assert!(fates::messages(store, purge).await.unwrap().is_empty());
}

async fn fates_read_back_by_position_in_the_order_written(store: &Store) {
    let id = requeue(store).await;
    let other = requeue(store).await;
    // A position can have two fates (held, then moved from the holding queue): the order they
    // were written in is kept, across checkpoints too.
    fates::checkpoint(store, id, &[Fate::new(5, Some("é ✓ 😀"), "held", "warren.holding"), moved(2, "b")])
        .await
        .unwrap();
    fates::checkpoint(store, other, &[moved(1, "elsewhere")]).await.unwrap();
    fates::finish(store, id, "done", 3, 0, None, &[moved(5, "é ✓ 😀"), Fate::new(2, Some("b"), "not_found", "")])
        .await
        .unwrap();
    let read: Vec<_> = fates::messages(store, id)
        .await
        .unwrap()
        .into_iter()
        .map(|r| (r.position, r.message_id, r.outcome, r.detail))
        .collect();
    let s = |t: &str| t.to_string();
    assert_eq!(
        read,
        [
            (2, Some(s("b")), s("moved"), s("orders")),
            (2, Some(s("b")), s("not_found"), s("")),
            (5, Some(s("é ✓ 😀")), s("held"), s("warren.holding")),
            (5, Some(s("é ✓ 😀")), s("moved"), s("orders")),
        ]
    );
    let done = audit::get(store, id).await.unwrap().unwrap();
    assert_eq!(done.message_ids, serde_json::json!(["b", "é ✓ 😀"]));
    assert_eq!(fates::messages(store, other).await.unwrap().len(), 1);
}

async fn an_unfinished_action_is_marked_interrupted_and_left_so(store: &Store) {
    let started = requeue(store).await;
    let running = requeue(store).await;
    let finished = requeue(store).await;
    fates::checkpoint(store, running, &[moved(1, "m-1")]).await.unwrap();
    fates::finish(store, finished, "done", 0, 0, None, &[]).await.unwrap();

    assert_eq!(fates::mark_interrupted(store, "r-survivor").await.unwrap(), 2);
    for id in [started, running] {
        let entry = audit::get(store, id).await.unwrap().unwrap();
        assert_eq!(entry.outcome, "interrupted");
        assert!(entry.detail.unwrap().contains("none is lost"));
    }
    assert_eq!(audit::get(store, finished).await.unwrap().unwrap().outcome, "done");
    let interrupted = audit::get(store, running).await.unwrap().unwrap();
    assert_eq!(interrupted.moved, 1, "the counts of the last checkpoint");

    // A late checkpoint of an interrupted action keeps its fates but not a `running` outcome.
    fates::checkpoint(store, running, &[moved(2, "m-2")]).await.unwrap();
    let entry = audit::get(store, running).await.unwrap().unwrap();
    assert_eq!((entry.outcome.as_str(), entry.moved), ("interrupted", 1));
    assert_eq!(fates::messages(store, running).await.unwrap().len(), 2);
    assert_eq!(fates::mark_interrupted(store, "r-survivor").await.unwrap(), 0, "nothing left running");
}

async fn thousands_of_fates_are_kept_in_one_finish(store: &Store) {
    let id = requeue(store).await;
    let ids: Vec<String> = (0..2_345).map(|i| format!("m-{i}")).collect();
    let all: Vec<Fate> = ids.iter().enumerate().map(|(i, m)| moved(i, m)).collect();
    fates::checkpoint(store, id, &all[..1_001]).await.unwrap();
    fates::finish(store, id, "done", ids.len(), 0, None, &all[1_001..]).await.unwrap();
    let read = fates::messages(store, id).await.unwrap();
    assert_eq!(read.iter().map(|r| r.message_id.clone().unwrap()).collect::<Vec<_>>(), ids);
    let done = audit::get(store, id).await.unwrap().unwrap();
    assert_eq!(done.message_ids, serde_json::json!(ids));
    assert_eq!(done.moved, 2_345);
}

/// An AMQP message id may hold a NUL, which PostgreSQL's text cannot: it reads back as U+FFFD
/// there, and the action's end is written all the same.
async fn a_message_id_with_a_nul_is_kept(store: &Store) {
    let id = requeue(store).await;
    fates::finish(store, id, "done", 1, 0, Some("to a\0b"), &[Fate::new(1, Some("m\0x"), "moved", "q\0")])
        .await
        .unwrap();
    let kept = if store.backend() == "postgres" { "m\u{FFFD}x" } else { "m\0x" };
    let read = fates::messages(store, id).await.unwrap();
    assert_eq!(read[0].message_id.as_deref(), Some(kept));
    assert_eq!(audit::get(store, id).await.unwrap().unwrap().message_ids, serde_json::json!([kept]));
}

/// Several replicas on one database (issue 33): recovery marks interrupted only the actions of
/// a dead replica (its heartbeat let go at a stop, or run out after a kill) and those that name
/// none (rows from before replicas). A live replica's action, and the survivor's own (even
/// without a heartbeat), run on.
async fn only_a_dead_replicas_actions_are_marked_interrupted(store: &Store) {
    let replicas = crate::Replicas::start(store).await;
    let of_live = requeue_by(store, replicas.live.id()).await;
    fates::checkpoint(store, of_live, &[moved(1, "m-1")]).await.unwrap();
    let of_stopped = requeue_by(store, replicas.stopped.id()).await;
    let of_killed = requeue_by(store, replicas.killed.id()).await;
    let of_survivor = requeue_by(store, "r-survivor").await;
    let before_replicas = store
        .insert_entry(warren::storage::audit::NewEntry {
            at: 0,
            kind: audit::Kind::Action,
            actor: "otto",
            source: None,
            broker: "b",
            vhost: "v",
            queue: "q",
            action: "requeue",
            request: "{}",
            outcome: "running",
            detail: None,
            run_by: None,
        })
        .await
        .unwrap();
    let outcome = |id: i64| async move { audit::get(store, id).await.unwrap().unwrap().outcome };

    assert_eq!(fates::mark_interrupted(store, "r-survivor").await.unwrap(), 2, "the stopped one's and the old one");
    assert_eq!(outcome(of_stopped).await, "interrupted");
    assert_eq!(outcome(before_replicas).await, "interrupted");
    assert_eq!(outcome(of_live).await, "running");
    assert_eq!(outcome(of_killed).await, "started", "its heartbeat has not run out yet");
    assert_eq!(outcome(of_survivor).await, "started");

    replicas.until_killed_is_dead(store).await;
    assert_eq!(fates::mark_interrupted(store, "r-survivor").await.unwrap(), 1);
    assert_eq!(outcome(of_killed).await, "interrupted");
    assert_eq!(outcome(of_live).await, "running");
    assert_eq!(outcome(of_survivor).await, "started");
    // The live replica's action ends as it would have.
    fates::finish(store, of_live, "done", 1, 0, None, &[]).await.unwrap();
    assert_eq!(outcome(of_live).await, "done");
}

/// SQLite's file has one process: at start, another replica's heartbeat is a killed process's,
/// and its actions and claims are recovered at once, not a lease time later. On PostgreSQL that
/// replica may be alive on another machine: left alone.
async fn on_sqlite_the_start_recovers_a_killed_process_at_once(store: &Store) {
    let killed = warren::replicas::Replica::new(store.clone(), std::time::Duration::from_secs(60), vec![]);
    killed.round().await.unwrap();
    let of_killed = requeue_by(store, killed.id()).await;
    let starting = warren::replicas::holder_id();
    let recovered = warren::dlq::recover_at_start(store, &starting).await.unwrap();
    let outcome = audit::get(store, of_killed).await.unwrap().unwrap().outcome;
    if store.backend() == "sqlite" {
        assert_eq!((recovered, outcome.as_str()), ((1, 0), "interrupted"));
    } else {
        assert_eq!((recovered, outcome.as_str()), ((0, 0), "started"));
    }
}
