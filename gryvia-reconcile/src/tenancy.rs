//! Tenancy: what a GryviaTenant or GryviaQuota should make exist, as a pure function.
//!
//! A tenant gets the namespace `tenant-<name>` (labelled, never owned: the deletion policy
//! decides its fate), a ResourceQuota (`requests.nvidia.com/gpu` and per-StorageClass storage),
//! a LimitRange with defaults, a NetworkPolicy when `networkPolicy.isolated` or its data is
//! confidential or restricted (`governance`, whose classification and compliance regimes also
//! label the namespace), and, opt-in,
//! RoleBindings for its members. Beyond the features guide, `parentTenant` is enforced: GPU
//! limits are allocated down the tree, so the GPUs of a family never exceed the root's limit.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use gryvia_types::conditions::{self, Status};
use gryvia_types::labels;
use gryvia_types::{
    DataClassification, DeletionPolicy, GryviaQuota, GryviaQuotaStatus, GryviaTenant,
    GryviaTenantStatus, MemberKind, MemberRole,
};
use k8s_openapi::api::core::v1::{
    LimitRange, LimitRangeItem, LimitRangeSpec, Namespace, Node, ResourceQuota, ResourceQuotaSpec,
};
use k8s_openapi::api::networking::v1::{
    NetworkPolicy, NetworkPolicyIngressRule, NetworkPolicyPeer, NetworkPolicySpec,
};
use k8s_openapi::api::rbac::v1::{RoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    LabelSelector, LabelSelectorRequirement, ObjectMeta,
};

use crate::facts::PodView;
use crate::{Child, EventType, ObjectRef, Plan, Timestamp, facts};

/// Name of the ResourceQuota a tenant gets in its namespace.
pub const TENANT_QUOTA: &str = "gryvia-tenant";
/// Name of the LimitRange a tenant gets.
pub const TENANT_LIMITS: &str = "gryvia-defaults";
/// Name of the NetworkPolicy of an isolated tenant.
pub const TENANT_NETPOL: &str = "gryvia-tenant-isolation";
/// The quota resource for GPUs.
pub const GPU_REQUESTS: &str = labels::NVIDIA_GPU_REQUESTS;
/// Condition type set when the parent caps this tenant's GPU limit.
pub const QUOTA_CAPPED: &str = "QuotaCapped";
/// Condition type set when the tenant uses more GPUs of a product than `gpusPerType` allows.
pub const TYPE_LIMIT_EXCEEDED: &str = "GpuTypeLimitExceeded";
/// Longest tenant name (the namespace `tenant-<name>` must fit in 63 characters).
pub const MAX_TENANT_NAME: usize = 56;
/// How often tenants are re-read to refresh usage in their status.
pub const RESYNC: Duration = Duration::from_secs(60);

/// The namespace of a tenant.
pub fn namespace_of(tenant: &str) -> String {
    format!("tenant-{tenant}")
}

/// Allocatable `nvidia.com/gpu` of a node (0 when it has none); see
/// [`facts::gpus_allocatable`].
pub fn node_gpus(node: &Node) -> i32 {
    clamp(facts::gpus_allocatable(node))
}

fn clamp(n: i64) -> i32 {
    i32::try_from(n).unwrap_or(if n < 0 { i32::MIN } else { i32::MAX })
}

/// GPUs held per node by the pods that hold them (bound, not finished; see
/// [`facts::holds_gpus`]).
pub fn gpus_by_node<P: PodView>(pods: &[P]) -> BTreeMap<String, i32> {
    let mut used = BTreeMap::new();
    for p in pods.iter().filter(facts::holds_gpus) {
        if let Some(n) = facts::node_of(p) {
            *used.entry(n.to_owned()).or_insert(0) += pod_gpus(p);
        }
    }
    used
}

/// `hard` and `used` of `requests.nvidia.com/gpu` in a ResourceQuota's status (`None` when it
/// has no GPU limit; an unreadable `used` counts as 0).
pub fn quota_gpus(rq: &ResourceQuota) -> Option<(i64, i64)> {
    let status = rq.status.as_ref()?;
    let hard = status.hard.as_ref()?.get(GPU_REQUESTS)?.0.parse().ok()?;
    let used = status
        .used
        .as_ref()
        .and_then(|u| u.get(GPU_REQUESTS))
        .and_then(|q| q.0.parse().ok())
        .unwrap_or(0);
    Some((hard, used))
}

/// GPUs a pod holds: the sum over its containers of `nvidia.com/gpu` (limits, else requests;
/// for an extended resource the two are equal when both are set); see [`facts::gpus_held`].
pub fn pod_gpus(pod: &(impl PodView + ?Sized)) -> i32 {
    clamp(facts::gpus_held(pod))
}

/// The GPU product of every node that has one (its `nvidia.com/gpu.product` label), by node
/// name.
pub fn node_products(nodes: &[Node]) -> BTreeMap<String, String> {
    nodes
        .iter()
        .filter_map(|n| Some((n.metadata.name.clone()?, facts::gpu_product(n)?.to_owned())))
        .collect()
}

/// GPUs of the pods that hold them (bound, not finished), per GPU product of their node
/// (`products`, by node name; `unknown` for a node without a product or not listed). What
/// [`TenantWorld::gpus_by_type`] holds for a tenant's pods.
pub fn gpus_by_product<'a, P: PodView + 'a>(
    pods: impl IntoIterator<Item = &'a P>,
    products: &BTreeMap<String, String>,
) -> BTreeMap<String, i32> {
    let mut out = BTreeMap::new();
    for pod in pods.into_iter().filter(facts::holds_gpus) {
        let gpus = pod_gpus(pod);
        if gpus == 0 {
            continue;
        }
        let product = facts::node_of(pod)
            .and_then(|n| products.get(n))
            .map_or("unknown", String::as_str);
        *out.entry(product.to_owned()).or_insert(0) += gpus;
    }
    out
}

/// What the tenant reconcile knows about the cluster.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct TenantWorld {
    /// Every tenant (for the hierarchy), this one included.
    pub tenants: Vec<TenantSummary>,
    /// The tenant's namespace, when it exists.
    pub namespace: Option<NamespaceState>,
    /// GPUs requested by pods in the namespace (the ResourceQuota's `status.used`).
    pub gpus_in_use: i32,
    /// GPUs of running pods per GPU product of their node.
    pub gpus_by_type: BTreeMap<String, i32>,
    /// Pods in the namespace.
    pub pods: i32,
    /// Pods, Jobs and GryviaAIJobs in the namespace (what "holds workloads" means).
    pub workloads: i32,
}

