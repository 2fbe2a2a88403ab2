//! The GryviaBudget controller of the quota-operator: spend of a scope in its period from the
//! usage records, forecast and state (policy: `gryvia_reconcile::budget`; the ai-operator's
//! admission gate reads the state, `crate::admission`).

use std::sync::Arc;

use gryvia_reconcile::budget::{AlertChannels, BudgetReconciler, BudgetWorld};
use gryvia_reconcile::metering::Sku;
use gryvia_types::{BudgetScopeType, GryviaBudget, GryviaGpuSku, GryviaTenant, GryviaUsageRecord};
use kube::runtime::controller::Controller;
use kube::runtime::predicates;
use kube::runtime::reflector::Store;

use super::{Running, Shared, all_of, cached, changed, in_namespace, owned};
use crate::Result;
use crate::cache::wait_ready;
use crate::mail::Mailer;
use crate::runtime::{Observe, run, spec_or_lifecycle};

/// The GryviaGpuSku catalogue in `skus`, as metering and budgets price with it.
pub fn catalogue(skus: &Store<GryviaGpuSku>) -> Vec<Sku> {
    let mut all = skus.state();
    all.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    all.iter().filter_map(|s| Sku::of(s)).collect()
}

/// Observes what a budget counts: every usage record and the catalogue.
pub struct BudgetObserver {
    records: Store<GryviaUsageRecord>,
    skus: Store<GryviaGpuSku>,
    tenants: Store<GryviaTenant>,
}

#[async_trait::async_trait]
impl Observe for BudgetObserver {
    type Object = GryviaBudget;
    type World = BudgetWorld;

    async fn observe(&self, budget: &GryviaBudget) -> Result<BudgetWorld> {
        wait_ready(&self.records, "GryviaUsageRecord").await?;
        wait_ready(&self.skus, "GryviaGpuSku").await?;
        wait_ready(&self.tenants, "GryviaTenant").await?;
        let records = owned(&in_namespace(&self.records, None));
        let scope = &budget.spec.scope;
        let tenant_emails = matches!(scope.type_, BudgetScopeType::Team | BudgetScopeType::Tenant)
            .then(|| cached(&self.tenants, None, &scope.name))
            .flatten()
            .and_then(|t| t.spec.notifications.clone())
            .map(|n| n.email)
            .unwrap_or_default();
        Ok(BudgetWorld {
            records,
            skus: catalogue(&self.skus),
            tenant_emails,
        })
    }
}

/// Where the budget controller sends alerts besides Events.
#[derive(Clone, Debug, Default)]
pub struct Alerts {
    /// The channels the reconcile may use.
    pub channels: AlertChannels,
    /// What sends e-mail (with `channels.email_to` set).
    pub mailer: Option<Mailer>,
}

/// The budget controller: a budget is reconciled when it changes, when a usage record of any
/// scope or the catalogue changes, and every minute (its Plan's requeue). Threshold alerts go
/// to `alerts`' channels.
pub fn controller(shared: &Shared, alerts: Alerts) -> Running {
    let c = &shared.caches;
    let budgets: Store<GryviaBudget> = c.store();
    let for_records = budgets.clone();
    let for_skus = budgets.clone();
    let ctrl = Controller::for_shared_stream(
        changed(c.subscribe::<GryviaBudget>(), spec_or_lifecycle),
        budgets,
    )
    // A record's spec (opened, closed), not its minutely re-pricing: a budget prices records
    // itself, and refreshes every minute anyway.
    .watches_shared_stream(
        changed(c.subscribe::<GryviaUsageRecord>(), predicates::generation),
        move |_r: Arc<GryviaUsageRecord>| all_of(&for_records),
    )
    .watches_shared_stream(
        c.subscribe::<GryviaGpuSku>(),
        move |_s: Arc<GryviaGpuSku>| all_of(&for_skus),
    );
    let observer = BudgetObserver {
        records: c.store(),
        skus: c.store(),
        tenants: c.store(),
    };
    let reconciler = BudgetReconciler {
        alerts: alerts.channels,
    };
    let executor = shared
        .executor(gryvia_reconcile::Reconcile::name(&reconciler))
        .with_mailer(alerts.mailer);
    Box::pin(run(
        ctrl,
        shared.context_with(reconciler, observer, executor),
    ))
}
