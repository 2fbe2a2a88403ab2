//! Tenancy: what a GryviaTenant or GryviaQuota should make exist, as a pure function.
//!
//! A tenant gets the namespace `tenant-<name>` (labelled, never owned: the deletion policy
//! decides its fate), a ResourceQuota (`requests.nvidia.com/gpu` and per-StorageClass storage),
//! a LimitRange with defaults, a NetworkPolicy when `networkPolicy.isolated`, and, opt-in,
//! RoleBindings for its members. Beyond the features guide, `parentTenant` is enforced: GPU
//! limits are allocated down the tree, so the GPUs of a family never exceed the root's limit.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use gryvia_types::conditions::{self, Status};
use gryvia_types::labels;
use gryvia_types::{
    DeletionPolicy, GryviaQuota, GryviaQuotaStatus, GryviaTenant, GryviaTenantStatus, MemberRole,
};
use serde_json::{Value, json};

use crate::{Child, EventType, ObjectRef, Plan, Timestamp};

/// Name of the ResourceQuota a tenant gets in its namespace.
pub const TENANT_QUOTA: &str = "gryvia-tenant";
/// Name of the LimitRange a tenant gets.
pub const TENANT_LIMITS: &str = "gryvia-defaults";
/// Name of the NetworkPolicy of an isolated tenant.
pub const TENANT_NETPOL: &str = "gryvia-tenant-isolation";
/// The quota resource for GPUs.
pub const GPU_REQUESTS: &str = "requests.nvidia.com/gpu";
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

/// Allocatable `nvidia.com/gpu` of a node (0 when it has none).
pub fn node_gpus(node: &k8s_openapi::api::core::v1::Node) -> i32 {
    node.status
        .as_ref()
        .and_then(|s| s.allocatable.as_ref())
        .and_then(|a| a.get(labels::NVIDIA_GPU_RESOURCE))
        .and_then(|q| q.0.parse().ok())
        .unwrap_or(0)
}

/// GPUs held per node by the pods that hold them (bound, not finished).
pub fn gpus_by_node(pods: &[k8s_openapi::api::core::v1::Pod]) -> BTreeMap<String, i32> {
    let mut used = BTreeMap::new();
    for p in pods {
        let phase = p
            .status
            .as_ref()
            .and_then(|s| s.phase.as_deref())
            .unwrap_or("Pending");
        if matches!(phase, "Succeeded" | "Failed") {
            continue;
        }
        if let Some(n) = p.spec.as_ref().and_then(|s| s.node_name.clone()) {
            *used.entry(n).or_insert(0) += pod_gpus(p);
        }
    }
    used
}

