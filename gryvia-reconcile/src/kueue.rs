//! The Kueue integration's policy (`--kueue-integration`): which Kueue objects Gryvia's tenants,
//! queues and priority tiers become, and what a job's Workload says about it.
//!
//! - A GPU product (node label `nvidia.com/gpu.product`) is a ResourceFlavor
//!   ([`flavor_of`]) whose node labels Kueue adds to admitted pods; a GryviaQueue quota for any
//!   product (`gpuType: "*"`) uses the flavor [`ANY_FLAVOR`] (every GPU node).
//! - A GryviaTenant is a ClusterQueue `tenant-<name>` with nominal GPUs per product: its
//!   `quotas.gpusPerType` entry, else its `concurrentGPUs`, else every GPU of the product.
//!   Tenants of one `parentTenant` tree share the cohort `tenants-<root>`: children borrow what
//!   the parent (and each other) leave unused, and the lender reclaims it (`reclaimWithinCohort:
//!   Any`); a tenant preempts its own lower-priority jobs (`withinClusterQueue: LowerPriority`).
//! - A GryviaQueue is a ClusterQueue `queue-<name>`: its quotas, limits, cohort, strategy and
//!   preemption rules as they are. Kueue always admits a job whole, so `gangAdmission: false`
//!   has no counterpart.
//! - Each namespace gets one LocalQueue [`LOCAL_QUEUE`]: to the GryviaQueue that lists it (the
//!   queue wins: it is the explicit scheduling setting), else to its tenant's ClusterQueue.
//! - A GryviaPriority is a WorkloadPriorityClass of the same name and value; a job's Workload
//!   priority is its tier's value plus `spec.priority` (0-100) through the class
//!   [`priority_class`] names, so `spec.priority` orders jobs within a tier and a queue.
//!
//! ClusterQueues also cover `cpu` and `memory` (Kueue refuses a job that requests a resource
//! its queue does not cover) with quotas no job reaches: Gryvia's Kueue quota is GPUs; CPU and
//! memory stay the tenants' ResourceQuotas'.

use std::collections::{BTreeMap, BTreeSet};

use gryvia_types::core::Resource;
use gryvia_types::kueue::{
    self, ClusterQueue, ClusterQueuePreemption, ClusterQueueSpec, FlavorQuotas, LocalQueue,
    LocalQueueSpec, ResourceFlavor, ResourceFlavorSpec, ResourceGroup, ResourceQuota,
    WorkloadPriorityClass,
};
use gryvia_types::scheduling::{
    GryviaPriority, GryviaQueue, PreemptWithin, QueueResource, QueueingStrategy,
};
use gryvia_types::{GryviaAIJob, GryviaTenant, JobPhase, KueueStanding, labels};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    LabelSelector, LabelSelectorRequirement, ObjectMeta, OwnerReference,
};
use serde::{Deserialize, Serialize};

use crate::facts;
use crate::tenancy::namespace_of;

/// The LocalQueue Gryvia makes in each namespace it covers.
pub const LOCAL_QUEUE: &str = "gryvia";
/// The ResourceFlavor of a quota for any GPU product (`gpuType: "*"`).
pub const ANY_FLAVOR: &str = "gpu-any";
/// CPU quota of every flavor (a million cores, as the API server writes it): more than any
/// job asks for.
pub const UNBOUNDED_CPU: &str = "1M";
/// Memory quota of every flavor: more than any job asks for.
pub const UNBOUNDED_MEMORY: &str = "1Pi";
/// Longest parent chain followed to find a tenant's root.
const MAX_DEPTH: usize = 32;

/// The ResourceFlavor of GPU product `product` (`gpu-` and the product, lower case, other
/// characters than letters, digits, `.` and `-` as `-`).
pub fn flavor_of(product: &str) -> String {
    let mut out = String::from("gpu-");
    out.extend(product.chars().map(|c| {
        if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
            c.to_ascii_lowercase()
        } else {
            '-'
        }
    }));
    out.truncate(253);
    out.trim_end_matches(['-', '.']).to_owned()
}

/// The ClusterQueue of tenant `tenant`.
pub fn tenant_cluster_queue(tenant: &str) -> String {
    format!("tenant-{tenant}")
}

