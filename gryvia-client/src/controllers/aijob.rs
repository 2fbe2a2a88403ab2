//! The GryviaAIJob controller of the ai-operator: a batch Job per AI job, retries and failure
//! classification (policy: `gryvia_reconcile::aijob`). Reads its Job, its pods, their nodes,
//! its PriorityClass and (with the native queue scheduler) the GryviaQueues from the
//! operator's caches.

use std::collections::BTreeMap;
use std::sync::Arc;

use gryvia_reconcile::aijob::{
    AIJobReconciler, AIJobWorld, KueueJobWorld, ObservedJob, ObservedNode, ObservedPod,
    kueue_priority_class,
};
use gryvia_reconcile::kueue::{LOCAL_QUEUE, ObservedWorkload, covers, local_queue_for};
use gryvia_types::kueue::{self, LocalQueue, Workload, WorkloadPriorityClass};
use gryvia_types::scheduling::{GryviaPriority, GryviaQueue};
use gryvia_types::{GryviaAIJob, GryviaTenant, labels};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::controller::Controller;
use kube::runtime::reflector::{ObjectRef, Store};

use super::{Running, Shared, cached, changed, in_namespace, managed_selector};
use crate::Result;
use crate::cache::{Cacheable, wait_ready};
use crate::runtime::{Observe, run, spec_or_lifecycle};

/// Observes an AI job: its batch Job, its pods, their nodes and its PriorityClass.
pub struct AIJobObserver {
    client: kube::Client,
    jobs: Store<Job>,
    pods: Store<Pod>,
    nodes: Store<Node>,
    classes: Store<PriorityClass>,
    /// The tiers (their SLA).
    tiers: Store<GryviaPriority>,
    /// How jobs are scheduled.
    scheduling: Scheduling,
    /// The queues, with the native queue (a job of a namespace one covers waits for its
    /// admission) or Kueue (such a namespace has Gryvia's LocalQueue).
    queues: Option<Store<GryviaQueue>>,
    /// Tenants, LocalQueues, Workloads and WorkloadPriorityClasses, with the Kueue integration.
    kueue: Option<KueueStores>,
}

/// What the AI job controller reads of Kueue.
struct KueueStores {
    local_queues: Store<LocalQueue>,
    tenants: Store<GryviaTenant>,
    workloads: Store<Workload>,
    classes: Store<WorkloadPriorityClass>,
}

/// How the AI job controller schedules jobs: by themselves (the kube-scheduler places their
/// pods), through the native queue, or through Kueue.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Scheduling {
    /// No queue: a job's batch Job is made at once.
    #[default]
    Direct,
    /// `--native-queue-scheduler`.
    NativeQueue,
    /// `--kueue-integration`.
    Kueue,
}

impl AIJobObserver {
    /// An observer reading the caches of `shared` for jobs scheduled as `scheduling` says.
    pub fn new(shared: &Shared, scheduling: Scheduling) -> Self {
        AIJobObserver {
            client: shared.client.clone(),
            jobs: shared.caches.store_labelled(&managed_selector()),
            pods: shared.caches.store_labelled(labels::JOB_NAME),
            nodes: shared.caches.store(),
            classes: shared.caches.store(),
            tiers: shared.caches.store(),
            scheduling,
            queues: (scheduling != Scheduling::Direct).then(|| shared.caches.store()),
            kueue: (scheduling == Scheduling::Kueue).then(|| KueueStores {
                local_queues: shared.caches.store(),
                tenants: shared.caches.store(),
                workloads: shared.caches.store(),
                classes: shared.caches.store(),
            }),
        }
    }

    /// What Kueue knows of `job` (never without the Kueue integration): the LocalQueue it
    /// goes to, whether its priority class exists, and the Workload of its batch Job `batch`.
    async fn kueue(&self, job: &GryviaAIJob, batch: Option<&Job>) -> Result<Option<KueueJobWorld>> {
        let (Some(k), Some(queues)) = (&self.kueue, &self.queues) else {
            return Ok(None);
        };
        wait_ready(&k.local_queues, "LocalQueue").await?;
        wait_ready(queues, "GryviaQueue").await?;
        wait_ready(&k.tenants, "GryviaTenant").await?;
        wait_ready(&k.workloads, "Workload").await?;
        wait_ready(&k.classes, "WorkloadPriorityClass").await?;
        let ns = job.namespace().unwrap_or_default();
        let label = |meta: &ObjectMeta| meta.labels.as_ref()?.get(kueue::QUEUE_NAME).cloned();
        let batch_queue = batch.map(|b| label(&b.metadata));
        let covered = cached(&k.local_queues, Some(&ns), LOCAL_QUEUE).is_some()
            || covers(
                &ns,
                queues.state().iter().map(AsRef::as_ref),
                k.tenants
                    .state()
                    .iter()
                    .filter_map(|t| t.metadata.name.as_deref()),
            );
        let local_queue = local_queue_for(
            batch_queue.as_ref().map(Option::as_deref),
            label(&job.metadata).as_deref(),
            covered,
            cached(&k.local_queues, Some(&ns), "default").is_some(),
        );
        let workload = batch
            .and_then(|b| b.metadata.uid.as_deref())
            .and_then(|uid| {
                in_namespace(&k.workloads, Some(&ns)).into_iter().find(|w| {
                    w.metadata
                        .owner_references
                        .as_ref()
                        .is_some_and(|refs| refs.iter().any(|r| r.uid == uid))
                })
            });
        Ok(Some(KueueJobWorld {
            local_queue,
            priority_class_exists: cached(&k.classes, None, &kueue_priority_class(job)).is_some(),
            workload: workload.map(|w| ObservedWorkload::of(&w)),
        }))
    }

