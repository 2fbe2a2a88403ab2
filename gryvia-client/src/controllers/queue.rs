//! The native queue scheduler of the ai-operator (`--native-queue-scheduler`): one admission
//! cycle over every GryviaQueue's pending GryviaAIJobs at a time (policy:
//! `gryvia_reconcile::queue`), not one reconcile per job racing the others.
//!
//! Any change that can move a decision (a queue, a job's spec or admission, a priority tier,
//! a node's GPUs or health, a pod bound or gone) wakes it; changes within [`DEBOUNCE`] are
//! taken together, and a cycle also runs every [`RESYNC`]. A cycle reads the operator's
//! caches, decides, and writes with server-side apply under its own field manager
//! ([`FIELD_MANAGER`]): each changed job's `status.admission`, `status.preemption` and
//! `status.queue` (the AI job controller never writes those), the notice annotation on a
//! victim's pods before its status says it is preempted, each queue's status, and Events.
//!
//! State is in the objects only. What this replica wrote is remembered until its cache shows
//! it (at most [`WRITTEN_TTL`]), so a cycle right after a write never admits a job twice nor
//! gives its room away; a new leader starts from a full listing of the objects.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::{StreamExt, stream};
use gryvia_reconcile::queue::{self, JobKey, JobWrite, QueueFields};
use gryvia_reconcile::{Child, EventType, Plan};
use gryvia_types::scheduling::{GryviaPriority, GryviaQueue, GryviaQueueStatus};
use gryvia_types::{GryviaAIJob, labels};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::runtime::reflector::Store;
use serde_json::json;
use tracing::{info, warn};

use super::{Running, Shared, owned, wake_on};
use crate::Result;
use crate::apply::Executor;
use crate::cache::wait_ready;
use crate::metrics::{ControllerLabels, Metrics};
use crate::runtime::spec_or_lifecycle;

/// Field manager and event reporter of the queue scheduler.
pub const FIELD_MANAGER: &str = "gryvia-queue";

/// Changes within this long after the first are decided on together.
pub const DEBOUNCE: Duration = Duration::from_millis(200);

/// A cycle runs at least this often (expected starts move with time; deletions wake no one).
pub const RESYNC: Duration = Duration::from_secs(15);

/// How long a write is assumed until the cache shows it.
pub const WRITTEN_TTL: Duration = Duration::from_secs(60);

/// Writes in flight at once.
pub const WRITE_PARALLELISM: usize = 16;

/// What this replica wrote to a job and when.
#[derive(Clone, Debug)]
struct Written {
    uid: Option<String>,
    fields: QueueFields,
    at: Instant,
}

/// The scheduler's stores, its executor and what it wrote.
struct Scheduler {
    queues: Store<GryviaQueue>,
    jobs: Store<GryviaAIJob>,
    priorities: Store<GryviaPriority>,
    nodes: Store<Node>,
    pods: Store<Pod>,
    executor: Executor,
    metrics: Metrics,
    written: Mutex<HashMap<JobKey, Written>>,
}

fn key_of(job: &GryviaAIJob) -> JobKey {
    JobKey::new(
        job.metadata.namespace.clone().unwrap_or_default(),
        job.metadata.name.clone().unwrap_or_default(),
    )
}

/// Folds what was written (and not yet seen in the cache) into `jobs`; forgets writes the
/// cache shows, writes to jobs gone or recreated, and writes older than [`WRITTEN_TTL`].
fn fold_written(jobs: &mut [GryviaAIJob], written: &mut HashMap<JobKey, Written>) {
    let mut seen: HashSet<JobKey> = HashSet::new();
    for job in jobs.iter_mut() {
        let key = key_of(job);
        let Some(w) = written.get(&key) else {
            continue;
        };
        seen.insert(key.clone());
        let current = QueueFields::of(job);
        if w.uid != job.metadata.uid || current == w.fields || w.at.elapsed() > WRITTEN_TTL {
            written.remove(&key);
            continue;
        }
        let status = job.status.get_or_insert_with(Default::default);
        status.admission = w.fields.admission.clone();
        status.preemption = w.fields.preemption.clone();
        status.queue = w.fields.queue.clone();
    }
    written.retain(|k, _| seen.contains(k));
}