/// `hard` and `used` of `requests.nvidia.com/gpu` in a ResourceQuota's status (`None` when it
/// has no GPU limit; an unreadable `used` counts as 0).
pub fn quota_gpus(rq: &k8s_openapi::api::core::v1::ResourceQuota) -> Option<(i64, i64)> {
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
/// for an extended resource the two are equal when both are set).
pub fn pod_gpus(pod: &k8s_openapi::api::core::v1::Pod) -> i32 {
    let Some(spec) = &pod.spec else { return 0 };
    spec.containers
        .iter()
        .filter_map(|c| c.resources.as_ref())
        .filter_map(|r| {
            r.limits
                .as_ref()
                .and_then(|l| l.get(labels::NVIDIA_GPU_RESOURCE))
                .or_else(|| {
                    r.requests
                        .as_ref()
                        .and_then(|q| q.get(labels::NVIDIA_GPU_RESOURCE))
                })
        })
        .filter_map(|q| q.0.parse::<i32>().ok())
        .sum()
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

fn managed_labels(tenant: &str) -> Value {
    json!({ labels::TENANT: tenant, labels::MANAGED_BY: labels::MANAGED_BY_VALUE })
}

fn child(value: Value) -> Child {
    // Every value built here has apiVersion, kind and metadata.name.
    Child::from_json(value).unwrap_or_else(|e| unreachable!("built child without identity: {e}"))
}

impl crate::Reconcile for TenantReconciler {
    type Object = GryviaTenant;
    type World = TenantWorld;
    type Status = GryviaTenantStatus;

    fn name(&self) -> &'static str {
        "gryvia-quota-operator"
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

        if let Some(msg) = invalid_name(&name) {
            set(
                &mut status,
                conditions::READY,
                Status::False,
                conditions::REASON_INVALID_SPEC,
                msg,
                generation,
                now,
            );
            plan.set_status_if_changed(tenant.status.as_ref(), status);
            return plan;
        }
        let ns = namespace_of(&name);
        if let Some(state) = &world.namespace
            && state.tenant_label.as_deref() != Some(name.as_str())
        {
            let msg = format!(
                "namespace {ns} exists and does not belong to this tenant (label {}={:?}); rename the tenant or relabel the namespace",
                labels::TENANT,
                state.tenant_label.as_deref().unwrap_or("")
            );
            set(
                &mut status,
                conditions::READY,
                Status::False,
                "NamespaceConflict",
                msg,
                generation,
                now,
            );
            plan.set_status_if_changed(tenant.status.as_ref(), status);
            return plan;
        }

        let alloc = allocate(&world.tenants)
            .remove(&name)
            .unwrap_or(Allocation {
                asked: tenant.spec.quotas.as_ref().and_then(|q| q.concurrent_gpus),
                granted: tenant.spec.quotas.as_ref().and_then(|q| q.concurrent_gpus),
                own: tenant.spec.quotas.as_ref().and_then(|q| q.concurrent_gpus),
                capped: None,
                problem: None,
            });

        plan.apply_child(
            child(json!({
                "apiVersion": "v1", "kind": "Namespace",
                "metadata": { "name": ns, "labels": managed_labels(&name) }
            }))
            .unowned(),
        );

        // ResourceQuota: GPUs of the namespace and storage per StorageClass.
        let mut hard = serde_json::Map::new();
        if let Some(own) = alloc.own {
            hard.insert(GPU_REQUESTS.to_owned(), json!(own.max(0).to_string()));
        }
        for (class, q) in &tenant.spec.storage_quotas {
            hard.insert(
                format!("{class}.storageclass.storage.k8s.io/requests.storage"),
                json!(q.0),
            );
        }
        if hard.is_empty() {
            plan.delete.push(ObjectRef::namespaced(
                "v1",
                "ResourceQuota",
                &ns,
                TENANT_QUOTA,
            ));
        } else {
            plan.apply_child(child(json!({
                "apiVersion": "v1", "kind": "ResourceQuota",
                "metadata": { "name": TENANT_QUOTA, "namespace": ns, "labels": managed_labels(&name) },
                "spec": { "hard": hard }
            })));
        }

        // LimitRange: requests for containers that set none; GPUs per container capped.
        let mut item = json!({
            "type": "Container",
            "defaultRequest": { "cpu": "100m", "memory": "256Mi" }
        });
        if let Some(own) = alloc.own {
            item["max"] = json!({ labels::NVIDIA_GPU_RESOURCE: own.max(0).to_string() });
        }
        plan.apply_child(child(json!({
            "apiVersion": "v1", "kind": "LimitRange",
            "metadata": { "name": TENANT_LIMITS, "namespace": ns, "labels": managed_labels(&name) },
            "spec": { "limits": [item] }
        })));

        // NetworkPolicy: only this tenant, the tenants it allows, and platform namespaces.
        match &tenant.spec.network_policy {
            Some(np) if np.isolated => {
                let mut allowed: Vec<&str> = vec![name.as_str()];
                allowed.extend(np.allowed_tenants.iter().map(String::as_str));
                allowed.sort_unstable();
                allowed.dedup();
                plan.apply_child(child(json!({
                    "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
                    "metadata": { "name": TENANT_NETPOL, "namespace": ns, "labels": managed_labels(&name) },
                    "spec": {
                        "podSelector": {},
                        "policyTypes": ["Ingress"],
                        "ingress": [{ "from": [
                            { "namespaceSelector": { "matchExpressions": [
                                { "key": labels::TENANT, "operator": "In", "values": allowed } ] } },
                            { "namespaceSelector": { "matchExpressions": [
                                { "key": labels::TENANT, "operator": "DoesNotExist" } ] } }
                        ] }]
                    }
                })));
            }
            _ => plan.delete.push(ObjectRef::namespaced(
                "networking.k8s.io/v1",
                "NetworkPolicy",
                &ns,
                TENANT_NETPOL,
            )),
        }

        // RoleBindings, opt-in.
        for (role, cluster_role) in [
            (MemberRole::Admin, "admin"),
            (MemberRole::Member, "edit"),
            (MemberRole::Viewer, "view"),
        ] {
            let binding = format!("gryvia-tenant-{cluster_role}");
            let mut users: Vec<&str> = tenant
                .spec
                .members
                .iter()
                .filter(|m| m.role == role)
                .map(|m| m.username.as_str())
                .collect();
            users.sort_unstable();
            if self.options.tenant_rbac && !users.is_empty() {
                let subjects: Vec<Value> = users
                    .iter()
                    .map(|u| json!({ "kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": u }))
                    .collect();
                plan.apply_child(child(json!({
                    "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                    "metadata": { "name": binding, "namespace": ns, "labels": managed_labels(&name) },
                    "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": cluster_role },
                    "subjects": subjects
                })));
            } else {
                plan.delete.push(ObjectRef::namespaced(
                    "rbac.authorization.k8s.io/v1",
                    "RoleBinding",
                    &ns,
                    &binding,
                ));
            }
        }

        // Status.
        status.namespace = Some(ns.clone());
        status.gpus_in_use = world.gpus_in_use;
        status.pods = world.pods;
        status.gpu_limit = alloc.own;
        status.gpu_utilization_percent = match alloc.own {
            Some(l) if l > 0 => Some(((i64::from(world.gpus_in_use) * 100) / i64::from(l)) as i32),
            _ => None,
        };
        match &alloc.capped {
            Some(msg) => {
                if !conditions::is_true(&current.conditions, QUOTA_CAPPED) {
                    plan.event(EventType::Warning, "QuotaCapped", msg.clone());
                }
                set(
                    &mut status,
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
                        &mut status,
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
        status.gpus_in_use_by_type = world.gpus_by_type.clone();
        let per_type = tenant
            .spec
            .quotas
            .as_ref()
            .map(|q| &q.gpus_per_type)
            .filter(|m| !m.is_empty());
        match per_type {
            Some(limits) => {
                let over: Vec<String> = limits
                    .iter()
                    .filter_map(|(product, limit)| {
                        let used = world.gpus_by_type.get(product).copied().unwrap_or(0);
                        (used > *limit).then(|| format!("{product}: {used} in use, limit {limit}"))
                    })
                    .collect();
                if over.is_empty() {
                    set(
                        &mut status,
                        TYPE_LIMIT_EXCEEDED,
                        Status::False,
                        "WithinGpuTypeLimits",
                        "",
                        generation,
                        now,
                    );
                } else {
                    let msg = format!("spec.quotas.gpusPerType exceeded: {}", over.join("; "));
                    if !conditions::is_true(&current.conditions, TYPE_LIMIT_EXCEEDED) {
                        plan.event(EventType::Warning, "GpuTypeLimitExceeded", msg.clone());
                    }
                    set(
                        &mut status,
                        TYPE_LIMIT_EXCEEDED,
                        Status::True,
                        "OverGpuTypeLimit",
                        msg,
                        generation,
                        now,
                    );
                }
            }
            None => status.conditions.retain(|c| c.type_ != TYPE_LIMIT_EXCEEDED),
        }
        match &alloc.problem {
            Some((reason, msg)) => {
                set(
                    &mut status,
                    conditions::READY,
                    Status::False,
                    reason,
                    msg.clone(),
                    generation,
                    now,
                );
            }
            None => {
                let msg = match alloc.own {
                    Some(l) => format!(
                        "namespace {ns} ready; {} of {l} GPUs in use",
                        world.gpus_in_use
                    ),
                    None => format!(
                        "namespace {ns} ready; {} GPUs in use, no GPU limit",
                        world.gpus_in_use
                    ),
                };
                set(
                    &mut status,
                    conditions::READY,
                    Status::True,
                    conditions::REASON_RECONCILED,
                    msg,
                    generation,
                    now,
                );
            }
        }
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
            plan.apply_child(
                child(json!({
                    "apiVersion": "v1", "kind": "Namespace",
                    "metadata": { "name": ns, "labels": managed_labels(&name),
                                  "annotations": { "gryvia.io/retained-from-tenant": name } }
                }))
                .unowned(),
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

/// The GryviaQuota reconcile.
#[derive(Clone, Copy, Debug, Default)]
pub struct QuotaReconciler;

impl crate::Reconcile for QuotaReconciler {
    type Object = GryviaQuota;
    type World = QuotaWorld;
    type Status = GryviaQuotaStatus;

    fn name(&self) -> &'static str {
        "gryvia-quota-operator"
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
        let mut hard = serde_json::Map::new();
        let h = &quota.spec.hard;
        if let Some(g) = h.gpus {
            hard.insert(GPU_REQUESTS.to_owned(), json!(g.to_string()));
        }
        if let Some(c) = &h.cpu {
            hard.insert("requests.cpu".to_owned(), json!(c.0));
        }
        if let Some(m) = &h.memory {
            hard.insert("requests.memory".to_owned(), json!(m.0));
        }
        if let Some(s) = &h.storage {
            hard.insert("requests.storage".to_owned(), json!(s.0));
        }
        if let Some(p) = h.pods {
            hard.insert("pods".to_owned(), json!(p.to_string()));
        }
        let wanted: BTreeSet<&str> = quota.spec.namespaces.iter().map(String::as_str).collect();
        let mut missing = Vec::new();
        for ns in &wanted {
            if world.existing_namespaces.contains(*ns) {
                plan.apply_child(child(json!({
                    "apiVersion": "v1", "kind": "ResourceQuota",
                    "metadata": { "name": object, "namespace": ns,
                                  "labels": { "gryvia.io/quota": name, labels::MANAGED_BY: labels::MANAGED_BY_VALUE } },
                    "spec": { "hard": hard }
                })));
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
