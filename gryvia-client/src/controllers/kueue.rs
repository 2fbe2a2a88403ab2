//! The Kueue integration of the ai-operator (`--kueue-integration`): keeps Kueue's
//! ResourceFlavors, ClusterQueues, LocalQueues and WorkloadPriorityClasses in line with the
//! GryviaTenants, GryviaQueues, GryviaPriorities, the GPU products of the nodes and the
//! priorities of unfinished jobs (policy: `gryvia_reconcile::kueue`). The AI job controller
//! submits each job's batch Job to its namespace's LocalQueue and reads Kueue's Workload back.
//!
//! One cycle decides about the whole set (at once after a quiet spell, changes during busy
//! times taken together, one cycle per [`PACE`] at most; at least every [`RESYNC`]): objects that differ from what the world asks for are applied with
//! server-side apply under [`FIELD_MANAGER`], objects labelled as Gryvia's that it no longer
//! asks for are deleted. A LocalQueue whose ClusterQueue changes is deleted and made anew
//! (Kueue does not let it move).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::{StreamExt, stream};
use gryvia_reconcile::kueue::{self as policy, Desired, KueueWorld};
use gryvia_reconcile::{Child, ObjectRef, facts};
use gryvia_types::kueue::{ClusterQueue, LocalQueue, ResourceFlavor, WorkloadPriorityClass};
use gryvia_types::scheduling::{GryviaPriority, GryviaQueue};
use gryvia_types::{GryviaAIJob, GryviaTenant, JobPhase, labels};
use k8s_openapi::api::core::v1::Node;
use kube::Resource;
use kube::runtime::reflector::Store;
use serde::Serialize;
use serde_json::Value;
use tracing::{info, warn};

use super::{Running, Shared, owned, wake_on};
use crate::Result;
use crate::apply::Executor;
use crate::cache::NamespaceMeta;
use crate::cache::wait_ready;
use crate::metrics::{ControllerLabels, Metrics};
use crate::runtime::spec_or_lifecycle;

/// Field manager of the Kueue integration.
pub const FIELD_MANAGER: &str = "gryvia-kueue";
/// At most one cycle starts per this long (plus the cycle's own time); a change after a
/// quiet spell starts one at once ([`super::cycles`]).
pub const PACE: Duration = Duration::from_millis(200);
/// A cycle runs at least this often (and repairs what someone else changed).
pub const RESYNC: Duration = Duration::from_secs(30);

/// The integration's stores and executor.
struct Integration {
    tenants: Store<GryviaTenant>,
    queues: Store<GryviaQueue>,
    priorities: Store<GryviaPriority>,
    nodes: Store<Node>,
    jobs: Store<GryviaAIJob>,
    flavors: Store<ResourceFlavor>,
    cluster_queues: Store<ClusterQueue>,
    local_queues: Store<LocalQueue>,
    priority_classes: Store<WorkloadPriorityClass>,
    /// Namespaces (metadata): a LocalQueue waits for its namespace.
    namespaces: Store<NamespaceMeta>,
    executor: Executor,
    metrics: Metrics,
    problems: Mutex<Vec<String>>,
}

/// The fields of `object` Gryvia decides: everything but the metadata Kubernetes adds, with
/// owner references and labels.
fn decided<K: Serialize + Resource>(object: &K) -> Value {
    let mut v = serde_json::to_value(object).unwrap_or(Value::Null);
    if let Value::Object(map) = &mut v {
        map.remove("status");
        map.remove("apiVersion");
        map.remove("kind");
        let meta = object.meta();
        map.insert(
            "metadata".to_owned(),
            serde_json::json!({
                "ownerReferences": meta.owner_references,
                "managed": meta.labels.as_ref().and_then(|l| l.get(labels::MANAGED_BY)),
            }),
        );
    }
    v
}

