//! The metering controllers of the quota-operator (opt-in): a GryviaUsageRecord for every GPU
//! job, and for the idle GPU time of reservations that charge for it (policy:
//! `gryvia_reconcile::metering`). Reads the catalogue, the job's namespace and the
//! GPU product of its first worker's node from the operator's caches.

use std::sync::Arc;

use gryvia_reconcile::metering::{
    MeteringReconciler, MeteringWorld, ReservationMeteringReconciler, ReservationMeteringWorld,
    node_product,
};
use gryvia_types::{
    CachedPod, GryviaAIJob, GryviaGpuSku, GryviaReservation, GryviaUsageRecord, labels,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;
use kube::runtime::controller::Controller;
use kube::runtime::reflector::{ObjectRef, Store};

use super::aijob::pods_of_job;
use super::budget::catalogue;
use super::{Running, Shared, cached};
use crate::Result;
use crate::cache::{NamespaceMeta, NodeMeta, wait_ready};
use crate::runtime::{Observe, run};

/// Observes what metering a job needs: the catalogue, its namespace's tenant and the GPU
/// product of the node its first worker ran on.
pub struct MeteringObserver {
    skus: Store<GryviaGpuSku>,
    namespaces: Store<NamespaceMeta>,
    pods: Store<CachedPod>,
    nodes: Store<NodeMeta>,
}

#[async_trait::async_trait]
impl Observe for MeteringObserver {
    type Object = GryviaAIJob;
    type World = MeteringWorld;

    async fn observe(&self, job: &GryviaAIJob) -> Result<MeteringWorld> {
        wait_ready(&self.skus, "GryviaGpuSku").await?;
        wait_ready(&self.namespaces, "Namespace").await?;
        wait_ready(&self.pods, "Pod").await?;
        wait_ready(&self.nodes, "Node").await?;
        let ns = job.namespace().unwrap_or_default();
        let tenant = cached(&self.namespaces, None, &ns)
            .and_then(|n| n.labels().get(labels::TENANT).cloned());
        let pods = pods_of_job(&self.pods, &ns, &job.name_any());
        let nodes: Vec<ObjectMeta> = pods
            .iter()
            .filter_map(|p| gryvia_reconcile::facts::node_of(p))
            .filter_map(|n| cached(&self.nodes, None, n).map(|n| n.metadata.clone()))
            .collect();
        let node_product = node_product(job, &pods, &nodes);
        Ok(MeteringWorld {
            skus: catalogue(&self.skus),
            tenant,
            node_product,
        })
    }
}

/// The metering controller over GryviaAIJobs: every change, their status included (a start
/// or a completion is what it meters).
pub fn controller(shared: &Shared) -> Running {
    let c = &shared.caches;
    let ctrl = Controller::for_shared_stream(c.subscribe::<GryviaAIJob>(), c.store());
    let observer = MeteringObserver {
        skus: c.store(),
        namespaces: c.store(),
        pods: c.store(),
        nodes: c.store(),
    };
    Box::pin(run(ctrl, shared.context(MeteringReconciler, observer)))
}

/// Observes what metering a reservation's idle time needs: its open usage records and the
/// catalogue.
pub struct ReservationMeteringObserver {
    records: Store<GryviaUsageRecord>,
    skus: Store<GryviaGpuSku>,
}

#[async_trait::async_trait]
impl Observe for ReservationMeteringObserver {
    type Object = GryviaReservation;
    type World = ReservationMeteringWorld;

    async fn observe(&self, r: &GryviaReservation) -> Result<ReservationMeteringWorld> {
        wait_ready(&self.records, "GryviaUsageRecord").await?;
        wait_ready(&self.skus, "GryviaGpuSku").await?;
        let name = r.name_any();
        let open = self
            .records
            .state()
            .iter()
            .filter(|rec| rec.labels().get(labels::RESERVATION) == Some(&name))
            .filter(|rec| rec.spec.end_time.is_none())
            .map(|rec| (**rec).clone())
            .collect();
        Ok(ReservationMeteringWorld {
            open,
            skus: catalogue(&self.skus),
        })
    }
}

/// The metering of reservations' idle GPU time (`billing.chargeWhenIdle`): a reservation is
/// reconciled at every change, its status included (its idle GPUs are what it meters), and when
/// one of its records changes.
pub fn reservation_controller(shared: &Shared) -> Running {
    let c = &shared.caches;
    let ctrl = Controller::for_shared_stream(c.subscribe::<GryviaReservation>(), c.store())
        .watches_shared_stream(
            c.subscribe::<GryviaUsageRecord>(),
            |rec: Arc<GryviaUsageRecord>| {
                rec.labels()
                    .get(labels::RESERVATION)
                    .map(|name| ObjectRef::<GryviaReservation>::new(name))
            },
        );
    let observer = ReservationMeteringObserver {
        records: c.store(),
        skus: c.store(),
    };
    Box::pin(run(
        ctrl,
        shared.context(ReservationMeteringReconciler, observer),
    ))
}
