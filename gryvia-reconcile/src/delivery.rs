//! The delivery log of outbound messages, as pure functions: job hooks' webhooks and budget
//! alerts (webhook and e-mail) are delivered at least once from a log in their object's status.
//!
//! Every message becomes a log entry first (state `Pending`, a stable id the receiver can drop
//! duplicates by); a reconcile sends the due ones ([`due`]) and records what came of each
//! attempt ([`record`]): `Delivered` on a success, otherwise another attempt after a backoff
//! that doubles from [`FIRST_RETRY`] up to [`MAX_RETRY`], and `GaveUp` after the allowed
//! attempts. The log keeps every pending entry and the newest finished ones ([`prune`]).

use std::time::Duration;

use gryvia_types::k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use gryvia_types::{AlertDelivery, DeliveryState, HookDelivery, WebhookDelivery};

use crate::{Delivery, Timestamp};

/// Wait before the second attempt of a delivery; it doubles with every further attempt.
pub const FIRST_RETRY: Duration = Duration::from_secs(5);
/// The longest wait between two attempts.
pub const MAX_RETRY: Duration = Duration::from_secs(300);
/// Finished entries kept in a log (the newest; pending ones are always kept).
pub const KEPT: usize = 100;
/// Deliveries attempted in one reconcile (the rest follow right after).
pub const BATCH: usize = 10;

/// An entry of a delivery log.
pub trait Entry {
    /// The message's id.
    fn id(&self) -> &str;
    /// Where it stands.
    fn state(&self) -> DeliveryState;
    /// Attempts so far and when the last one was made.
    fn attempted(&self) -> (i32, Option<Timestamp>);
    /// Records an attempt made at `at`: the answer's code, the failure, and the new state.
    fn attempt(
        &mut self,
        at: Timestamp,
        code: Option<i32>,
        error: Option<String>,
        state: DeliveryState,
    );
}

macro_rules! entry {
    ($t:ty) => {
        impl Entry for $t {
            fn id(&self) -> &str {
                &self.id
            }

            fn state(&self) -> DeliveryState {
                self.state
            }

            fn attempted(&self) -> (i32, Option<Timestamp>) {
                (self.attempts, self.last_attempt.as_ref().map(|t| t.0))
            }

            fn attempt(
                &mut self,
                at: Timestamp,
                code: Option<i32>,
                error: Option<String>,
                state: DeliveryState,
            ) {
                self.attempts += 1;
                self.last_attempt = Some(Time(at));
                self.response_code = code;
                self.error = error;
                self.state = state;
            }
        }
    };
}

entry!(HookDelivery);
entry!(AlertDelivery);
entry!(WebhookDelivery);

/// The wait after `attempts` failed attempts before the next one.
pub fn backoff(attempts: i32) -> Duration {
    let doublings = u32::try_from(attempts.saturating_sub(1).clamp(0, 16)).unwrap_or(0);
    FIRST_RETRY.saturating_mul(1 << doublings).min(MAX_RETRY)
}

/// `t` plus `d` (`t` itself when that is out of range).
pub fn plus(t: Timestamp, d: Duration) -> Timestamp {
    t.checked_add(jiff::SignedDuration::try_from(d).unwrap_or(jiff::SignedDuration::MAX))
        .unwrap_or(t)
}

/// `t` minus `d` (`t` itself when that is out of range).
pub fn minus(t: Timestamp, d: Duration) -> Timestamp {
    t.checked_sub(jiff::SignedDuration::try_from(d).unwrap_or(jiff::SignedDuration::ZERO))
        .unwrap_or(t)
}

/// When a pending entry is due: `None` (now) before its first attempt.
pub fn due_at(e: &impl Entry) -> Option<Timestamp> {
    match e.attempted() {
        (n, Some(t)) if n > 0 => Some(plus(t, backoff(n))),
        _ => None,
    }
}

/// The pending entries of `log` due at `now` (at most [`BATCH`], in log order), and how long
/// until the next of the others is due (`None` when there is none).
pub fn due<E: Entry>(log: &[E], now: Timestamp) -> (Vec<&E>, Option<Duration>) {
    let mut send = Vec::new();
    let mut wake: Option<Duration> = None;
    for e in log.iter().filter(|e| e.state() == DeliveryState::Pending) {
        let at = due_at(e);
        if at.is_none_or(|t| t <= now) && send.len() < BATCH {
            send.push(e);
            continue;
        }
        let wait = at
            .map_or(Duration::ZERO, |t| {
                Duration::try_from(t.duration_since(now)).unwrap_or(Duration::ZERO)
            })
            .max(Duration::from_secs(1));
        wake = Some(wake.map_or(wait, |w| w.min(wait)));
    }
    (send, wake)
}

/// What an attempt led to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Recorded {
    /// It succeeded.
    Delivered,
    /// It failed, and it was the last attempt allowed: why.
    GaveUp(String),
    /// It failed; the next attempt is due after this.
    RetryIn(Duration),
}

/// Records `outcome` in the log entry it is about (`None` when the log has none), made at
/// `now`, with `max_attempts` allowed in all.
pub fn record<E: Entry>(
    log: &mut [E],
    outcome: &Delivery,
    max_attempts: i32,
    now: Timestamp,
) -> Option<Recorded> {
    let e = log.iter_mut().find(|e| e.id() == outcome.id)?;
    let code = outcome.status.map(i32::from);
    let failure = outcome.failure();
    let attempts = e.attempted().0 + 1;
    let (state, recorded) = match &failure {
        None => (DeliveryState::Delivered, Recorded::Delivered),
        Some(why) if attempts >= max_attempts => {
            (DeliveryState::GaveUp, Recorded::GaveUp(why.clone()))
        }
        Some(_) => (DeliveryState::Pending, Recorded::RetryIn(backoff(attempts))),
    };
    e.attempt(now, code, failure, state);
    Some(recorded)
}

