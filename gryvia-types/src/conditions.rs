//! Helpers for Kubernetes-style status conditions (`metav1.Condition`).
//!
//! Conditions are how every Gryvia status records what was done and why: a restarted operator
//! reads them back and continues. The helpers keep `lastTransitionTime` stable while the status
//! does not change, so reconciling twice emits no patch.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

/// Condition type: the object is reconciled and its children are in place.
pub const READY: &str = "Ready";
/// Condition type: the spec is valid (used by templates and other declarative kinds).
pub const VALID: &str = "Valid";
/// Reason: the spec failed validation; the message names the field.
pub const REASON_INVALID_SPEC: &str = "InvalidSpec";
/// Reason: everything the spec asks for is in place.
pub const REASON_RECONCILED: &str = "Reconciled";

/// The status of a condition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// `"True"`.
    True,
    /// `"False"`.
    False,
    /// `"Unknown"`.
    Unknown,
}

impl Status {
    /// The string Kubernetes stores.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::True => "True",
            Status::False => "False",
            Status::Unknown => "Unknown",
        }
    }
}

impl From<bool> for Status {
    fn from(value: bool) -> Self {
        if value { Status::True } else { Status::False }
    }
}

/// Builds a condition observed at `now`.
pub fn new(
    type_: &str,
    status: Status,
    reason: &str,
    message: impl Into<String>,
    observed_generation: Option<i64>,
    now: jiff::Timestamp,
) -> Condition {
    Condition {
        type_: type_.to_owned(),
        status: status.as_str().to_owned(),
        reason: reason.to_owned(),
        message: message.into(),
        observed_generation,
        last_transition_time: Time(now),
    }
}

/// Finds the condition of `type_`.
pub fn find<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// True when the condition of `type_` exists and has status `"True"`.
pub fn is_true(conditions: &[Condition], type_: &str) -> bool {
    find(conditions, type_).is_some_and(|c| c.status == "True")
}

/// Inserts or updates `cond` in `conditions`, keeping the list sorted by type.
///
/// # Guarantees
/// When a condition of the same type exists with the same status, its `lastTransitionTime` is
/// kept (only reason, message and generation are updated), so setting the same condition twice
/// yields an identical list. Returns true when anything changed.
pub fn set(conditions: &mut Vec<Condition>, mut cond: Condition) -> bool {
    match conditions.iter_mut().find(|c| c.type_ == cond.type_) {
        Some(existing) => {
            if existing.status == cond.status {
                cond.last_transition_time = existing.last_transition_time.clone();
            }
            if *existing == cond {
                return false;
            }
            *existing = cond;
            true
        }
        None => {
            conditions.push(cond);
            conditions.sort_by(|a, b| a.type_.cmp(&b.type_));
            true
        }
    }
}

/// Compares two condition lists ignoring `lastTransitionTime`.
pub fn same_ignoring_time(a: &[Condition], b: &[Condition]) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|(x, y)| {
            x.type_ == y.type_
                && x.status == y.status
                && x.reason == y.reason
                && x.message == y.message
                && x.observed_generation == y.observed_generation
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(secs: i64) -> jiff::Timestamp {
        jiff::Timestamp::from_second(secs).unwrap_or(jiff::Timestamp::UNIX_EPOCH)
    }

    #[test]
    fn setting_the_same_status_keeps_the_transition_time() {
        let mut conds = vec![];
        assert!(set(
            &mut conds,
            new(READY, Status::True, "A", "m", Some(1), t(10))
        ));
        assert!(!set(
            &mut conds,
            new(READY, Status::True, "A", "m", Some(1), t(20))
        ));
        assert_eq!(conds[0].last_transition_time, Time(t(10)));
    }

    #[test]
    fn a_status_change_moves_the_transition_time() {
        let mut conds = vec![new(READY, Status::True, "A", "m", None, t(10))];
        assert!(set(
            &mut conds,
            new(READY, Status::False, "B", "n", None, t(20))
        ));
        assert_eq!(conds[0].last_transition_time, Time(t(20)));
        assert!(!is_true(&conds, READY));
    }

    #[test]
    fn a_reason_change_keeps_time_but_reports_a_change() {
        let mut conds = vec![new(READY, Status::False, "A", "m", None, t(10))];
        assert!(set(
            &mut conds,
            new(READY, Status::False, "B", "m", None, t(20))
        ));
        assert_eq!(conds[0].reason, "B");
        assert_eq!(conds[0].last_transition_time, Time(t(10)));
    }

    #[test]
    fn conditions_stay_sorted_by_type() {
        let mut conds = vec![];
        set(&mut conds, new(VALID, Status::True, "A", "", None, t(1)));
        set(&mut conds, new(READY, Status::True, "A", "", None, t(1)));
        let types: Vec<_> = conds.iter().map(|c| c.type_.as_str()).collect();
        assert_eq!(types, vec![READY, VALID]);
        assert!(same_ignoring_time(&conds, &conds.clone()));
    }
}
