//! The usage record controller of the quota-operator (opt-in, with metering): prices each
//! GryviaUsageRecord from the catalogue (policy: `gryvia_reconcile::metering`).

use std::sync::Arc;

use gryvia_reconcile::metering::{Sku, UsageRecordReconciler};
use gryvia_types::{GryviaGpuSku, GryviaUsageRecord};
use kube::ResourceExt;
use kube::runtime::controller::Controller;
use kube::runtime::reflector::{ObjectRef, Store};

use super::budget::catalogue;
use super::{Running, Shared, changed};
use crate::Result;
use crate::cache::wait_ready;
use crate::runtime::{Observe, run, spec_or_lifecycle};

/// Observes the catalogue, for pricing a usage record.
pub struct UsageRecordObserver {
    skus: Store<GryviaGpuSku>,
}

#[async_trait::async_trait]
impl Observe for UsageRecordObserver {
    type Object = GryviaUsageRecord;
    type World = Vec<Sku>;

    async fn observe(&self, _record: &GryviaUsageRecord) -> Result<Vec<Sku>> {
        wait_ready(&self.skus, "GryviaGpuSku").await?;
        Ok(catalogue(&self.skus))
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
    let observer = UsageRecordObserver { skus: c.store() };
    Box::pin(run(ctrl, shared.context(UsageRecordReconciler, observer)))
}