/// The ClusterQueue of GryviaQueue `queue`.
pub fn queue_cluster_queue(queue: &str) -> String {
    format!("queue-{queue}")
}

/// The cohort of the tenants whose parent chain ends at `root`.
pub fn tenant_cohort(root: &str) -> String {
    format!("tenants-{root}")
}

/// The WorkloadPriorityClass of a job with priority tier `tier` (a GryviaPriority name, from
/// the `gryvia.io/priority-class` annotation) and `spec.priority` `priority`.
pub fn priority_class(tier: Option<&str>, priority: i32) -> String {
    match tier {
        Some(t) => format!("{t}-priority-{priority}"),
        None => format!("gryvia-priority-{priority}"),
    }
}

/// The value of that class: the tier's value plus `spec.priority` (tiers closer than 100
/// apart can interleave; the guide's tiers are further apart).
pub fn priority_value(tier_value: Option<i32>, priority: i32) -> i32 {
    tier_value.unwrap_or(0).saturating_add(priority)
}

/// What the integration reads: the tenants, queues and tiers, the GPUs of each product, and
/// the (tier, `spec.priority`) pairs of unfinished jobs (each needs its priority class).
#[derive(Clone, Debug, Default)]
pub struct KueueWorld {
    /// Every GryviaTenant.
    pub tenants: Vec<GryviaTenant>,
    /// Every GryviaQueue.
    pub queues: Vec<GryviaQueue>,
    /// Every GryviaPriority.
    pub priorities: Vec<GryviaPriority>,
    /// Allocatable GPUs per product (node label `nvidia.com/gpu.product`).
    pub gpus_per_product: BTreeMap<String, i64>,
    /// (tier, `spec.priority`) of the unfinished jobs.
    pub job_priorities: BTreeSet<(Option<String>, i32)>,
}

impl KueueWorld {
    /// The world of `tenants` (those being deleted left out), `queues`, `priorities`, the
    /// allocatable GPUs of `nodes` per product, and the (tier, `spec.priority`) of the
    /// unfinished `jobs`.
    pub fn of(
        tenants: &[GryviaTenant],
        queues: &[GryviaQueue],
        priorities: &[GryviaPriority],
        nodes: &[Node],
        jobs: &[GryviaAIJob],
    ) -> Self {
        let mut gpus_per_product: BTreeMap<String, i64> = BTreeMap::new();
        for n in nodes {
            if let Some(p) = facts::gpu_product(n) {
                *gpus_per_product.entry(p.to_owned()).or_default() += facts::gpus_allocatable(n);
            }
        }
        let job_priorities = jobs
            .iter()
            .filter(|j| {
                !j.status
                    .as_ref()
                    .is_some_and(|s| s.phase.is_some_and(JobPhase::is_finished))
            })
            .map(|j| (crate::aijob::priority_class_of(j), j.spec.priority))
            .collect();
        KueueWorld {
            tenants: tenants
                .iter()
                .filter(|t| t.metadata.deletion_timestamp.is_none())
                .cloned()
                .collect(),
            queues: queues.to_vec(),
            priorities: priorities.to_vec(),
            gpus_per_product,
            job_priorities,
        }
    }
}

/// Whether the integration gives `namespace` Gryvia's LocalQueue ([`desired`]): a queue
/// lists it, or it is the namespace of a tenant of `tenants` (names).
pub fn covers<'a>(
    namespace: &str,
    queues: impl IntoIterator<Item = &'a GryviaQueue>,
    mut tenants: impl Iterator<Item = &'a str>,
) -> bool {
    queues
        .into_iter()
        .any(|q| q.spec.namespaces.iter().any(|n| n == namespace))
        || tenants.any(|t| namespace_of(t) == namespace)
}

