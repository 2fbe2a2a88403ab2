//! The network-operator's training insight controller (policy:
//! `gryvia_reconcile::network::reconcile::TrainingInsightReconciler`): each
//! GryviaTrainingInsight shows its GryviaAIJob's running ranks' traffic from the last
//! GryviaFlowAggregate window of each rank's node, with the stragglers and the rank-to-rank
//! bytes.

use std::collections::BTreeMap;
use std::sync::Arc;

use gryvia_reconcile::network::reconcile::{InsightWorld, TrainingInsightReconciler};
use gryvia_reconcile::network::straggler::ranks;
use gryvia_types::{CachedPod, GryviaFlowAggregate, GryviaTrainingInsight, labels};
use kube::ResourceExt;
use kube::runtime::controller::Controller;
use kube::runtime::reflector::{ObjectRef, Store};

use super::aijob::pods_of_job;
use super::{Running, Shared, all_of, changed};
use crate::Result;
use crate::cache::wait_ready;
use crate::runtime::{Observe, run, spec_or_lifecycle};

/// Observes the job's pods and the aggregates of their nodes.
pub struct InsightObserver {
    pods: Store<CachedPod>,
    aggregates: Store<GryviaFlowAggregate>,
}

#[async_trait::async_trait]
impl Observe for InsightObserver {
    type Object = GryviaTrainingInsight;
    type World = InsightWorld;

    async fn observe(&self, i: &GryviaTrainingInsight) -> Result<InsightWorld> {
        wait_ready(&self.pods, "Pod").await?;
        wait_ready(&self.aggregates, "GryviaFlowAggregate").await?;
        let ns = i.namespace().unwrap_or_default();
        let pods = pods_of_job(&self.pods, &ns, &i.spec.job_name);
        let ranks = ranks(pods.iter().map(AsRef::as_ref));
        let aggregates: BTreeMap<String, _> = self
            .aggregates
            .state()
            .iter()
            .filter(|a| ranks.iter().any(|r| r.node == a.spec.node_name))
            .filter_map(|a| Some((a.spec.node_name.clone(), a.status.clone()?)))
            .collect();
        Ok(InsightWorld { ranks, aggregates })
    }
}

/// The training insight controller: reconciled when an insight's spec changes, when any node's
/// aggregate is written, and when a pod of its job changes.
pub fn controller(shared: &Shared) -> Running {
    let c = &shared.caches;
    let insights: Store<GryviaTrainingInsight> = c.store();
    let of_aggregate = insights.clone();
    let of_pod = insights.clone();
    let ctrl = Controller::for_shared_stream(
        changed(c.subscribe::<GryviaTrainingInsight>(), spec_or_lifecycle),
        insights,
    )
    .watches_shared_stream(
        c.subscribe::<GryviaFlowAggregate>(),
        move |_a: Arc<GryviaFlowAggregate>| all_of(&of_aggregate),
    )
    .watches_shared_stream(c.subscribe::<CachedPod>(), move |pod: Arc<CachedPod>| {
        let job = pod.labels().get(labels::JOB_NAME).cloned();
        let ns = pod.namespace();
        of_pod
            .state()
            .iter()
            .filter(|i| job.as_deref() == Some(i.spec.job_name.as_str()) && i.namespace() == ns)
            .map(|i| ObjectRef::from_obj(i.as_ref()))
            .collect::<Vec<_>>()
    });
    let observer = InsightObserver {
        pods: c.store(),
        aggregates: c.store(),
    };
    Box::pin(run(
        ctrl,
        shared.context(TrainingInsightReconciler, observer),
    ))
}
