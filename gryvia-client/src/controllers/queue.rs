//! The native queue scheduler of the ai-operator (`--native-queue-scheduler`): one admission
//! cycle over every GryviaQueue's pending GryviaAIJobs at a time (policy:
//! `gryvia_reconcile::queue`), not one reconcile per job racing the others.
//!
//! Any change that can move a decision (a queue, a job's spec or admission, a priority tier,
//! a node's GPUs or health, a pod bound or gone) wakes it: at once after a quiet spell;
//! changes during busy times are taken together, one cycle per [`PACE`] at most (plus its own
//! time); and a cycle also runs every [`RESYNC`]. A cycle reads the operator's
//! caches, decides, and writes with server-side apply under its own field manager
//! ([`FIELD_MANAGER`]): each changed job's `status.admission`, `status.preemption` and
//! `status.queue` (the AI job controller never writes those), the notice annotation on a
//! victim's pods before its status says it is preempted, each queue's status, and Events.
//! With a long queue (more than [`FULL_CYCLES_UP_TO`] jobs) every waiting job's standing is
//! worked out at most every [`STANDINGS_EVERY`]; the cycles between make the same decisions
//! without it.
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
use gryvia_types::{CachedPod, GryviaAIJob, labels};
use k8s_openapi::api::core::v1::Node;
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

/// At most one cycle starts per this long (plus the cycle's own time); a change after a
/// quiet spell starts one at once ([`super::cycles`]).
pub const PACE: Duration = Duration::from_millis(50);

/// A cycle runs at least this often (expected starts move with time; deletions wake no one).
pub const RESYNC: Duration = Duration::from_secs(15);

/// How long a write is assumed until the cache shows it.
pub const WRITTEN_TTL: Duration = Duration::from_secs(60);

/// Writes in flight at once.
pub const WRITE_PARALLELISM: usize = 16;

/// One standing-only write (a waiting job's position, reason or expected start) may go this
/// often, at most [`queue::STANDING_WRITES_PER_CYCLE`] saved up: decisions are never held back
/// by them, and a long queue's positions (which move at every admission ahead) do not flood
/// the API server.
pub const STANDING_WRITE_EVERY: Duration = Duration::from_millis(30);

/// A queue's status (counts and GPUs in use) is written at most this often; a change of its
/// `Ready` condition goes at once.
pub const QUEUE_STATUS_EVERY: Duration = Duration::from_secs(1);

/// With more jobs than this in the queues' namespaces, a cycle works out every waiting job's
/// standing (and the queues' counts) at most every [`STANDINGS_EVERY`]; the cycles between
/// make only the decisions ([`queue::decide`]). With fewer, every cycle is a full one.
pub const FULL_CYCLES_UP_TO: usize = 1_000;

/// See [`FULL_CYCLES_UP_TO`].
pub const STANDINGS_EVERY: Duration = Duration::from_secs(1);

/// What this replica wrote to an object (`value`: the part it owns), to which incarnation of
/// it (`uid`), and when.
#[derive(Clone, Debug)]
struct Written<V> {
    uid: Option<String>,
    value: V,
    at: Instant,
}

/// One write the writer makes: a job's plan or a queue's.
enum Write {
    Job(Box<(GryviaAIJob, Plan<QueueFields>)>),
    Queue(Box<(GryviaQueue, Plan<GryviaQueueStatus>)>),
}

/// What the scheduler remembers between cycles: writes sent and not yet in the cache (folded
/// into what the next cycle sees, so it neither decides twice nor rewrites), the objects with
/// a write in flight (never a second one at once: they could land out of order) and the
/// decision that goes once it is done, the last
/// write of each queue's status, the standing writes it may still make, and the first error of
/// a write since the last cycle.
#[derive(Default)]
struct Memory {
    jobs: HashMap<JobKey, Written<QueueFields>>,
    queues: HashMap<String, Written<Option<GryviaQueueStatus>>>,
    jobs_in_flight: HashSet<JobKey>,
    /// A decision made while the job had a write in flight: sent when that one is done (it is
    /// already in `jobs`, so no cycle decides it again meanwhile).
    jobs_next: HashMap<JobKey, Write>,
    queues_in_flight: HashSet<String>,
    queue_written_at: HashMap<String, Instant>,
    /// A cycle left a write out (in flight, or a queue written too recently): wake again.
    deferred: bool,
    standing_tokens: usize,
    tokens_at: Option<Instant>,
    /// When the last cycle with standings ran.
    full_at: Option<Instant>,
    failed: Option<crate::Error>,
}

