//! Admission of GryviaAIJobs, as pure functions: what the ai-operator's validating webhook
//! decides and what its mutating webhook adds.
//!
//! Validating (on create): the tenant's allowed GPU SKUs, the namespace's GPU quota and the
//! tenant's per-product limits, `priority` in 0..100, a `gryvia.io/template` label that names
//! a Valid template, a `gryvia.io/reservation` annotation that names a reservation of the
//! job's tenant, and no toleration of a reservation's taint without that annotation. When the
//! facts could not be read, the webhook server decides by its fail-open / fail-closed flag;
//! these functions only see facts.
//!
//! Mutating (on create): the distributed-training environment of the job's framework (torchrun
//! `PET_*`, `TF_CONFIG`, JAX, MPI) and NCCL defaults, never overriding a variable the job sets;
//! and for a job annotated `gryvia.io/reservation: <name>`, the reservation's toleration and
//! node selector.

use std::collections::{BTreeMap, BTreeSet};

use gryvia_types::{Framework, GryviaAIJob, labels};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// Facts about the job's tenant (the `gryvia.io/tenant` label of its namespace).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TenantFacts {
    /// Tenant name.
    pub name: String,
    /// `spec.allowedSkus` (GryviaGpuSku names); any when empty.
    pub allowed_skus: Vec<String>,
    /// `spec.quotas.gpusPerType`: GPUs per product.
    pub gpus_per_type: BTreeMap<String, i32>,
    /// `status.gpusInUseByType`.
    pub gpus_in_use_by_type: BTreeMap<String, i32>,
}

/// A namespace's GPU quota (the tightest ResourceQuota on `requests.nvidia.com/gpu`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GpuQuota {
    /// Name of the ResourceQuota.
    pub name: String,
    /// `hard`.
    pub hard: i64,
    /// `used`.
    pub used: i64,
}

/// State of the template a job's label names.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum TemplateState {
    /// No such GryviaTemplate.
    Missing,
    /// It exists but its Valid condition is not True (the message says why).
    Invalid(String),
    /// Valid.
    Valid,
}

/// State of the reservation a job's annotation names.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReservationFacts {
    /// Whether it exists.
    pub exists: bool,
    /// Its owner (a tenant name for owner types team and tenant).
    pub owner: Option<String>,
}

/// What the validating webhook knows about the cluster.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AdmissionWorld {
    /// The tenant of the job's namespace, when it belongs to one.
    pub tenant: Option<TenantFacts>,
    /// GPU product of every GryviaGpuSku, by SKU name.
    pub skus: BTreeMap<String, String>,
    /// The namespace's GPU quota, when it has one.
    pub gpu_quota: Option<GpuQuota>,
    /// The template named by the `gryvia.io/template` label, when the label is set.
    pub template: Option<TemplateState>,
    /// The reservation named by the `gryvia.io/reservation` annotation, when it is set.
    pub reservation: Option<ReservationFacts>,
    /// Budgets in state `blocked` whose scope covers the job (filled only with the admission
    /// gate on).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub blocked_budgets: Vec<BlockedBudget>,
}

/// A budget that blocks new jobs in its scope.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BlockedBudget {
    /// Its name.
    pub name: String,
    /// Its spend in the current period, US dollars.
    pub spend_usd: Option<String>,
}

/// An admission decision.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Decision {
    /// Whether the object is admitted.
    pub allowed: bool,
    /// Why not, naming the field (shown by kubectl and the CLI).
    pub message: Option<String>,
    /// Warnings returned with an admitted object.
    pub warnings: Vec<String>,
}

impl Decision {
    /// Admit.
    pub fn allow() -> Self {
        Decision {
            allowed: true,
            message: None,
            warnings: Vec::new(),
        }
    }

    /// Reject with `message`.
    pub fn deny(message: impl Into<String>) -> Self {
        Decision {
            allowed: false,
            message: Some(message.into()),
            warnings: Vec::new(),
        }
    }
}

fn annotation<'a>(job: &'a GryviaAIJob, key: &str) -> Option<&'a str> {
    job.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .map(String::as_str)
}

