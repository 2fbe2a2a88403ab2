//! GryviaNetwork health from the collectors' GryviaFabricSignals: which attached nodes report,
//! which have a named interface missing, down, slower than expected, or dropping or erroring
//! packets, and the median link speed. A node whose collector is silent is unknown, never
//! degraded: no reading is not a bad reading.

use std::collections::BTreeMap;

use gryvia_types::k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use gryvia_types::{GryviaFabricSignal, GryviaNetwork, GryviaNetworkStatus};

use crate::component_health;
use crate::{Plan, Reconcile, Timestamp, facts};

/// What the network's status is worked out from.
#[derive(Clone, Debug, Default)]
pub struct NetworkWorld {
    /// Every node with its labels.
    pub nodes: BTreeMap<String, BTreeMap<String, String>>,
    /// The collectors' signals, by node.
    pub signals: BTreeMap<String, GryviaFabricSignal>,
}

/// One attached node's verdict.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NodeLinks {
    /// Every named interface up, at speed, without drops or errors in the window.
    Healthy,
    /// What is wrong, e.g. `ib0 down`.
    Degraded(Vec<String>),
    /// No fresh signal.
    Unknown,
}

/// The verdict on `node`'s links from its `signal` at `now`.
pub fn node_links(
    network: &GryviaNetwork,
    signal: Option<&GryviaFabricSignal>,
    now: Timestamp,
) -> NodeLinks {
    let Some(status) = signal.and_then(|s| s.status.as_ref()) else {
        return NodeLinks::Unknown;
    };
    // A signal is written every window.
    if !component_health::fresh(status.updated_at.as_ref(), status.window_seconds, now) {
        return NodeLinks::Unknown;
    }
    let expected_mbps = network
        .spec
        .expected_bandwidth_gbps
        .map(|g| i64::from(g) * 1000);
    let mut problems = Vec::new();
    for name in &network.spec.interfaces {
        let Some(i) = status.interfaces.iter().find(|i| &i.name == name) else {
            problems.push(format!("{name} not reported"));
            continue;
        };
        match i.oper_state.as_deref() {
            Some("up" | "unknown") | None => {}
            Some(state) => problems.push(format!("{name} {state}")),
        }
        if let (Some(want), Some(have)) = (expected_mbps, i.speed_mbps)
            && have < want
        {
            problems.push(format!(
                "{name} at {} Gbit/s, expected {}",
                have / 1000,
                want / 1000
            ));
        }
        if i.drops > 0 {
            problems.push(format!("{name} dropped {} packets", i.drops));
        }
        if i.rx_errors + i.tx_errors > 0 {
            problems.push(format!("{name} {} errors", i.rx_errors + i.tx_errors));
        }
    }
    if problems.is_empty() {
        NodeLinks::Healthy
    } else {
        NodeLinks::Degraded(problems)
    }
}

/// The median over the reporting nodes of each node's slowest named interface, Gbit/s.
fn median_speed_gbps(network: &GryviaNetwork, signals: &[&GryviaFabricSignal]) -> Option<f64> {
    let mut speeds: Vec<i64> = signals
        .iter()
        .filter_map(|s| s.status.as_ref())
        .filter_map(|st| {
            st.interfaces
                .iter()
                .filter(|i| network.spec.interfaces.contains(&i.name))
                .filter_map(|i| i.speed_mbps)
                .min()
        })
        .collect();
    if speeds.is_empty() {
        return None;
    }
    speeds.sort_unstable();
    #[expect(clippy::cast_precision_loss, reason = "link speeds are far below 2^52")]
    Some(speeds[speeds.len() / 2] as f64 / 1000.0)
}

