//! The observe half and the wiring of metering: a GryviaUsageRecord for every GPU job, priced
//! from the GryviaGpuSku catalogue. The policy is in `gryvia_reconcile::metering`.

use futures::future::BoxFuture;
use gryvia_reconcile::metering::{MeteringReconciler, MeteringWorld, Sku, UsageRecordReconciler};
use gryvia_types::{GryviaAIJob, GryviaGpuSku, GryviaUsageRecord, labels};
use k8s_openapi::api::core::v1::{Namespace, Node};
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use kube::runtime::controller::Controller;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;

use crate::metrics::Metrics;
use crate::runtime::{Context, Observe, run, spec_controller};
use crate::{Result, api_err};

/// The GryviaGpuSku catalogue, as metering and budgets price with it.
///
/// # Errors
/// [`crate::Error::Api`] when the SKUs cannot be listed.
pub async fn skus(client: &kube::Client) -> Result<Vec<Sku>> {
    Ok(Api::<GryviaGpuSku>::all(client.clone())
        .list(&ListParams::default())
        .await
        .map_err(api_err("list GryviaGpuSkus"))?
        .items
        .iter()
        .filter_map(Sku::of)
        .collect())
}

/// Observes what metering a job needs: the catalogue, its namespace's tenant and the GPU
/// product of the node its first worker ran on.
pub struct MeteringObserver {
    client: kube::Client,
}

#[async_trait::async_trait]
impl Observe for MeteringObserver {
    type Object = GryviaAIJob;
    type World = MeteringWorld;

    async fn observe(&self, job: &GryviaAIJob) -> Result<MeteringWorld> {
        let ns = job.namespace().unwrap_or_default();
        let tenant = Api::<Namespace>::all(self.client.clone())
            .get_opt(&ns)
            .await
            .map_err(api_err(format!("read namespace {ns}")))?
            .and_then(|n| n.labels().get(labels::TENANT).cloned());
        let node_product = if job.spec.gpu_type.is_some() {
            None
        } else {
            let mut pods = crate::aijob::pods_of(&self.client, &ns, &job.name_any()).await?;
            pods.sort_by_key(|p| p.name_any());
            match pods
                .iter()
                .find_map(|p| p.spec.as_ref().and_then(|s| s.node_name.clone()))
            {
                Some(node) => Api::<Node>::all(self.client.clone())
                    .get_opt(&node)
                    .await
                    .map_err(api_err(format!("read node {node}")))?
                    .and_then(|n| n.labels().get(labels::NVIDIA_GPU_PRODUCT).cloned()),
                None => None,
            }
        };
        Ok(MeteringWorld {
            skus: skus(&self.client).await?,
            tenant,
            node_product,
        })
    }
}

/// Observes the catalogue, for pricing a usage record.
pub struct UsageRecordObserver {
    client: kube::Client,
}

#[async_trait::async_trait]
impl Observe for UsageRecordObserver {
    type Object = GryviaUsageRecord;
    type World = Vec<Sku>;

    async fn observe(&self, _record: &GryviaUsageRecord) -> Result<Vec<Sku>> {
        skus(&self.client).await
    }
}

/// Builds the metering controllers (for `crate::runtime::join`): one over GryviaAIJobs (every
/// change, their status included: a start or a completion is what it meters), one pricing
/// GryviaUsageRecords (again when the catalogue changes).
pub fn controllers(client: kube::Client, metrics: Metrics) -> crate::runtime::Controllers {
    Box::new(move || -> BoxFuture<'static, ()> {
        let client = client.clone();
        let metrics = metrics.clone();
        Box::pin(async move {
            let jobs = Controller::new(
                Api::<GryviaAIJob>::all(client.clone()),
                watcher::Config::default(),
            );
            let jobs_ctx = Context::for_client(
                MeteringReconciler,
                MeteringObserver {
                    client: client.clone(),
                },
                &client,
                metrics.clone(),
            );
            let (records, store) = spec_controller(Api::<GryviaUsageRecord>::all(client.clone()));
            let records = records.watches(
                Api::<GryviaGpuSku>::all(client.clone()),
                watcher::Config::default(),
                move |sku: GryviaGpuSku| {
                    let name = sku.name_any();
                    let product = sku.spec.gpu_product.clone();
                    store
                        .state()
                        .iter()
                        .filter(|r| r.spec.sku == name || r.spec.sku == product)
                        .map(|r| ObjectRef::from_obj(r.as_ref()))
                        .collect::<Vec<_>>()
                },
            );
            let records_ctx = Context::for_client(
                UsageRecordReconciler,
                UsageRecordObserver {
                    client: client.clone(),
                },
                &client,
                metrics,
            );
            futures::join!(run(jobs, jobs_ctx), run(records, records_ctx));
        })
    })
}