/// Decides whether a new job is admitted.
pub fn validate_job(job: &GryviaAIJob, world: &AdmissionWorld) -> Decision {
    let spec = &job.spec;
    if !(0..=100).contains(&spec.priority) {
        return Decision::deny(format!(
            "spec.priority: {} is outside 0..100",
            spec.priority
        ));
    }
    let total = i64::from(spec.gpus) * i64::from(spec.replicas);
    if total > 0
        && let Some(b) = world.blocked_budgets.first()
    {
        return Decision::deny(format!(
            "GryviaBudget {} is blocked (spend {} USD of its limit): new GPU jobs in its scope are rejected until its period ends or its limit is raised",
            b.name,
            b.spend_usd.as_deref().unwrap_or("?")
        ));
    }

    if let Some(t) = &world.tenant
        && spec.gpus > 0
    {
        if !t.allowed_skus.is_empty() {
            let allowed: BTreeSet<&str> = t
                .allowed_skus
                .iter()
                .filter_map(|s| world.skus.get(s).map(String::as_str))
                .collect();
            let products = allowed.iter().copied().collect::<Vec<_>>().join(", ");
            match &spec.gpu_type {
                None => {
                    return Decision::deny(format!(
                        "spec.gpuType: tenant {} may only use SKUs {}; set spec.gpuType to one of their products ({})",
                        t.name,
                        t.allowed_skus.join(", "),
                        if products.is_empty() {
                            "none is defined"
                        } else {
                            &products
                        }
                    ));
                }
                Some(ty) => {
                    let by_name = world.skus.get(ty).map(String::as_str);
                    let ok = t.allowed_skus.iter().any(|s| s == ty)
                        || allowed.contains(ty.as_str())
                        || by_name.is_some_and(|p| allowed.contains(p));
                    if !ok {
                        return Decision::deny(format!(
                            "spec.gpuType: {ty} is not allowed for tenant {} (allowed SKUs: {}; products: {})",
                            t.name,
                            t.allowed_skus.join(", "),
                            if products.is_empty() {
                                "none is defined"
                            } else {
                                &products
                            }
                        ));
                    }
                }
            }
        }
        if let Some(ty) = &spec.gpu_type {
            let product = world.skus.get(ty).cloned().unwrap_or_else(|| ty.clone());
            if let Some(limit) = t.gpus_per_type.get(&product) {
                let used = t.gpus_in_use_by_type.get(&product).copied().unwrap_or(0);
                if i64::from(used) + total > i64::from(*limit) {
                    return Decision::deny(format!(
                        "spec.gpus: the job needs {total} {product} GPUs (gpus x replicas) and tenant {} uses {used} of its {limit}",
                        t.name
                    ));
                }
            }
        }
    }
    if let Some(q) = &world.gpu_quota
        && total > 0
        && q.used + total > q.hard
    {
        return Decision::deny(format!(
            "spec.gpus: the job needs {total} GPUs (gpus x replicas) and the namespace has {} of its {}-GPU quota left (ResourceQuota {})",
            (q.hard - q.used).max(0),
            q.hard,
            q.name
        ));
    }
    if let Some(tpl) = job
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(labels::TEMPLATE))
    {
        match &world.template {
            Some(TemplateState::Valid) => {}
            Some(TemplateState::Invalid(why)) => {
                return Decision::deny(format!(
                    "metadata.labels[{}]: template {tpl} is not valid: {why}",
                    labels::TEMPLATE
                ));
            }
            Some(TemplateState::Missing) | None => {
                return Decision::deny(format!(
                    "metadata.labels[{}]: template {tpl} does not exist",
                    labels::TEMPLATE
                ));
            }
        }
    }
    let reservation = annotation(job, labels::RESERVATION);
    if let Some(r) = reservation {
        match &world.reservation {
            Some(ReservationFacts {
                exists: true,
                owner,
            }) => {
                let tenant = world.tenant.as_ref().map(|t| t.name.as_str());
                if let Some(o) = owner
                    && tenant != Some(o.as_str())
                {
                    return Decision::deny(format!(
                        "metadata.annotations[{}]: reservation {r} belongs to {o}, and this namespace belongs to {}",
                        labels::RESERVATION,
                        tenant.map_or("no tenant".to_owned(), |t| format!("tenant {t}"))
                    ));
                }
            }
            _ => {
                return Decision::deny(format!(
                    "metadata.annotations[{}]: reservation {r} does not exist",
                    labels::RESERVATION
                ));
            }
        }
    }
    for (i, t) in spec.tolerations.iter().enumerate() {
        let reserved = t.key.as_deref() == Some(labels::RESERVED_TAINT)
            || (t.key.is_none() && t.operator.as_deref() == Some("Exists"));
        if reserved {
            let ok = reservation.is_some_and(|r| {
                t.key.as_deref() == Some(labels::RESERVED_TAINT) && t.value.as_deref() == Some(r)
            });
            if !ok {
                return Decision::deny(format!(
                    "spec.tolerations[{i}]: tolerating {} is only for jobs annotated {} with that reservation",
                    labels::RESERVED_TAINT,
                    labels::RESERVATION
                ));
            }
        }
    }
    Decision::allow()
}

fn env(name: &str, value: impl Into<String>) -> Value {
    json!({"name": name, "value": value.into()})
}

