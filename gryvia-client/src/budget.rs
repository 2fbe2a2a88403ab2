//! The observe half and the wiring of budgets (GryviaBudget): the usage records and the
//! catalogue. The policy is in `gryvia_reconcile::budget`; the ai-operator's admission gate
//! reads the budgets' state (`crate::admission`).

use futures::future::BoxFuture;
use gryvia_reconcile::budget::{BudgetReconciler, BudgetWorld};
use gryvia_types::{GryviaBudget, GryviaGpuSku, GryviaUsageRecord};
use kube::api::{Api, ListParams};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{PredicateConfig, WatchStreamExt, predicates, watcher};

use crate::metrics::Metrics;
use crate::runtime::{Context, Observe, run, spec_controller};
use crate::{Result, api_err};

/// Observes what a budget counts: every usage record and the catalogue.
pub struct BudgetObserver {
    client: kube::Client,
}

#[async_trait::async_trait]
impl Observe for BudgetObserver {
    type Object = GryviaBudget;
    type World = BudgetWorld;

    async fn observe(&self, _budget: &GryviaBudget) -> Result<BudgetWorld> {
        let records = Api::<GryviaUsageRecord>::all(self.client.clone())
            .list(&ListParams::default())
            .await
            .map_err(api_err("list GryviaUsageRecords"))?
            .items;
        let skus = crate::metering::skus(&self.client).await?;
        Ok(BudgetWorld { records, skus })
    }
}

/// Builds the budget controller (for `crate::runtime::join`): a budget is reconciled when it
/// changes, when a usage record of any scope or the catalogue changes, and every minute.
pub fn controllers(client: kube::Client, metrics: Metrics) -> crate::runtime::Controllers {
    Box::new(move || -> BoxFuture<'static, ()> {
        let client = client.clone();
        let metrics = metrics.clone();
        Box::pin(async move {
            let (ctrl, budgets) = spec_controller(Api::<GryviaBudget>::all(client.clone()));
            let for_records = budgets.clone();
            let all = |store: &kube::runtime::reflector::Store<GryviaBudget>| {
                store
                    .state()
                    .iter()
                    .map(|b| ObjectRef::from_obj(b.as_ref()))
                    .collect::<Vec<_>>()
            };
            let ctrl = ctrl
                // A record's spec (opened, closed), not its minutely re-pricing: a budget
                // prices records itself, and refreshes every minute anyway.
                .watches_stream(
                    watcher(
                        Api::<GryviaUsageRecord>::all(client.clone()),
                        watcher::Config::default(),
                    )
                    .default_backoff()
                    .applied_objects()
                    .predicate_filter(predicates::generation, PredicateConfig::default()),
                    move |_r: GryviaUsageRecord| all(&for_records),
                )
                .watches(
                    Api::<GryviaGpuSku>::all(client.clone()),
                    watcher::Config::default(),
                    move |_s: GryviaGpuSku| all(&budgets),
                );
            let ctx = Context::for_client(
                BudgetReconciler,
                BudgetObserver {
                    client: client.clone(),
                },
                &client,
                metrics,
            );
            run(ctrl, ctx).await;
        })
    })
}