impl Memory {
    /// Standing-only writes this cycle may make: one more every [`STANDING_WRITE_EVERY`]
    /// since the last count, at most [`queue::STANDING_WRITES_PER_CYCLE`] saved up.
    fn standing_budget(&mut self, now: Instant) -> usize {
        let cap = queue::STANDING_WRITES_PER_CYCLE;
        if let Some(at) = self.tokens_at {
            let earned = usize::try_from(
                now.duration_since(at).as_millis() / STANDING_WRITE_EVERY.as_millis(),
            )
            .unwrap_or(cap);
            if earned == 0 {
                return self.standing_tokens;
            }
            self.standing_tokens = self.standing_tokens.saturating_add(earned).min(cap);
        } else {
            self.standing_tokens = cap;
        }
        self.tokens_at = Some(now);
        self.standing_tokens
    }
}

/// The scheduler's stores, its executor and what it remembers.
struct Scheduler {
    queues: Store<GryviaQueue>,
    jobs: Store<GryviaAIJob>,
    priorities: Store<GryviaPriority>,
    nodes: Store<Node>,
    pods: Store<CachedPod>,
    executor: Executor,
    metrics: Metrics,
    memory: Mutex<Memory>,
    /// Writes go to the writer ([`Scheduler::write`], [`WRITE_PARALLELISM`] at a time): a
    /// cycle never waits for them.
    writes: futures::channel::mpsc::UnboundedSender<Write>,
    /// Wakes a cycle (a write failed, or a cycle deferred one).
    wake: Arc<tokio::sync::Notify>,
}

fn key_of(job: &GryviaAIJob) -> JobKey {
    JobKey::new(
        job.metadata.namespace.clone().unwrap_or_default(),
        job.metadata.name.clone().unwrap_or_default(),
    )
}

/// Folds what was written (and not yet seen in the cache) into `objects` (`part` reads the
/// written part of an object, `put` sets it, on a copy of that object only: the others stay
/// shared with the cache); forgets writes the cache shows, writes to objects gone or
/// recreated, and writes older than [`WRITTEN_TTL`]. Only objects `written` names (`ident` of
/// a key: namespace, or "", and name) have their key made.
fn fold_written<T, K, V>(
    objects: &mut [Arc<T>],
    written: &mut HashMap<K, Written<V>>,
    ident: impl Fn(&K) -> (&str, &str),
    key: impl Fn(&T) -> K,
    part: impl Fn(&T) -> V,
    put: impl Fn(&mut T, V),
) where
    T: kube::Resource + Clone,
    K: std::hash::Hash + Eq,
    V: PartialEq + Clone,
{
    let named: Vec<usize> = {
        let idents: HashSet<(&str, &str)> = written.keys().map(&ident).collect();
        objects
            .iter()
            .enumerate()
            .filter(|(_, o)| {
                let meta = o.meta();
                let ns = meta.namespace.as_deref().unwrap_or_default();
                meta.name
                    .as_deref()
                    .is_some_and(|n| idents.contains(&(ns, n)))
            })
            .map(|(i, _)| i)
            .collect()
    };
    let mut seen: HashSet<K> = HashSet::new();
    for i in named {
        let obj = &mut objects[i];
        let k = key(obj);
        let Some(w) = written.get(&k) else {
            continue;
        };
        let stale = w.uid != obj.meta().uid || part(obj) == w.value || w.at.elapsed() > WRITTEN_TTL;
        if stale {
            written.remove(&k);
            continue;
        }
        put(Arc::make_mut(obj), w.value.clone());
        seen.insert(k);
    }
    written.retain(|k, _| seen.contains(k));
}

/// [`fold_written`] for jobs: their queue fields.
fn fold_written_jobs(
    jobs: &mut [Arc<GryviaAIJob>],
    written: &mut HashMap<JobKey, Written<QueueFields>>,
) {
    fn ident(k: &JobKey) -> (&str, &str) {
        (&k.namespace, &k.name)
    }
    fold_written(
        jobs,
        written,
        ident,
        key_of,
        QueueFields::of,
        |job, fields| {
            let status = job.status.get_or_insert_with(Default::default);
            status.admission = fields.admission;
            status.preemption = fields.preemption;
            status.queue = fields.queue;
        },
    );
}

/// [`fold_written`] for queues: their status.
fn fold_written_queues(
    queues: &mut [Arc<GryviaQueue>],
    written: &mut HashMap<String, Written<Option<GryviaQueueStatus>>>,
) {
    fold_written(
        queues,
        written,
        |name| ("", name.as_str()),
        |q| q.metadata.name.clone().unwrap_or_default(),
        |q| q.status.clone(),
        |q, status| q.status = status,
    );
}