/// The part of a tenant the hierarchy needs.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TenantSummary {
    /// Name.
    pub name: String,
    /// `spec.parentTenant`.
    #[serde(default)]
    pub parent: Option<String>,
    /// `spec.quotas.concurrentGPUs`.
    #[serde(default)]
    pub gpus: Option<i32>,
    /// Creation time (earlier siblings are served first); `None` sorts first.
    #[serde(default)]
    pub created: Option<Timestamp>,
}

impl TenantSummary {
    /// Summarises a tenant object.
    pub fn of(t: &GryviaTenant) -> Self {
        TenantSummary {
            name: t.metadata.name.clone().unwrap_or_default(),
            parent: t.spec.parent_tenant.clone(),
            gpus: t.spec.quotas.as_ref().and_then(|q| q.concurrent_gpus),
            created: t.metadata.creation_timestamp.as_ref().map(|c| c.0),
        }
    }
}

/// A namespace as the reconcile sees it.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct NamespaceState {
    /// Its `gryvia.io/tenant` label.
    pub tenant_label: Option<String>,
    /// Whether it is being deleted.
    pub terminating: bool,
}

impl NamespaceState {
    /// Reads a namespace's metadata: its tenant (see [`facts::tenant_of_namespace`]) and
    /// whether it is being deleted.
    pub fn of(namespace: &ObjectMeta) -> Self {
        NamespaceState {
            tenant_label: namespace
                .labels
                .as_ref()
                .and_then(facts::tenant_of_namespace),
            terminating: namespace.deletion_timestamp.is_some(),
        }
    }
}

/// The GPU allocation of one tenant in the hierarchy.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Allocation {
    /// What the tenant asked for (`None`: no limit).
    pub asked: Option<i32>,
    /// What the family tree grants it (`None`: no limit).
    pub granted: Option<i32>,
    /// What its own namespace may use: `granted` minus what its children were granted.
    pub own: Option<i32>,
    /// Why `granted` is below `asked`, when it is.
    pub capped: Option<String>,
    /// Why the allocation is unusable (missing parent, cycle), when it is.
    pub problem: Option<(String, String)>,
}

/// Allocates GPU limits down the tenant tree.
///
/// # Guarantees
/// - A root tenant is granted what it asks for.
/// - Children of a parent are served in order of creation (then name), each granted
///   `min(asked, what the parent has left)`; the parent's own namespace keeps the rest.
///   So for every parent, `own + Σ children.granted == granted` when the parent is limited.
/// - A child without a GPU limit under a limited parent is granted nothing (it must ask).
/// - A tenant whose parent does not exist, or that is part of a cycle, is granted 0 and gets
///   a problem that its status reports.
/// - Deterministic: the result depends only on the set of summaries.
pub fn allocate(tenants: &[TenantSummary]) -> BTreeMap<String, Allocation> {
    let by_name: BTreeMap<&str, &TenantSummary> =
        tenants.iter().map(|t| (t.name.as_str(), t)).collect();
    let mut children: BTreeMap<&str, Vec<&TenantSummary>> = BTreeMap::new();
    for t in tenants {
        if let Some(p) = &t.parent {
            children.entry(p.as_str()).or_default().push(t);
        }
    }
    for list in children.values_mut() {
        list.sort_by(|a, b| (a.created, &a.name).cmp(&(b.created, &b.name)));
    }
    let mut out = BTreeMap::new();
    // Problems first: missing parents and cycles.
    for t in tenants {
        let mut seen = BTreeSet::new();
        let mut cur = t;
        seen.insert(cur.name.as_str());
        while let Some(p) = &cur.parent {
            match by_name.get(p.as_str()) {
                None => {
                    let (reason, msg) = if cur.name == t.name {
                        (
                            "ParentNotFound",
                            format!("spec.parentTenant: tenant {p:?} does not exist"),
                        )
                    } else {
                        (
                            "ParentNotFound",
                            format!(
                                "ancestor {:?} names parent {p:?}, which does not exist",
                                cur.name
                            ),
                        )
                    };
                    out.insert(t.name.clone(), problem(t, reason, msg));
                    break;
                }
                Some(next) => {
                    if !seen.insert(next.name.as_str()) {
                        out.insert(
                            t.name.clone(),
                            problem(t, conditions::REASON_INVALID_SPEC, format!("spec.parentTenant: the tenant hierarchy has a cycle through {:?}", next.name)),
                        );
                        break;
                    }
                    cur = next;
                }
            }
        }
    }
    // Then grant top-down from the roots.
    let mut roots: Vec<&TenantSummary> = tenants.iter().filter(|t| t.parent.is_none()).collect();
    roots.sort_by(|a, b| a.name.cmp(&b.name));
    let mut stack: Vec<(&TenantSummary, Option<i32>, Option<String>)> =
        roots.into_iter().map(|t| (t, t.gpus, None)).collect();
    while let Some((t, granted, capped)) = stack.pop() {
        let mut left = granted;
        for child in children
            .get(t.name.as_str())
            .map(Vec::as_slice)
            .unwrap_or_default()
        {
            if out.contains_key(&child.name) {
                continue;
            }
            let (child_granted, child_capped) = match (left, child.gpus) {
                (None, asked) => (asked, None),
                (Some(l), Some(asked)) if asked <= l => (Some(asked), None),
                (Some(l), Some(asked)) => (
                    Some(l),
                    Some(format!(
                        "asked for {asked} GPUs, parent {:?} has {l} left; granted {l}",
                        t.name
                    )),
                ),
                (Some(l), None) => (
                    Some(0),
                    Some(format!(
                        "parent {:?} limits GPUs ({l} left): set spec.quotas.concurrentGPUs to receive some",
                        t.name
                    )),
                ),
            };
            if let (Some(l), Some(g)) = (left, child_granted) {
                left = Some(l - g);
            }
            stack.push((child, child_granted, child_capped));
        }
        out.insert(
            t.name.clone(),
            Allocation {
                asked: t.gpus,
                granted,
                own: left,
                capped,
                problem: None,
            },
        );
    }
    out
}

fn problem(t: &TenantSummary, reason: &str, message: String) -> Allocation {
    Allocation {
        asked: t.gpus,
        granted: Some(0),
        own: Some(0),
        capped: None,
        problem: Some((reason.to_owned(), message)),
    }
}

/// Options of the tenant reconcile (flags of the quota-operator).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct TenantOptions {
    /// Create RoleBindings for members (`--tenant-rbac`, opt-in).
    pub tenant_rbac: bool,
}

/// The tenant reconcile.
#[derive(Clone, Copy, Debug, Default)]
pub struct TenantReconciler {
    /// Options.
    pub options: TenantOptions,
}

/// The labels of every object a tenant gets: the tenant's name and Gryvia as manager.
fn managed_labels(tenant: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (labels::TENANT.to_owned(), tenant.to_owned()),
        (
            labels::MANAGED_BY.to_owned(),
            labels::MANAGED_BY_VALUE.to_owned(),
        ),
    ])
}

