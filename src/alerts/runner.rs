//! The alert loop: after every poll, evaluate the rules over the live data, decide who is told
//! what, and record the phase changes, the states (so a restart neither forgets nor re-sends an
//! alert) and the notifications to send (in the outbox) in one transaction. The channels' tasks
//! deliver from the outbox; this loop never waits for a receiver.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio_util::sync::CancellationToken;

use super::notify::{Notification, NotificationKind};
use super::store::{self, Silence};
use super::{AlertKey, AlertPhase, AlertState, BrokerInput, Evaluator, Rule, Transition};
use crate::config::Config;
use crate::live::Live;
use crate::storage::Store;

/// What the alert loop uses of warren's shared handles (`AppState::alerts` hands it over): the
/// alerts sit below the state that holds them.
#[derive(Clone)]
pub struct Handles {
    pub config: std::sync::Arc<Config>,
    pub db: Store,
    pub live: Live,
    /// The rules of the file (`[[alerts]]`), as the wing read them.
    pub config_rules: std::sync::Arc<Vec<super::Rule>>,
    pub notifier: super::notify::Dispatcher,
    /// Which brokers this replica evaluates: those whose leases it holds (`replicas`).
    pub replica: std::sync::Arc<crate::replicas::Replica>,
}

/// What to tell about one alert.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tell {
    /// Fired, or still firing and never told (it fired during a silence that has ended).
    Firing,
    /// Still firing, and the repeat interval has passed since it was last told.
    Reminder,
    /// Resolved after it was told it fired.
    Resolved,
}

/// One notification to send.
#[derive(Debug, Clone)]
pub struct Outgoing {
    pub tell: Tell,
    pub rule: Rule,
    pub key: AlertKey,
    pub value: Option<f64>,
    pub at: DateTime<Utc>,
    pub note: Option<String>,
}

/// Runs until `cancel`: one evaluation after each poll of any broker. The alerts of a broker are
/// evaluated by the replica that holds its lease; a replica that takes a broker over continues
/// from the states the previous one stored (`Evaluator::hand_over`).
pub async fn run(handles: Handles, cancel: CancellationToken) {
    let mut evaluator = Evaluator::new(Vec::new());
    let mut evaluated = BTreeSet::new();
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = handles.live.next_poll() => {}
        }
        if let Err(e) = evaluate_once(&handles, &mut evaluator, &mut evaluated, Utc::now()).await {
            tracing::error!(error = %e, "alert evaluation failed; will retry after the next poll");
        }
    }
}

/// The page of an alert's queue, or of its broker, under warren's public address.
pub fn dashboard_url(base: &reqwest::Url, key: &AlertKey) -> String {
    // A name that is `.` or `..` would be resolved away as a dot segment.
    let encode_segment = |s: &str| match crate::broker::management::encode_segment(s) {
        dots if dots == "." || dots == ".." => dots.replace('.', "%2E"),
        encoded => encoded,
    };
    let path = match (&key.vhost, &key.queue) {
        (Some(vhost), Some(queue)) => {
            format!("queues/{}/{}/{}", encode_segment(&key.broker), encode_segment(vhost), encode_segment(queue))
        }
        _ if key.node.is_some() => format!("brokers/{}/nodes", encode_segment(&key.broker)),
        _ => format!("brokers/{}", encode_segment(&key.broker)),
    };
    // Under the base's path (`https://x/warren` is meant as the folder `warren`), as text: a
    // URL parser would resolve the dot segments.
    format!("{}/{path}", base.as_str().trim_end_matches('/'))
}

impl Outgoing {
    fn notification(&self) -> Notification {
        let kind = match self.tell {
            Tell::Firing => NotificationKind::Firing,
            Tell::Reminder => NotificationKind::Reminder,
            Tell::Resolved => NotificationKind::Resolved,
        };
        Notification::for_rule(kind, &self.rule, self.key.clone(), self.value, self.at, self.note.clone())
    }
}