/// The network's status at `now`.
pub fn status(
    network: &GryviaNetwork,
    world: &NetworkWorld,
    now: Timestamp,
) -> GryviaNetworkStatus {
    let attached: Vec<&String> = world
        .nodes
        .iter()
        .filter(|(_, labels)| facts::labels_match(&network.spec.node_selector, labels))
        .map(|(n, _)| n)
        .collect();
    let (mut healthy, mut unknown) = (0usize, Vec::new());
    let mut degraded: Vec<(String, String)> = Vec::new();
    let mut fresh = Vec::new();
    for node in &attached {
        let signal = world.signals.get(*node);
        match node_links(network, signal, now) {
            NodeLinks::Healthy => {
                healthy += 1;
                fresh.extend(signal);
            }
            NodeLinks::Degraded(p) => {
                degraded.push(((*node).clone(), p.join(", ")));
                fresh.extend(signal);
            }
            NodeLinks::Unknown => unknown.push((*node).clone()),
        }
    }
    let reporting = healthy + degraded.len();
    let phase = component_health::phase(reporting, degraded.len(), 0);
    let head = if attached.is_empty() {
        "no node matches spec.nodeSelector".to_owned()
    } else {
        format!(
            "{} of {} nodes reporting, {} degraded",
            reporting,
            attached.len(),
            degraded.len()
        )
    };
    let message = component_health::message(head, &degraded, "fabric signal", &unknown);
    let mut status = network.status.clone().unwrap_or_default();
    status.phase = Some(phase);
    status.nodes_total = i32::try_from(attached.len()).unwrap_or(i32::MAX);
    status.nodes_degraded = i32::try_from(degraded.len()).unwrap_or(i32::MAX);
    status.measured_bandwidth_gbps = median_speed_gbps(network, &fresh);
    status.last_checked = Some(Time(now));
    component_health::set_ready(
        &mut status.conditions,
        phase,
        [
            "LinksHealthy",
            "LinksDegraded",
            "LinksDown",
            "NoFabricSignal",
        ],
        &message,
        network.metadata.generation,
        now,
    );
    status.message = Some(message);
    status
}

/// The GryviaNetwork health controller (gpu-operator).
#[derive(Clone, Copy, Debug, Default)]
pub struct NetworkReconciler;

impl Reconcile for NetworkReconciler {
    type Object = GryviaNetwork;
    type World = NetworkWorld;
    type Status = GryviaNetworkStatus;