/// The metadata of a tenant's object `name` in its namespace `ns`.
fn tenant_meta(tenant: &str, ns: &str, name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_owned()),
        namespace: Some(ns.to_owned()),
        labels: Some(managed_labels(tenant)),
        ..ObjectMeta::default()
    }
}

/// The tenant's namespace, labelled with the tenant (and, when a deleted tenant's policy keeps
/// it, annotated with where it came from).
pub fn tenant_namespace(tenant: &str, retained: bool) -> Namespace {
    Namespace {
        metadata: ObjectMeta {
            name: Some(namespace_of(tenant)),
            labels: Some(managed_labels(tenant)),
            annotations: retained.then(|| {
                BTreeMap::from([(labels::RETAINED_FROM_TENANT.to_owned(), tenant.to_owned())])
            }),
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    }
}

/// Prefix of the namespace labels naming a tenant's compliance regimes.
pub const COMPLIANCE_LABEL_PREFIX: &str = "compliance.gryvia.io/";

/// The live tenant's namespace: [`tenant_namespace`] with its governance as labels (the data
/// classification, and `compliance.gryvia.io/<regime>: "true"` per compliance requirement).
pub fn governed_namespace(tenant: &GryviaTenant) -> Namespace {
    let name = tenant.metadata.name.as_deref().unwrap_or_default();
    let mut ns = tenant_namespace(name, false);
    if let (Some(g), Some(l)) = (&tenant.spec.governance, ns.metadata.labels.as_mut()) {
        if let Some(c) = g.data_classification {
            l.insert(
                labels::DATA_CLASSIFICATION.to_owned(),
                c.as_str().to_owned(),
            );
        }
        for regime in &g.compliance_requirements {
            l.insert(
                format!("{COMPLIANCE_LABEL_PREFIX}{regime}"),
                "true".to_owned(),
            );
        }
    }
    ns
}

/// The tenant's ResourceQuota: the GPUs its own namespace may use (`own`) and storage per
/// StorageClass; `None` when there is nothing to limit.
pub fn tenant_quota(tenant: &GryviaTenant, own: Option<i32>) -> Option<ResourceQuota> {
    let name = tenant.metadata.name.as_deref().unwrap_or_default();
    let mut hard = BTreeMap::new();
    if let Some(own) = own {
        hard.insert(GPU_REQUESTS.to_owned(), Quantity(own.max(0).to_string()));
    }
    for (class, q) in &tenant.spec.storage_quotas {
        hard.insert(
            format!("{class}.storageclass.storage.k8s.io/requests.storage"),
            q.clone(),
        );
    }
    (!hard.is_empty()).then(|| ResourceQuota {
        metadata: tenant_meta(name, &namespace_of(name), TENANT_QUOTA),
        spec: Some(ResourceQuotaSpec {
            hard: Some(hard),
            ..ResourceQuotaSpec::default()
        }),
        ..ResourceQuota::default()
    })
}

/// The tenant's LimitRange: requests for containers that set none, GPUs per container capped
/// at what the namespace may use. With a cap, a container that asks for no GPU gets none by
/// default: the API server defaults a LimitRange's missing `default` to its `max`, which would
/// give every such container the namespace's whole GPU quota (and have it rejected by it).
pub fn tenant_limits(tenant: &str, own: Option<i32>) -> LimitRange {
    let quantities = |pairs: &[(&str, String)]| {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), Quantity(v.clone())))
            .collect::<BTreeMap<_, _>>()
    };
    LimitRange {
        metadata: tenant_meta(tenant, &namespace_of(tenant), TENANT_LIMITS),
        spec: Some(LimitRangeSpec {
            limits: vec![LimitRangeItem {
                type_: "Container".to_owned(),
                default_request: Some(quantities(&[
                    ("cpu", "100m".to_owned()),
                    ("memory", "256Mi".to_owned()),
                ])),
                default: own.map(|_| quantities(&[(labels::NVIDIA_GPU_RESOURCE, "0".to_owned())])),
                max: own
                    .map(|o| quantities(&[(labels::NVIDIA_GPU_RESOURCE, o.max(0).to_string())])),
                ..LimitRangeItem::default()
            }],
        }),
    }
}

/// A namespace selector on the tenant label.
fn tenant_selector(operator: &str, values: Option<Vec<String>>) -> NetworkPolicyPeer {
    NetworkPolicyPeer {
        namespace_selector: Some(LabelSelector {
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: labels::TENANT.to_owned(),
                operator: operator.to_owned(),
                values,
            }]),
            ..LabelSelector::default()
        }),
        ..NetworkPolicyPeer::default()
    }
}

/// The NetworkPolicy of an isolated tenant: ingress only from itself, the tenants it allows
/// and platform namespaces (those of no tenant); `None` when it is not isolated. A
/// confidential or restricted tenant (`governance.dataClassification`) is always isolated, and
/// a restricted one admits no other tenant whatever `networkPolicy.allowedTenants` says.
pub fn tenant_network_policy(tenant: &GryviaTenant) -> Option<NetworkPolicy> {
    let class = tenant
        .spec
        .governance
        .as_ref()
        .and_then(|g| g.data_classification);
    let np = tenant.spec.network_policy.clone().unwrap_or_default();
    if !np.isolated && !class.is_some_and(DataClassification::isolating) {
        return None;
    }
    let name = tenant.metadata.name.as_deref().unwrap_or_default();
    let mut allowed: Vec<String> = vec![name.to_owned()];
    if class != Some(DataClassification::Restricted) {
        allowed.extend(np.allowed_tenants.iter().cloned());
    }
    allowed.sort_unstable();
    allowed.dedup();
    Some(NetworkPolicy {
        metadata: tenant_meta(name, &namespace_of(name), TENANT_NETPOL),
        spec: Some(NetworkPolicySpec {
            pod_selector: Some(LabelSelector::default()),
            policy_types: Some(vec!["Ingress".to_owned()]),
            ingress: Some(vec![NetworkPolicyIngressRule {
                from: Some(vec![
                    tenant_selector("In", Some(allowed)),
                    tenant_selector("DoesNotExist", None),
                ]),
                ..NetworkPolicyIngressRule::default()
            }]),
            ..NetworkPolicySpec::default()
        }),
    })
}

/// The ClusterRole each member role is bound to.
pub const MEMBER_ROLES: [(MemberRole, &str); 3] = [
    (MemberRole::Admin, "admin"),
    (MemberRole::Member, "edit"),
    (MemberRole::Viewer, "view"),
];