/// The live (bound, unfinished) pods of job `key`.
fn live_pods<'a>(pods: &'a [Arc<CachedPod>], key: &JobKey) -> Vec<&'a Arc<CachedPod>> {
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
fn plan_of(write: &JobWrite, pods: &[Arc<CachedPod>]) -> Plan<QueueFields> {
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
    fn new(
        shared: &Shared,
        writes: futures::channel::mpsc::UnboundedSender<Write>,
        wake: Arc<tokio::sync::Notify>,
    ) -> Self {
        Scheduler {
            queues: shared.caches.store(),
            jobs: shared.caches.store(),
            priorities: shared.caches.store(),
            nodes: shared.caches.store(),
            pods: shared.caches.store(),
            executor: Executor::new(shared.client.clone(), FIELD_MANAGER).dry_run(shared.dry_run),
            metrics: shared.metrics.clone(),
            memory: Mutex::default(),
            writes,
            wake,
        }
    }

    async fn ready(&self) -> Result<()> {
        wait_ready(&self.queues, "GryviaQueue").await?;
        wait_ready(&self.jobs, "GryviaAIJob").await?;
        wait_ready(&self.priorities, "GryviaPriority").await?;
        wait_ready(&self.nodes, "Node").await?;
        wait_ready(&self.pods, "Pod").await
    }

    fn memory(&self) -> std::sync::MutexGuard<'_, Memory> {
        self.memory
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// One cycle: observe the caches (with what was written and not yet seen), decide, and
    /// hand what changed to the writer; the first error of a write since the last cycle is
    /// this cycle's (so failing writes back off).
    async fn cycle(&self) -> Result<()> {
        self.ready().await?;
        let started = Instant::now();
        let labels = ControllerLabels {
            controller: FIELD_MANAGER.to_owned(),
        };
        self.metrics.reconciles.get_or_create(&labels).inc();
        // Shared with the caches: only what was written and is not in them yet is copied.
        let mut queues = self.queues.state();
        let mut jobs = self.jobs.state();
        {
            let mut memory = self.memory();
            fold_written_jobs(&mut jobs, &mut memory.jobs);
            fold_written_queues(&mut queues, &mut memory.queues);
        }
        let priorities = owned(&self.priorities.state());
        let nodes = self.nodes.state();
        let pods = self.pods.state();
        // Whole seconds: what the API server keeps of a time, so a written admission reads
        // back equal.
        let now = jiff::Timestamp::from_second(jiff::Timestamp::now().as_second())
            .unwrap_or_else(|_| jiff::Timestamp::now());
        let world = queue::world_of(&queues, &jobs, &priorities, &nodes, &pods);
        let observed = started.elapsed();
        let full = world.jobs.len() <= FULL_CYCLES_UP_TO
            || self
                .memory()
                .full_at
                .is_none_or(|at| at.elapsed() >= STANDINGS_EVERY);
        let decided = if full {
            self.memory().full_at = Some(Instant::now());
            queue::cycle(&world, now)
        } else {
            // The standings follow within STANDINGS_EVERY even if nothing else wakes a cycle.
            self.memory().deferred = true;
            queue::decide(&world, now)
        };
        let decision = started.elapsed().saturating_sub(observed);
        let sent = self.send_jobs(&jobs, &decided, &pods);
        let queues_sent = self.send_queues(&queues, &decided, now);
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
                writes = sent,
                queue_writes = queues_sent,
                full,
                observe_ms = observed.as_millis(),
                decide_ms = decision.as_millis(),
                took_ms = started.elapsed().as_millis(),
                "queue cycle"
            );
        }
        self.memory().failed.take().map_or(Ok(()), Err)
    }

    /// Hands the jobs' writes of `decided` to the writer (decisions first, standings within
    /// their budget) and remembers them; how many. A job with a write in flight gets no new
    /// standing, and its decision goes once that write is done.
    fn send_jobs(
        &self,
        jobs: &[Arc<GryviaAIJob>],
        decided: &queue::Cycle,
        pods: &[Arc<CachedPod>],
    ) -> usize {
        let mut memory = self.memory();
        let budget = memory.standing_budget(Instant::now());
        let in_flight = &memory.jobs_in_flight;
        let queue::JobWrites {
            writes,
            of,
            held_back,
        } = queue::job_writes_within(jobs, decided, budget, |k| in_flight.contains(k));
        if held_back > 0 {
            memory.deferred = true;
        }
        let standings = writes.iter().filter(|w| !w.decision).count();
        memory.standing_tokens = memory.standing_tokens.saturating_sub(standings);
        let mut sent = 0;
        for (w, i) in writes.into_iter().zip(of) {
            let Some(job) = jobs.get(i) else {
                continue;
            };
            let plan = plan_of(&w, pods);
            memory.jobs.insert(
                w.job.clone(),
                Written {
                    uid: job.metadata.uid.clone(),
                    value: w.fields.clone(),
                    at: Instant::now(),
                },
            );
            let write = Write::Job(Box::new(((**job).clone(), plan)));
            if memory.jobs_in_flight.contains(&w.job) {
                memory.jobs_next.insert(w.job, write);
                sent += 1;
                continue;
            }
            memory.jobs_in_flight.insert(w.job.clone());
            if self.writes.unbounded_send(write).is_ok() {
                sent += 1;
            }
        }
        sent
    }

    /// Hands each queue's status that changed to the writer (at most every
    /// [`QUEUE_STATUS_EVERY`] unless its `Ready` condition changed), with an Event for a new
    /// problem; how many.
    fn send_queues(
        &self,
        queues: &[Arc<GryviaQueue>],
        decided: &queue::Cycle,
        now: jiff::Timestamp,
    ) -> usize {
        let mut memory = self.memory();
        let mut sent = 0;
        for q in queues {
            let Some((status, event)) = queue::queue_status(q, decided, now) else {
                continue;
            };
            let name = q.metadata.name.clone().unwrap_or_default();
            let ready_changed = q
                .status
                .as_ref()
                .is_none_or(|s| s.conditions != status.conditions);
            let recent = memory
                .queue_written_at
                .get(&name)
                .is_some_and(|at| at.elapsed() < QUEUE_STATUS_EVERY);
            if memory.queues_in_flight.contains(&name) || (recent && !ready_changed) {
                memory.deferred = true;
                continue;
            }
            let mut plan: Plan<GryviaQueueStatus> = Plan::new();
            if let Some(e) = event {
                plan.event(EventType::Warning, &e.reason, e.message);
            }
            plan.status = Some(status.clone());
            memory.queues.insert(
                name.clone(),
                Written {
                    uid: q.metadata.uid.clone(),
                    value: Some(status),
                    at: Instant::now(),
                },
            );
            memory.queue_written_at.insert(name.clone(), Instant::now());
            memory.queues_in_flight.insert(name.clone());
            if self
                .writes
                .unbounded_send(Write::Queue(Box::new(((**q).clone(), plan))))
                .is_ok()
            {
                sent += 1;
            }
        }
        memory
            .queue_written_at
            .retain(|_, at| at.elapsed() < QUEUE_STATUS_EVERY);
        sent
    }

    /// Makes one write; what it wrote stays remembered until the cache shows it, a failed one
    /// is forgotten (the next cycle decides again from the cache) and its error is the next
    /// cycle's. Wakes a cycle after a failure, or when a cycle left an object out meanwhile.
    async fn write(&self, write: Write) {
        let (result, job, queue) = match write {
            Write::Job(w) => {
                let (job, plan) = *w;
                let key = key_of(&job);
                let result = self.executor.apply(&job, &plan).await.map(|_| ());
                if let Err(e) = &result {
                    warn!(job = %key, error = %e, "could not write the queue's decision");
                }
                (result, Some(key), None)
            }
            Write::Queue(w) => {
                let (q, plan) = *w;
                let name = q.metadata.name.clone().unwrap_or_default();
                let result = self.executor.apply(&q, &plan).await.map(|_| ());
                if let Err(e) = &result {
                    warn!(queue = %name, error = %e, "could not write the queue's status");
                }
                (result, None, Some(name))
            }
        };
        let mut memory = self.memory();
        // The decision made meanwhile goes now; it stays remembered even if this write failed.
        let mut next_sent = false;
        if let Some(key) = &job {
            memory.jobs_in_flight.remove(key);
            if let Some(next) = memory.jobs_next.remove(key) {
                memory.jobs_in_flight.insert(key.clone());
                next_sent = self.writes.unbounded_send(next).is_ok();
            }
        }
        if let Some(name) = &queue {
            memory.queues_in_flight.remove(name);
        }
        let wake = match result {
            Err(e) => {
                if let Some(key) = job.as_ref().filter(|_| !next_sent) {
                    memory.jobs.remove(key);
                }
                if let Some(name) = &queue {
                    memory.queues.remove(name);
                    memory.queue_written_at.remove(name);
                }
                memory.failed.get_or_insert(e);
                true
            }
            Ok(()) => std::mem::take(&mut memory.deferred),
        };
        drop(memory);
        if wake {
            self.wake.notify_one();
        }
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
fn pod_key(pod: &CachedPod) -> Option<u64> {
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
/// ([`super::cycles`]). Its writes go out [`WRITE_PARALLELISM`] at a time while the next
/// cycles decide.
pub fn controller(shared: &Shared) -> Running {
    let caches = &shared.caches;
    let wake = Arc::new(tokio::sync::Notify::new());
    let woken = stream::unfold(wake.clone(), |w| async move {
        w.notified().await;
        Some(((), w))
    });
    let triggers = stream::select_all(vec![
        wake_on::<GryviaQueue>(caches, spec_or_lifecycle),
        wake_on::<GryviaAIJob>(caches, job_key),
        wake_on::<GryviaPriority>(caches, spec_or_lifecycle),
        wake_on::<Node>(caches, node_key),
        wake_on::<CachedPod>(caches, pod_key),
        woken.boxed(),
    ]);
    let (tx, rx) = futures::channel::mpsc::unbounded();
    let scheduler = Arc::new(Scheduler::new(shared, tx, wake));
    let writer = {
        let scheduler = scheduler.clone();
        rx.for_each_concurrent(WRITE_PARALLELISM, move |w| {
            let scheduler = scheduler.clone();
            async move { scheduler.write(w).await }
        })
    };
    // A queue status held back (written too recently) goes with the next cycle; this wakes
    // one when nothing else does.
    let deferred = {
        let scheduler = scheduler.clone();
        async move {
            loop {
                tokio::time::sleep(QUEUE_STATUS_EVERY).await;
                let mut memory = scheduler.memory();
                if memory.deferred {
                    memory.deferred = false;
                    drop(memory);
                    scheduler.wake.notify_one();
                }
            }
        }
    };
    let cycles = super::cycles(
        FIELD_MANAGER,
        triggers.boxed(),
        RESYNC,
        PACE,
        shared.metrics.clone(),
        move || {
            let scheduler = scheduler.clone();
            async move { scheduler.cycle().await }
        },
    );
    Box::pin(async move {
        tokio::select! {
            () = cycles => {}
            () = writer => {}
            () = deferred => {}
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(name: &str, uid: &str) -> Arc<GryviaAIJob> {
        Arc::new(
            serde_json::from_value(json!({
                "apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaAIJob",
                "metadata": {"name": name, "namespace": "ml", "uid": uid},
                "spec": {"image": "i", "gpus": 1}
            }))
            .expect("a valid job"),
        )
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
        let in_cache = job("a", "u1");
        let mut jobs = vec![in_cache.clone()];
        let mut written = HashMap::from([(
            JobKey::new("ml", "a"),
            Written {
                uid: Some("u1".to_owned()),
                value: standing(2),
                at: Instant::now(),
            },
        )]);
        fold_written_jobs(&mut jobs, &mut written);
        assert_eq!(QueueFields::of(&jobs[0]), standing(2));
        assert_eq!(
            QueueFields::of(&in_cache),
            QueueFields::default(),
            "the cache's object is not changed: the cycle's copy is"
        );
        assert_eq!(written.len(), 1, "kept until the cache shows it");
        let mut cached = vec![jobs[0].clone()];
        fold_written_jobs(&mut cached, &mut written);
        assert!(written.is_empty(), "the cache shows it: forgotten");
    }

    #[test]
    fn a_write_to_a_recreated_or_deleted_job_is_forgotten() {
        let mut written = HashMap::from([
            (
                JobKey::new("ml", "a"),
                Written {
                    uid: Some("old".to_owned()),
                    value: standing(1),
                    at: Instant::now(),
                },
            ),
            (
                JobKey::new("ml", "gone"),
                Written {
                    uid: Some("u9".to_owned()),
                    value: standing(1),
                    at: Instant::now(),
                },
            ),
        ]);
        let mut jobs = vec![job("a", "new")];
        fold_written_jobs(&mut jobs, &mut written);
        assert!(written.is_empty());
        assert_eq!(QueueFields::of(&jobs[0]), QueueFields::default());
    }

    #[test]
    fn standings_earn_one_write_per_interval_up_to_a_cap() {
        let mut memory = Memory::default();
        let t0 = Instant::now();
        assert_eq!(memory.standing_budget(t0), queue::STANDING_WRITES_PER_CYCLE);
        memory.standing_tokens = 0;
        assert_eq!(memory.standing_budget(t0 + STANDING_WRITE_EVERY / 2), 0);
        // Time under one interval is not lost: it counts at the next call.
        assert_eq!(memory.standing_budget(t0 + STANDING_WRITE_EVERY * 3), 3);
        assert_eq!(
            memory.standing_budget(t0 + STANDING_WRITE_EVERY * 10_000),
            queue::STANDING_WRITES_PER_CYCLE
        );
    }
}