/// One evaluation: rules from the config and the database, the live data of every broker
/// polled at least once whose lease this replica holds, silences applied. Its history, states
/// and notifications (in the outbox, for the dispatcher's current channels) are written in one
/// transaction fenced with those leases, so a crash either keeps all or loses the evaluation,
/// which the next poll redoes, and a replica that lost a lease writes nothing of it. Returns
/// what was queued. `evaluated`: the brokers the previous evaluation was for.
pub async fn evaluate_once(
    handles: &Handles,
    evaluator: &mut Evaluator,
    evaluated: &mut BTreeSet<String>,
    now: DateTime<Utc>,
) -> Result<Vec<Outgoing>, sqlx::Error> {
    let leases: BTreeMap<String, crate::storage::Held> = handles
        .config
        .brokers
        .iter()
        .filter_map(|b| Some((b.name.clone(), handles.replica.held(&crate::replicas::broker_work(&b.name))?)))
        .collect();
    let held: BTreeSet<String> = leases.keys().cloned().collect();
    if held != *evaluated {
        // Brokers taken over continue from what their previous replica stored.
        let taken: Vec<AlertState> = store::states(&handles.db)
            .await?
            .into_iter()
            .map(|s| s.state)
            .filter(|s| held.contains(&s.key.broker) && !evaluated.contains(&s.key.broker))
            .collect();
        evaluator.hand_over(|broker| held.contains(broker) && evaluated.contains(broker), taken);
        *evaluated = held.clone();
    }
    let rules: Vec<Rule> =
        store::all_rules(&handles.config_rules, &handles.db).await?.into_iter().map(|r| r.rule).collect();
    evaluator.set_rules(rules.clone());
    let live = handles.live.snapshot();
    // A broker not polled yet is left out: "up with no queues" would read as every queue gone.
    // So is one this replica does not hold: "a broker missing holds everything".
    let inputs: Vec<BrokerInput> = live
        .iter()
        .filter(|b| held.contains(&b.name))
        .filter_map(|b| {
            b.status.up.map(|up| BrokerInput {
                name: &b.name,
                up,
                queues: &b.queues,
                values: super::value::broker_values(b),
                nodes: Some(&b.nodes),
            })
        })
        .collect();
    let transitions = evaluator.evaluate(now, &inputs);
    let silences = store::silences(&handles.db, true).await?;
    // What was queued, not what was delivered: a firing waiting in the outbox is not planned again.
    let told: HashMap<(String, AlertKey), Option<DateTime<Utc>>> =
        store::states(&handles.db).await?.into_iter().map(|s| ((s.state.rule_id, s.state.key), s.queued_at)).collect();
    let repeat = handles.config.alert_repeat;
    let plan = plan(&rules, &transitions, &evaluator.states(), &told, &silences, repeat, now);
    // Queued now (firing or reminder), or as before.
    let states: Vec<(AlertState, Option<DateTime<Utc>>)> = evaluator
        .states()
        .into_iter()
        .map(|s| {
            let id = (s.rule_id.clone(), s.key.clone());
            let now_told = plan.outgoing.iter().any(|o| o.tell != Tell::Resolved && o.rule.id == id.0 && o.key == id.1);
            let at = if now_told { Some(now) } else { told.get(&id).copied().flatten() };
            (s, at)
        })
        .collect();
    let mut tx = handles.db.begin().await?;
    for lease in leases.values() {
        if !tx.fence(lease).await? {
            // Dropped: rolled back. The replica that took the broker evaluates it from the
            // states stored before this evaluation, so nothing it found is lost.
            tracing::warn!(lease = lease.name, "alert evaluation not kept: another replica took a broker's lease");
            *evaluated = BTreeSet::new();
            return Ok(Vec::new());
        }
    }
    store::record(&mut *tx, &plan.history, &states, &held).await?;
    let mut queued = Vec::with_capacity(plan.outgoing.len());
    for o in &plan.outgoing {
        let mut notification = o.notification();
        notification.dashboard_url = handles.config.public_url.as_ref().map(|base| dashboard_url(base, &o.key));
        // "does not answer" alone sends the reader to warren to learn why: say it here.
        if o.rule.metric == super::Metric::BrokerUnreachable && o.tell != Tell::Resolved {
            let error = live.iter().find(|b| b.name == o.key.broker).and_then(|b| b.status.error.clone());
            if let Some(error) = error {
                notification.description = format!("{}: {error}", notification.description);
            }
        }
        queued.push(handles.notifier.enqueue(&mut *tx, &notification).await?);
    }
    tx.commit().await?;
    handles.notifier.wake();
    for (o, channels) in plan.outgoing.iter().zip(queued) {
        tracing::info!(rule = %o.rule.id, key = %o.key, tell = ?o.tell, channels, "alert notification queued");
    }
    Ok(plan.outgoing)
}