/// The name of the RoleBinding of `cluster_role` in a tenant's namespace.
pub fn role_binding_name(cluster_role: &str) -> String {
    format!("gryvia-tenant-{cluster_role}")
}

/// The RoleBinding of the members with `role` to `cluster_role` (users, then groups, each
/// sorted; a member of kind `Group` is a Group subject); `None` when
/// the role has no member.
pub fn tenant_role_binding(
    tenant: &GryviaTenant,
    role: MemberRole,
    cluster_role: &str,
) -> Option<RoleBinding> {
    let name = tenant.metadata.name.as_deref().unwrap_or_default();
    let mut users: Vec<(MemberKind, &str)> = tenant
        .spec
        .members
        .iter()
        .filter(|m| m.role == role)
        .map(|m| (m.kind, m.username.as_str()))
        .collect();
    users.sort_unstable();
    (!users.is_empty()).then(|| RoleBinding {
        metadata: tenant_meta(name, &namespace_of(name), &role_binding_name(cluster_role)),
        role_ref: RoleRef {
            api_group: RBAC_GROUP.to_owned(),
            kind: "ClusterRole".to_owned(),
            name: cluster_role.to_owned(),
        },
        subjects: Some(
            users
                .into_iter()
                .map(|(kind, u)| Subject {
                    kind: match kind {
                        MemberKind::User => "User",
                        MemberKind::Group => "Group",
                    }
                    .to_owned(),
                    api_group: Some(RBAC_GROUP.to_owned()),
                    name: u.to_owned(),
                    namespace: None,
                })
                .collect(),
        ),
    })
}

const RBAC_GROUP: &str = "rbac.authorization.k8s.io";

/// Applies `object`, or deletes the object of that identity when it is `None`.
fn apply_or_delete<S, K>(plan: &mut Plan<S>, object: Option<K>, gone: ObjectRef)
where
    K: k8s_openapi::Resource + k8s_openapi::Metadata<Ty = ObjectMeta> + serde::Serialize,
{
    match object {
        Some(o) => {
            plan.apply_built(Child::from_resource(&o));
        }
        None => plan.delete.push(gone),
    }
}

impl TenantReconciler {
    /// The children of a tenant: its namespace (not owned), quota, limits, network policy
    /// and, opt-in, role bindings; the ones it should not have are deleted.
    fn children(
        &self,
        plan: &mut Plan<GryviaTenantStatus>,
        tenant: &GryviaTenant,
        own: Option<i32>,
    ) {
        let name = tenant.metadata.name.as_deref().unwrap_or_default();
        let ns = namespace_of(name);
        plan.apply_built(Child::from_resource(&governed_namespace(tenant)).map(Child::unowned));
        apply_or_delete(
            plan,
            tenant_quota(tenant, own),
            ObjectRef::namespaced("v1", "ResourceQuota", &ns, TENANT_QUOTA),
        );
        plan.apply_built(Child::from_resource(&tenant_limits(name, own)));
        apply_or_delete(
            plan,
            tenant_network_policy(tenant),
            ObjectRef::namespaced("networking.k8s.io/v1", "NetworkPolicy", &ns, TENANT_NETPOL),
        );
        for (role, cluster_role) in MEMBER_ROLES {
            apply_or_delete(
                plan,
                tenant_role_binding(tenant, role, cluster_role)
                    .filter(|_| self.options.tenant_rbac),
                ObjectRef::namespaced(
                    "rbac.authorization.k8s.io/v1",
                    "RoleBinding",
                    &ns,
                    &role_binding_name(cluster_role),
                ),
            );
        }
    }
}

/// Why a tenant is not set up: a name its namespace cannot have, or a namespace of that
/// name that belongs to someone else (reason and message).
fn refusal(name: &str, world: &TenantWorld) -> Option<(&'static str, String)> {
    if let Some(msg) = invalid_name(name) {
        return Some((conditions::REASON_INVALID_SPEC, msg));
    }
    let state = world.namespace.as_ref()?;
    (state.tenant_label.as_deref() != Some(name)).then(|| {
        (
            "NamespaceConflict",
            format!(
                "namespace {} exists and does not belong to this tenant (label {}={:?}); rename the tenant or relabel the namespace",
                namespace_of(name),
                labels::TENANT,
                state.tenant_label.as_deref().unwrap_or("")
            ),
        )
    })
}

/// The tenant's allocation in the tree, or what it asks for when the tree does not list it.
fn allocation_of(tenant: &GryviaTenant, world: &TenantWorld) -> Allocation {
    let name = tenant.metadata.name.as_deref().unwrap_or_default();
    let asked = tenant.spec.quotas.as_ref().and_then(|q| q.concurrent_gpus);
    allocate(&world.tenants).remove(name).unwrap_or(Allocation {
        asked,
        granted: asked,
        own: asked,
        capped: None,
        problem: None,
    })
}

/// The QuotaCapped condition (with a Warning Event when it turns on); left out while the
/// tenant was never capped.
fn record_capped(
    plan: &mut Plan<GryviaTenantStatus>,
    status: &mut GryviaTenantStatus,
    was_capped: bool,
    capped: Option<&String>,
    generation: Option<i64>,
    now: Timestamp,
) {
    match capped {
        Some(msg) => {
            if !was_capped {
                plan.event(EventType::Warning, "QuotaCapped", msg.clone());
            }
            set(
                status,
                QUOTA_CAPPED,
                Status::True,
                "ParentLimit",
                msg.clone(),
                generation,
                now,
            );
        }
        None => {
            if conditions::find(&status.conditions, QUOTA_CAPPED).is_some() {
                set(
                    status,
                    QUOTA_CAPPED,
                    Status::False,
                    "WithinParentLimit",
                    "",
                    generation,
                    now,
                );
            }
        }
    }
}

/// The products used beyond their `gpusPerType` limit, one line each.
pub fn over_type_limits(
    limits: &BTreeMap<String, i32>,
    used: &BTreeMap<String, i32>,
) -> Vec<String> {
    limits
        .iter()
        .filter_map(|(product, limit)| {
            let n = used.get(product).copied().unwrap_or(0);
            (n > *limit).then(|| format!("{product}: {n} in use, limit {limit}"))
        })
        .collect()
}