/// What to apply and delete so that the objects in `store` (Gryvia's, by label) become
/// `desired`; `moved` says when an existing object cannot be changed in place (it is deleted
/// and made again in the next cycle).
fn diff<K>(
    store: &Store<K>,
    desired: &[K],
    moved: impl Fn(&K, &K) -> bool,
) -> (Vec<Child>, Vec<ObjectRef>)
where
    K: Resource<DynamicType = ()> + Clone + Serialize + 'static,
{
    let cached: BTreeMap<(Option<String>, String), Arc<K>> = store
        .state()
        .into_iter()
        .map(|o| {
            let m = o.meta();
            ((m.namespace.clone(), m.name.clone().unwrap_or_default()), o)
        })
        .collect();
    let api_version = K::api_version(&()).into_owned();
    let kind = K::kind(&()).into_owned();
    let reference = |ns: &Option<String>, name: &str| match ns {
        Some(ns) => ObjectRef::namespaced(&api_version, &kind, ns, name),
        None => ObjectRef::cluster(&api_version, &kind, name),
    };
    let mut apply = Vec::new();
    let mut delete = Vec::new();
    let mut wanted = BTreeSet::new();
    for d in desired {
        let m = d.meta();
        let key = (m.namespace.clone(), m.name.clone().unwrap_or_default());
        wanted.insert(key.clone());
        match cached.get(&key) {
            Some(c) if c.meta().deletion_timestamp.is_some() => {}
            Some(c) if moved(c, d) => delete.push(reference(&key.0, &key.1)),
            Some(c) if decided(c.as_ref()) == decided(d) => {}
            _ => {
                if let Ok(child) = Child::from_resource(d) {
                    apply.push(child.unowned());
                }
            }
        }
    }
    for (key, c) in &cached {
        let ours = c
            .meta()
            .labels
            .as_ref()
            .and_then(|l| l.get(labels::MANAGED_BY))
            .is_some_and(|v| v == labels::MANAGED_BY_VALUE);
        if ours && !wanted.contains(key) && c.meta().deletion_timestamp.is_none() {
            delete.push(reference(&key.0, &key.1));
        }
    }
    (apply, delete)
}

impl Integration {
    fn new(shared: &Shared) -> Self {
        let caches = &shared.caches;
        Integration {
            tenants: caches.store(),
            queues: caches.store(),
            priorities: caches.store(),
            nodes: caches.store(),
            jobs: caches.store(),
            flavors: caches.store(),
            cluster_queues: caches.store(),
            local_queues: caches.store(),
            priority_classes: caches.store(),
            namespaces: caches.store(),
            executor: Executor::new(shared.client.clone(), FIELD_MANAGER).dry_run(shared.dry_run),
            metrics: shared.metrics.clone(),
            problems: Mutex::default(),
        }
    }

    async fn ready(&self) -> Result<()> {
        wait_ready(&self.tenants, "GryviaTenant").await?;
        wait_ready(&self.queues, "GryviaQueue").await?;
        wait_ready(&self.priorities, "GryviaPriority").await?;
        wait_ready(&self.nodes, "Node").await?;
        wait_ready(&self.jobs, "GryviaAIJob").await?;
        wait_ready(&self.flavors, "ResourceFlavor").await?;
        wait_ready(&self.cluster_queues, "ClusterQueue").await?;
        wait_ready(&self.local_queues, "LocalQueue").await?;
        wait_ready(&self.priority_classes, "WorkloadPriorityClass").await?;
        wait_ready(&self.namespaces, "Namespace").await
    }

    /// What the world asks for now.
    fn desired(&self) -> Desired {
        policy::desired(&KueueWorld::of(
            &owned(&self.tenants.state()),
            &owned(&self.queues.state()),
            &owned(&self.priorities.state()),
            &owned(&self.nodes.state()),
            &owned(&self.jobs.state()),
        ))
    }