/// What the outcomes of one reconcile's deliveries led to, together.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Outcomes {
    /// How many succeeded.
    pub delivered: usize,
    /// The ids of those given up, and why.
    pub gave_up: Vec<(String, String)>,
    /// When the earliest of those to retry is due.
    pub retry_in: Option<Duration>,
}

/// Records every outcome of `outcomes` in `log` ([`record`]).
pub fn record_all<E: Entry>(
    log: &mut [E],
    outcomes: &[Delivery],
    max_attempts: i32,
    now: Timestamp,
) -> Outcomes {
    let mut out = Outcomes::default();
    for outcome in outcomes {
        match record(log, outcome, max_attempts, now) {
            Some(Recorded::Delivered) => out.delivered += 1,
            Some(Recorded::GaveUp(why)) => out.gave_up.push((outcome.id.clone(), why)),
            Some(Recorded::RetryIn(wait)) => {
                out.retry_in = Some(out.retry_in.map_or(wait, |r| r.min(wait)));
            }
            None => {}
        }
    }
    out
}

/// Keeps every pending entry and the newest [`KEPT`] finished ones (entries are appended, so
/// the oldest finished ones go first).
pub fn prune<E: Entry>(log: &mut Vec<E>) {
    let done = log
        .iter()
        .filter(|e| e.state() != DeliveryState::Pending)
        .count();
    let mut drop = done.saturating_sub(KEPT);
    log.retain(|e| {
        if drop > 0 && e.state() != DeliveryState::Pending {
            drop -= 1;
            return false;
        }
        true
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use gryvia_types::AlertChannel;
    use gryvia_types::money::Decimal;

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn entry(id: &str) -> AlertDelivery {
        AlertDelivery {
            id: id.to_owned(),
            channel: AlertChannel::Webhook,
            threshold: 50,
            percent: 51,
            spend_usd: Decimal::from_micros(51_000_000),
            gpu_hours: Decimal::from_micros(0),
            period_start: Time(ts("2026-12-01T00:00:00Z")),
            time: Time(ts("2026-12-04T10:00:00Z")),
            attempts: 0,
            last_attempt: None,
            response_code: None,
            error: None,
            state: DeliveryState::Pending,
        }
    }

    fn answered(id: &str, status: u16) -> Delivery {
        Delivery {
            id: id.to_owned(),
            status: Some(status),
            error: None,
        }
    }

    #[test]
    fn the_wait_doubles_from_five_seconds_up_to_five_minutes() {
        let waits: Vec<u64> = (1..=9).map(|n| backoff(n).as_secs()).collect();
        assert_eq!(waits, [5, 10, 20, 40, 80, 160, 300, 300, 300]);
        assert_eq!(backoff(0).as_secs(), 5);
    }

    #[test]
    fn a_failed_attempt_is_retried_after_the_backoff_and_given_up_after_the_last() {
        let now = ts("2026-12-04T10:00:00Z");
        let mut log = vec![entry("a")];
        assert_eq!(
            record(&mut log, &answered("a", 503), 2, now),
            Some(Recorded::RetryIn(Duration::from_secs(5)))
        );
        assert_eq!(log[0].state, DeliveryState::Pending);
        assert_eq!(log[0].response_code, Some(503));
        assert_eq!(log[0].error.as_deref(), Some("answered HTTP 503"));
        // Not due before the backoff has passed.
        let (send, wake) = due(&log, ts("2026-12-04T10:00:02Z"));
        assert!(send.is_empty());
        assert_eq!(wake, Some(Duration::from_secs(3)));
        let (send, _) = due(&log, ts("2026-12-04T10:00:05Z"));
        assert_eq!(send.len(), 1);
        assert_eq!(
            record(&mut log, &answered("a", 500), 2, now),
            Some(Recorded::GaveUp("answered HTTP 500".to_owned()))
        );
        assert_eq!(log[0].state, DeliveryState::GaveUp);
        assert_eq!(log[0].attempts, 2);
        assert_eq!(due(&log, now), (Vec::new(), None));
    }

    #[test]
    fn a_success_is_recorded_once_and_an_unknown_id_changes_nothing() {
        let now = ts("2026-12-04T10:00:00Z");
        let mut log = vec![entry("a")];
        assert_eq!(record(&mut log, &answered("b", 200), 3, now), None);
        assert_eq!(log[0].attempts, 0);
        assert_eq!(
            record(&mut log, &answered("a", 250), 3, now),
            Some(Recorded::Delivered)
        );
        assert_eq!(log[0].state, DeliveryState::Delivered);
        assert_eq!(log[0].error, None);
    }

    #[test]
    fn at_most_a_batch_is_due_at_once_and_the_rest_wakes_the_reconcile() {
        let now = ts("2026-12-04T10:00:00Z");
        let log: Vec<AlertDelivery> = (0..BATCH + 3).map(|i| entry(&format!("d{i}"))).collect();
        let (send, wake) = due(&log, now);
        assert_eq!(send.len(), BATCH);
        assert_eq!(send[0].id, "d0");
        assert_eq!(wake, Some(Duration::from_secs(1)));
    }

    #[test]
    fn pruning_keeps_every_pending_entry_and_the_newest_finished_ones() {
        let mut log: Vec<AlertDelivery> = (0..KEPT + 5)
            .map(|i| {
                let mut e = entry(&format!("d{i}"));
                e.state = DeliveryState::Delivered;
                e
            })
            .collect();
        log.insert(0, entry("pending"));
        prune(&mut log);
        assert_eq!(log.len(), KEPT + 1);
        assert_eq!(log[0].id, "pending");
        assert_eq!(log[1].id, "d5");
    }
}
