//! Nodes for the CLI, the gateway and the Python SDK: what the health policy reads of nodes,
//! pods and budgets, maintenance start and end, drains through the Eviction API (on the same
//! executor as the controllers), and a node's health report.

use std::collections::BTreeSet;
use std::time::Duration;

use gryvia_reconcile::health::{DrainPlan, PdbInfo, PodInfo, drain_plan};
use gryvia_reconcile::{Eviction, maintenance};
use gryvia_types::{CachedPod, GryviaGpuNode, GryviaHealthCheck};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams};

use crate::apply::Executor;
use crate::{Error, Result, api_err};

/// The pods on `node` and the PodDisruptionBudgets of their namespaces.
///
/// # Errors
/// [`Error::Api`] when a list fails.
pub async fn pods_and_budgets(
    client: &kube::Client,
    node: &str,
) -> Result<(Vec<PodInfo>, Vec<PdbInfo>)> {
    let pods: Vec<PodInfo> = Api::<CachedPod>::all(client.clone())
        .list(&ListParams::default().fields(&format!("spec.nodeName={node}")))
        .await
        .map_err(api_err(format!("list pods on node {node}")))?
        .items
        .iter()
        .map(|p| PodInfo::of(&p))
        .collect();
    let namespaces: BTreeSet<&str> = pods.iter().map(|p| p.namespace.as_str()).collect();
    let mut pdbs = Vec::new();
    for ns in namespaces {
        pdbs.extend(
            Api::<PodDisruptionBudget>::namespaced(client.clone(), ns)
                .list(&ListParams::default())
                .await
                .map_err(api_err(format!("list pod disruption budgets in {ns}")))?
                .items
                .iter()
                .map(PdbInfo::of),
        );
    }
    Ok((pods, pdbs))
}

/// Field manager of node changes made by the CLI.
pub const MAINTENANCE_MANAGER: &str = super::CLI_MANAGER;

/// Puts `node` into maintenance: annotates it with the reason and cordons it
/// (`gryvia_reconcile::maintenance::start`). Returns whether the node was schedulable before
/// (then `end_maintenance` uncordons it).
///
/// # Errors
/// [`Error::Api`] when the node cannot be read or patched (404 names the node).
pub async fn start_maintenance(client: &kube::Client, node: &str, reason: &str) -> Result<bool> {
    let nodes: Api<Node> = Api::all(client.clone());
    let current = nodes
        .get(node)
        .await
        .map_err(api_err(format!("read node {node}")))?;
    let start = maintenance::start(&current, reason);
    nodes
        .patch(node, &PatchParams::default(), &Patch::Merge(&start.patch()))
        .await
        .map_err(api_err(format!("cordon node {node}")))?;
    Ok(start.was_schedulable)
}

/// Ends maintenance of `node` (`gryvia_reconcile::maintenance::end`): removes the annotations,
/// uncordons the node when maintenance cordoned it, and removes the `gryvia.io/gpu-unhealthy`
/// taint (a human returning the node to service after repairing it). Returns what was done,
/// one line each.
///
/// # Errors
/// [`Error::Api`] when the node cannot be read or patched.
pub async fn end_maintenance(client: &kube::Client, node: &str) -> Result<Vec<String>> {
    let nodes: Api<Node> = Api::all(client.clone());
    let current = nodes
        .get(node)
        .await
        .map_err(api_err(format!("read node {node}")))?;
    let end = maintenance::end(&current);
    nodes
        .patch(node, &PatchParams::default(), &Patch::Merge(&end.patch()))
        .await
        .map_err(api_err(format!("update node {node}")))?;
    Ok(end.done)
}

/// Progress of a drain, reported after every round.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DrainProgress {
    /// This pod's eviction was accepted.
    Evicted(String),
    /// A PodDisruptionBudget refused this pod's eviction (429); retried.
    Blocked(String),
    /// Pods still on the node after a round: evictable, blocked, terminating.
    Waiting {
        /// Pods whose eviction is still to be requested.
        evictable: usize,
        /// Pods a budget keeps.
        blocked: usize,
        /// Pods on their way out.
        terminating: usize,
    },
}