    /// One cycle: decide, apply what differs (flavors and classes before the queues that
    /// name them), delete what is no longer asked for (LocalQueues first).
    async fn cycle(&self) -> Result<()> {
        self.ready().await?;
        let labels = ControllerLabels {
            controller: FIELD_MANAGER.to_owned(),
        };
        self.metrics.reconciles.get_or_create(&labels).inc();
        let started = std::time::Instant::now();
        let mut desired = self.desired();
        desired.wait_for_namespaces(|ns| {
            self.namespaces
                .get(&kube::runtime::reflector::ObjectRef::new(ns))
                .is_some()
        });
        let (f_apply, f_delete) = diff(&self.flavors, &desired.flavors, |_, _| false);
        let (p_apply, p_delete) =
            diff(&self.priority_classes, &desired.priority_classes, |_, _| {
                false
            });
        let (c_apply, c_delete) = diff(&self.cluster_queues, &desired.cluster_queues, |_, _| false);
        let (l_apply, l_delete) = diff(
            &self.local_queues,
            &desired.local_queues,
            |cached: &LocalQueue, wanted: &LocalQueue| {
                cached.spec.cluster_queue != wanted.spec.cluster_queue
            },
        );
        let apply: Vec<Child> = [f_apply, p_apply, c_apply, l_apply].concat();
        let delete: Vec<ObjectRef> = [l_delete, c_delete, p_delete, f_delete].concat();
        self.report(&desired.problems);
        if apply.is_empty() && delete.is_empty() {
            return Ok(());
        }
        self.executor.apply_set(&apply, &delete).await?;
        self.metrics
            .duration
            .get_or_create(&labels)
            .observe(started.elapsed().as_secs_f64());
        info!(
            applied = apply.len(),
            deleted = delete.len(),
            took_ms = started.elapsed().as_millis(),
            "kueue objects in line"
        );
        Ok(())
    }

    /// Logs the problems of the world when they change.
    fn report(&self, problems: &[String]) {
        let mut last = self
            .problems
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if *last != problems {
            for p in problems {
                warn!(problem = %p, "the Kueue integration cannot map this");
            }
            *last = problems.to_vec();
        }
    }
}

/// What of a job counts here: its tier annotation, `spec.priority`, whether it finished.
fn job_key(job: &GryviaAIJob) -> Option<u64> {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    job.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(labels::PRIORITY_CLASS))
        .hash(&mut h);
    job.spec.priority.hash(&mut h);
    job.status
        .as_ref()
        .is_some_and(|s| s.phase.is_some_and(JobPhase::is_finished))
        .hash(&mut h);
    Some(h.finish())
}

/// What of a node counts: its GPU product and allocatable GPUs.
fn node_key(node: &Node) -> Option<u64> {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    facts::gpu_product(node).hash(&mut h);
    facts::gpus_allocatable(node).hash(&mut h);
    Some(h.finish())
}

/// The Kueue integration: a cycle whenever a tenant, queue, tier, node product, job priority
/// or one of the Kueue objects changed, and every [`RESYNC`].
pub fn controller(shared: &Shared) -> Running {
    let caches = &shared.caches;
    let triggers = stream::select_all(vec![
        wake_on::<GryviaTenant>(caches, spec_or_lifecycle),
        wake_on::<GryviaQueue>(caches, spec_or_lifecycle),
        wake_on::<GryviaPriority>(caches, spec_or_lifecycle),
        wake_on::<Node>(caches, node_key),
        wake_on::<GryviaAIJob>(caches, job_key),
        wake_on::<ResourceFlavor>(caches, |_| None),
        wake_on::<ClusterQueue>(caches, |_| None),
        wake_on::<LocalQueue>(caches, |_| None),
        wake_on::<WorkloadPriorityClass>(caches, |_| None),
    ]);
    let integration = Arc::new(Integration::new(shared));
    super::cycles(
        FIELD_MANAGER,
        triggers.boxed(),
        RESYNC,
        PACE,
        shared.metrics.clone(),
        move || {
            let integration = integration.clone();
            async move { integration.cycle().await }
        },
    )
}
