//! The GryviaHealthCheck controller of the gpu-operator: verdicts from the node agents'
//! observations, quarantine, drain and the remediation ladder (policy:
//! `gryvia_reconcile::health`). Reads nodes, GryviaGpuNodes, the other checks and the pods and
//! budgets of the nodes a check quarantined from the operator's caches.
//!
//! A check runs on its schedule, on a spec change, when an agent reports on a remediation step,
//! and when an agent reports a fatal reading ([`gryvia_reconcile::health::fatal_signal`]): that
//! node is evaluated at once. The nodes a check's status says it quarantined and the cache does
//! not show tainted yet (its own write, seen a moment later) are read from the API server, so
//! a reconcile right after a quarantine counts it against `maxQuarantinedPercent`.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use gryvia_reconcile::health::{
    HealthCheckReconciler, HealthOptions, HealthWorld, NodeInfo, PdbInfo, PodInfo, fatal_signal,
    remediating_elsewhere,
};
use gryvia_types::{CachedPod, GryviaGpuNode, GryviaHealthCheck};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::ResourceExt;
use kube::runtime::controller::Controller;
use kube::runtime::reflector::Store;

use super::{Running, Shared, all_of, changed, owned};
use crate::cache::wait_ready;
use crate::runtime::{Observe, run, spec_or_lifecycle};
use crate::{Error, Result};

/// Observes a health check: nodes, GryviaGpuNodes, the other checks, and the pods and
/// budgets of the nodes it quarantined.
pub struct HealthObserver {
    client: kube::Client,
    nodes: Store<Node>,
    gpu_nodes: Store<GryviaGpuNode>,
    checks: Store<GryviaHealthCheck>,
    pods: Store<CachedPod>,
    pdbs: Store<PodDisruptionBudget>,
}

impl HealthObserver {
    /// The pods on each node `check` quarantined, and the budgets of their namespaces.
    fn drained(
        &self,
        nodes: &[NodeInfo],
        check: &str,
    ) -> (BTreeMap<String, Vec<PodInfo>>, Vec<PdbInfo>) {
        let quarantined: BTreeSet<&str> = nodes
            .iter()
            .filter(|n| n.quarantined_by.as_deref() == Some(check))
            .map(|n| n.name.as_str())
            .collect();
        let mut pods: BTreeMap<String, Vec<_>> = quarantined
            .iter()
            .map(|n| ((*n).to_owned(), Vec::new()))
            .collect();
        // Only the pods of quarantined nodes are read and sorted (a fleet holds tens of
        // thousands).
        for pod in self.pods.state() {
            let node = gryvia_reconcile::facts::node_of(&pod);
            if let Some(list) = node.and_then(|n| pods.get_mut(n)) {
                list.push(PodInfo::of(&pod));
            }
        }
        for list in pods.values_mut() {
            list.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        }
        let namespaces: BTreeSet<String> = pods
            .values()
            .flatten()
            .map(|p| p.namespace.clone())
            .collect();
        let mut pdbs: Vec<_> = self
            .pdbs
            .state()
            .iter()
            .filter(|b| b.namespace().is_some_and(|ns| namespaces.contains(&ns)))
            .map(|b| PdbInfo::of(b))
            .collect();
        pdbs.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        (pods, pdbs)
    }
}

#[async_trait::async_trait]
impl Observe for HealthObserver {
    type Object = GryviaHealthCheck;
    type World = HealthWorld;

    async fn observe(&self, hc: &GryviaHealthCheck) -> Result<HealthWorld> {
        let world = self.cached_world(hc).await?;
        self.with_own_quarantines(hc, world).await
    }
}

