//! The GryviaStorage health controller of the gpu-operator: each storage's status from the node
//! agents' probes of its mount (`GryviaGpuNode.status.storage`; policy:
//! `gryvia_reconcile::storage_health`).

use std::sync::Arc;

use gryvia_reconcile::storage_health::{StorageReconciler, StorageWorld};
use gryvia_types::{GryviaGpuNode, GryviaStorage};
use k8s_openapi::api::core::v1::Node;
use kube::runtime::controller::Controller;
use kube::runtime::reflector::{ObjectRef, Store};

use super::{Running, Shared, changed, node_labels};
use crate::Result;
use crate::cache::wait_ready;
use crate::runtime::{Observe, run, spec_or_lifecycle};

/// Observes every node's labels and every node agent's report.
pub struct StorageObserver {
    nodes: Store<Node>,
    agents: Store<GryviaGpuNode>,
}

#[async_trait::async_trait]
impl Observe for StorageObserver {
    type Object = GryviaStorage;
    type World = StorageWorld;

    async fn observe(&self, _s: &GryviaStorage) -> Result<StorageWorld> {
        wait_ready(&self.nodes, "Node").await?;
        wait_ready(&self.agents, "GryviaGpuNode").await?;
        Ok(StorageWorld {
            nodes: node_labels(&self.nodes),
            agents: self
                .agents
                .state()
                .iter()
                .map(|a| (a.spec.node_name.clone(), a.as_ref().clone()))
                .collect(),
        })
    }
}

/// The storage health controller: reconciled when a storage's spec changes, when a node agent
/// reports a probe of it, and every half minute (reports go stale without an event).
pub fn controller(shared: &Shared) -> Running {
    let c = &shared.caches;
    let storages: Store<GryviaStorage> = c.store();
    let ctrl = Controller::for_shared_stream(
        changed(c.subscribe::<GryviaStorage>(), spec_or_lifecycle),
        storages,
    )
    .watches_shared_stream(
        c.subscribe::<GryviaGpuNode>(),
        |agent: Arc<GryviaGpuNode>| {
            agent
                .status
                .as_ref()
                .map(|s| {
                    s.storage
                        .iter()
                        .map(|p| ObjectRef::<GryviaStorage>::new(&p.name))
                        .collect::<Vec<_>>()
                })
                .unwrap_or_default()
        },
    );
    let observer = StorageObserver {
        nodes: c.store(),
        agents: c.store(),
    };
    Box::pin(run(ctrl, shared.context(StorageReconciler, observer)))
}