/// The live (bound, unfinished) pods of job `key`.
fn live_pods<'a>(pods: &'a [Arc<Pod>], key: &JobKey) -> Vec<&'a Arc<Pod>> {
    pods.iter()
        .filter(|p| {
            p.metadata.namespace.as_deref() == Some(key.namespace.as_str())
                && p.metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(labels::JOB_NAME))
                    .is_some_and(|n| *n == key.name)
                && gryvia_reconcile::facts::pod_phase(p).is_live()
        })
        .collect()
}

/// The Plan of one job's write: the notice on its live pods first, then the Event, then its
/// queue fields (applied under [`FIELD_MANAGER`]: fields left out are removed).
fn plan_of(write: &JobWrite, pods: &[Arc<Pod>]) -> Plan<QueueFields> {
    let mut plan = Plan::new();
    if let Some(notice) = &write.notice {
        for pod in live_pods(pods, &write.job) {
            let child = Child::from_json(json!({
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": pod.metadata.name,
                    "namespace": write.job.namespace,
                    "annotations": {labels::PREEMPTION_NOTICE: notice},
                },
            }));
            if let Ok(child) = child {
                plan.apply.push(child.unowned());
            }
        }
    }
    if let Some(e) = &write.event {
        plan.event(e.type_, &e.reason, e.message.clone());
    }
    plan.status = Some(write.fields.clone());
    plan
}

impl Scheduler {
    fn new(shared: &Shared) -> Self {
        Scheduler {
            queues: shared.caches.store(),
            jobs: shared.caches.store(),
            priorities: shared.caches.store(),
            nodes: shared.caches.store(),
            pods: shared.caches.store(),
            executor: Executor::new(shared.client.clone(), FIELD_MANAGER).dry_run(shared.dry_run),
            metrics: shared.metrics.clone(),
            written: Mutex::default(),
        }
    }

    async fn ready(&self) -> Result<()> {
        wait_ready(&self.queues, "GryviaQueue").await?;
        wait_ready(&self.jobs, "GryviaAIJob").await?;
        wait_ready(&self.priorities, "GryviaPriority").await?;
        wait_ready(&self.nodes, "Node").await?;
        wait_ready(&self.pods, "Pod").await
    }

