//! The usage record controller of the quota-operator (opt-in, with metering): prices each
//! GryviaUsageRecord from the catalogue and samples how busy its job's GPUs are from the node
//! agents' GryviaGpuNodes (policy: `gryvia_reconcile::metering`).

use std::sync::Arc;

use gryvia_reconcile::metering::{UsageRecordReconciler, UsageRecordWorld};
use gryvia_types::{
    CachedPod, GryviaAIJob, GryviaGpuNode, GryviaGpuSku, GryviaUsageRecord, labels,
};
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

/// The usage record of the AI job a pod belongs to (its name from the job's name and UID, the
/// job read from `jobs`); `None` for a pod of no AI job, or of one the cache does not hold.
pub fn record_of_pod(
    pod: &CachedPod,
    jobs: &Store<GryviaAIJob>,
) -> Option<ObjectRef<GryviaUsageRecord>> {
    let name = pod.labels().get(labels::JOB_NAME)?;
    let job = cached(jobs, pod.namespace().as_deref(), name)?;
    let uid = job.metadata.uid.as_deref()?;
    Some(ObjectRef::new(&gryvia_reconcile::metering::record_name(
        name, uid,
    )))
}

/// The usage record controller: a record is priced when its spec changes and again when its
/// SKU changes in the catalogue, and sampled again when its job's pods change (a pod placed
/// and running gives the first reading: a job shorter than the periodic resample would
/// otherwise have none counted before its end).
pub fn controller(shared: &Shared) -> Running {
    let c = &shared.caches;
    let records: Store<GryviaUsageRecord> = c.store();
    let of_sku = records.clone();
    let jobs: Store<GryviaAIJob> = c.store();
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
    )
    .watches_shared_stream(c.subscribe::<CachedPod>(), move |pod: Arc<CachedPod>| {
        record_of_pod(&pod, &jobs)
    });
    let observer = UsageRecordObserver {
        skus: c.store(),
        pods: c.store(),
        gpu_nodes: c.store(),
    };
    Box::pin(run(ctrl, shared.context(UsageRecordReconciler, observer)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::api::ObjectMeta;
    use kube::runtime::watcher;

    #[test]
    fn a_pod_of_an_ai_job_maps_to_its_jobs_usage_record_and_any_other_pod_to_none() {
        let (jobs, mut writer) = kube::runtime::reflector::store::<GryviaAIJob>();
        let job: GryviaAIJob = serde_json::from_value(serde_json::json!({
            "apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaAIJob",
            "metadata": {"name": "train", "namespace": "ml", "uid": "1234abcd-5678-90ef-aaaa-bbbbccccdddd"},
            "spec": {"image": "registry.local/train:1"}
        }))
        .unwrap();
        writer.apply_watcher_event(&watcher::Event::Apply(job));
        let pod = |namespace: &str, job: Option<&str>| CachedPod {
            metadata: ObjectMeta {
                name: Some("train-0".into()),
                namespace: Some(namespace.into()),
                labels: job.map(|j| [(labels::JOB_NAME.to_owned(), j.to_owned())].into()),
                ..ObjectMeta::default()
            },
            ..CachedPod::default()
        };
        assert_eq!(
            record_of_pod(&pod("ml", Some("train")), &jobs),
            Some(ObjectRef::new("train-1234abcd"))
        );
        assert_eq!(record_of_pod(&pod("ml", None), &jobs), None, "no job label");
        assert_eq!(
            record_of_pod(&pod("other", Some("train")), &jobs),
            None,
            "another namespace's job"
        );
        assert_eq!(
            record_of_pod(&pod("ml", Some("gone")), &jobs),
            None,
            "a job the cache does not hold"
        );
    }
}