/// The LocalQueue a job goes to: the one its batch Job was made for (`Some(None)`: made
/// without Kueue, it stays so), else the job's own `kueue.x-k8s.io/queue-name` label, else
/// [`LOCAL_QUEUE`] when the integration covers the namespace (also before the LocalQueue is
/// made: Kueue holds the Workload until then), else a LocalQueue named `default` when the
/// namespace has one; `None`: the job runs without Kueue.
pub fn local_queue_for(
    batch_job_queue: Option<Option<&str>>,
    job_label: Option<&str>,
    covered: bool,
    default_exists: bool,
) -> Option<String> {
    if let Some(made_for) = batch_job_queue {
        return made_for.map(str::to_owned);
    }
    job_label
        .map(str::to_owned)
        .or_else(|| covered.then(|| LOCAL_QUEUE.to_owned()))
        .or_else(|| default_exists.then(|| "default".to_owned()))
}

/// The Kueue objects that world asks for, and what in it could not be mapped.
#[derive(Clone, Debug, Default)]
pub struct Desired {
    /// One per GPU product (and [`ANY_FLAVOR`] when a queue uses `*`).
    pub flavors: Vec<ResourceFlavor>,
    /// One per tenant and per queue.
    pub cluster_queues: Vec<ClusterQueue>,
    /// One per covered namespace.
    pub local_queues: Vec<LocalQueue>,
    /// One per tier and per (tier, priority) of a job.
    pub priority_classes: Vec<WorkloadPriorityClass>,
    /// Problems, each naming the object and field.
    pub problems: Vec<String>,
}

impl Desired {
    /// Leaves out the LocalQueues of namespaces that do not exist (`exists` says which do): a
    /// tenant's namespace may not be made yet, and its LocalQueue waits for it (a later cycle
    /// makes it) instead of failing the whole set. Each is reported in `problems`.
    pub fn wait_for_namespaces(&mut self, exists: impl Fn(&str) -> bool) {
        let problems = &mut self.problems;
        self.local_queues.retain(|lq| {
            let ns = lq.metadata.namespace.as_deref().unwrap_or_default();
            let there = exists(ns);
            if !there {
                problems.push(format!(
                    "namespace {ns} does not exist yet: its LocalQueue {LOCAL_QUEUE} waits for it"
                ));
            }
            there
        });
    }
}

/// `object` labelled as Gryvia's, owned by `owner` (the tenant, queue or tier it comes from).
fn managed<K: Resource>(mut object: K, owner: Option<OwnerReference>) -> K {
    let meta = object.meta_mut();
    meta.labels.get_or_insert_with(BTreeMap::new).insert(
        labels::MANAGED_BY.to_owned(),
        labels::MANAGED_BY_VALUE.to_owned(),
    );
    meta.owner_references = owner.map(|o| vec![o]);
    object
}

/// The controller owner reference to `object`.
fn owner<K: Resource<DynamicType = ()>>(object: &K) -> Option<OwnerReference> {
    object.controller_owner_ref(&())
}

fn flavor_quota(
    flavor: String,
    gpus: i64,
    borrowing: Option<i32>,
    lending: Option<i32>,
) -> FlavorQuotas {
    FlavorQuotas {
        name: flavor,
        resources: vec![
            ResourceQuota {
                name: labels::NVIDIA_GPU_RESOURCE.to_owned(),
                nominal_quota: Quantity(gpus.max(0).to_string()),
                borrowing_limit: borrowing.map(|b| Quantity(b.to_string())),
                lending_limit: lending.map(|l| Quantity(l.to_string())),
            },
            ResourceQuota {
                name: "cpu".to_owned(),
                nominal_quota: Quantity(UNBOUNDED_CPU.to_owned()),
                ..ResourceQuota::default()
            },
            ResourceQuota {
                name: "memory".to_owned(),
                nominal_quota: Quantity(UNBOUNDED_MEMORY.to_owned()),
                ..ResourceQuota::default()
            },
        ],
    }
}

fn covered() -> Vec<String> {
    vec![
        labels::NVIDIA_GPU_RESOURCE.to_owned(),
        "cpu".to_owned(),
        "memory".to_owned(),
    ]
}

fn namespaces_selector(namespaces: &[String]) -> LabelSelector {
    LabelSelector {
        match_expressions: Some(vec![LabelSelectorRequirement {
            key: "kubernetes.io/metadata.name".to_owned(),
            operator: "In".to_owned(),
            values: Some(namespaces.to_vec()),
        }]),
        match_labels: None,
    }
}