/// The environment the mutating webhook adds for the job's framework and NCCL. Values may
/// refer to the controller's `RANK`, `WORLD_SIZE`, `MASTER_ADDR` and `MASTER_PORT`, which come
/// first in the container (Kubernetes expands `$(VAR)`).
pub fn training_env(job: &GryviaAIJob) -> Vec<Value> {
    let spec = &job.spec;
    let name = job.metadata.name.clone().unwrap_or_default();
    let mut out = Vec::new();
    let distributed = spec.replicas > 1;
    if spec.gpus > 0 {
        out.push(env("NCCL_DEBUG", "WARN"));
        if distributed {
            // Never bind NCCL's bootstrap to loopback or container bridges.
            out.push(env("NCCL_SOCKET_IFNAME", "^lo,docker0"));
            out.push(env("NCCL_ASYNC_ERROR_HANDLING", "1"));
        }
    }
    match spec.framework {
        Some(Framework::Pytorch | Framework::Deepspeed) => {
            out.push(env("PET_NNODES", spec.replicas.to_string()));
            out.push(env("PET_NPROC_PER_NODE", spec.gpus.max(1).to_string()));
            out.push(env("PET_NODE_RANK", "$(RANK)"));
            out.push(env("PET_MASTER_ADDR", "$(MASTER_ADDR)"));
            out.push(env("PET_MASTER_PORT", "$(MASTER_PORT)"));
            if spec.gpus > 0 && distributed {
                out.push(env("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"));
            }
        }
        Some(Framework::Tensorflow) => {
            let workers: Vec<String> = (0..spec.replicas)
                .map(|i| {
                    if distributed {
                        format!("\"{name}-{i}.{name}:2222\"")
                    } else {
                        "\"localhost:2222\"".to_owned()
                    }
                })
                .collect();
            out.push(env(
                "TF_CONFIG",
                format!(
                    "{{\"cluster\":{{\"worker\":[{}]}},\"task\":{{\"type\":\"worker\",\"index\":$(RANK)}}}}",
                    workers.join(",")
                ),
            ));
        }
        Some(Framework::Jax) => {
            out.push(env(
                "JAX_COORDINATOR_ADDRESS",
                "$(MASTER_ADDR):$(MASTER_PORT)",
            ));
            out.push(env("JAX_NUM_PROCESSES", spec.replicas.to_string()));
            out.push(env("JAX_PROCESS_ID", "$(RANK)"));
        }
        Some(Framework::Mpi) => {
            let hosts: Vec<String> = (0..spec.replicas)
                .map(|i| {
                    if distributed {
                        format!("{name}-{i}.{name}")
                    } else {
                        "localhost".to_owned()
                    }
                })
                .collect();
            out.push(env("GRYVIA_WORKER_HOSTS", hosts.join(",")));
            out.push(env("OMPI_MCA_orte_keep_fqdn_hostnames", "true"));
        }
        Some(Framework::Custom) | None => {}
    }
    let set: BTreeSet<&str> = spec.env.iter().map(|e| e.name.as_str()).collect();
    out.retain(|e| !set.contains(e["name"].as_str().unwrap_or_default()));
    out
}

/// Items of a list as JSON values (typed Kubernetes values always serialize).
fn values<T: Serialize>(items: &[T]) -> Vec<Value> {
    items
        .iter()
        .map(|i| serde_json::to_value(i).unwrap_or(Value::Null))
        .collect()
}

/// The JSON Patch (RFC 6902) the mutating webhook returns for a new job; empty when nothing
/// is added.
pub fn mutate_job(job: &GryviaAIJob) -> Vec<Value> {
    let mut ops = Vec::new();
    let extra = training_env(job);
    if !extra.is_empty() {
        let mut all = values(&job.spec.env);
        all.extend(extra);
        ops.push(json!({"op": "add", "path": "/spec/env", "value": all}));
    }
    if let Some(r) = annotation(job, labels::RESERVATION) {
        let toleration = json!({"key": labels::RESERVED_TAINT, "operator": "Equal", "value": r, "effect": "NoSchedule"});
        let has = job.spec.tolerations.iter().any(|t| {
            t.key.as_deref() == Some(labels::RESERVED_TAINT) && t.value.as_deref() == Some(r)
        });
        if !has {
            let mut all = values(&job.spec.tolerations);
            all.push(toleration);
            ops.push(json!({"op": "add", "path": "/spec/tolerations", "value": all}));
        }
        if job
            .spec
            .node_selector
            .get(labels::RESERVED_TAINT)
            .map(String::as_str)
            != Some(r)
        {
            let mut sel = job.spec.node_selector.clone();
            sel.insert(labels::RESERVED_TAINT.to_owned(), r.to_owned());
            ops.push(json!({"op": "add", "path": "/spec/nodeSelector", "value": sel}));
        }
    }
    ops
}