/// The GpuTypeLimitExceeded condition (with a Warning Event when it turns on); none without
/// per-type limits.
fn record_type_limits(
    plan: &mut Plan<GryviaTenantStatus>,
    status: &mut GryviaTenantStatus,
    was_exceeded: bool,
    tenant: &GryviaTenant,
    world: &TenantWorld,
    now: Timestamp,
) {
    let generation = tenant.metadata.generation;
    let Some(limits) = tenant
        .spec
        .quotas
        .as_ref()
        .map(|q| &q.gpus_per_type)
        .filter(|m| !m.is_empty())
    else {
        status.conditions.retain(|c| c.type_ != TYPE_LIMIT_EXCEEDED);
        return;
    };
    let over = over_type_limits(limits, &world.gpus_by_type);
    if over.is_empty() {
        set(
            status,
            TYPE_LIMIT_EXCEEDED,
            Status::False,
            "WithinGpuTypeLimits",
            "",
            generation,
            now,
        );
        return;
    }
    let msg = format!("spec.quotas.gpusPerType exceeded: {}", over.join("; "));
    if !was_exceeded {
        plan.event(EventType::Warning, "GpuTypeLimitExceeded", msg.clone());
    }
    set(
        status,
        TYPE_LIMIT_EXCEEDED,
        Status::True,
        "OverGpuTypeLimit",
        msg,
        generation,
        now,
    );
}

/// The Ready condition: the allocation's problem, or the namespace ready with its usage.
fn record_ready(
    status: &mut GryviaTenantStatus,
    alloc: &Allocation,
    ns: &str,
    gpus_in_use: i32,
    generation: Option<i64>,
    now: Timestamp,
) {
    let (s, reason, msg) = match &alloc.problem {
        Some((reason, msg)) => (Status::False, reason.as_str(), msg.clone()),
        None => (
            Status::True,
            conditions::REASON_RECONCILED,
            match alloc.own {
                Some(l) => format!("namespace {ns} ready; {gpus_in_use} of {l} GPUs in use"),
                None => format!("namespace {ns} ready; {gpus_in_use} GPUs in use, no GPU limit"),
            },
        ),
    };
    set(status, conditions::READY, s, reason, msg, generation, now);
}

/// GPU utilisation in percent of the namespace's limit (none without a positive limit).
pub fn utilisation_percent(in_use: i32, limit: Option<i32>) -> Option<i32> {
    match limit {
        Some(l) if l > 0 => i32::try_from((i64::from(in_use) * 100) / i64::from(l)).ok(),
        _ => None,
    }
}

impl crate::Reconcile for TenantReconciler {
    type Object = GryviaTenant;
    type World = TenantWorld;
    type Status = GryviaTenantStatus;

    fn name(&self) -> &'static str {
        "gryvia-tenants"
    }

    fn finalizer(&self) -> Option<&'static str> {
        Some(labels::FINALIZER)
    }

    fn reconcile(
        &self,
        tenant: &GryviaTenant,
        world: &TenantWorld,
        now: Timestamp,
    ) -> Plan<GryviaTenantStatus> {
        let mut plan = Plan::new();
        plan.requeue(RESYNC);
        let name = tenant.metadata.name.clone().unwrap_or_default();
        let generation = tenant.metadata.generation;
        let current = tenant.status.clone().unwrap_or_default();
        let mut status = current.clone();
        status.observed_generation = generation;
        if let Some((reason, msg)) = refusal(&name, world) {
            set(
                &mut status,
                conditions::READY,
                Status::False,
                reason,
                msg,
                generation,
                now,
            );
            plan.set_status_if_changed(tenant.status.as_ref(), status);
            return plan;
        }
        let ns = namespace_of(&name);
        let alloc = allocation_of(tenant, world);
        self.children(&mut plan, tenant, alloc.own);
        status.namespace = Some(ns.clone());
        status.gpus_in_use = world.gpus_in_use;
        status.pods = world.pods;
        status.gpu_limit = alloc.own;
        status.gpu_utilization_percent = utilisation_percent(world.gpus_in_use, alloc.own);
        let was_capped = conditions::is_true(&current.conditions, QUOTA_CAPPED);
        record_capped(
            &mut plan,
            &mut status,
            was_capped,
            alloc.capped.as_ref(),
            generation,
            now,
        );
        status.gpus_in_use_by_type = world.gpus_by_type.clone();
        let was_exceeded = conditions::is_true(&current.conditions, TYPE_LIMIT_EXCEEDED);
        record_type_limits(&mut plan, &mut status, was_exceeded, tenant, world, now);
        record_ready(&mut status, &alloc, &ns, world.gpus_in_use, generation, now);
        plan.set_status_if_changed(tenant.status.as_ref(), status);
        plan
    }

    fn cleanup(
        &self,
        tenant: &GryviaTenant,
        world: &TenantWorld,
        now: Timestamp,
    ) -> Plan<GryviaTenantStatus> {
        let mut plan = Plan::new();
        let name = tenant.metadata.name.clone().unwrap_or_default();
        let ns = namespace_of(&name);
        let Some(state) = &world.namespace else {
            return plan;
        };
        if state.tenant_label.as_deref() != Some(name.as_str()) || state.terminating {
            return plan;
        }
        let retain = tenant.spec.deletion_policy == DeletionPolicy::Retain && world.workloads > 0;
        if retain {
            let msg = format!(
                "namespace {ns} kept: it still holds {} workload(s) and spec.deletionPolicy is Retain",
                world.workloads
            );
            plan.event(EventType::Warning, "NamespaceRetained", msg.clone());
            let mut status = tenant.status.clone().unwrap_or_default();
            set(
                &mut status,
                conditions::READY,
                Status::False,
                "NamespaceRetained",
                msg,
                tenant.metadata.generation,
                now,
            );
            plan.set_status_if_changed(tenant.status.as_ref(), status);
            // The namespace stays; it is marked so people can tell where it came from.
            plan.apply_built(
                Child::from_resource(&tenant_namespace(&name, true)).map(Child::unowned),
            );
        } else {
            plan.event(
                EventType::Normal,
                "NamespaceDeleted",
                format!(
                    "deleting namespace {ns} ({} workload(s), policy {:?})",
                    world.workloads, tenant.spec.deletion_policy
                ),
            );
            plan.delete.push(ObjectRef::cluster("v1", "Namespace", &ns));
        }
        plan
    }
}

fn invalid_name(name: &str) -> Option<String> {
    if name.len() > MAX_TENANT_NAME {
        return Some(format!(
            "metadata.name: {} characters; a tenant name may have at most {MAX_TENANT_NAME} (its namespace is tenant-<name>)",
            name.len()
        ));
    }
    if name.contains('.') {
        return Some(
            "metadata.name: a tenant name must not contain dots (its namespace is tenant-<name>)"
                .to_owned(),
        );
    }
    None
}

fn set(
    status_conditions: &mut impl HasConditions,
    type_: &str,
    s: Status,
    reason: &str,
    msg: impl Into<String>,
    generation: Option<i64>,
    now: Timestamp,
) {
    conditions::set(
        status_conditions.conditions_mut(),
        conditions::new(type_, s, reason, msg, generation, now),
    );
}

/// Statuses with a condition list.
pub trait HasConditions {
    /// The conditions.
    fn conditions_mut(
        &mut self,
    ) -> &mut Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition>;
}

