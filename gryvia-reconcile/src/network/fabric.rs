//! The merged fabric signal (`--merge-fabric-signals`): one GryviaFabricSignal, named
//! [`MERGED`] with `spec.nodeName: "*"`, whose status lists every node's signal as an entry
//! (retransmissions, median RTT, frames, drops and errors, interfaces not up, freshness) and
//! sums the fresh ones: retransmissions summed, the median of the nodes' median RTTs, the
//! nodes reporting. Each node's collector writes its own signal (`--fabric-status-per-node`);
//! this folds them. Pure.

use gryvia_types::k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use gryvia_types::{FabricNodeEntry, GryviaFabricSignal, GryviaFabricSignalStatus};

use crate::{Plan, Reconcile, Timestamp};

/// Name of the merged signal.
pub const MERGED: &str = "cluster";
/// `spec.nodeName` of the merged signal.
pub const ALL_NODES: &str = "*";

/// A node's signal is fresh while it is younger than this many of its windows.
pub const FRESH_WINDOWS: i64 = 3;

/// The merged status of the per-node `signals` (the merged one among them is left out) at
/// `now`.
pub fn merged_status(signals: &[GryviaFabricSignal], now: Timestamp) -> GryviaFabricSignalStatus {
    let mut nodes: Vec<FabricNodeEntry> = signals
        .iter()
        .filter(|s| s.spec.node_name != ALL_NODES)
        .filter_map(|s| {
            let st = s.status.as_ref()?;
            let window = i64::from(st.window_seconds.max(1));
            let fresh = st
                .updated_at
                .as_ref()
                .is_some_and(|t| now.as_second() - t.0.as_second() <= FRESH_WINDOWS * window);
            Some(FabricNodeEntry {
                node: s.spec.node_name.clone(),
                tcp_retransmits: st.tcp_retransmits,
                median_srtt_micros: st.median_srtt_micros,
                rx_packets: st.interfaces.iter().map(|i| i.rx_packets).sum(),
                drops_and_errors: st
                    .interfaces
                    .iter()
                    .map(|i| i.drops + i.rx_errors + i.tx_errors)
                    .sum(),
                interfaces_down: st
                    .interfaces
                    .iter()
                    .filter(|i| i.oper_state.as_deref().is_some_and(|o| o != "up"))
                    .map(|i| i.name.clone())
                    .collect(),
                window_seconds: st.window_seconds,
                updated_at: st.updated_at.clone(),
                fresh,
            })
        })
        .collect();
    nodes.sort_by(|a, b| a.node.cmp(&b.node));
    let fresh: Vec<&FabricNodeEntry> = nodes.iter().filter(|n| n.fresh).collect();
    let mut rtts: Vec<i64> = fresh.iter().filter_map(|n| n.median_srtt_micros).collect();
    rtts.sort_unstable();
    GryviaFabricSignalStatus {
        tcp_retransmits: fresh.iter().map(|n| n.tcp_retransmits).sum(),
        median_srtt_micros: (!rtts.is_empty()).then(|| rtts[(rtts.len() - 1) / 2]),
        window_seconds: fresh.iter().map(|n| n.window_seconds).max().unwrap_or(0),
        updated_at: nodes
            .iter()
            .filter_map(|n| n.updated_at.as_ref())
            .max_by_key(|t| t.0)
            .map(|t| Time(t.0)),
        nodes_reporting: Some(i32::try_from(fresh.len()).unwrap_or(i32::MAX)),
        nodes,
        ..GryviaFabricSignalStatus::default()
    }
}

/// Keeps the merged signal's status (every other signal is its collector's).
#[derive(Clone, Copy, Debug, Default)]
pub struct FabricMergeReconciler;

impl Reconcile for FabricMergeReconciler {
    type Object = GryviaFabricSignal;
    type World = Vec<GryviaFabricSignal>;
    type Status = GryviaFabricSignalStatus;

    fn name(&self) -> &'static str {
        "fabric-merge"
    }

    fn reconcile(
        &self,
        s: &GryviaFabricSignal,
        signals: &Vec<GryviaFabricSignal>,
        now: Timestamp,
    ) -> Plan<GryviaFabricSignalStatus> {
        let mut plan = Plan::new();
        if s.spec.node_name != ALL_NODES {
            return plan;
        }
        plan.set_status_if_changed(s.status.as_ref(), merged_status(signals, now));
        // Back when a node's signal may have gone stale.
        plan.requeue(std::time::Duration::from_secs(30));
        plan
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gryvia_types::{GryviaFabricSignalSpec, InterfaceCounters};

    fn at(s: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + s).unwrap()
    }

    fn signal(
        node: &str,
        retx: i64,
        rtt: Option<i64>,
        updated: i64,
        down: bool,
    ) -> GryviaFabricSignal {
        let mut s = GryviaFabricSignal::new(
            node,
            GryviaFabricSignalSpec {
                node_name: node.into(),
            },
        );
        s.status = Some(GryviaFabricSignalStatus {
            tcp_retransmits: retx,
            median_srtt_micros: rtt,
            window_seconds: 10,
            updated_at: Some(Time(at(updated))),
            interfaces: vec![InterfaceCounters {
                name: "ib0".into(),
                rx_packets: 100,
                drops: 2,
                rx_errors: 1,
                oper_state: Some(if down { "down" } else { "up" }.into()),
                ..InterfaceCounters::default()
            }],
            ..GryviaFabricSignalStatus::default()
        });
        s
    }

    #[test]
    fn the_merged_signal_lists_every_node_and_sums_the_fresh_ones() {
        let merged = GryviaFabricSignal::new(
            MERGED,
            GryviaFabricSignalSpec {
                node_name: ALL_NODES.into(),
            },
        );
        let signals = vec![
            signal("n2", 5, Some(300), 95, false),
            signal("n1", 3, Some(100), 100, true),
            signal("n3", 7, Some(200), 100, false),
            // 70 s old with 10 s windows: stale, listed but not summed.
            signal("n4", 1000, Some(9000), 30, false),
            merged.clone(),
        ];
        let st = merged_status(&signals, at(100));
        let names: Vec<&str> = st.nodes.iter().map(|n| n.node.as_str()).collect();
        assert_eq!(names, ["n1", "n2", "n3", "n4"]);
        assert_eq!(st.nodes_reporting, Some(3));
        assert_eq!(st.tcp_retransmits, 15);
        assert_eq!(st.median_srtt_micros, Some(200));
        assert_eq!(st.nodes[0].interfaces_down, ["ib0"]);
        assert_eq!(
            (st.nodes[0].rx_packets, st.nodes[0].drops_and_errors),
            (100, 3)
        );
        assert!(!st.nodes[3].fresh);
        assert_eq!(st.updated_at, Some(Time(at(100))));
        // Only the merged signal is reconciled.
        let plan = FabricMergeReconciler.reconcile(&signals[0], &signals, at(100));
        assert!(plan.status.is_none() && plan.requeue_after().is_none());
        let plan = FabricMergeReconciler.reconcile(&merged, &signals, at(100));
        assert_eq!(plan.status.unwrap().nodes.len(), 4);
    }
}
