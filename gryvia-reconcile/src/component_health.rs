//! What the storage and network health controllers share: a phase from what their nodes
//! report, its Ready condition, and a Plan that writes the status, records an Event when the
//! phase changes, and checks again later (readings go stale without an event).

use gryvia_types::ComponentPhase;
use gryvia_types::conditions::Status;

use crate::{EventType, Plan};

/// The condition type both controllers write: True when every node that reports is healthy.
pub const READY: &str = "Ready";
/// How often a component's status is worked out again.
pub const RECHECK_MS: u64 = 30_000;

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

/// The Ready condition's status and reason for `phase`, with the component's reasons for
/// healthy, degraded, unavailable and unknown.
pub fn ready(phase: ComponentPhase, reasons: [&'static str; 4]) -> (Status, &'static str) {
    match phase {
        ComponentPhase::Healthy => (Status::True, reasons[0]),
        ComponentPhase::Degraded => (Status::False, reasons[1]),
        ComponentPhase::Unavailable => (Status::False, reasons[2]),
        ComponentPhase::Unknown => (Status::Unknown, reasons[3]),
    }
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