/// The root of `tenant`'s parent chain, or a problem (a missing parent, a cycle).
fn root_of<'a>(
    tenant: &'a GryviaTenant,
    by_name: &BTreeMap<&'a str, &'a GryviaTenant>,
) -> Result<&'a str, String> {
    let mut current = tenant;
    let name = tenant.metadata.name.as_deref().unwrap_or_default();
    for _ in 0..MAX_DEPTH {
        let Some(parent) = current.spec.parent_tenant.as_deref() else {
            return Ok(current.metadata.name.as_deref().unwrap_or_default());
        };
        match by_name.get(parent) {
            Some(p) => current = p,
            None => {
                return Err(format!(
                    "GryviaTenant {name}: spec.parentTenant {parent:?} does not exist; its ClusterQueue has no cohort until it does"
                ));
            }
        }
    }
    Err(format!(
        "GryviaTenant {name}: spec.parentTenant: the parent chain is a cycle or deeper than {MAX_DEPTH}; its ClusterQueue has no cohort"
    ))
}

fn tenant_queue(
    tenant: &GryviaTenant,
    cohort: Option<String>,
    products: &BTreeMap<String, i64>,
) -> ClusterQueue {
    let name = tenant.metadata.name.clone().unwrap_or_default();
    let quotas = tenant.spec.quotas.as_ref();
    let per_type = quotas.map(|q| &q.gpus_per_type);
    let mut all: BTreeSet<&str> = products.keys().map(String::as_str).collect();
    if let Some(p) = per_type {
        all.extend(p.keys().map(String::as_str));
    }
    let flavors = all
        .into_iter()
        .map(|product| {
            let nominal = per_type
                .and_then(|p| p.get(product).copied())
                .or_else(|| quotas.and_then(|q| q.concurrent_gpus))
                .map_or_else(|| products.get(product).copied().unwrap_or(0), i64::from);
            flavor_quota(flavor_of(product), nominal, None, None)
        })
        .collect::<Vec<_>>();
    let cq = ClusterQueue::new(
        &tenant_cluster_queue(&name),
        ClusterQueueSpec {
            cohort_name: cohort,
            namespace_selector: Some(namespaces_selector(&[namespace_of(&name)])),
            queueing_strategy: Some("BestEffortFIFO".to_owned()),
            resource_groups: if flavors.is_empty() {
                Vec::new()
            } else {
                vec![ResourceGroup {
                    covered_resources: covered(),
                    flavors,
                }]
            },
            preemption: Some(ClusterQueuePreemption {
                reclaim_within_cohort: Some("Any".to_owned()),
                within_cluster_queue: Some("LowerPriority".to_owned()),
            }),
        },
    );
    managed(cq, owner(tenant))
}

fn queue_flavor(r: &QueueResource) -> String {
    if r.gpu_type == "*" {
        ANY_FLAVOR.to_owned()
    } else {
        flavor_of(&r.gpu_type)
    }
}

fn gryvia_queue(queue: &GryviaQueue) -> ClusterQueue {
    let name = queue.metadata.name.clone().unwrap_or_default();
    let spec = &queue.spec;
    // Kueue allows borrowing and lending limits only in a cohort.
    let in_cohort = spec.cohort.is_some();
    let flavors = spec
        .resources
        .iter()
        .map(|r| {
            flavor_quota(
                queue_flavor(r),
                i64::from(r.nominal),
                r.borrowing_limit.filter(|_| in_cohort),
                r.lending_limit.filter(|_| in_cohort),
            )
        })
        .collect();
    let cq = ClusterQueue::new(
        &queue_cluster_queue(&name),
        ClusterQueueSpec {
            cohort_name: spec.cohort.clone(),
            namespace_selector: Some(namespaces_selector(&spec.namespaces)),
            queueing_strategy: Some(
                match spec.queueing_strategy {
                    QueueingStrategy::StrictFIFO => "StrictFIFO",
                    QueueingStrategy::BestEffortFIFO => "BestEffortFIFO",
                }
                .to_owned(),
            ),
            resource_groups: vec![ResourceGroup {
                covered_resources: covered(),
                flavors,
            }],
            preemption: Some(ClusterQueuePreemption {
                reclaim_within_cohort: Some(
                    if spec.preemption.reclaim_within_cohort {
                        "Any"
                    } else {
                        "Never"
                    }
                    .to_owned(),
                ),
                within_cluster_queue: Some(
                    match spec.preemption.within_queue {
                        PreemptWithin::Never => "Never",
                        PreemptWithin::LowerPriority => "LowerPriority",
                    }
                    .to_owned(),
                ),
            }),
        },
    );
    managed(cq, owner(queue))
}