    fn name(&self) -> &'static str {
        "network-health"
    }

    fn reconcile(
        &self,
        network: &GryviaNetwork,
        world: &NetworkWorld,
        now: Timestamp,
    ) -> Plan<GryviaNetworkStatus> {
        let status = status(network, world, now);
        let before = network.status.as_ref().and_then(|s| s.phase);
        let message = status.message.clone().unwrap_or_default();
        component_health::plan("Network", before, status.phase, &message, status)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::component_health::RECHECK_MS;
    use gryvia_types::ComponentPhase;
    use gryvia_types::{
        GryviaFabricSignalSpec, GryviaFabricSignalStatus, GryviaNetworkSpec, InterfaceCounters,
        NetworkType,
    };

    fn at(s: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + s).unwrap()
    }

    fn network(interfaces: &[&str], gbps: Option<i32>) -> GryviaNetwork {
        GryviaNetwork::new(
            "fabric",
            GryviaNetworkSpec {
                type_: NetworkType::Infiniband,
                interfaces: interfaces.iter().map(|s| (*s).to_owned()).collect(),
                expected_bandwidth_gbps: gbps,
                node_selector: BTreeMap::from([("gpu".to_owned(), "yes".to_owned())]),
            },
        )
    }

    fn signal(node: &str, updated: i64, ifaces: Vec<InterfaceCounters>) -> GryviaFabricSignal {
        let mut s = GryviaFabricSignal::new(
            node,
            GryviaFabricSignalSpec {
                node_name: node.into(),
            },
        );
        s.status = Some(GryviaFabricSignalStatus {
            interfaces: ifaces,
            window_seconds: 10,
            updated_at: Some(Time(at(updated))),
            ..Default::default()
        });
        s
    }

    fn ib(state: &str, mbps: i64) -> InterfaceCounters {
        InterfaceCounters {
            name: "ib0".into(),
            oper_state: Some(state.into()),
            speed_mbps: Some(mbps),
            ..Default::default()
        }
    }

    fn world(signals: Vec<GryviaFabricSignal>) -> NetworkWorld {
        let gpu = BTreeMap::from([("gpu".to_owned(), "yes".to_owned())]);
        NetworkWorld {
            nodes: BTreeMap::from([
                ("n1".to_owned(), gpu.clone()),
                ("n2".to_owned(), gpu.clone()),
                ("n3".to_owned(), gpu),
                ("cpu".to_owned(), BTreeMap::new()),
            ]),
            signals: signals
                .into_iter()
                .map(|s| (s.spec.node_name.clone(), s))
                .collect(),
        }
    }

    #[test]
    fn every_attached_node_up_at_speed_is_healthy_with_the_median_speed() {
        let net = network(&["ib0"], Some(400));
        let w = world(vec![
            signal("n1", 0, vec![ib("up", 400_000)]),
            signal("n2", 0, vec![ib("up", 400_000)]),
            signal("n3", -5, vec![ib("up", 800_000)]),
            signal("cpu", 0, vec![ib("down", 1)]),
        ]);
        let s = status(&net, &w, at(5));
        assert_eq!(s.phase, Some(ComponentPhase::Healthy));
        assert_eq!((s.nodes_total, s.nodes_degraded), (3, 0));
        assert_eq!(s.measured_bandwidth_gbps, Some(400.0));
        assert_eq!(
            s.message.as_deref(),
            Some("3 of 3 nodes reporting, 0 degraded")
        );
        assert_eq!(s.conditions[0].status, "True");
    }

    #[test]
    fn a_link_down_slow_dropping_or_missing_degrades_its_node_and_says_why() {
        let net = network(&["ib0"], Some(400));
        let mut dropping = ib("up", 400_000);
        dropping.drops = 12;
        dropping.rx_errors = 2;
        let w = world(vec![
            signal("n1", 0, vec![ib("down", 400_000)]),
            signal(
                "n2",
                0,
                vec![
                    ib("up", 200_000),
                    InterfaceCounters {
                        name: "eth0".into(),
                        ..Default::default()
                    },
                ],
            ),
            signal("n3", 0, vec![dropping]),
        ]);
        let s = status(&net, &w, at(1));
        assert_eq!(s.phase, Some(ComponentPhase::Unavailable));
        assert_eq!(s.nodes_degraded, 3);
        let m = s.message.unwrap();
        assert!(m.contains("n1: ib0 down"), "{m}");
        assert!(m.contains("n2: ib0 at 200 Gbit/s, expected 400"), "{m}");
        assert!(
            m.contains("n3: ib0 dropped 12 packets, ib0 2 errors"),
            "{m}"
        );

        let w = world(vec![
            signal("n1", 0, vec![ib("up", 400_000)]),
            signal(
                "n2",
                0,
                vec![InterfaceCounters {
                    name: "eth0".into(),
                    ..Default::default()
                }],
            ),
        ]);
        let s = status(&net, &w, at(1));
        assert_eq!(s.phase, Some(ComponentPhase::Degraded));
        let m = s.message.unwrap();
        assert!(m.starts_with("2 of 3 nodes reporting, 1 degraded"), "{m}");
        assert!(m.contains("n2: ib0 not reported"), "{m}");
        assert!(m.contains("no fresh fabric signal from n3"), "{m}");
    }

    #[test]
    fn a_silent_or_stale_collector_is_unknown_never_degraded() {
        let net = network(&["ib0"], None);
        // Three windows of 10 s are less than the 60 s floor: 61 s old is stale.
        let w = world(vec![
            signal("n1", 0, vec![ib("down", 1)]),
            signal("n2", 59, vec![ib("up", 100_000)]),
        ]);
        let s = status(&net, &w, at(61));
        assert_eq!(s.phase, Some(ComponentPhase::Healthy));
        assert_eq!((s.nodes_total, s.nodes_degraded), (3, 0));
        assert!(
            s.message
                .unwrap()
                .contains("no fresh fabric signal from n1, n3")
        );
        let s = status(&net, &world(vec![]), at(0));
        assert_eq!(s.phase, Some(ComponentPhase::Unknown));
        assert_eq!(s.conditions[0].reason, "NoFabricSignal");
        let mut lonely = network(&["ib0"], None);
        lonely
            .spec
            .node_selector
            .insert("rack".into(), "none".into());
        let s = status(&lonely, &world(vec![]), at(0));
        assert_eq!(
            s.message.as_deref(),
            Some("no node matches spec.nodeSelector")
        );
    }

    #[test]
    fn a_phase_change_is_an_event_and_the_status_is_checked_again() {
        let net = network(&["ib0"], None);
        let plan = NetworkReconciler.reconcile(
            &net,
            &world(vec![signal("n1", 0, vec![ib("down", 1)])]),
            at(0),
        );
        assert_eq!(plan.requeue_after_ms, Some(RECHECK_MS));
        assert_eq!(plan.events.len(), 1);
        assert_eq!(plan.events[0].reason, "NetworkUnavailable");
        let mut again = net.clone();
        again.status = plan.status;
        let plan = NetworkReconciler.reconcile(
            &again,
            &world(vec![signal("n1", 0, vec![ib("down", 1)])]),
            at(1),
        );
        assert!(plan.events.is_empty());
    }
}