struct Plan {
    /// Every transition, with whether a silence held back its notification.
    history: Vec<(Transition, bool)>,
    outgoing: Vec<Outgoing>,
}

/// Who is told what (pure): a firing alert is told once, when it is not silenced (so a silence
/// that ends lets it through), then reminded every `repeat`; a resolved alert is told only if
/// its firing was.
fn plan(
    rules: &[Rule],
    transitions: &[Transition],
    states: &[AlertState],
    told: &HashMap<(String, AlertKey), Option<DateTime<Utc>>>,
    silences: &[Silence],
    repeat: Option<Duration>,
    now: DateTime<Utc>,
) -> Plan {
    let silenced = |rule: &str, key: &AlertKey| silences.iter().any(|s| s.covers(rule, key, now));
    let rule = |id: &str| rules.iter().find(|r| r.id == id);
    let mut outgoing = Vec::new();
    let history = transitions.iter().map(|t| (t.clone(), silenced(&t.rule_id, &t.key))).collect();
    for t in transitions.iter().filter(|t| t.to == AlertPhase::Resolved) {
        let was_told = told.get(&(t.rule_id.clone(), t.key.clone())).is_some_and(Option::is_some);
        // A removed rule is no longer in `rules`: its resolution goes untold, and the history
        // keeps the record.
        if let (true, false, Some(rule)) = (was_told, silenced(&t.rule_id, &t.key), rule(&t.rule_id)) {
            outgoing.push(Outgoing {
                tell: Tell::Resolved,
                rule: rule.clone(),
                key: t.key.clone(),
                value: t.value,
                at: t.at,
                note: t.note.clone(),
            });
        }
    }
    for s in states.iter().filter(|s| s.phase == AlertPhase::Firing) {
        if silenced(&s.rule_id, &s.key) {
            continue;
        }
        let Some(rule) = rule(&s.rule_id) else { continue };
        let tell = match told.get(&(s.rule_id.clone(), s.key.clone())).copied().flatten() {
            None => Tell::Firing,
            Some(at) if repeat.is_some_and(|r| now - at >= chrono::Duration::from_std(r).unwrap_or_default()) => {
                Tell::Reminder
            }
            Some(_) => continue,
        };
        outgoing.push(Outgoing {
            tell,
            rule: rule.clone(),
            key: s.key.clone(),
            value: s.last_value,
            at: now,
            note: None,
        });
    }
    Plan { history, outgoing }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule() -> Rule {
        serde_json::from_value(serde_json::json!({"id": "deep", "name": "Deep", "metric": "ready",
            "comparator": ">", "threshold": 10, "severity": "warning"}))
        .expect("a valid rule")
    }

    fn key() -> AlertKey {
        AlertKey::queue("local", "/", "work")
    }

    fn firing(now: DateTime<Utc>) -> AlertState {
        AlertState {
            rule_id: "deep".into(),
            key: key(),
            phase: AlertPhase::Firing,
            active_since: now,
            fired_at: Some(now),
            false_since: None,
            last_value: Some(11.0),
            observed_at: now,
        }
    }

    fn silence(until: DateTime<Utc>) -> Silence {
        Silence {
            id: 1,
            rule_id: Some("deep".into()),
            key: None,
            until,
            comment: "deploying".into(),
            created_by: "ops".into(),
            created_at: until,
        }
    }

    fn tells(plan: &Plan) -> Vec<Tell> {
        plan.outgoing.iter().map(|o| o.tell).collect()
    }

    #[test]
    fn a_firing_alert_is_told_once_then_reminded_after_the_repeat_interval() {
        let t0 = Utc::now();
        let hour = Some(Duration::from_secs(3600));
        let never = HashMap::new();
        let states = [firing(t0)];
        assert_eq!(tells(&plan(&[rule()], &[], &states, &never, &[], hour, t0)), vec![Tell::Firing]);
        let told = HashMap::from([(("deep".to_string(), key()), Some(t0))]);
        let later = t0 + chrono::Duration::minutes(59);
        assert!(tells(&plan(&[rule()], &[], &states, &told, &[], hour, later)).is_empty());
        let later = t0 + chrono::Duration::minutes(60);
        assert_eq!(tells(&plan(&[rule()], &[], &states, &told, &[], hour, later)), vec![Tell::Reminder]);
        assert!(tells(&plan(&[rule()], &[], &states, &told, &[], None, later)).is_empty(), "no repeat configured");
    }

    #[test]
    fn a_silence_holds_back_notifications_and_its_end_lets_them_through() {
        let t0 = Utc::now();
        let states = [firing(t0)];
        let never = HashMap::new();
        let silences = [silence(t0 + chrono::Duration::minutes(30))];
        let during = plan(&[rule()], &[], &states, &never, &silences, None, t0);
        assert!(tells(&during).is_empty());
        let after = plan(&[rule()], &[], &states, &never, &silences, None, t0 + chrono::Duration::minutes(31));
        assert_eq!(tells(&after), vec![Tell::Firing], "told once the silence ended");
    }

    #[test]
    fn resolved_is_told_only_when_the_firing_was() {
        let t0 = Utc::now();
        let resolved = Transition {
            rule_id: "deep".into(),
            key: key(),
            from: AlertPhase::Firing,
            to: AlertPhase::Resolved,
            value: Some(0.0),
            at: t0,
            note: None,
        };
        let told = HashMap::from([(("deep".to_string(), key()), Some(t0))]);
        let untold = HashMap::from([(("deep".to_string(), key()), None)]);
        let p = plan(&[rule()], std::slice::from_ref(&resolved), &[], &told, &[], None, t0);
        assert_eq!(tells(&p), vec![Tell::Resolved]);
        assert_eq!(p.history.len(), 1);
        assert!(tells(&plan(&[rule()], std::slice::from_ref(&resolved), &[], &untold, &[], None, t0)).is_empty());
    }
}

#[cfg(test)]
mod link_tests {
    use super::*;

    /// Issue 19, case 7: a notification links back to the alert's queue or broker under
    /// `public_url`, whatever the names hold.
    #[test]
    fn dashboard_links_keep_every_name_inside_the_public_path() {
        let key = |v: &str, q: &str| AlertKey::queue("local", v, q);
        let base = reqwest::Url::parse("https://ops.example/warren").unwrap();
        assert_eq!(dashboard_url(&base, &key("/", "orders")), "https://ops.example/warren/queues/local/%2F/orders");
        assert_eq!(dashboard_url(&base, &key("/", "..")), "https://ops.example/warren/queues/local/%2F/%2E%2E");
        assert_eq!(
            dashboard_url(&base, &key("a b", "x?y#z")),
            "https://ops.example/warren/queues/local/a%20b/x%3Fy%23z"
        );
        let root = reqwest::Url::parse("http://warren.example:8080/").unwrap();
        assert_eq!(dashboard_url(&root, &AlertKey::broker("eu 1")), "http://warren.example:8080/brokers/eu%201");
    }
}