fn local_queue(
    namespace: &str,
    cluster_queue: String,
    owner: Option<OwnerReference>,
) -> LocalQueue {
    let mut lq = LocalQueue::new(LOCAL_QUEUE, LocalQueueSpec { cluster_queue });
    lq.metadata.namespace = Some(namespace.to_owned());
    managed(lq, owner)
}

fn priority_class_object(
    name: String,
    value: i32,
    description: String,
    owner: Option<OwnerReference>,
) -> WorkloadPriorityClass {
    let class = WorkloadPriorityClass {
        metadata: ObjectMeta {
            name: Some(name),
            ..ObjectMeta::default()
        },
        value,
        description: Some(description),
    };
    managed(class, owner)
}

/// The Kueue objects `world` asks for (each sorted by name), with the problems found.
pub fn desired(world: &KueueWorld) -> Desired {
    let mut problems = Vec::new();
    let by_name: BTreeMap<&str, &GryviaTenant> = world
        .tenants
        .iter()
        .filter_map(|t| Some((t.metadata.name.as_deref()?, t)))
        .collect();
    let cluster_queues = cluster_queues(world, &by_name, &mut problems);
    let local_queues = local_queues(world, &by_name, &mut problems);
    Desired {
        flavors: flavors(world),
        cluster_queues,
        local_queues,
        priority_classes: priority_classes(world),
        problems,
    }
}

/// A flavor per product the nodes, the tenants' quotas or the queues name.
fn flavors(world: &KueueWorld) -> Vec<ResourceFlavor> {
    let mut products: BTreeSet<String> = world.gpus_per_product.keys().cloned().collect();
    for t in &world.tenants {
        if let Some(q) = &t.spec.quotas {
            products.extend(q.gpus_per_type.keys().cloned());
        }
    }
    let mut any = false;
    for q in &world.queues {
        for r in &q.spec.resources {
            if r.gpu_type == "*" {
                any = true;
            } else {
                products.insert(r.gpu_type.clone());
            }
        }
    }
    let flavor = |name: &str, label: &str, value: &str| {
        let node_labels = BTreeMap::from([(label.to_owned(), value.to_owned())]);
        managed(
            ResourceFlavor::new(name, ResourceFlavorSpec { node_labels }),
            None,
        )
    };
    let mut flavors: BTreeMap<String, ResourceFlavor> = products
        .iter()
        .map(|p| {
            (
                flavor_of(p),
                flavor(&flavor_of(p), labels::NVIDIA_GPU_PRODUCT, p),
            )
        })
        .collect();
    if any {
        flavors.insert(
            ANY_FLAVOR.to_owned(),
            flavor(ANY_FLAVOR, "nvidia.com/gpu.present", "true"),
        );
    }
    flavors.into_values().collect()
}

/// A ClusterQueue per tenant (trees sharing a cohort) and per queue.
fn cluster_queues(
    world: &KueueWorld,
    by_name: &BTreeMap<&str, &GryviaTenant>,
    problems: &mut Vec<String>,
) -> Vec<ClusterQueue> {
    let mut roots: BTreeMap<&str, Option<&str>> = BTreeMap::new();
    for (name, t) in by_name {
        match root_of(t, by_name) {
            Ok(root) => {
                roots.insert(name, Some(root));
            }
            Err(problem) => {
                problems.push(problem);
                roots.insert(name, None);
            }
        }
    }
    let mut tree_size: BTreeMap<&str, usize> = BTreeMap::new();
    for root in roots.values().flatten() {
        *tree_size.entry(root).or_default() += 1;
    }
    let mut cqs: BTreeMap<String, ClusterQueue> = BTreeMap::new();
    for (name, t) in by_name {
        let cohort = roots
            .get(name)
            .copied()
            .flatten()
            .filter(|root| tree_size.get(root).copied().unwrap_or(0) > 1)
            .map(tenant_cohort);
        let cq = tenant_queue(t, cohort, &world.gpus_per_product);
        cqs.insert(cq.metadata.name.clone().unwrap_or_default(), cq);
    }
    for q in &world.queues {
        let cq = gryvia_queue(q);
        cqs.insert(cq.metadata.name.clone().unwrap_or_default(), cq);
    }
    cqs.into_values().collect()
}