impl HasConditions for GryviaTenantStatus {
    fn conditions_mut(
        &mut self,
    ) -> &mut Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
        &mut self.conditions
    }
}

impl HasConditions for GryviaQuotaStatus {
    fn conditions_mut(
        &mut self,
    ) -> &mut Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
        &mut self.conditions
    }
}

// ---------------------------------------------------------------------------------------------
// GryviaQuota
// ---------------------------------------------------------------------------------------------

/// What the quota reconcile knows.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct QuotaWorld {
    /// Namespaces that exist (of those the quota names), sorted.
    pub existing_namespaces: BTreeSet<String>,
    /// Namespaces holding a ResourceQuota of this GryviaQuota.
    pub managed_in: BTreeSet<String>,
    /// GPUs requested per namespace (from the ResourceQuotas' status).
    pub gpus_used: BTreeMap<String, i32>,
}

/// Name of the ResourceQuota a GryviaQuota makes in each namespace.
pub fn quota_object_name(quota: &str) -> String {
    format!("gryvia-quota-{quota}")
}

/// The `hard` limits of a GryviaQuota as ResourceQuota resources.
pub fn quota_hard(quota: &GryviaQuota) -> BTreeMap<String, Quantity> {
    let h = &quota.spec.hard;
    let mut hard = BTreeMap::new();
    if let Some(g) = h.gpus {
        hard.insert(GPU_REQUESTS.to_owned(), Quantity(g.to_string()));
    }
    if let Some(c) = &h.cpu {
        hard.insert("requests.cpu".to_owned(), c.clone());
    }
    if let Some(m) = &h.memory {
        hard.insert("requests.memory".to_owned(), m.clone());
    }
    if let Some(s) = &h.storage {
        hard.insert("requests.storage".to_owned(), s.clone());
    }
    if let Some(p) = h.pods {
        hard.insert("pods".to_owned(), Quantity(p.to_string()));
    }
    hard
}

/// The ResourceQuota a GryviaQuota makes in `namespace`.
pub fn quota_object(quota: &GryviaQuota, namespace: &str) -> ResourceQuota {
    let name = quota.metadata.name.clone().unwrap_or_default();
    ResourceQuota {
        metadata: ObjectMeta {
            name: Some(quota_object_name(&name)),
            namespace: Some(namespace.to_owned()),
            labels: Some(BTreeMap::from([
                (labels::QUOTA.to_owned(), name),
                (
                    labels::MANAGED_BY.to_owned(),
                    labels::MANAGED_BY_VALUE.to_owned(),
                ),
            ])),
            ..ObjectMeta::default()
        },
        spec: Some(ResourceQuotaSpec {
            hard: Some(quota_hard(quota)),
            ..ResourceQuotaSpec::default()
        }),
        ..ResourceQuota::default()
    }
}

/// How soon a GryviaQuota that lists a namespace not there yet is looked at again.
pub const MISSING_NAMESPACE_RECHECK: Duration = Duration::from_secs(5);

/// The GryviaQuota reconcile.
#[derive(Clone, Copy, Debug, Default)]
pub struct QuotaReconciler;

impl crate::Reconcile for QuotaReconciler {
    type Object = GryviaQuota;
    type World = QuotaWorld;
    type Status = GryviaQuotaStatus;

