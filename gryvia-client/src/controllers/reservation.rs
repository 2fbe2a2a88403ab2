//! The GryviaReservation controller of the ai-operator (opt-in): labels (and, exclusive, taints)
//! the nodes a reservation holds while its window is open or its lead time runs, evicts others'
//! GPU pods there when the owner's pods wait for room, and accounts availability against the
//! SLA (policy: `gryvia_reconcile::reservation`).

use std::sync::Arc;

use gryvia_reconcile::reservation::{ReservationReconciler, ReservationWorld};
use gryvia_types::{CachedPod, GryviaReservation, labels};
use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use kube::runtime::controller::Controller;
use kube::runtime::reflector::{ObjectRef, Store};

use super::{Running, Shared, changed, owned};
use crate::Result;
use crate::cache::wait_ready;
use crate::runtime::{Observe, run, spec_or_lifecycle};

/// Observes the nodes a reservation may hold: every node, with the GPUs its running pods use.
pub struct ReservationObserver {
    nodes: Store<Node>,
    pods: Store<CachedPod>,
}

#[async_trait::async_trait]
impl Observe for ReservationObserver {
    type Object = GryviaReservation;
    type World = ReservationWorld;

    async fn observe(&self, _r: &GryviaReservation) -> Result<ReservationWorld> {
        wait_ready(&self.nodes, "Node").await?;
        wait_ready(&self.pods, "Pod").await?;
        // `ReservationWorld::of` counts only the pods that hold GPUs (bound, not finished).
        Ok(ReservationWorld::of(
            &owned(&self.nodes.state()),
            &self.pods.state(),
        ))
    }
}

/// The reservation controller: reconciled when a reservation's spec changes, when a node it
/// labelled does, and when a pod of its jobs (label `gryvia.io/reservation`) does.
pub fn controller(shared: &Shared) -> Running {
    let caches = &shared.caches;
    let trigger = changed(caches.subscribe::<GryviaReservation>(), spec_or_lifecycle);
    let ctrl = Controller::for_shared_stream(trigger, caches.store())
        .watches_shared_stream(caches.subscribe::<Node>(), |node: Arc<Node>| {
            node.labels()
                .get(labels::RESERVED_TAINT)
                .map(|r| ObjectRef::<GryviaReservation>::new(r))
        })
        // The owner's pods: one waiting for a node may need GPUs given back.
        .watches_shared_stream(caches.subscribe::<CachedPod>(), |pod: Arc<CachedPod>| {
            pod.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(labels::RESERVATION))
                .map(|r| ObjectRef::<GryviaReservation>::new(r))
        });
    let observer = ReservationObserver {
        nodes: caches.store(),
        pods: caches.store(),
    };
    Box::pin(run(ctrl, shared.context(ReservationReconciler, observer)))
}