/// A LocalQueue per namespace: a queue's namespaces first (queues by name), then tenants'.
fn local_queues(
    world: &KueueWorld,
    by_name: &BTreeMap<&str, &GryviaTenant>,
    problems: &mut Vec<String>,
) -> Vec<LocalQueue> {
    let mut claimed: BTreeMap<String, String> = BTreeMap::new();
    let mut lqs: BTreeMap<String, LocalQueue> = BTreeMap::new();
    let mut queues: Vec<&GryviaQueue> = world.queues.iter().collect();
    queues.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    for q in queues {
        let name = q.metadata.name.clone().unwrap_or_default();
        for ns in &q.spec.namespaces {
            if let Some(first) = claimed.get(ns) {
                problems.push(format!(
                    "GryviaQueue {name}: spec.namespaces: {ns} is already in GryviaQueue {first}; its jobs go to {first}"
                ));
                continue;
            }
            claimed.insert(ns.clone(), name.clone());
            lqs.insert(
                ns.clone(),
                local_queue(ns, queue_cluster_queue(&name), owner(q)),
            );
        }
    }
    for (name, t) in by_name {
        let ns = namespace_of(name);
        if claimed.contains_key(&ns) {
            continue;
        }
        lqs.insert(
            ns.clone(),
            local_queue(&ns, tenant_cluster_queue(name), owner(*t)),
        );
    }
    lqs.into_values().collect()
}

/// A priority class per tier and per (tier, priority) of a job.
fn priority_classes(world: &KueueWorld) -> Vec<WorkloadPriorityClass> {
    let tiers: BTreeMap<&str, &GryviaPriority> = world
        .priorities
        .iter()
        .filter_map(|p| Some((p.metadata.name.as_deref()?, p)))
        .collect();
    let mut classes: BTreeMap<String, WorkloadPriorityClass> = BTreeMap::new();
    for (name, p) in &tiers {
        classes.insert(
            (*name).to_owned(),
            priority_class_object(
                (*name).to_owned(),
                p.spec.value,
                format!("GryviaPriority {name}"),
                owner(*p),
            ),
        );
    }
    for (tier, priority) in &world.job_priorities {
        let found = tier.as_deref().map(|t| tiers.get(t));
        if let Some(None) = found {
            // The job waits for its tier (the AI job controller says so).
            continue;
        }
        let tier_object = found.flatten();
        let name = priority_class(tier.as_deref(), *priority);
        let description = match tier {
            Some(t) => format!("GryviaPriority {t} with spec.priority {priority}"),
            None => format!("spec.priority {priority}"),
        };
        classes.insert(
            name.clone(),
            priority_class_object(
                name,
                priority_value(tier_object.map(|p| p.spec.value), *priority),
                description,
                tier_object.and_then(|p| owner(*p)),
            ),
        );
    }
    classes.into_values().collect()
}

/// A Workload condition, as observed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadCondition {
    /// `QuotaReserved`, `Admitted`, `Evicted`, `Preempted`, `Finished`, ...
    pub type_: String,
    /// `status == "True"`.
    pub status: bool,
    /// Reason.
    pub reason: String,
    /// Message.
    pub message: String,
}

/// A job's Workload, as observed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObservedWorkload {
    /// Its name.
    pub name: String,
    /// The ClusterQueue that admitted it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_queue: Option<String>,
    /// The flavors of its admission.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub flavors: Vec<String>,
    /// Its conditions.
    #[serde(default)]
    pub conditions: Vec<WorkloadCondition>,
}

