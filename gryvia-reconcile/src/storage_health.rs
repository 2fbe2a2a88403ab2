//! GryviaStorage health from the node agents' probes (`GryviaGpuNode.status.storage`): which
//! selected nodes have the storage mounted, writable and fast enough, its capacity and use, and
//! the median probe latency. A node whose agent is silent, or has not probed the storage yet, is
//! unknown, never failing.

use std::collections::BTreeMap;

use gryvia_types::k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use gryvia_types::{GryviaGpuNode, GryviaStorage, GryviaStorageStatus, StorageProbe};

use crate::component_health;
use crate::{Plan, Reconcile, Timestamp, facts};

/// What the storage's status is worked out from.
#[derive(Clone, Debug, Default)]
pub struct StorageWorld {
    /// Every node with its labels.
    pub nodes: BTreeMap<String, BTreeMap<String, String>>,
    /// The node agents' reports, by node.
    pub agents: BTreeMap<String, GryviaGpuNode>,
}

/// One node's verdict on the storage.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NodeStorage {
    /// Mounted, written and read back within the latency limit.
    Healthy(StorageProbe),
    /// Mounted and working, slower than `spec.maxLatencyMillis`.
    Slow(StorageProbe),
    /// Not mounted, not writable, or the probe hung: the reason.
    Failing(String),
    /// No fresh report with a probe of this storage.
    Unknown,
}

/// Where the node agent of a node labelled `node_labels` probes `storage`: its `mountPath`
/// when it has one and its `nodeSelector` selects the node.
pub fn probed_at<'a>(
    storage: &'a GryviaStorage,
    node_labels: &BTreeMap<String, String>,
) -> Option<&'a str> {
    storage
        .spec
        .mount_path
        .as_deref()
        .filter(|_| facts::labels_match(&storage.spec.node_selector, node_labels))
}

/// The verdict on `storage` from a node's agent `report` at `now`.
pub fn node_storage(
    storage: &GryviaStorage,
    report: Option<&GryviaGpuNode>,
    now: Timestamp,
) -> NodeStorage {
    let Some(agent) = report else {
        return NodeStorage::Unknown;
    };
    let Some(status) = &agent.status else {
        return NodeStorage::Unknown;
    };
    let interval = agent.spec.report_interval_seconds;
    if !component_health::fresh(status.observed_at.as_ref(), interval, now) {
        return NodeStorage::Unknown;
    }
    let name = storage.metadata.name.as_deref().unwrap_or_default();
    let Some(probe) = status.storage.iter().find(|p| p.name == name) else {
        return NodeStorage::Unknown;
    };
    if let Some(e) = &probe.error {
        return NodeStorage::Failing(e.clone());
    }
    if !probe.mounted {
        return NodeStorage::Failing(format!("{} is not a mount point", probe.mount_path));
    }
    match probe.latency_millis {
        Some(ms) if ms > i64::from(storage.spec.max_latency_millis) => {
            NodeStorage::Slow(probe.clone())
        }
        _ => NodeStorage::Healthy(probe.clone()),
    }
}