impl HealthObserver {
    /// The world as the caches have it.
    async fn cached_world(&self, hc: &GryviaHealthCheck) -> Result<HealthWorld> {
        // Verdicts need the whole picture.
        wait_ready(&self.nodes, "Node").await?;
        wait_ready(&self.gpu_nodes, "GryviaGpuNode").await?;
        wait_ready(&self.pods, "Pod").await?;
        wait_ready(&self.pdbs, "PodDisruptionBudget").await?;
        let name = hc.name_any();
        let mut nodes: Vec<NodeInfo> = self.nodes.state().iter().map(|n| NodeInfo::of(n)).collect();
        nodes.sort_by(|a, b| a.name.cmp(&b.name));
        let gpu_nodes: BTreeMap<String, Arc<GryviaGpuNode>> = self
            .gpu_nodes
            .state()
            .into_iter()
            .map(|g| (g.spec.node_name.clone(), g))
            .collect();
        let (pods, pdbs) = if hc.spec.on_failure.drain {
            self.drained(&nodes, &name)
        } else {
            (BTreeMap::new(), Vec::new())
        };
        let remediating_elsewhere = remediating_elsewhere(&owned(&self.checks.state()), &name);
        Ok(HealthWorld {
            nodes,
            gpu_nodes,
            pods,
            pdbs,
            remediating_elsewhere,
        })
    }

    /// `world` with the nodes `hc`'s status says it quarantined read from the API server where
    /// the cache does not show them tainted by it (usually none: a quarantine this controller
    /// just made, or one a human ended).
    async fn with_own_quarantines(
        &self,
        hc: &GryviaHealthCheck,
        mut world: HealthWorld,
    ) -> Result<HealthWorld> {
        let name = hc.name_any();
        let claimed: BTreeSet<&str> = hc
            .status
            .iter()
            .flat_map(|s| s.nodes.iter())
            .filter(|r| r.quarantined)
            .map(|r| r.node.as_str())
            .collect();
        let api: kube::Api<Node> = kube::Api::all(self.client.clone());
        for info in &mut world.nodes {
            if !claimed.contains(info.name.as_str())
                || info.quarantined_by.as_deref() == Some(name.as_str())
            {
                continue;
            }
            let fresh = api.get_opt(&info.name).await.map_err(|source| Error::Api {
                operation: format!("read Node {}", info.name),
                source,
            })?;
            if let Some(node) = fresh {
                *info = NodeInfo::of(&node);
            }
        }
        Ok(world)
    }
}

/// A hash of what of a GryviaGpuNode the checks react to at once: its remediation result (the
/// agent reports on a step) and a fatal reading with the time of its observation (other
/// observations are read on the check's schedule).
fn remediation_or_fatal(g: &GryviaGpuNode) -> Option<u64> {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    let status = g.status.as_ref();
    status
        .and_then(|s| s.remediation_result.as_ref())
        .map(|r| (r.id.clone(), format!("{:?}", r.phase)))
        .hash(&mut h);
    status
        .and_then(fatal_signal)
        .map(|t| t.as_nanosecond())
        .hash(&mut h);
    Some(h.finish())
}

/// The GPU health controller: a check is reconciled when its spec changes, on its schedule
/// (its Plan's requeue), when an agent reports on a remediation step, and when an agent
/// reports a fatal reading.
pub fn controller(shared: &Shared, options: HealthOptions) -> Running {
    let c = &shared.caches;
    let checks: Store<GryviaHealthCheck> = c.store();
    let all_checks = checks.clone();
    let ctrl = Controller::for_shared_stream(
        changed(c.subscribe::<GryviaHealthCheck>(), spec_or_lifecycle),
        checks.clone(),
    )
    .watches_shared_stream(
        changed(c.subscribe::<GryviaGpuNode>(), remediation_or_fatal),
        move |_: Arc<GryviaGpuNode>| all_of(&all_checks),
    );
    let observer = HealthObserver {
        client: shared.client.clone(),
        nodes: c.store(),
        gpu_nodes: c.store(),
        checks,
        pods: c.store(),
        pdbs: c.store(),
    };
    let reconciler = HealthCheckReconciler { options };
    Box::pin(run(ctrl, shared.context(reconciler, observer)))
}
