//! The network-operator's service graph controller (policy:
//! `gryvia_reconcile::network::reconcile::ServiceGraphReconciler`): each GryviaServiceGraph
//! folds every node's new GryviaFlowAggregate window in, its flows resolved to workloads through
//! the cluster's pods and Services.

use std::sync::Arc;

use gryvia_reconcile::network::flows::directory;
use gryvia_reconcile::network::reconcile::{GraphWorld, ServiceGraphReconciler};
use gryvia_types::{CachedPod, GryviaFlowAggregate, GryviaServiceGraph};
use k8s_openapi::api::core::v1::Service;
use kube::runtime::controller::Controller;
use kube::runtime::reflector::Store;

use super::{Running, Shared, all_of, changed};
use crate::Result;
use crate::cache::wait_ready;
use crate::runtime::{Observe, run, spec_or_lifecycle};

/// Observes every node's aggregate, and the pods and Services to resolve their flows.
pub struct GraphObserver {
    aggregates: Store<GryviaFlowAggregate>,
    pods: Store<CachedPod>,
    services: Store<Service>,
}

#[async_trait::async_trait]
impl Observe for GraphObserver {
    type Object = GryviaServiceGraph;
    type World = GraphWorld;

    async fn observe(&self, _g: &GryviaServiceGraph) -> Result<GraphWorld> {
        wait_ready(&self.aggregates, "GryviaFlowAggregate").await?;
        wait_ready(&self.pods, "Pod").await?;
        wait_ready(&self.services, "Service").await?;
        let aggregates = self.aggregates.state();
        Ok(GraphWorld {
            directory: directory(
                self.pods.state().iter().map(AsRef::as_ref),
                self.services.state().iter().map(AsRef::as_ref),
                aggregates.iter().map(|a| a.spec.node_name.clone()),
            ),
            aggregates: aggregates
                .iter()
                .filter_map(|a| Some((a.spec.node_name.clone(), a.status.clone()?)))
                .collect(),
        })
    }
}

/// The service graph controller: reconciled when a graph's spec changes, when any node's
/// aggregate is written (every graph may hold its flows), and when its oldest bucket is due to
/// leave the window (the Plan's requeue).
pub fn controller(shared: &Shared) -> Running {
    let c = &shared.caches;
    let graphs: Store<GryviaServiceGraph> = c.store();
    let of_aggregate = graphs.clone();
    let ctrl = Controller::for_shared_stream(
        changed(c.subscribe::<GryviaServiceGraph>(), spec_or_lifecycle),
        graphs,
    )
    .watches_shared_stream(
        c.subscribe::<GryviaFlowAggregate>(),
        move |_a: Arc<GryviaFlowAggregate>| all_of(&of_aggregate),
    );
    let observer = GraphObserver {
        aggregates: c.store(),
        pods: c.store(),
        services: c.store(),
    };
    Box::pin(run(ctrl, shared.context(ServiceGraphReconciler, observer)))
}
