//! The GryviaNetwork health controller of the gpu-operator: each network's status from the
//! collectors' GryviaFabricSignals of the nodes it selects (policy:
//! `gryvia_reconcile::network_health`).

use std::sync::Arc;

use gryvia_reconcile::network_health::{NetworkReconciler, NetworkWorld};
use gryvia_types::{GryviaFabricSignal, GryviaNetwork};
use k8s_openapi::api::core::v1::Node;
use kube::runtime::controller::Controller;
use kube::runtime::reflector::Store;

use super::{Running, Shared, all_of, changed, node_labels};
use crate::Result;
use crate::cache::wait_ready;
use crate::runtime::{Observe, run, spec_or_lifecycle};

/// Observes every node's labels and every collector's signal.
pub struct NetworkObserver {
    nodes: Store<Node>,
    signals: Store<GryviaFabricSignal>,
}

#[async_trait::async_trait]
impl Observe for NetworkObserver {
    type Object = GryviaNetwork;
    type World = NetworkWorld;

    async fn observe(&self, _n: &GryviaNetwork) -> Result<NetworkWorld> {
        wait_ready(&self.nodes, "Node").await?;
        wait_ready(&self.signals, "GryviaFabricSignal").await?;
        Ok(NetworkWorld {
            nodes: node_labels(&self.nodes),
            signals: self
                .signals
                .state()
                .iter()
                .map(|s| (s.spec.node_name.clone(), s.as_ref().clone()))
                .collect(),
        })
    }
}

/// The network health controller: reconciled when a network's spec changes, when any fabric
/// signal is written (every network may select its node), and every half minute (signals go
/// stale without an event).
pub fn controller(shared: &Shared) -> Running {
    let c = &shared.caches;
    let networks: Store<GryviaNetwork> = c.store();
    let of_signal = networks.clone();
    let ctrl = Controller::for_shared_stream(
        changed(c.subscribe::<GryviaNetwork>(), spec_or_lifecycle),
        networks,
    )
    .watches_shared_stream(
        c.subscribe::<GryviaFabricSignal>(),
        move |_s: Arc<GryviaFabricSignal>| all_of(&of_signal),
    );
    let observer = NetworkObserver {
        nodes: c.store(),
        signals: c.store(),
    };
    Box::pin(run(ctrl, shared.context(NetworkReconciler, observer)))
}
