//! What the storage and network health controllers share: a phase from what their nodes
//! report, its Ready condition, and a Plan that writes the status, records an Event when the
//! phase changes, and checks again later (readings go stale without an event).

use gryvia_types::ComponentPhase;
use gryvia_types::conditions::{self, Status};
use gryvia_types::k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use gryvia_types::k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::{EventType, Plan, Timestamp};

/// The condition type both controllers write: True when every node that reports is healthy.
pub const READY: &str = "Ready";
/// How often a component's status is worked out again.
pub const RECHECK_MS: u64 = 30_000;
/// A reading older than this many of its writer's intervals (and at least
/// [`MIN_STALE_SECONDS`]) is stale.
pub const STALE_INTERVALS: i64 = 3;
/// The least age, seconds, that makes a reading stale.
pub const MIN_STALE_SECONDS: i64 = 60;
/// How many failing or silent nodes a status message names.
pub const NAMED_NODES: usize = 5;

/// Whether a reading written at `at` by something that writes every `interval_seconds` is
/// fresh at `now`: at most [`STALE_INTERVALS`] intervals old, and at least
/// [`MIN_STALE_SECONDS`] is always fresh. No time is never fresh.
pub fn fresh(at: Option<&Time>, interval_seconds: i32, now: Timestamp) -> bool {
    let stale_after = (i64::from(interval_seconds) * STALE_INTERVALS).max(MIN_STALE_SECONDS);
    at.is_some_and(|t| now.as_second() - t.0.as_second() <= stale_after)
}

/// A status message: `head`, then each node with what is wrong with it (the first
/// [`NAMED_NODES`]), then `silent` (`no fresh <what> from a, b`) when some nodes did not report.
pub fn message(
    head: String,
    problems: &[(String, String)],
    what: &str,
    silent: &[String],
) -> String {
    let mut parts = vec![head];
    parts.extend(
        problems
            .iter()
            .take(NAMED_NODES)
            .map(|(node, why)| format!("{node}: {why}")),
    );
    if !silent.is_empty() {
        let shown: Vec<&str> = silent
            .iter()
            .take(NAMED_NODES)
            .map(String::as_str)
            .collect();
        parts.push(format!("no fresh {what} from {}", shown.join(", ")));
    }
    parts.join("; ")
}

/// The phase from how many nodes reported, how many of those failed outright, and how many
/// have a lesser problem (slow): Unknown when none reported, Unavailable when all failed,
/// Degraded when any failed or has a problem, else Healthy.
pub fn phase(reporting: usize, failing: usize, impaired: usize) -> ComponentPhase {
    match (reporting, failing, impaired) {
        (0, _, _) => ComponentPhase::Unknown,
        (r, f, _) if f == r => ComponentPhase::Unavailable,
        (_, 0, 0) => ComponentPhase::Healthy,
        _ => ComponentPhase::Degraded,
    }
}

/// Sets the [`READY`] condition for `phase` in `conditions`, with the component's reasons for
/// healthy, degraded, unavailable and unknown, and `message`.
pub fn set_ready(
    conditions: &mut Vec<Condition>,
    phase: ComponentPhase,
    reasons: [&'static str; 4],
    message: &str,
    generation: Option<i64>,
    now: Timestamp,
) {
    let (status, reason) = match phase {
        ComponentPhase::Healthy => (Status::True, reasons[0]),
        ComponentPhase::Degraded => (Status::False, reasons[1]),
        ComponentPhase::Unavailable => (Status::False, reasons[2]),
        ComponentPhase::Unknown => (Status::Unknown, reasons[3]),
    };
    conditions::set(
        conditions,
        conditions::new(READY, status, reason, message, generation, now),
    );
}

/// The Plan that writes `status`: an Event `<kind><Phase>` with `message` when the phase went
/// from `before` to `after` (a Warning for Degraded and Unavailable), and a recheck after
/// [`RECHECK_MS`].
pub fn plan<S>(
    kind: &str,
    before: Option<ComponentPhase>,
    after: Option<ComponentPhase>,
    message: &str,
    status: S,
) -> Plan<S> {
    let mut plan = Plan::new();
    if before != after
        && let Some(phase) = after
    {
        let type_ = if matches!(phase, ComponentPhase::Healthy | ComponentPhase::Unknown) {
            EventType::Normal
        } else {
            EventType::Warning
        };
        plan.event(type_, &format!("{kind}{phase:?}"), message.to_owned());
    }
    plan.status = Some(status);
    plan.requeue_after_ms = Some(RECHECK_MS);
    plan
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_phase_follows_what_the_reporting_nodes_found() {
        assert_eq!(phase(0, 0, 0), ComponentPhase::Unknown);
        assert_eq!(phase(3, 0, 0), ComponentPhase::Healthy);
        assert_eq!(phase(3, 1, 0), ComponentPhase::Degraded);
        assert_eq!(phase(3, 0, 1), ComponentPhase::Degraded);
        assert_eq!(phase(3, 3, 0), ComponentPhase::Unavailable);
    }

    #[test]
    fn a_reading_is_fresh_for_three_intervals_and_at_least_a_minute() {
        let at = |s: i64| Time(Timestamp::from_second(1_800_000_000 + s).unwrap());
        let now = Timestamp::from_second(1_800_000_100).unwrap();
        assert!(fresh(Some(&at(40)), 10, now));
        assert!(!fresh(Some(&at(39)), 10, now));
        assert!(fresh(Some(&at(-50)), 50, now));
        assert!(!fresh(None, 10, now));
    }

    #[test]
    fn a_message_names_the_first_problems_and_the_silent_nodes() {
        let problems: Vec<(String, String)> = (0..7)
            .map(|i| (format!("n{i}"), "down".to_owned()))
            .collect();
        let m = message(
            "head".into(),
            &problems,
            "signal",
            &["s1".into(), "s2".into()],
        );
        assert_eq!(
            m,
            "head; n0: down; n1: down; n2: down; n3: down; n4: down; no fresh signal from s1, s2"
        );
        assert_eq!(message("head".into(), &[], "probe", &[]), "head");
    }

    #[test]
    fn an_event_only_when_the_phase_changes_a_warning_when_it_got_worse() {
        let p = plan("Storage", None, Some(ComponentPhase::Degraded), "why", ());
        assert_eq!(p.events.len(), 1);
        assert_eq!(
            (p.events[0].type_, p.events[0].reason.as_str()),
            (EventType::Warning, "StorageDegraded")
        );
        assert_eq!(p.requeue_after_ms, Some(RECHECK_MS));
        let p = plan(
            "Network",
            Some(ComponentPhase::Degraded),
            Some(ComponentPhase::Healthy),
            "ok",
            (),
        );
        assert_eq!(p.events[0].type_, EventType::Normal);
        let p = plan(
            "Network",
            Some(ComponentPhase::Healthy),
            Some(ComponentPhase::Healthy),
            "ok",
            (),
        );
        assert!(p.events.is_empty());
    }
}