/// The storage's status at `now`.
pub fn status(
    storage: &GryviaStorage,
    world: &StorageWorld,
    now: Timestamp,
) -> GryviaStorageStatus {
    // The nodes expected to mount it: those selected that run a node agent.
    let expected: Vec<&String> = world
        .nodes
        .iter()
        .filter(|(n, labels)| {
            world.agents.contains_key(*n)
                && facts::labels_match(&storage.spec.node_selector, labels)
        })
        .map(|(n, _)| n)
        .collect();
    let mut ok: Vec<StorageProbe> = Vec::new();
    let mut slow: Vec<(String, i64)> = Vec::new();
    let mut failing: Vec<(String, String)> = Vec::new();
    let mut unknown: Vec<String> = Vec::new();
    // Without a mount path no agent probes it: whatever a node reported is from before.
    let probed_nodes = if storage.spec.mount_path.is_some() {
        expected.as_slice()
    } else {
        &[]
    };
    for node in probed_nodes {
        match node_storage(storage, world.agents.get(*node), now) {
            NodeStorage::Healthy(p) => ok.push(p),
            NodeStorage::Slow(p) => {
                slow.push(((*node).clone(), p.latency_millis.unwrap_or_default()));
                ok.push(p);
            }
            NodeStorage::Failing(why) => failing.push(((*node).clone(), why)),
            NodeStorage::Unknown => unknown.push((*node).clone()),
        }
    }
    let probed = ok.len() + failing.len();
    // Without a mount path nothing was probed: `probed` is 0, the phase Unknown.
    let phase = component_health::phase(probed, failing.len(), slow.len());
    let mut latencies: Vec<i64> = ok.iter().filter_map(|p| p.latency_millis).collect();
    latencies.sort_unstable();
    let head = match (&storage.spec.mount_path, expected.len()) {
        (None, _) => "no spec.mountPath: nothing to probe".to_owned(),
        (Some(_), 0) => "no node with a node agent matches spec.nodeSelector".to_owned(),
        (Some(path), n) => format!(
            "{path}: {} of {n} nodes probed, {} failing, {} slow",
            probed,
            failing.len(),
            slow.len()
        ),
    };
    let max_ms = storage.spec.max_latency_millis;
    let problems: Vec<(String, String)> = failing
        .iter()
        .cloned()
        .chain(
            slow.iter()
                .map(|(node, ms)| (node.clone(), format!("{ms}ms, over {max_ms}ms"))),
        )
        .collect();
    let message = component_health::message(head, &problems, "probe", &unknown);
    let mut status = storage.status.clone().unwrap_or_default();
    status.phase = Some(phase);
    status.latency_millis = (!latencies.is_empty()).then(|| latencies[latencies.len() / 2]);
    // Every node sees the same filesystem: the largest figures are the freshest whole view.
    status.capacity_bytes = ok.iter().filter_map(|p| p.capacity_bytes).max();
    status.used_bytes = ok.iter().filter_map(|p| p.used_bytes).max();
    status.last_checked = Some(Time(now));
    component_health::set_ready(
        &mut status.conditions,
        phase,
        [
            "MountsHealthy",
            "MountsDegraded",
            "MountsFailing",
            "NotProbed",
        ],
        &message,
        storage.metadata.generation,
        now,
    );
    status.message = Some(message);
    status
}

/// The GryviaStorage health controller (gpu-operator).
#[derive(Clone, Copy, Debug, Default)]
pub struct StorageReconciler;

impl Reconcile for StorageReconciler {
    type Object = GryviaStorage;
    type World = StorageWorld;
    type Status = GryviaStorageStatus;