impl ObservedWorkload {
    /// Summarises a Workload.
    pub fn of(w: &kueue::Workload) -> Self {
        let status = w.status.clone().unwrap_or_default();
        let admission = status.admission.as_ref();
        let mut flavors: Vec<String> = admission
            .map(|a| {
                a.pod_set_assignments
                    .iter()
                    .flat_map(|p| p.flavors.values().cloned())
                    .collect()
            })
            .unwrap_or_default();
        flavors.sort();
        flavors.dedup();
        ObservedWorkload {
            name: w.metadata.name.clone().unwrap_or_default(),
            cluster_queue: admission.map(|a| a.cluster_queue.clone()),
            flavors,
            conditions: status
                .conditions
                .iter()
                .map(|c| WorkloadCondition {
                    type_: c.type_.clone(),
                    status: c.status == "True",
                    reason: c.reason.clone(),
                    message: c.message.clone(),
                })
                .collect(),
        }
    }

    fn condition(&self, type_: &str) -> Option<&WorkloadCondition> {
        self.conditions.iter().find(|c| c.type_ == type_)
    }

    fn is(&self, type_: &str) -> bool {
        self.condition(type_).is_some_and(|c| c.status)
    }

    /// Kueue admitted it: its job may run.
    pub fn admitted(&self) -> bool {
        self.is(kueue::ADMITTED) && !self.is(kueue::FINISHED)
    }
}

/// Where a job submitted to LocalQueue `local_queue` stands, from its Workload (`None`: Kueue
/// has not made it yet); `previous` is what the status said (for the count of evictions).
pub fn standing(
    local_queue: &str,
    workload: Option<&ObservedWorkload>,
    previous: Option<&KueueStanding>,
) -> KueueStanding {
    let evictions = previous.map_or(0, |p| p.evictions);
    let Some(w) = workload else {
        return KueueStanding {
            local_queue: local_queue.to_owned(),
            workload: None,
            cluster_queue: None,
            state: "Pending".to_owned(),
            reason: None,
            message: Some("waiting for Kueue to make the Workload of the batch Job".to_owned()),
            flavors: Vec::new(),
            evictions,
        };
    };
    let text = |s: &str| (!s.is_empty()).then(|| s.to_owned());
    let pending = w
        .condition(kueue::QUOTA_RESERVED)
        .filter(|c| !c.status)
        .and_then(|c| text(&c.message));
    let (state, reason, message) = if w.is(kueue::FINISHED) {
        let c = w.condition(kueue::FINISHED);
        (
            "Finished",
            c.and_then(|c| text(&c.reason)),
            c.and_then(|c| text(&c.message)),
        )
    } else if w.is(kueue::ADMITTED) {
        let c = w.condition(kueue::ADMITTED);
        (
            "Admitted",
            c.and_then(|c| text(&c.reason)),
            c.and_then(|c| text(&c.message)),
        )
    } else if w.is(kueue::QUOTA_RESERVED) {
        let c = w.condition(kueue::QUOTA_RESERVED);
        (
            "QuotaReserved",
            c.and_then(|c| text(&c.reason)),
            c.and_then(|c| text(&c.message)),
        )
    } else if w.is(kueue::EVICTED) {
        // Preempted says by whom (InClusterQueue, InCohortReclamation, ...); Evicted why.
        let c = w
            .condition(kueue::PREEMPTED)
            .filter(|c| c.status)
            .or_else(|| w.condition(kueue::EVICTED));
        let why = c.and_then(|c| text(&c.message));
        let message = match (why, pending) {
            (Some(why), Some(now)) => Some(format!("{why}; requeued: {now}")),
            (why, now) => why.or(now),
        };
        ("Evicted", c.and_then(|c| text(&c.reason)), message)
    } else {
        let c = w.condition(kueue::QUOTA_RESERVED);
        (
            "Pending",
            c.and_then(|c| text(&c.reason)),
            pending.or_else(|| Some("waiting for Kueue to admit the Workload".to_owned())),
        )
    };
    let newly_evicted = state == "Evicted" && previous.is_some_and(|p| p.state != "Evicted");
    KueueStanding {
        local_queue: local_queue.to_owned(),
        workload: Some(w.name.clone()),
        cluster_queue: w.cluster_queue.clone(),
        state: state.to_owned(),
        reason,
        message,
        flavors: w.flavors.clone(),
        evictions: evictions + i32::from(newly_evicted),
    }
}
