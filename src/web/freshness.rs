//! How old the data on a page is. Every live fragment renders one indicator
//! (`templates/_freshness.html`), so it is replaced together with the data it describes. The
//! server writes the absolute time, which is all a page without JavaScript needs;
//! `static/warren.js` ticks it as "Updated 4 s ago" and turns it into a stale warning when the
//! data stops coming (the broker is not polled, or warren does not answer the refreshes).

use chrono::{DateTime, Utc};

use crate::live::BrokerLive;
use crate::web::format;

/// How often the live fragments ask for themselves again: the `hx-trigger="every 5s"` of
/// their templates (a running job's page asks every second and says so itself).
pub const REFRESH_SECS: u64 = 5;

/// Warren's own data (audit log, alerts, a job) is never older than the answer that carried
/// it, so it goes stale only when answers stop coming: three refreshes missed, and never less
/// than this, since a busy warren (a move running, two cores) may answer one refresh late.
const MIN_STALE_AFTER_SECS: u64 = 10;

/// One indicator, as `_freshness.html` renders it.
pub struct Freshness {
    /// `live` (the fragment refreshes itself), `still` (rendered once: a paged view, a finished
    /// job) or `snapshot` (data as of a snapshot taken on request).
    pub kind: &'static str,
    /// When the data was obtained (unix seconds); `None` before there is any.
    pub updated_unix: Option<i64>,
    /// The same time as every time on the pages.
    pub updated: String,
    /// When the server rendered this (unix seconds). The script measures the age from here
    /// and its own clock's progress since, so a browser clock that is off shows no false age.
    pub rendered_unix: i64,
    /// Seconds between refreshes of a live fragment.
    pub every_secs: Option<u64>,
    /// Older than this, live data is stale.
    pub stale_after_secs: u64,
    /// Where live data comes from, for the stale warning: "from broker local", or empty for
    /// warren's own data.
    pub source: String,
    /// What the server says now: the absolute time, or already a stale warning.
    pub text: String,
    /// Stale already when rendered (a broker down for a while): the page without JavaScript
    /// says so too.
    pub stale: bool,
    /// A sentence after the time ("this page does not refresh itself").
    pub note: String,
}

impl Freshness {
    /// Data from the brokers' polls (a fragment refreshed every `every_secs`): as old as the
    /// oldest last successful poll among `brokers`. A broker never polled successfully shows
    /// no numbers ("—"), so it makes nothing on the page old.
    ///
    /// Stale past three refreshes, and never before two of the slowest broker's polls (its
    /// interval as stretched by the CPU budget) and one refresh went by: one slow or failed
    /// poll is not an outage yet, and the fragment itself adds up to one refresh of delay.
    pub fn polled(brokers: &[&BrokerLive], every_secs: u64) -> Freshness {
        let now = Utc::now();
        let oldest = brokers.iter().filter_map(|b| b.status.last_success.map(|t| (t, b.name.as_str()))).min();
        let poll_secs = brokers.iter().map(|b| b.load.interval_secs.max(b.load.base_interval_secs)).fold(0.0, f64::max);
        let stale_after_secs = (3 * every_secs).max(2 * poll_secs.ceil() as u64 + every_secs);
        let source = match oldest {
            Some((_, name)) => format!("from broker {name}"),
            None => String::new(),
        };
        let mut freshness = Freshness::at(oldest.map(|(t, _)| t), now, "live", Some(every_secs), stale_after_secs);
        freshness.source = source;
        if oldest.is_none() {
            freshness.text = "No data yet: waiting for the first successful poll.".to_string();
        }
        freshness.mark_stale_at(now);
        freshness
    }

    /// Warren's own data read for this answer (audit log, alert states, a job), in a fragment
    /// refreshed every `every_secs`.
    pub fn rendered(every_secs: u64) -> Freshness {
        let now = Utc::now();
        let stale_after_secs = (3 * every_secs).max(MIN_STALE_AFTER_SECS);
        Freshness::at(Some(now), now, "live", Some(every_secs), stale_after_secs)
    }

    /// Warren's own data read for this answer, in a view that does not refresh itself; `note`
    /// says why.
    pub fn still(note: &str) -> Freshness {
        let now = Utc::now();
        let mut freshness = Freshness::at(Some(now), now, "still", None, 0);
        freshness.text = format!("As of {}.", freshness.updated);
        freshness.note = note.to_string();
        freshness
    }

    /// A snapshot's messages: data as of when it was taken, not live.
    pub fn snapshot(taken_at: DateTime<Utc>) -> Freshness {
        let mut freshness = Freshness::at(Some(taken_at), Utc::now(), "snapshot", None, 0);
        freshness.text = format!("Snapshot taken {}:", freshness.updated);
        freshness.note = "the messages below are as of then, not live; Refresh takes a new snapshot.".to_string();
        freshness
    }

    fn at(
        updated: Option<DateTime<Utc>>,
        now: DateTime<Utc>,
        kind: &'static str,
        every_secs: Option<u64>,
        stale_after_secs: u64,
    ) -> Freshness {
        let text = format!("Updated {}.", format::time(updated));
        Freshness {
            kind,
            updated_unix: updated.map(|t| t.timestamp()),
            updated: format::time(updated),
            rendered_unix: now.timestamp(),
            every_secs,
            stale_after_secs,
            source: String::new(),
            text,
            stale: false,
            note: String::new(),
        }
    }

    /// Live data already older than the threshold says so in the server's text.
    fn mark_stale_at(&mut self, now: DateTime<Utc>) {
        let Some(updated) = self.updated_unix else { return };
        let age_secs = now.timestamp() - updated;
        if self.kind == "live" && age_secs > self.stale_after_secs as i64 {
            self.stale = true;
            self.text = format!(
                "Stale: no new data {} since {} ({} before this page was made).",
                self.source,
                self.updated,
                format::duration(age_secs as f64)
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn broker(name: &str, last_success_secs_ago: Option<i64>, poll_secs: f64) -> BrokerLive {
        let mut live = crate::live::Live::new(&[name.to_string()]).broker(name).expect("configured");
        live.status.last_success = last_success_secs_ago.map(|s| Utc::now() - chrono::Duration::seconds(s));
        live.load.interval_secs = poll_secs;
        live.load.base_interval_secs = poll_secs;
        live
    }

    #[test]
    fn polled_data_is_as_old_as_the_oldest_broker_that_has_data() {
        let (a, b, never) = (broker("a", Some(2), 1.0), broker("b", Some(8), 1.0), broker("c", None, 1.0));
        let f = Freshness::polled(&[&a, &b, &never], 5);
        assert_eq!(f.updated_unix, b.status.last_success.map(|t| t.timestamp()));
        assert_eq!(f.source, "from broker b");
        assert_eq!(f.stale_after_secs, 15, "three refreshes of 5 s");
        assert!(!f.stale && f.text.starts_with("Updated "), "{}", f.text);
    }

    #[test]
    fn a_slow_poll_interval_raises_the_threshold_and_old_data_is_stale_on_the_server_too() {
        let slow = broker("slow", Some(100), 30.0);
        let f = Freshness::polled(&[&slow], 5);
        assert_eq!(f.stale_after_secs, 65, "two polls of 30 s and one refresh");
        assert!(f.stale && f.text.starts_with("Stale: no new data from broker slow since "), "{}", f.text);
    }

    #[test]
    fn no_data_yet_is_not_an_age() {
        let f = Freshness::polled(&[&broker("a", None, 5.0)], 5);
        assert_eq!(f.updated_unix, None);
        assert!(!f.stale && f.text.starts_with("No data yet"), "{}", f.text);
    }
}
