//! The life of a GryviaNetworkAnomaly: raised when a node's sample deviates from its baseline,
//! at most one open per node and metric while the deviation lasts, resolved by the first
//! sample of that metric back within bounds. Pure: the operator applies what it decides.

use std::collections::BTreeMap;

use gryvia_types::GryviaNetworkAnomalySpec;
use gryvia_types::k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::baseline::{Deviation, Metric};
use crate::Timestamp;

/// What to do with a node's anomalies after a sample.
#[derive(Clone, Debug, PartialEq)]
pub enum Change {
    /// A new anomaly, named.
    Raise {
        /// The object's name.
        name: String,
        /// Its spec.
        spec: GryviaNetworkAnomalySpec,
    },
    /// The open anomaly of this name is over.
    Resolve {
        /// The object's name.
        name: String,
        /// The metric, back within bounds.
        metric: Metric,
        /// What the metric was when it came back.
        observed: f64,
    },
}

/// The name of a new anomaly of `metric` on `node` detected at `at`: unique per node, metric
/// and second, within the 253 characters of an object name.
pub fn name(node: &str, metric: Metric, at: Timestamp) -> String {
    let kind = wire(metric.anomaly());
    let suffix = format!("-{kind}-{}", at.as_second());
    let keep = 253usize.saturating_sub(suffix.len());
    let node: String = node.chars().take(keep).collect();
    format!("{}{suffix}", node.trim_end_matches(['-', '.']))
}

/// An enum's value as the CRD spells it (`bandwidth-drop`, `critical`).
pub fn wire(v: impl serde::Serialize) -> String {
    serde_json::to_value(v)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}

/// Whether an anomaly is open (not resolved).
pub fn is_open(a: &gryvia_types::GryviaNetworkAnomaly) -> bool {
    a.status.as_ref().is_none_or(|s| s.resolved_at.is_none())
}

/// The changes a sample brings to `node`'s anomalies. `open` are its open anomalies (name by
/// metric); `sampled` the metrics the sample had, with their values; `found` the deviations in
/// it. A metric the sample lacked changes nothing.
pub fn changes(
    node: &str,
    open: &BTreeMap<Metric, String>,
    sampled: &BTreeMap<Metric, f64>,
    found: &BTreeMap<Metric, Deviation>,
    now: Timestamp,
) -> Vec<Change> {
    let mut out = Vec::new();
    for (&metric, &observed) in sampled {
        match (found.get(&metric), open.get(&metric)) {
            // Still off: the open anomaly stands for it.
            (Some(_), Some(_)) | (None, None) => {}
            (Some(d), None) => out.push(Change::Raise {
                name: name(node, metric, now),
                spec: GryviaNetworkAnomalySpec {
                    node: node.to_owned(),
                    type_: metric.anomaly(),
                    severity: d.severity,
                    detected_at: Time(now),
                    metric: metric.key().to_owned(),
                    baseline: d.baseline,
                    observed: d.observed,
                    subject: None,
                },
            }),
            (None, Some(name)) => out.push(Change::Resolve {
                name: name.clone(),
                metric,
                observed,
            }),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use gryvia_types::{AnomalyType, Severity};

    fn at(s: i64) -> Timestamp {
        Timestamp::from_second(s).unwrap()
    }

    fn off(metric: Metric, observed: f64) -> Deviation {
        Deviation {
            metric,
            observed,
            baseline: 1000.0,
            sigmas: 5.0,
            severity: Severity::Warning,
        }
    }

    #[test]
    fn a_deviation_raises_one_anomaly_kept_while_it_lasts_and_resolved_when_it_ends() {
        let sampled = BTreeMap::from([(Metric::Bytes, 10.0), (Metric::RttMicros, 900.0)]);
        let found = BTreeMap::from([(Metric::Bytes, off(Metric::Bytes, 10.0))]);
        let c = changes(
            "gpu-1",
            &BTreeMap::new(),
            &sampled,
            &found,
            at(1_700_000_000),
        );
        assert_eq!(c.len(), 1);
        let Change::Raise { name, spec } = &c[0] else {
            panic!("{c:?}")
        };
        assert_eq!(name, "gpu-1-bandwidth-drop-1700000000");
        assert_eq!(spec.type_, AnomalyType::BandwidthDrop);
        assert_eq!((spec.observed, spec.baseline), (10.0, 1000.0));
        assert_eq!(spec.metric, "bytesPerSecond");

        // The next sample is still off: nothing new.
        let open = BTreeMap::from([(Metric::Bytes, name.clone())]);
        assert!(changes("gpu-1", &open, &sampled, &found, at(1_700_000_010)).is_empty());

        // A sample without bytes changes nothing; one back within bounds resolves it.
        let rtt_only = BTreeMap::from([(Metric::RttMicros, 900.0)]);
        assert!(
            changes(
                "gpu-1",
                &open,
                &rtt_only,
                &BTreeMap::new(),
                at(1_700_000_020)
            )
            .is_empty()
        );
        let back = BTreeMap::from([(Metric::Bytes, 990.0)]);
        let c = changes("gpu-1", &open, &back, &BTreeMap::new(), at(1_700_000_030));
        assert_eq!(
            c,
            vec![Change::Resolve {
                name: name.clone(),
                metric: Metric::Bytes,
                observed: 990.0
            }]
        );
    }

    #[test]
    fn names_fit_an_object_name() {
        let long = "n".repeat(300);
        let n = name(&long, Metric::RetransmitRate, at(5));
        assert_eq!(n.len(), 253);
        assert!(n.ends_with("-retransmit-spike-5"));
    }
}