    fn written(&self) -> std::sync::MutexGuard<'_, HashMap<JobKey, Written>> {
        self.written
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// One cycle: observe the caches, decide, write what changed.
    async fn cycle(&self) -> Result<()> {
        self.ready().await?;
        let started = Instant::now();
        let labels = ControllerLabels {
            controller: FIELD_MANAGER.to_owned(),
        };
        self.metrics.reconciles.get_or_create(&labels).inc();
        let queues = owned(&self.queues.state());
        let mut jobs = owned(&self.jobs.state());
        fold_written(&mut jobs, &mut self.written());
        let priorities = owned(&self.priorities.state());
        let nodes = owned(&self.nodes.state());
        let pods = self.pods.state();
        let plain = owned(&pods);
        // Whole seconds: what the API server keeps of a time, so a written admission reads
        // back equal.
        let now = jiff::Timestamp::from_second(jiff::Timestamp::now().as_second())
            .unwrap_or_else(|_| jiff::Timestamp::now());
        let world = queue::world_of(&queues, &jobs, &priorities, &nodes, &plain);
        let decided = queue::cycle(&world, now);
        // Decisions first; the standings of a burst of new jobs follow over later cycles.
        let writes = queue::within_budget(
            queue::job_writes(&jobs, &decided),
            queue::STANDING_WRITES_PER_CYCLE,
        );
        let by_key: HashMap<JobKey, &GryviaAIJob> = jobs.iter().map(|j| (key_of(j), j)).collect();
        let results: Vec<(JobWrite, Result<()>)> = stream::iter(writes.into_iter().map(|w| {
            let owner = by_key.get(&w.job).copied();
            let plan = plan_of(&w, &pods);
            async move {
                let result = match owner {
                    Some(job) => self.executor.apply(job, &plan).await.map(|_| ()),
                    None => Ok(()),
                };
                (w, result)
            }
        }))
        .buffer_unordered(WRITE_PARALLELISM)
        .collect()
        .await;
        let mut first_error = None;
        let mut wrote = 0usize;
        for (w, result) in results {
            match result {
                Ok(()) => {
                    wrote += 1;
                    let uid = by_key.get(&w.job).and_then(|j| j.metadata.uid.clone());
                    self.written().insert(
                        w.job.clone(),
                        Written {
                            uid,
                            fields: w.fields,
                            at: Instant::now(),
                        },
                    );
                }
                Err(e) => {
                    warn!(job = %w.job, error = %e, "could not write the queue's decision");
                    first_error.get_or_insert(e);
                }
            }
        }
        self.write_queues(&queues, &decided, now).await?;
        self.metrics
            .duration
            .get_or_create(&labels)
            .observe(started.elapsed().as_secs_f64());
        if !decided.admitted.is_empty()
            || !decided.preempted.is_empty()
            || !decided.released.is_empty()
        {
            info!(
                admitted = decided.admitted.len(),
                preempted = decided.preempted.len(),
                released = decided.released.len(),
                pending = decided.pending.len(),
                writes = wrote,
                took_ms = started.elapsed().as_millis(),
                "queue cycle"
            );
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Writes each queue's status that changed, with an Event for a new problem,
    /// [`WRITE_PARALLELISM`] at a time.
    async fn write_queues(
        &self,
        queues: &[GryviaQueue],
        decided: &queue::Cycle,
        now: jiff::Timestamp,
    ) -> Result<()> {
        let plans: Vec<(GryviaQueue, Plan<GryviaQueueStatus>)> = queues
            .iter()
            .filter_map(|q| {
                let (status, event) = queue::queue_status(q, decided, now)?;
                let mut plan: Plan<GryviaQueueStatus> = Plan::new();
                if let Some(e) = event {
                    plan.event(EventType::Warning, &e.reason, e.message);
                }
                plan.status = Some(status);
                Some((q.clone(), plan))
            })
            .collect();
        // As many at once as the jobs' writes: a cycle waits for the slowest, not the sum.
        stream::iter(
            plans
                .into_iter()
                .map(|(q, plan)| async move { self.executor.apply(&q, &plan).await.map(|_| ()) }),
        )
        .buffer_unordered(WRITE_PARALLELISM)
        .collect::<Vec<Result<()>>>()
        .await
        .into_iter()
        .collect()
    }
}

/// What of a job can move a decision: its spec and lifecycle, its priority class and
/// reservation annotations, whether it finished, and its admission and preemption (not its
/// standing, which the scheduler itself writes every cycle).
fn job_key(job: &GryviaAIJob) -> Option<u64> {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    // Spec, lifecycle, admission and preemption: what wakes the AI job controller too.
    super::aijob::spec_lifecycle_or_admission(job).hash(&mut h);
    let ann = job.metadata.annotations.as_ref();
    for key in [labels::PRIORITY_CLASS, labels::RESERVATION] {
        ann.and_then(|a| a.get(key)).hash(&mut h);
    }
    job.status
        .as_ref()
        .is_some_and(|s| s.phase.is_some_and(gryvia_types::JobPhase::is_finished))
        .hash(&mut h);
    Some(h.finish())
}

/// What of a node counts: its labels, taints, cordon and allocatable resources (not the
/// heartbeats of its status).
fn node_key(node: &Node) -> Option<u64> {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    node.metadata.labels.hash(&mut h);
    node.metadata.deletion_timestamp.is_some().hash(&mut h);
    if let Some(spec) = &node.spec {
        spec.unschedulable.hash(&mut h);
        serde_json::to_string(&spec.taints)
            .unwrap_or_default()
            .hash(&mut h);
    }
    if let Some(status) = &node.status {
        serde_json::to_string(&status.allocatable)
            .unwrap_or_default()
            .hash(&mut h);
    }
    Some(h.finish())
}

/// What of a pod counts: where it is bound, whether it is live, and its notice.
fn pod_key(pod: &Pod) -> Option<u64> {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    gryvia_reconcile::facts::node_of(pod).hash(&mut h);
    gryvia_reconcile::facts::pod_phase(pod)
        .is_live()
        .hash(&mut h);
    pod.metadata.deletion_timestamp.is_some().hash(&mut h);
    Some(h.finish())
}

/// The queue scheduler: a cycle whenever something that can move a decision changed (and
/// every [`RESYNC`]); a failed cycle is retried after a back-off, never in a hot loop
/// ([`super::cycles`]).
pub fn controller(shared: &Shared) -> Running {
    let caches = &shared.caches;
    let triggers = stream::select_all(vec![
        wake_on::<GryviaQueue>(caches, spec_or_lifecycle),
        wake_on::<GryviaAIJob>(caches, job_key),
        wake_on::<GryviaPriority>(caches, spec_or_lifecycle),
        wake_on::<Node>(caches, node_key),
        wake_on::<Pod>(caches, pod_key),
    ]);
    let scheduler = Arc::new(Scheduler::new(shared));
    super::cycles(
        FIELD_MANAGER,
        triggers.boxed(),
        RESYNC,
        DEBOUNCE,
        shared.metrics.clone(),
        move || {
            let scheduler = scheduler.clone();
            async move { scheduler.cycle().await }
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(name: &str, uid: &str) -> GryviaAIJob {
        serde_json::from_value(json!({
            "apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaAIJob",
            "metadata": {"name": name, "namespace": "ml", "uid": uid},
            "spec": {"image": "i", "gpus": 1}
        }))
        .expect("a valid job")
    }

    fn standing(position: i32) -> QueueFields {
        QueueFields {
            queue: Some(queue::standing(
                "q",
                usize::try_from(position).unwrap_or(0),
                "why".to_owned(),
                None,
            )),
            ..QueueFields::default()
        }
    }

    #[test]
    fn a_write_not_yet_in_the_cache_is_folded_in_and_forgotten_once_it_is() {
        let mut jobs = vec![job("a", "u1")];
        let mut written = HashMap::from([(
            JobKey::new("ml", "a"),
            Written {
                uid: Some("u1".to_owned()),
                fields: standing(2),
                at: Instant::now(),
            },
        )]);
        fold_written(&mut jobs, &mut written);
        assert_eq!(QueueFields::of(&jobs[0]), standing(2));
        assert_eq!(written.len(), 1, "kept until the cache shows it");
        let mut cached = vec![jobs[0].clone()];
        fold_written(&mut cached, &mut written);
        assert!(written.is_empty(), "the cache shows it: forgotten");
    }

    #[test]
    fn a_write_to_a_recreated_or_deleted_job_is_forgotten() {
        let mut written = HashMap::from([
            (
                JobKey::new("ml", "a"),
                Written {
                    uid: Some("old".to_owned()),
                    fields: standing(1),
                    at: Instant::now(),
                },
            ),
            (
                JobKey::new("ml", "gone"),
                Written {
                    uid: Some("u9".to_owned()),
                    fields: standing(1),
                    at: Instant::now(),
                },
            ),
        ]);
        let mut jobs = vec![job("a", "new")];
        fold_written(&mut jobs, &mut written);
        assert!(written.is_empty());
        assert_eq!(QueueFields::of(&jobs[0]), QueueFields::default());
    }
}
