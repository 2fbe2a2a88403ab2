//! Network intelligence from the collectors' data, as pure policies: streaming baselines and
//! the anomalies they raise, the service graph, network cost by zone pair and egress, flow
//! policy learned from traffic (with a NetworkPolicy evaluator to replay flows against it), and
//! stragglers of distributed training jobs. The network-intelligence operator applies what
//! they decide.

pub mod anomaly;
pub mod baseline;
pub mod collector;
pub mod cost;
pub mod fabric;
pub mod flows;
pub mod graph;
pub mod learn;
pub mod policies;
pub mod policy;
pub mod reconcile;
pub mod straggler;

use gryvia_types::k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

/// Whether `t` is later than `seen`, the last time folded in, to the whole second: a status
/// keeps whole seconds (a `Time` is written so), while a collector may write fractions, and
/// a window read back must not count as new again.
pub fn newer(seen: Option<&Time>, t: Option<&Time>) -> bool {
    t.is_some_and(|t| seen.is_none_or(|s| t.0.as_second() > s.0.as_second()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Timestamp;

    #[test]
    fn a_window_with_fractions_is_not_new_against_its_own_second() {
        let t = |s: &str| Time(s.parse::<Timestamp>().unwrap());
        let end = t("2026-12-06T10:00:05.731Z");
        assert!(newer(None, Some(&end)));
        assert!(!newer(Some(&t("2026-12-06T10:00:05Z")), Some(&end)));
        assert!(newer(Some(&t("2026-12-06T10:00:04Z")), Some(&end)));
        assert!(!newer(Some(&end), None));
    }
}
