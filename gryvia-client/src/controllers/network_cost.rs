//! The network-operator's network cost controller (policy:
//! `gryvia_reconcile::network::reconcile::NetworkCostReconciler`): each GryviaNetworkCost folds
//! every node's new GryviaFlowAggregate window in, its flows priced by the zones of the two
//! ends' nodes and attributed through the cluster's pods, Services and namespaces; the one
//! with `spec.usageRecords` writes each namespace's hourly GryviaUsageRecords.

use std::collections::BTreeMap;
use std::sync::Arc;

use gryvia_reconcile::network::cost::{cost_directory, metering};
use gryvia_reconcile::network::reconcile::{CostWorld, NetworkCostReconciler};
use gryvia_types::{CachedPod, GryviaFlowAggregate, GryviaNetworkCost};
use k8s_openapi::api::core::v1::{Node, Service};
use kube::ResourceExt;
use kube::runtime::controller::Controller;
use kube::runtime::reflector::Store;

use super::{Running, Shared, all_of, changed};
use crate::Result;
use crate::cache::{NamespaceMeta, wait_ready};
use crate::runtime::{Observe, run, spec_or_lifecycle};

/// Observes every node's aggregate, the addresses and zones to price its flows, the namespaces'
/// tenants, and which GryviaNetworkCost writes the usage records.
pub struct CostObserver {
    aggregates: Store<GryviaFlowAggregate>,
    pods: Store<CachedPod>,
    services: Store<Service>,
    nodes: Store<Node>,
    namespaces: Store<NamespaceMeta>,
    costs: Store<GryviaNetworkCost>,
}

#[async_trait::async_trait]
impl Observe for CostObserver {
    type Object = GryviaNetworkCost;
    type World = CostWorld;

    async fn observe(&self, _c: &GryviaNetworkCost) -> Result<CostWorld> {
        wait_ready(&self.aggregates, "GryviaFlowAggregate").await?;
        wait_ready(&self.pods, "Pod").await?;
        wait_ready(&self.services, "Service").await?;
        wait_ready(&self.nodes, "Node").await?;
        wait_ready(&self.namespaces, "Namespace").await?;
        let aggregates = self.aggregates.state();
        let services = self.services.state();
        let services: Vec<&Service> = services.iter().map(AsRef::as_ref).collect();
        let namespace_labels: BTreeMap<String, BTreeMap<String, String>> = self
            .namespaces
            .state()
            .iter()
            .map(|n| (n.name_any(), n.labels().clone()))
            .collect();
        Ok(CostWorld {
            directory: cost_directory(
                self.pods.state().iter().map(AsRef::as_ref),
                &services,
                self.nodes.state().iter().map(AsRef::as_ref),
                &namespace_labels,
                aggregates.iter().map(|a| a.spec.node_name.clone()),
            ),
            aggregates: aggregates
                .iter()
                .filter_map(|a| Some((a.spec.node_name.clone(), a.status.clone()?)))
                .collect(),
            metering: metering(self.costs.state().iter().map(AsRef::as_ref)),
        })
    }
}

/// The network cost controller: reconciled when a cost's spec changes, when any node's
/// aggregate is written (every collector's interval: which cost writes the usage records is
/// looked at again then), and when an hour is due to close (the Plan's requeue).
pub fn controller(shared: &Shared) -> Running {
    let c = &shared.caches;
    let costs: Store<GryviaNetworkCost> = c.store();
    let of_aggregate = costs.clone();
    let ctrl = Controller::for_shared_stream(
        changed(c.subscribe::<GryviaNetworkCost>(), spec_or_lifecycle),
        costs.clone(),
    )
    .watches_shared_stream(
        c.subscribe::<GryviaFlowAggregate>(),
        move |_a: Arc<GryviaFlowAggregate>| all_of(&of_aggregate),
    );
    let observer = CostObserver {
        aggregates: c.store(),
        pods: c.store(),
        services: c.store(),
        nodes: c.store(),
        namespaces: c.store(),
        costs,
    };
    Box::pin(run(ctrl, shared.context(NetworkCostReconciler, observer)))
}