    /// Whether a GryviaQueue covers `namespace` (never without the native queue scheduler).
    async fn queued(&self, namespace: &str) -> Result<bool> {
        let (Scheduling::NativeQueue, Some(queues)) = (self.scheduling, &self.queues) else {
            return Ok(false);
        };
        wait_ready(queues, "GryviaQueue").await?;
        Ok(queues
            .state()
            .iter()
            .any(|q| q.spec.namespaces.iter().any(|n| n == namespace)))
    }
}

/// The pods of AI job `name` in `namespace` in `pods` (pods labelled with their job), sorted
/// by name.
pub fn pods_of_job<K: Cacheable>(pods: &Store<K>, namespace: &str, name: &str) -> Vec<Arc<K>> {
    let mut out: Vec<Arc<K>> = pods
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
        wait_ready(&self.tiers, "GryviaPriority").await?;
        let name = job.name_any();
        let ns = job.namespace().unwrap_or_default();
        let uid = job.uid().unwrap_or_default();
        let mut batch = cached(&self.jobs, Some(&ns), &name);
        if batch.is_none() && job.status.as_ref().is_some_and(|s| s.job_name.is_some()) {
            // Missing from the cache although the job made it: the Job watch may lag the pod
            // watch that triggered this reconcile. Ask the API server before the policy takes
            // the Job for deleted (which fails the job).
            batch = Api::<Job>::namespaced(self.client.clone(), &ns)
                .get_opt(&name)
                .await
                .map_err(|source| crate::Error::Api {
                    operation: format!("read Job {ns}/{name}"),
                    source,
                })?
                .map(Arc::new);
        }
        let kueue = self.kueue(job, batch.as_deref()).await?;
        let batch = batch.map(|j| ObservedJob::of(&j, &uid));
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
        let sla_seconds = job
            .annotations()
            .get(labels::PRIORITY_CLASS)
            .and_then(|t| cached(&self.tiers, None, t))
            .and_then(|t| t.spec.sla.as_ref().map(|s| s.max_queue_seconds));
        Ok(AIJobWorld {
            queued: self.queued(&ns).await?,
            job: batch,
            pods,
            nodes,
            priority_class_exists,
            sla_seconds,
            kueue,
        })
    }
}

/// Maps a pod of an AI job (label `gryvia.io/job-name`) to its GryviaAIJob.
fn job_of_pod(pod: &Pod) -> Option<ObjectRef<GryviaAIJob>> {
    let name = pod.labels().get(labels::JOB_NAME)?;
    Some(ObjectRef::new(name).within(&pod.namespace()?))
}

/// What wakes the AI job controller about the job itself: its spec and lifecycle, and the
/// queue's decisions (`status.admission`, `status.preemption`); not its own status writes,
/// nor the queue's standing (`status.queue`), which changes every cycle.
pub(crate) fn spec_lifecycle_or_admission(job: &GryviaAIJob) -> Option<u64> {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    spec_or_lifecycle(job).hash(&mut h);
    if let Some(s) = &job.status {
        serde_json::to_string(&(&s.admission, &s.preemption))
            .unwrap_or_default()
            .hash(&mut h);
    }
    Some(h.finish())
}

/// Maps a Workload of a batch Job (its owner) to the GryviaAIJob of the same name.
fn job_of_workload(w: &Workload) -> Option<ObjectRef<GryviaAIJob>> {
    let owner = w
        .metadata
        .owner_references
        .as_ref()?
        .iter()
        .find(|r| r.kind == "Job" && r.api_version == "batch/v1")?;
    Some(ObjectRef::new(&owner.name).within(&w.namespace()?))
}

/// The AI job controller: status-only updates (its own writes) trigger nothing but the
/// queue's admissions and preemptions; changes of its Jobs and pods do (and, with the Kueue
/// integration, of their Workloads). With the native queue, jobs of namespaces a GryviaQueue
/// covers wait for their admission; with Kueue, jobs go to their namespace's LocalQueue.
pub fn controller(shared: &Shared, scheduling: Scheduling) -> Running {
    let caches = &shared.caches;
    let trigger = changed(
        caches.subscribe::<GryviaAIJob>(),
        spec_lifecycle_or_admission,
    );
    let ctrl = Controller::for_shared_stream(trigger, caches.store())
        .owns_shared_stream(caches.subscribe_labelled::<Job>(&managed_selector()))
        .watches_shared_stream(
            caches.subscribe_labelled::<Pod>(labels::JOB_NAME),
            |pod: Arc<Pod>| job_of_pod(&pod),
        );
    let ctrl = if scheduling == Scheduling::Kueue {
        ctrl.watches_shared_stream(caches.subscribe::<Workload>(), |w: Arc<Workload>| {
            job_of_workload(&w)
        })
    } else {
        ctrl
    };
    let ctx = shared.context(AIJobReconciler, AIJobObserver::new(shared, scheduling));
    Box::pin(run(ctrl, ctx))
}
