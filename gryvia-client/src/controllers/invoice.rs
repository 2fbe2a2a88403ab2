//! The invoice controllers of the quota-operator (`--invoices`): GryviaInvoices priced from
//! the usage records and issued once their period has ended, and the monthly issuing that
//! gives every tenant its invoice for the month (policy: `gryvia_reconcile::invoice`).

use std::sync::Arc;

use gryvia_reconcile::invoice::{InvoiceReconciler, InvoiceWorld, MonthlyInvoices};
use gryvia_types::{GryviaGpuSku, GryviaInvoice, GryviaTenant, GryviaUsageRecord};
use kube::runtime::controller::Controller;
use kube::runtime::predicates;
use kube::runtime::reflector::Store;

use super::budget::catalogue;
use super::{Running, Shared, all_of, changed, in_namespace, owned};
use crate::Result;
use crate::cache::wait_ready;
use crate::runtime::{Observe, run, spec_or_lifecycle};

/// Observes what an invoice counts: every usage record, the catalogue and every invoice.
pub struct InvoiceObserver {
    records: Store<GryviaUsageRecord>,
    skus: Store<GryviaGpuSku>,
    invoices: Store<GryviaInvoice>,
}

#[async_trait::async_trait]
impl Observe for InvoiceObserver {
    type Object = GryviaInvoice;
    type World = InvoiceWorld;

    async fn observe(&self, _invoice: &GryviaInvoice) -> Result<InvoiceWorld> {
        wait_ready(&self.records, "GryviaUsageRecord").await?;
        wait_ready(&self.skus, "GryviaGpuSku").await?;
        wait_ready(&self.invoices, "GryviaInvoice").await?;
        Ok(InvoiceWorld {
            records: owned(&in_namespace(&self.records, None)),
            skus: catalogue(&self.skus),
            invoices: owned(&in_namespace(&self.invoices, None)),
        })
    }
}

/// The invoice controller: an invoice is reconciled when it changes, when a usage record is
/// opened or closed, when the catalogue or another invoice changes, and every minute while
/// open (its Plan's requeue).
pub fn controller(shared: &Shared, reconciler: InvoiceReconciler) -> Running {
    let c = &shared.caches;
    let invoices: Store<GryviaInvoice> = c.store();
    let (for_records, for_skus, for_invoices) =
        (invoices.clone(), invoices.clone(), invoices.clone());
    let ctrl = Controller::for_shared_stream(
        changed(c.subscribe::<GryviaInvoice>(), spec_or_lifecycle),
        invoices,
    )
    .watches_shared_stream(
        changed(c.subscribe::<GryviaUsageRecord>(), predicates::generation),
        move |_r: Arc<GryviaUsageRecord>| all_of(&for_records),
    )
    .watches_shared_stream(
        c.subscribe::<GryviaGpuSku>(),
        move |_s: Arc<GryviaGpuSku>| all_of(&for_skus),
    )
    // Another invoice created or deleted can make one overlap or stop overlapping.
    .watches_shared_stream(
        changed(c.subscribe::<GryviaInvoice>(), spec_or_lifecycle),
        move |_i: Arc<GryviaInvoice>| all_of(&for_invoices),
    );
    let observer = InvoiceObserver {
        records: c.store(),
        skus: c.store(),
        invoices: c.store(),
    };
    Box::pin(run(ctrl, shared.context(reconciler, observer)))
}

/// Observes nothing: a tenant's monthly invoices follow from the tenant and the clock.
pub struct NoWorld;

#[async_trait::async_trait]
impl Observe for NoWorld {
    type Object = GryviaTenant;
    type World = ();

    async fn observe(&self, _tenant: &GryviaTenant) -> Result<()> {
        Ok(())
    }
}

/// The monthly issuing: every tenant gets its invoice for the current UTC month (and the
/// previous one, when it existed then), checked when the tenant changes and every hour.
pub fn monthly_controller(shared: &Shared) -> Running {
    let c = &shared.caches;
    let ctrl = Controller::for_shared_stream(
        changed(c.subscribe::<GryviaTenant>(), spec_or_lifecycle),
        c.store(),
    );
    Box::pin(run(ctrl, shared.context(MonthlyInvoices, NoWorld)))
}
