//! The usage record controller of the quota-operator (opt-in, with metering): prices each
//! GryviaUsageRecord from the catalogue and samples how busy its job's GPUs are from the node
//! agents' GryviaGpuNodes (policy: `gryvia_reconcile::metering`).

use std::sync::Arc;

use gryvia_reconcile::metering::{UsageRecordReconciler, UsageRecordWorld};
use gryvia_types::{CachedPod, GryviaGpuNode, GryviaGpuSku, GryviaUsageRecord};
use kube::ResourceExt;
use kube::runtime::controller::Controller;
use kube::runtime::reflector::{ObjectRef, Store};

use super::aijob::pods_of_job;
use super::budget::catalogue;
use super::{Running, Shared, cached, changed};
use crate::Result;
use crate::cache::wait_ready;
use crate::runtime::{Observe, run, spec_or_lifecycle};

/// Observes the catalogue, for pricing a usage record, and the readings of its job's GPUs.
pub struct UsageRecordObserver {
    skus: Store<GryviaGpuSku>,
    pods: Store<CachedPod>,
    gpu_nodes: Store<GryviaGpuNode>,
}

/// The mean utilisation of the GPUs on the nodes `pods` ran on, from their GryviaGpuNodes
/// (`None` when no node agent reports for them). Exact for pods that take whole nodes; for a
/// node shared with other pods, its mean over all its GPUs.
pub fn utilisation_of(pods: &[Arc<CachedPod>], gpu_nodes: &Store<GryviaGpuNode>) -> Option<i32> {
    let mut nodes: Vec<&str> = pods
        .iter()
        .filter_map(|p| gryvia_reconcile::facts::node_of(p.as_ref()))
        .collect();
    nodes.sort_unstable();
    nodes.dedup();
    gryvia_reconcile::metering::mean_utilisation(
        nodes
            .iter()
            .filter_map(|n| cached(gpu_nodes, None, n))
            .flat_map(|g| {
                g.status
                    .as_ref()
                    .map(|s| s.gpus.clone())
                    .unwrap_or_default()
            })
            .filter_map(|gpu| gpu.utilization_percent),
    )
}

#[async_trait::async_trait]
impl Observe for UsageRecordObserver {
    type Object = GryviaUsageRecord;
    type World = UsageRecordWorld;

    async fn observe(&self, record: &GryviaUsageRecord) -> Result<UsageRecordWorld> {
        wait_ready(&self.skus, "GryviaGpuSku").await?;
        wait_ready(&self.pods, "Pod").await?;
        wait_ready(&self.gpu_nodes, "GryviaGpuNode").await?;
        let w = &record.spec.workload;
        let utilisation = (w.kind == "GryviaAIJob")
            .then(|| pods_of_job(&self.pods, &record.spec.namespace, &w.name))
            .and_then(|pods| utilisation_of(&pods, &self.gpu_nodes));
        Ok(UsageRecordWorld {
            skus: catalogue(&self.skus),
            utilisation,
        })
    }
}

/// The usage record controller: a record is priced when its spec changes and again when its
/// SKU changes in the catalogue.
pub fn controller(shared: &Shared) -> Running {
    let c = &shared.caches;
    let records: Store<GryviaUsageRecord> = c.store();
    let of_sku = records.clone();
    let ctrl = Controller::for_shared_stream(
        changed(c.subscribe::<GryviaUsageRecord>(), spec_or_lifecycle),
        records,
    )
    .watches_shared_stream(
        c.subscribe::<GryviaGpuSku>(),
        move |sku: Arc<GryviaGpuSku>| {
            let name = sku.name_any();
            let product = sku.spec.gpu_product.clone();
            of_sku
                .state()
                .iter()
                .filter(|r| r.spec.sku == name || r.spec.sku == product)
                .map(|r| ObjectRef::from_obj(r.as_ref()))
                .collect::<Vec<_>>()
        },
    );
    let observer = UsageRecordObserver {
        skus: c.store(),
        pods: c.store(),
        gpu_nodes: c.store(),
    };
    Box::pin(run(ctrl, shared.context(UsageRecordReconciler, observer)))
}