    fn name(&self) -> &'static str {
        "storage-health"
    }

    fn reconcile(
        &self,
        storage: &GryviaStorage,
        world: &StorageWorld,
        now: Timestamp,
    ) -> Plan<GryviaStorageStatus> {
        let status = status(storage, world, now);
        let before = storage.status.as_ref().and_then(|s| s.phase);
        let message = status.message.clone().unwrap_or_default();
        component_health::plan("Storage", before, status.phase, &message, status)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::component_health::RECHECK_MS;
    use gryvia_types::ComponentPhase;
    use gryvia_types::{GryviaGpuNodeSpec, GryviaGpuNodeStatus, GryviaStorageSpec, StorageType};

    fn at(s: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + s).unwrap()
    }

    fn storage(max_ms: i32) -> GryviaStorage {
        GryviaStorage::new(
            "datasets",
            GryviaStorageSpec {
                type_: StorageType::Nfs,
                endpoint: Some("fs:/export".into()),
                storage_class_name: None,
                capacity: None,
                mount_path: Some("/mnt/datasets".into()),
                node_selector: BTreeMap::from([("gpu".to_owned(), "yes".to_owned())]),
                max_latency_millis: max_ms,
            },
        )
    }

    fn probe(mounted: bool, ms: Option<i64>, error: Option<&str>) -> StorageProbe {
        StorageProbe {
            name: "datasets".into(),
            mount_path: "/mnt/datasets".into(),
            mounted,
            latency_millis: ms,
            capacity_bytes: Some(1000),
            used_bytes: Some(400),
            error: error.map(str::to_owned),
        }
    }

    fn agent(node: &str, observed: i64, probes: Vec<StorageProbe>) -> GryviaGpuNode {
        let mut g = GryviaGpuNode::new(
            node,
            GryviaGpuNodeSpec {
                node_name: node.into(),
                report_interval_seconds: 10,
                remediation_request: None,
            },
        );
        g.status = Some(GryviaGpuNodeStatus {
            observed_at: Some(Time(at(observed))),
            storage: probes,
            ..Default::default()
        });
        g
    }

    fn world(agents: Vec<GryviaGpuNode>) -> StorageWorld {
        let gpu = BTreeMap::from([("gpu".to_owned(), "yes".to_owned())]);
        StorageWorld {
            nodes: BTreeMap::from([
                ("n1".to_owned(), gpu.clone()),
                ("n2".to_owned(), gpu.clone()),
                ("n3".to_owned(), gpu),
                ("cpu".to_owned(), BTreeMap::new()),
            ]),
            agents: agents
                .into_iter()
                .map(|a| (a.spec.node_name.clone(), a))
                .collect(),
        }
    }

    #[test]
    fn mounted_and_fast_everywhere_is_healthy_with_the_median_latency_and_capacity() {
        let w = world(vec![
            agent("n1", 0, vec![probe(true, Some(3), None)]),
            agent("n2", 0, vec![probe(true, Some(9), None)]),
            agent("n3", 0, vec![probe(true, Some(5), None)]),
            agent("cpu", 0, vec![probe(false, None, Some("not mounted"))]),
        ]);
        let s = status(&storage(100), &w, at(1));
        assert_eq!(s.phase, Some(ComponentPhase::Healthy));
        assert_eq!(s.latency_millis, Some(5));
        assert_eq!((s.capacity_bytes, s.used_bytes), (Some(1000), Some(400)));
        assert_eq!(
            s.message.as_deref(),
            Some("/mnt/datasets: 3 of 3 nodes probed, 0 failing, 0 slow")
        );
        assert_eq!(s.conditions[0].status, "True");
    }

    #[test]
    fn an_unmounted_or_hung_node_degrades_and_all_failing_is_unavailable() {
        let w = world(vec![
            agent("n1", 0, vec![probe(true, Some(3), None)]),
            agent(
                "n2",
                0,
                vec![probe(
                    false,
                    None,
                    Some("/mnt/datasets is not a mount point"),
                )],
            ),
            agent("n3", 0, vec![probe(true, Some(900), None)]),
        ]);
        let s = status(&storage(100), &w, at(1));
        assert_eq!(s.phase, Some(ComponentPhase::Degraded));
        let m = s.message.unwrap();
        assert!(m.contains("3 of 3 nodes probed, 1 failing, 1 slow"), "{m}");
        assert!(m.contains("n2: /mnt/datasets is not a mount point"), "{m}");
        assert!(m.contains("n3: 900ms, over 100ms"), "{m}");

        let hung = probe(
            false,
            None,
            Some("probe of /mnt/datasets hung for more than 10s"),
        );
        let w = world(vec![
            agent("n1", 0, vec![hung.clone()]),
            agent("n2", 0, vec![hung]),
        ]);
        let s = status(&storage(100), &w, at(1));
        assert_eq!(s.phase, Some(ComponentPhase::Unavailable));
        assert_eq!(s.latency_millis, None);
        assert_eq!(s.conditions[0].reason, "MountsFailing");
    }

    #[test]
    fn silent_agents_and_storages_not_yet_probed_are_unknown_never_failing() {
        // 3 intervals of 10 s are under the 60 s floor: 61 s old is stale.
        let w = world(vec![
            agent("n1", 0, vec![probe(false, None, Some("gone"))]),
            agent("n2", 60, vec![]),
        ]);
        let s = status(&storage(100), &w, at(61));
        assert_eq!(s.phase, Some(ComponentPhase::Unknown));
        assert!(s.message.unwrap().contains("no fresh probe from n1, n2"));
        let mut unprobed = storage(100);
        unprobed.spec.mount_path = None;
        let s = status(&unprobed, &w, at(1));
        assert_eq!(
            s.message.as_deref(),
            Some("no spec.mountPath: nothing to probe")
        );
    }

    #[test]
    fn an_agent_probes_the_storages_with_a_mount_path_that_select_its_node() {
        let gpu = BTreeMap::from([("gpu".to_owned(), "yes".to_owned())]);
        assert_eq!(probed_at(&storage(100), &gpu), Some("/mnt/datasets"));
        assert_eq!(probed_at(&storage(100), &BTreeMap::new()), None);
        let mut everywhere = storage(100);
        everywhere.spec.node_selector.clear();
        assert_eq!(
            probed_at(&everywhere, &BTreeMap::new()),
            Some("/mnt/datasets")
        );
        everywhere.spec.mount_path = None;
        assert_eq!(probed_at(&everywhere, &gpu), None);
    }

    #[test]
    fn a_phase_change_is_an_event_once() {
        let w = world(vec![agent("n1", 0, vec![probe(false, None, Some("x"))])]);
        let plan = StorageReconciler.reconcile(&storage(100), &w, at(0));
        assert_eq!(plan.events.len(), 1);
        assert_eq!(plan.events[0].reason, "StorageUnavailable");
        assert_eq!(plan.requeue_after_ms, Some(RECHECK_MS));
        let mut again = storage(100);
        again.status = plan.status;
        assert!(
            StorageReconciler
                .reconcile(&again, &w, at(1))
                .events
                .is_empty()
        );
    }
}