    fn name(&self) -> &'static str {
        "gryvia-quotas"
    }

    fn reconcile(
        &self,
        quota: &GryviaQuota,
        world: &QuotaWorld,
        now: Timestamp,
    ) -> Plan<GryviaQuotaStatus> {
        let mut plan = Plan::new();
        plan.requeue(RESYNC);
        let name = quota.metadata.name.clone().unwrap_or_default();
        let object = quota_object_name(&name);
        let generation = quota.metadata.generation;
        let wanted: BTreeSet<&str> = quota.spec.namespaces.iter().map(String::as_str).collect();
        let mut missing = Vec::new();
        for ns in &wanted {
            if world.existing_namespaces.contains(*ns) {
                plan.apply_built(Child::from_resource(&quota_object(quota, ns)));
            } else {
                missing.push(*ns);
            }
        }
        for ns in &world.managed_in {
            if !wanted.contains(ns.as_str()) {
                plan.delete
                    .push(ObjectRef::namespaced("v1", "ResourceQuota", ns, &object));
            }
        }
        let mut status = quota.status.clone().unwrap_or_default();
        status.observed_generation = generation;
        status.gpus_used = world
            .gpus_used
            .iter()
            .filter(|(ns, _)| wanted.contains(ns.as_str()))
            .map(|(k, v)| (k.clone(), *v))
            .collect();
        if missing.is_empty() {
            set(
                &mut status,
                conditions::READY,
                Status::True,
                conditions::REASON_RECONCILED,
                format!("quota applied in {} namespace(s)", wanted.len()),
                generation,
                now,
            );
        } else {
            // A namespace's arrival re-reconciles the quota through the namespace watch; should
            // that event come before the quota is in the cache, this look again catches it.
            plan.requeue(MISSING_NAMESPACE_RECHECK);
            set(
                &mut status,
                conditions::READY,
                Status::False,
                "NamespaceNotFound",
                format!(
                    "spec.namespaces: {} do(es) not exist yet; applied in the others",
                    missing.join(", ")
                ),
                generation,
                now,
            );
        }
        plan.set_status_if_changed(quota.status.as_ref(), status);
        plan
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gryvia_types::testing::tenant;
    use gryvia_types::{TenantMember, TenantNetworkPolicy};
    use k8s_openapi::api::core::v1::Pod;

    fn now() -> Timestamp {
        Timestamp::from_second(1_800_000_000).unwrap()
    }

    fn json<K: serde::Serialize>(k: &K) -> serde_json::Value {
        serde_json::to_value(k).unwrap()
    }

    fn member(name: &str, role: MemberRole) -> TenantMember {
        TenantMember {
            kind: MemberKind::User,
            username: name.to_owned(),
            role,
        }
    }

    #[test]
    fn a_retained_namespace_says_which_tenant_left_it() {
        let ns = tenant_namespace("ml", true);
        assert_eq!(ns.metadata.name.as_deref(), Some("tenant-ml"));
        assert_eq!(
            ns.metadata.annotations.unwrap()[labels::RETAINED_FROM_TENANT],
            "ml"
        );
        assert!(tenant_namespace("ml", false).metadata.annotations.is_none());
    }

    #[test]
    fn the_quota_holds_the_own_gpus_and_storage_per_class_or_is_none() {
        let mut t = tenant("ml", 4);
        t.spec
            .storage_quotas
            .insert("fast".into(), Quantity("1Ti".into()));
        let hard = tenant_quota(&t, Some(-1))
            .unwrap()
            .spec
            .unwrap()
            .hard
            .unwrap();
        assert_eq!(hard[GPU_REQUESTS], Quantity("0".into()), "never negative");
        assert_eq!(
            hard["fast.storageclass.storage.k8s.io/requests.storage"],
            Quantity("1Ti".into())
        );
        t.spec.storage_quotas.clear();
        assert!(tenant_quota(&t, None).is_none());
    }

    #[test]
    fn the_limit_range_caps_gpus_per_container_only_with_a_limit() {
        let item = |own| tenant_limits("ml", own).spec.unwrap().limits.remove(0);
        assert_eq!(
            item(Some(3)).max.unwrap()[labels::NVIDIA_GPU_RESOURCE],
            Quantity("3".into())
        );
        // Without a default the API server would take the max as every container's GPUs.
        assert_eq!(
            item(Some(3)).default.unwrap()[labels::NVIDIA_GPU_RESOURCE],
            Quantity("0".into())
        );
        assert!(item(None).max.is_none());
        assert!(item(None).default.is_none());
        assert_eq!(item(None).type_, "Container");
    }

    #[test]
    fn a_tenant_selector_names_the_tenant_label() {
        assert_eq!(
            json(&tenant_selector("DoesNotExist", None)),
            serde_json::json!({"namespaceSelector": {"matchExpressions": [
                {"key": labels::TENANT, "operator": "DoesNotExist"}]}})
        );
    }

    #[test]
    fn only_an_isolated_tenant_gets_a_network_policy_with_itself_and_its_allowed_tenants() {
        let mut t = tenant("ml", 1);
        assert!(tenant_network_policy(&t).is_none());
        t.spec.network_policy = Some(TenantNetworkPolicy {
            isolated: true,
            allowed_tenants: vec!["cv".into(), "ml".into()],
        });
        let np = json(&tenant_network_policy(&t).unwrap());
        assert_eq!(
            np["spec"]["ingress"][0]["from"][0]["namespaceSelector"]["matchExpressions"][0]["values"],
            serde_json::json!(["cv", "ml"])
        );
    }

    fn governed(t: &mut GryviaTenant, class: DataClassification, regimes: &[&str]) {
        t.spec.governance = Some(gryvia_types::TenantGovernance {
            data_classification: Some(class),
            compliance_requirements: regimes.iter().map(|r| (*r).to_owned()).collect(),
        });
    }

    fn allowed_in(np: &NetworkPolicy) -> serde_json::Value {
        json(np)["spec"]["ingress"][0]["from"][0]["namespaceSelector"]["matchExpressions"][0]
            ["values"]
            .clone()
    }

    #[test]
    fn confidential_data_isolates_the_namespace_and_restricted_data_admits_no_other_tenant() {
        let mut t = tenant("ml", 1);
        t.spec.network_policy = Some(TenantNetworkPolicy {
            isolated: false,
            allowed_tenants: vec!["cv".into()],
        });
        governed(&mut t, DataClassification::Internal, &[]);
        assert!(
            tenant_network_policy(&t).is_none(),
            "internal data: as asked"
        );
        governed(&mut t, DataClassification::Confidential, &[]);
        let np = tenant_network_policy(&t).expect("confidential data is always isolated");
        assert_eq!(allowed_in(&np), serde_json::json!(["cv", "ml"]));
        governed(&mut t, DataClassification::Restricted, &[]);
        let np = tenant_network_policy(&t).expect("restricted data is always isolated");
        assert_eq!(allowed_in(&np), serde_json::json!(["ml"]));
    }

    #[test]
    fn the_namespace_carries_the_classification_and_one_label_per_compliance_regime() {
        let mut t = tenant("ml", 1);
        assert_eq!(governed_namespace(&t), tenant_namespace("ml", false));
        governed(&mut t, DataClassification::Confidential, &["SOC2", "HIPAA"]);
        let l = governed_namespace(&t).metadata.labels.unwrap();
        assert_eq!(l[labels::DATA_CLASSIFICATION], "confidential");
        assert_eq!(l["compliance.gryvia.io/SOC2"], "true");
        assert_eq!(l["compliance.gryvia.io/HIPAA"], "true");
        assert_eq!(l[labels::TENANT], "ml");
    }

    #[test]
    fn role_bindings_are_named_after_their_cluster_role() {
        assert_eq!(role_binding_name("view"), "gryvia-tenant-view");
    }

    #[test]
    fn a_role_binding_lists_the_roles_members_sorted() {
        let mut t = tenant("ml", 1);
        t.spec.members = vec![
            member("bob", MemberRole::Member),
            member("al", MemberRole::Member),
            member("root", MemberRole::Admin),
        ];
        let rb = tenant_role_binding(&t, MemberRole::Member, "edit").unwrap();
        let users: Vec<String> = rb.subjects.unwrap().into_iter().map(|s| s.name).collect();
        assert_eq!(users, vec!["al", "bob"]);
        assert_eq!(rb.role_ref.name, "edit");
        assert!(tenant_role_binding(&t, MemberRole::Viewer, "view").is_none());
    }

    #[test]
    fn an_absent_object_is_deleted() {
        let mut plan: Plan<()> = Plan::new();
        let gone = ObjectRef::namespaced("v1", "LimitRange", "ns", "x");
        apply_or_delete::<(), LimitRange>(&mut plan, None, gone.clone());
        apply_or_delete(&mut plan, Some(tenant_limits("ml", None)), gone.clone());
        assert_eq!(plan.delete, vec![gone]);
        assert_eq!(plan.apply.len(), 1);
    }

    #[test]
    fn the_children_are_applied_or_deleted_by_the_options() {
        let t = tenant("ml", 2);
        let mut plan = Plan::new();
        TenantReconciler::default().children(&mut plan, &t, Some(2));
        let kinds: Vec<&str> = plan
            .apply
            .iter()
            .map(|c| c.object_ref.kind.as_str())
            .collect();
        assert_eq!(kinds, vec!["Namespace", "ResourceQuota", "LimitRange"]);
        assert!(!plan.apply[0].owned, "the namespace outlives the tenant");
        assert_eq!(
            plan.delete.len(),
            4,
            "network policy and three role bindings"
        );
    }

    #[test]
    fn a_bad_name_or_a_foreign_namespace_refuses_the_tenant() {
        let world = TenantWorld::default();
        assert_eq!(refusal("ml", &world), None);
        assert_eq!(
            refusal("a.b", &world).map(|r| r.0),
            Some(conditions::REASON_INVALID_SPEC)
        );
        let foreign = TenantWorld {
            namespace: Some(NamespaceState {
                tenant_label: Some("other".into()),
                terminating: false,
            }),
            ..TenantWorld::default()
        };
        assert_eq!(
            refusal("ml", &foreign).map(|r| r.0),
            Some("NamespaceConflict")
        );
    }

    #[test]
    fn a_tenant_the_tree_does_not_list_gets_what_it_asks() {
        let t = tenant("ml", 5);
        let alloc = allocation_of(&t, &TenantWorld::default());
        assert_eq!(
            (alloc.asked, alloc.granted, alloc.own),
            (Some(5), Some(5), Some(5))
        );
    }

    #[test]
    fn capping_raises_an_event_once_and_uncapping_clears_the_condition() {
        let mut plan = Plan::new();
        let mut status = GryviaTenantStatus::default();
        let msg = "capped".to_owned();
        record_capped(&mut plan, &mut status, false, Some(&msg), None, now());
        assert_eq!(plan.events.len(), 1);
        assert!(conditions::is_true(&status.conditions, QUOTA_CAPPED));
        record_capped(&mut plan, &mut status, true, Some(&msg), None, now());
        assert_eq!(plan.events.len(), 1);
        record_capped(&mut plan, &mut status, true, None, None, now());
        assert!(!conditions::is_true(&status.conditions, QUOTA_CAPPED));
    }

    #[test]
    fn products_over_their_limit_are_listed() {
        let limits = BTreeMap::from([("H100".to_owned(), 2), ("A100".to_owned(), 4)]);
        let used = BTreeMap::from([("H100".to_owned(), 3), ("A100".to_owned(), 4)]);
        assert_eq!(
            over_type_limits(&limits, &used),
            vec!["H100: 3 in use, limit 2"]
        );
    }

    #[test]
    fn the_type_limit_condition_follows_usage_and_goes_without_limits() {
        let mut t = tenant("ml", 8);
        if let Some(q) = t.spec.quotas.as_mut() {
            q.gpus_per_type.insert("H100".into(), 1);
        }
        let world = TenantWorld {
            gpus_by_type: BTreeMap::from([("H100".to_owned(), 2)]),
            ..TenantWorld::default()
        };
        let mut plan = Plan::new();
        let mut status = GryviaTenantStatus::default();
        record_type_limits(&mut plan, &mut status, false, &t, &world, now());
        assert!(conditions::is_true(&status.conditions, TYPE_LIMIT_EXCEEDED));
        assert_eq!(plan.events.len(), 1);
        record_type_limits(
            &mut plan,
            &mut status,
            false,
            &tenant("ml", 8),
            &world,
            now(),
        );
        assert!(conditions::find(&status.conditions, TYPE_LIMIT_EXCEEDED).is_none());
    }

    #[test]
    fn ready_reports_the_allocation_problem_or_the_usage() {
        let mut status = GryviaTenantStatus::default();
        let mut alloc = Allocation {
            asked: Some(4),
            granted: Some(4),
            own: Some(4),
            capped: None,
            problem: None,
        };
        record_ready(&mut status, &alloc, "tenant-ml", 1, None, now());
        assert_eq!(
            conditions::find(&status.conditions, conditions::READY)
                .unwrap()
                .message,
            "namespace tenant-ml ready; 1 of 4 GPUs in use"
        );
        alloc.problem = Some(("ParentNotFound".into(), "no parent".into()));
        record_ready(&mut status, &alloc, "tenant-ml", 1, None, now());
        assert!(!conditions::is_true(&status.conditions, conditions::READY));
    }

    #[test]
    fn utilisation_is_a_share_of_a_positive_limit() {
        assert_eq!(utilisation_percent(3, Some(4)), Some(75));
        assert_eq!(utilisation_percent(3, Some(0)), None);
        assert_eq!(utilisation_percent(3, None), None);
    }

    fn gryvia_quota() -> GryviaQuota {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaQuota",
            "metadata": {"name": "team"},
            "spec": {"namespaces": ["a"], "hard": {"gpus": 4, "pods": 10}}
        }))
        .unwrap()
    }

    #[test]
    fn a_quotas_hard_limits_become_resource_quota_resources() {
        let hard = quota_hard(&gryvia_quota());
        assert_eq!(hard[GPU_REQUESTS], Quantity("4".into()));
        assert_eq!(hard["pods"], Quantity("10".into()));
        assert_eq!(hard.len(), 2);
    }

    #[test]
    fn a_quotas_resource_quota_is_labelled_with_the_quota() {
        let rq = quota_object(&gryvia_quota(), "a");
        assert_eq!(rq.metadata.name.as_deref(), Some("gryvia-quota-team"));
        assert_eq!(rq.metadata.labels.unwrap()[labels::QUOTA], "team");
    }

    fn gpu_pod(node: Option<&str>, gpus: i32, phase: &str) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p"},
            "spec": {"nodeName": node, "containers": [
                {"name": "c", "resources": {"limits": {"nvidia.com/gpu": gpus.to_string()}}}]},
            "status": {"phase": phase}
        }))
        .unwrap()
    }

    #[test]
    fn node_products_list_labelled_nodes() {
        let nodes: Vec<Node> = serde_json::from_value(serde_json::json!([
            {"metadata": {"name": "a", "labels": {labels::NVIDIA_GPU_PRODUCT: "H100"}}},
            {"metadata": {"name": "b"}}
        ]))
        .unwrap();
        assert_eq!(
            node_products(&nodes),
            BTreeMap::from([("a".to_owned(), "H100".to_owned())])
        );
    }

    #[test]
    fn gpus_are_counted_per_product_of_the_node_holding_them() {
        let products = BTreeMap::from([("a".to_owned(), "H100".to_owned())]);
        let pods = vec![
            gpu_pod(Some("a"), 2, "Running"),
            gpu_pod(Some("a"), 1, "Pending"),
            gpu_pod(Some("a"), 4, "Succeeded"),
            gpu_pod(Some("b"), 1, "Running"),
            gpu_pod(Some("b"), 0, "Running"),
            gpu_pod(None, 8, "Pending"),
        ];
        assert_eq!(
            gpus_by_product(&pods, &products),
            BTreeMap::from([("H100".to_owned(), 3), ("unknown".to_owned(), 1)])
        );
    }

    #[test]
    fn a_namespace_reads_its_tenant_and_deletion() {
        let ns: Namespace = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "tenant-ml", "labels": {labels::TENANT: "ml"},
                         "deletionTimestamp": "2026-01-01T00:00:00Z"}
        }))
        .unwrap();
        assert_eq!(
            NamespaceState::of(&ns.metadata),
            NamespaceState {
                tenant_label: Some("ml".into()),
                terminating: true
            }
        );
        assert_eq!(
            NamespaceState::of(&ObjectMeta::default()),
            NamespaceState::default()
        );
    }
}