/// Drains `node` through the Eviction API with the controllers' executor
/// ([`Executor::evict`]: PodDisruptionBudgets are honoured; nothing is deleted directly),
/// calling `progress` as it goes, until no evictable pod is left or
/// `timeout` passes. Returns the final plan (empty when drained).
///
/// # Errors
/// [`Error::Api`] on an API failure other than a budget refusing an eviction;
/// [`Error::Timeout`] naming the pods still there when `timeout` passes.
pub async fn drain(
    client: &kube::Client,
    node: &str,
    timeout: Duration,
    interval: Duration,
    mut progress: impl FnMut(&DrainProgress),
) -> Result<DrainPlan> {
    let deadline = tokio::time::Instant::now() + timeout;
    let mut reported: BTreeSet<String> = BTreeSet::new();
    let executor = Executor::new(client.clone(), MAINTENANCE_MANAGER);
    loop {
        let (pods, pdbs) = pods_and_budgets(client, node).await?;
        let plan = drain_plan(&pods, &pdbs);
        if plan.complete() {
            return Ok(plan);
        }
        // Every evictable or blocked pod is asked to leave: the API server decides with the
        // budget's current state, which may have changed since it was read.
        let ask: Vec<Eviction> = plan
            .evict
            .iter()
            .chain(plan.blocked.iter().map(|b| &b.pod))
            .map(|p| Eviction {
                namespace: p.namespace.clone(),
                pod: p.name.clone(),
                reason: format!("drain of node {node}"),
            })
            .collect();
        let outcome = executor.evict(&ask).await?;
        for key in outcome.evicted {
            progress(&DrainProgress::Evicted(key));
        }
        for key in outcome.blocked_evictions {
            if reported.insert(key.clone()) {
                progress(&DrainProgress::Blocked(key));
            }
        }
        progress(&DrainProgress::Waiting {
            evictable: plan.evict.len(),
            blocked: plan.blocked.len(),
            terminating: plan.terminating.len(),
        });
        if tokio::time::Instant::now() >= deadline {
            let mut left: Vec<String> = plan.evict.iter().map(PodInfo::key).collect();
            left.extend(plan.blocked.iter().map(ToString::to_string));
            left.extend(plan.terminating.iter().cloned());
            return Err(Error::Timeout {
                what: format!("node {node} to drain; still there: {}", left.join(", ")),
                after: timeout,
            });
        }
        tokio::time::sleep(interval).await;
    }
}

/// A node with its GryviaGpuNode and the verdicts health checks gave it.
#[derive(Clone, Debug)]
pub struct NodeReport {
    /// The Node.
    pub node: Node,
    /// Its GryviaGpuNode, if an agent reports it.
    pub gpu_node: Option<GryviaGpuNode>,
    /// `(health check, result)` for every check that covers the node.
    pub results: Vec<(String, gryvia_types::NodeHealthResult)>,
}

/// Reads `node`, its GryviaGpuNode and its results in every health check.
///
/// # Errors
/// [`Error::Api`] when a read fails (404 names the node).
pub async fn node_report(client: &kube::Client, node: &str) -> Result<NodeReport> {
    let n = Api::<Node>::all(client.clone())
        .get(node)
        .await
        .map_err(api_err(format!("read node {node}")))?;
    let gpu_nodes = Api::<GryviaGpuNode>::all(client.clone())
        .list(&ListParams::default())
        .await
        .map_err(api_err("list GryviaGpuNodes"))?;
    let gpu_node = gpu_nodes
        .items
        .into_iter()
        .find(|g| g.spec.node_name == node);
    let checks = Api::<GryviaHealthCheck>::all(client.clone())
        .list(&ListParams::default())
        .await
        .map_err(api_err("list GryviaHealthChecks"))?;
    let mut results = Vec::new();
    for c in checks.items {
        let name = c.name_any();
        if let Some(r) = c
            .status
            .and_then(|s| s.nodes.into_iter().find(|r| r.node == node))
        {
            results.push((name, r));
        }
    }
    Ok(NodeReport {
        node: n,
        gpu_node,
        results,
    })
}
