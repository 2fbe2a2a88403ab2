//! The GryviaAIJob controller of the ai-operator: a batch Job per AI job, retries and failure
//! classification (policy: `gryvia_reconcile::aijob`). Reads its Job, its pods, their nodes
//! and its PriorityClass from the operator's caches.

use std::collections::BTreeMap;
use std::sync::Arc;

use gryvia_reconcile::aijob::{
    AIJobReconciler, AIJobWorld, ObservedJob, ObservedNode, ObservedPod,
};
use gryvia_types::{GryviaAIJob, labels};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::ResourceExt;
use kube::runtime::controller::Controller;
use kube::runtime::reflector::{ObjectRef, Store};

use super::{Running, Shared, cached, changed, managed_selector};
use crate::Result;
use crate::cache::wait_ready;
use crate::runtime::{Observe, run, spec_or_lifecycle};

/// Observes an AI job: its batch Job, its pods, their nodes and its PriorityClass.
pub struct AIJobObserver {
    jobs: Store<Job>,
    pods: Store<Pod>,
    nodes: Store<Node>,
    classes: Store<PriorityClass>,
}

impl AIJobObserver {
    /// An observer reading the caches of `shared`.
    pub fn new(shared: &Shared) -> Self {
        AIJobObserver {
            jobs: shared.caches.store_labelled(&managed_selector()),
            pods: shared.caches.store_labelled(labels::JOB_NAME),
            nodes: shared.caches.store(),
            classes: shared.caches.store(),
        }
    }
}

/// The pods of AI job `name` in `namespace` in `pods` (pods labelled with their job), sorted
/// by name.
pub fn pods_of_job(pods: &Store<Pod>, namespace: &str, name: &str) -> Vec<Arc<Pod>> {
    let mut out: Vec<Arc<Pod>> = pods
        .state()
        .into_iter()
        .filter(|p| {
            p.namespace().as_deref() == Some(namespace)
                && p.labels().get(labels::JOB_NAME).map(String::as_str) == Some(name)
        })
        .collect();
    out.sort_by_key(|p| p.name_any());
    out
}

#[async_trait::async_trait]
impl Observe for AIJobObserver {
    type Object = GryviaAIJob;
    type World = AIJobWorld;

    async fn observe(&self, job: &GryviaAIJob) -> Result<AIJobWorld> {
        wait_ready(&self.jobs, "Job").await?;
        wait_ready(&self.pods, "Pod").await?;
        wait_ready(&self.nodes, "Node").await?;
        wait_ready(&self.classes, "PriorityClass").await?;
        let name = job.name_any();
        let ns = job.namespace().unwrap_or_default();
        let uid = job.uid().unwrap_or_default();
        let batch = cached(&self.jobs, Some(&ns), &name).map(|j| ObservedJob::of(&j, &uid));
        let pods: Vec<ObservedPod> = pods_of_job(&self.pods, &ns, &name)
            .iter()
            .map(|p| ObservedPod::of(p))
            .collect();
        let nodes: BTreeMap<String, ObservedNode> = pods
            .iter()
            .filter_map(|p| p.node.as_deref())
            .filter_map(|n| {
                cached(&self.nodes, None, n).map(|node| (n.to_owned(), ObservedNode::of(&node)))
            })
            .collect();
        let priority_class_exists = job
            .annotations()
            .get(labels::PRIORITY_CLASS)
            .is_some_and(|pc| cached(&self.classes, None, pc).is_some());
        Ok(AIJobWorld {
            // The native queue scheduler (#16) is not wired into the ai-operator yet: no job
            // waits for a queue.
            queued: false,
            job: batch,
            pods,
            nodes,
            priority_class_exists,
        })
    }
}

/// Maps a pod of an AI job (label `gryvia.io/job-name`) to its GryviaAIJob.
fn job_of_pod(pod: &Pod) -> Option<ObjectRef<GryviaAIJob>> {
    let name = pod.labels().get(labels::JOB_NAME)?;
    Some(ObjectRef::new(name).within(&pod.namespace()?))
}

/// The AI job controller: status-only updates (its own writes) trigger nothing; changes of
/// its Jobs and pods do.
pub fn controller(shared: &Shared) -> Running {
    let caches = &shared.caches;
    let trigger = changed(caches.subscribe::<GryviaAIJob>(), spec_or_lifecycle);
    let ctrl = Controller::for_shared_stream(trigger, caches.store())
        .owns_shared_stream(caches.subscribe_labelled::<Job>(&managed_selector()))
        .watches_shared_stream(
            caches.subscribe_labelled::<Pod>(labels::JOB_NAME),
            |pod: Arc<Pod>| job_of_pod(&pod),
        );
    let ctx = shared.context(AIJobReconciler, AIJobObserver::new(shared));
    Box::pin(run(ctrl, ctx))
}
