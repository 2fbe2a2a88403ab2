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

use gryvia_types::conditions;
use gryvia_types::{
    DataClassification, Framework, GryviaAIJob, GryviaBudget, GryviaReservation, GryviaTemplate,
    GryviaTenant, OwnerType, PaymentMethod, labels,
};
use k8s_openapi::api::core::v1::ResourceQuota;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// Facts about the job's tenant (the `gryvia.io/tenant` label of its namespace).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct TenantFacts {
    /// Tenant name.
    pub name: String,
    /// `spec.allowedSkus` (GryviaGpuSku names); any when empty.
    pub allowed_skus: Vec<String>,
    /// `spec.quotas.gpusPerType`: GPUs per product.
    pub gpus_per_type: BTreeMap<String, i32>,
    /// `status.gpusInUseByType`.
    pub gpus_in_use_by_type: BTreeMap<String, i32>,
    /// `spec.quotas.costUSD.monthly`: whole US dollars a UTC month.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd_monthly: Option<i64>,
    /// `spec.quotas.gpuHours`: GPU-hours a UTC month, and the burst allowed above them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_hours_monthly: Option<(i64, i64)>,
    /// `spec.priorities.default`: the tier of jobs that name none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_tier: Option<String>,
    /// `spec.priorities` is set without `allowHighPriority`: tiers above the default are
    /// refused.
    #[serde(default)]
    pub no_high_tiers: bool,
    /// `spec.governance.dataClassification`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub classification: Option<DataClassification>,
    /// `spec.billing.prepaidBalance` in US dollar micro-units, for a tenant paying `prepaid`
    /// (0 when it sets no balance).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prepaid_micros: Option<i64>,
}

impl TenantFacts {
    /// The facts of tenant `name` from its object.
    pub fn of(name: &str, tenant: &GryviaTenant) -> Self {
        let quotas = tenant.spec.quotas.as_ref();
        let priorities = tenant.spec.priorities.as_ref();
        let billing = tenant.spec.billing.as_ref();
        TenantFacts {
            name: name.to_owned(),
            allowed_skus: tenant.spec.allowed_skus.clone(),
            gpus_per_type: tenant
                .spec
                .quotas
                .as_ref()
                .map(|q| q.gpus_per_type.clone())
                .unwrap_or_default(),
            gpus_in_use_by_type: tenant
                .status
                .as_ref()
                .map(|s| s.gpus_in_use_by_type.clone())
                .unwrap_or_default(),
            cost_usd_monthly: quotas.and_then(|q| q.cost_usd.as_ref()?.monthly),
            gpu_hours_monthly: quotas
                .and_then(|q| q.gpu_hours.as_ref())
                .and_then(|h| Some((h.monthly?, h.burst.unwrap_or(0)))),
            default_tier: priorities.and_then(|p| p.default.clone()),
            no_high_tiers: priorities.is_some_and(|p| !p.allow_high_priority),
            classification: tenant
                .spec
                .governance
                .as_ref()
                .and_then(|g| g.data_classification),
            prepaid_micros: billing
                .filter(|b| b.payment_method == Some(PaymentMethod::Prepaid))
                .map(|b| {
                    b.prepaid_balance
                        .as_ref()
                        .and_then(|d| d.micros().ok())
                        .unwrap_or(0)
                }),
        }
    }

    /// Whether the tenant has a monthly money or GPU-hour quota or a prepaid balance (the gate
    /// then needs its spend).
    pub fn has_spend_quota(&self) -> bool {
        self.cost_usd_monthly.is_some()
            || self.gpu_hours_monthly.is_some()
            || self.prepaid_micros.is_some()
    }
}

/// How long a new job is expected to run, and how that was worked out.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Runtime {
    /// Seconds.
    pub seconds: i64,
    /// How: `activeDeadlineSeconds`, or the median of the template's runs.
    pub basis: String,
}

/// What the gate weighs a new job of a tenant with a money or GPU-hour quota against: the
/// tenant's metered use this UTC month and the job's estimate.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MonthSpend {
    /// US dollars spent this month, micro-units.
    pub usd_micros: i64,
    /// US dollars spent ever (what a prepaid balance is counted down by), micro-units.
    #[serde(default)]
    pub total_usd_micros: i64,
    /// GPU-seconds used this month.
    pub gpu_seconds: i64,
    /// Price of a GPU-hour of the job's SKU, US dollar micro-units (`None`: unpriced).
    pub price_micros: Option<i64>,
    /// How long the job is expected to run (`None`: no deadline and no history).
    pub runtime: Option<Runtime>,
}

/// The expected runtime of a job: its `activeDeadlineSeconds`, else the median length of the
/// tenant's last runs of the same template (`durations`, seconds, newest last; at most the
/// last [`RUNTIME_SAMPLES`] count).
pub fn expected_runtime(
    job: &GryviaAIJob,
    template: Option<&str>,
    durations: &[i64],
) -> Option<Runtime> {
    if let Some(d) = job.spec.active_deadline_seconds.filter(|d| *d > 0) {
        return Some(Runtime {
            seconds: d,
            basis: "activeDeadlineSeconds".to_owned(),
        });
    }
    let template = template?;
    let mut last: Vec<i64> = durations
        .iter()
        .rev()
        .take(RUNTIME_SAMPLES)
        .copied()
        .collect();
    if last.is_empty() {
        return None;
    }
    last.sort_unstable();
    let median = last[last.len() / 2];
    Some(Runtime {
        seconds: median,
        basis: format!(
            "the median of the last {} runs of template {template}",
            last.len()
        ),
    })
}

/// What `tenant` has used this UTC month (its usage records priced at the catalogue `skus`, in
/// US dollars), and the estimate of `job`: the price of its GPU type and its expected runtime.
pub fn month_spend(
    job: &GryviaAIJob,
    tenant: &str,
    records: &[&gryvia_types::GryviaUsageRecord],
    skus: &[crate::metering::Sku],
    now: crate::Timestamp,
) -> MonthSpend {
    let (start, _) = crate::budget::period(gryvia_types::PeriodType::Monthly, now);
    let (usd_micros, gpu_seconds) =
        crate::invoice::totals(tenant, start, now, records.iter().copied(), skus, "USD");
    let (total_usd_micros, _) = crate::invoice::totals(
        tenant,
        crate::Timestamp::UNIX_EPOCH,
        now,
        records.iter().copied(),
        skus,
        "USD",
    );
    let price_micros = job.spec.gpu_type.as_deref().and_then(|t| {
        skus.iter()
            .filter(|s| s.currency == "USD" && (s.name == t || s.gpu_product == t))
            .min_by(|a, b| a.name.cmp(&b.name))
            .map(|s| s.price_micros)
    });
    let template = job
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(labels::TEMPLATE))
        .map(String::as_str);
    let mut runs: Vec<(crate::Timestamp, i64)> = records
        .iter()
        .filter(|r| r.spec.tenant == tenant && r.spec.template.as_deref() == template)
        .filter_map(|r| {
            let end = r.spec.end_time.as_ref()?.0;
            Some((end, end.as_second() - r.spec.start_time.0.as_second()))
        })
        .collect();
    runs.sort_unstable();
    let durations: Vec<i64> = runs.into_iter().map(|(_, d)| d).collect();
    MonthSpend {
        usd_micros,
        total_usd_micros,
        gpu_seconds,
        price_micros,
        runtime: expected_runtime(job, template, &durations),
    }
}

/// Runs of a template the expected runtime of a new job is the median of.
pub const RUNTIME_SAMPLES: usize = 20;

fn money(micros: i64) -> String {
    gryvia_types::money::Decimal::from_micros(micros)
        .as_str()
        .to_owned()
}

fn gpu_hours(seconds: i64) -> String {
    crate::invoice::hours(seconds).as_str().to_owned()
}

/// A new job of `total` GPUs would take the tenant past its monthly money or GPU-hour quota:
/// what it has used this month plus the job's estimate (GPUs x expected runtime x price).
fn check_spend(total: i64, t: &TenantFacts, spend: Option<&MonthSpend>) -> Option<String> {
    let spend = spend.filter(|_| total > 0)?;
    let seconds = spend.runtime.as_ref().map_or(0, |r| r.seconds);
    let est_gpu_seconds = total.saturating_mul(seconds);
    let est_micros = i64::try_from(
        i128::from(est_gpu_seconds) * i128::from(spend.price_micros.unwrap_or(0)) / 3600,
    )
    .unwrap_or(i64::MAX);
    let estimate = match (&spend.runtime, spend.price_micros) {
        (None, _) => "no estimate (no activeDeadlineSeconds, no runs of its template)".to_owned(),
        (Some(r), Some(p)) => format!(
            "{} USD ({total} GPUs for {} s, {}, at {} USD a GPU-hour)",
            money(est_micros),
            r.seconds,
            r.basis,
            money(p)
        ),
        (Some(r), None) => format!(
            "{} GPU-hours ({total} GPUs for {} s, {}; its GPU type has no price)",
            gpu_hours(est_gpu_seconds),
            r.seconds,
            r.basis
        ),
    };
    if let Some(balance) = t.prepaid_micros {
        let left = balance.saturating_sub(spend.total_usd_micros);
        if left <= 0 || est_micros > left {
            return Some(format!(
                "tenant {}'s prepaid balance (spec.billing.prepaidBalance) is {} USD: {} USD spent, {} USD left, and {}",
                t.name,
                money(balance),
                money(spend.total_usd_micros),
                money(left.max(0)),
                if left <= 0 {
                    "new GPU jobs are refused until it is topped up".to_owned()
                } else {
                    format!("this job's estimate of {estimate} would overspend it")
                },
            ));
        }
    }
    if let Some(limit) = t.cost_usd_monthly {
        let limit_micros = limit.saturating_mul(1_000_000);
        let projected = spend.usd_micros.saturating_add(est_micros);
        if projected > limit_micros || spend.usd_micros >= limit_micros {
            return Some(format!(
                "tenant {}'s monthly spend quota (spec.quotas.costUSD.monthly) is {limit} USD: {} USD spent this month, and this job's estimate of {estimate} would exceed it",
                t.name,
                money(spend.usd_micros),
            ));
        }
    }
    if let Some((monthly, burst)) = t.gpu_hours_monthly {
        let limit = monthly.saturating_add(burst);
        let limit_seconds = limit.saturating_mul(3600);
        let projected = spend.gpu_seconds.saturating_add(est_gpu_seconds);
        if projected > limit_seconds || spend.gpu_seconds >= limit_seconds {
            return Some(format!(
                "tenant {}'s monthly GPU-hour quota (spec.quotas.gpuHours: {monthly} and {burst} burst) is {limit} GPU-hours: {} used this month, and this job's estimate of {} GPU-hours would exceed it",
                t.name,
                gpu_hours(spend.gpu_seconds),
                gpu_hours(est_gpu_seconds),
            ));
        }
    }
    None
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

impl GpuQuota {
    /// The tightest GPU quota among `quotas` (those of one namespace): the one with the
    /// fewest GPUs left; `None` when none limits GPUs.
    pub fn tightest<'a>(quotas: impl IntoIterator<Item = &'a ResourceQuota>) -> Option<Self> {
        quotas
            .into_iter()
            .filter_map(|q| {
                let (hard, used) = crate::tenancy::quota_gpus(q)?;
                Some(GpuQuota {
                    name: q.metadata.name.clone().unwrap_or_default(),
                    hard,
                    used,
                })
            })
            .min_by_key(|q| q.hard - q.used)
    }
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

impl TemplateState {
    /// The state of a template (`None`: it does not exist): Valid only with its Valid
    /// condition True.
    pub fn of(template: Option<&GryviaTemplate>) -> Self {
        let Some(t) = template else {
            return TemplateState::Missing;
        };
        let valid = t
            .status
            .as_ref()
            .and_then(|s| conditions::find(&s.conditions, conditions::VALID));
        match valid {
            Some(c) if c.status == "True" => TemplateState::Valid,
            Some(c) => TemplateState::Invalid(c.message.clone()),
            None => TemplateState::Invalid("the ai-operator has not checked it yet".to_owned()),
        }
    }
}

/// State of the reservation a job's annotation names.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReservationFacts {
    /// Whether it exists.
    pub exists: bool,
    /// Its owning tenant (owner types team and tenant).
    pub owner: Option<String>,
    /// Its owning project: the namespace whose jobs may use it (owner type project).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project: Option<String>,
    /// Its owning user: who must create the jobs that use it (owner type user).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
}

impl ReservationFacts {
    /// The facts of a reservation (`None`: it does not exist): its owner as a tenant (owner
    /// types team and tenant), a namespace (project) or a user.
    pub fn of(reservation: Option<&GryviaReservation>) -> Self {
        let owner = reservation.map(|r| (r.spec.owner.type_, r.spec.owner.name.clone()));
        let of = |types: &[OwnerType]| {
            owner
                .clone()
                .filter(|(t, _)| types.contains(t))
                .map(|(_, n)| n)
        };
        ReservationFacts {
            exists: reservation.is_some(),
            owner: of(&[OwnerType::Team, OwnerType::Tenant]),
            project: of(&[OwnerType::Project]),
            user: of(&[OwnerType::User]),
        }
    }
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
    /// Every GryviaPriority's value, by name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tiers: BTreeMap<String, i32>,
    /// Exclusive reservations with `guarantees.preemptible`, by name, with their baseline: the
    /// value of the owner tenant's default tier (0 without one, and for project and user
    /// owners). Jobs of a tier above it tolerate the reservation's taint.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub preemptible: BTreeMap<String, i32>,
    /// Who creates the job (the admission request's `userInfo.username`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requester: Option<String>,
    /// Budgets in state `blocked` whose scope covers the job (filled only with the admission
    /// gate on).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub blocked_budgets: Vec<BlockedBudget>,
    /// The tenant's use this month and the job's estimate (filled only with the admission gate
    /// on, for a tenant with a money or GPU-hour quota).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spend: Option<MonthSpend>,
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

/// The budgets in state `blocked` whose scope covers a job of `tenant` in `namespace`, by
/// name, with their spend.
pub fn blocked_budgets<'a>(
    budgets: impl IntoIterator<Item = &'a GryviaBudget> + Clone,
    tenant: Option<&str>,
    namespace: &str,
) -> Vec<BlockedBudget> {
    crate::budget::blocking(budgets.clone(), tenant, namespace)
        .into_iter()
        .map(|name| {
            let spend_usd = budgets
                .clone()
                .into_iter()
                .find(|b| b.metadata.name.as_deref() == Some(name.as_str()))
                .and_then(|b| b.status.as_ref()?.spend_usd.as_ref())
                .map(|d| d.as_str().to_owned());
            BlockedBudget { name, spend_usd }
        })
        .collect()
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

/// `spec.priority` outside 0..100.
fn check_priority(job: &GryviaAIJob) -> Option<String> {
    let p = job.spec.priority;
    (!(0..=100).contains(&p)).then(|| format!("spec.priority: {p} is outside 0..100"))
}

/// A blocked budget covers the job, which asks for `total` GPUs.
fn check_budgets(total: i64, world: &AdmissionWorld) -> Option<String> {
    let b = world.blocked_budgets.first().filter(|_| total > 0)?;
    Some(format!(
        "GryviaBudget {} is blocked (spend {} USD of its limit): new GPU jobs in its scope are rejected until its period ends or its limit is raised",
        b.name,
        b.spend_usd.as_deref().unwrap_or("?")
    ))
}

/// The job's GPU type is not one of the tenant's allowed SKUs (by SKU name or product).
fn check_skus(
    job: &GryviaAIJob,
    t: &TenantFacts,
    skus: &BTreeMap<String, String>,
) -> Option<String> {
    if t.allowed_skus.is_empty() {
        return None;
    }
    let allowed: BTreeSet<&str> = t
        .allowed_skus
        .iter()
        .filter_map(|s| skus.get(s).map(String::as_str))
        .collect();
    let products = allowed.iter().copied().collect::<Vec<_>>().join(", ");
    let products = if products.is_empty() {
        "none is defined".to_owned()
    } else {
        products
    };
    let Some(ty) = &job.spec.gpu_type else {
        return Some(format!(
            "spec.gpuType: tenant {} may only use SKUs {}; set spec.gpuType to one of their products ({products})",
            t.name,
            t.allowed_skus.join(", "),
        ));
    };
    let by_name = skus.get(ty).map(String::as_str);
    let ok = t.allowed_skus.iter().any(|s| s == ty)
        || allowed.contains(ty.as_str())
        || by_name.is_some_and(|p| allowed.contains(p));
    (!ok).then(|| {
        format!(
            "spec.gpuType: {ty} is not allowed for tenant {} (allowed SKUs: {}; products: {products})",
            t.name,
            t.allowed_skus.join(", "),
        )
    })
}

/// The job's `total` GPUs of its product would take the tenant over its per-product limit.
fn check_type_limit(
    job: &GryviaAIJob,
    t: &TenantFacts,
    skus: &BTreeMap<String, String>,
    total: i64,
) -> Option<String> {
    let ty = job.spec.gpu_type.as_ref()?;
    let product = skus.get(ty).cloned().unwrap_or_else(|| ty.clone());
    let limit = t.gpus_per_type.get(&product)?;
    let used = t.gpus_in_use_by_type.get(&product).copied().unwrap_or(0);
    (i64::from(used) + total > i64::from(*limit)).then(|| {
        format!(
            "spec.gpus: the job needs {total} {product} GPUs (gpus x replicas) and tenant {} uses {used} of its {limit}",
            t.name
        )
    })
}

/// The job's `total` GPUs do not fit in what is left of the namespace's GPU quota.
fn check_quota(total: i64, quota: Option<&GpuQuota>) -> Option<String> {
    let q = quota.filter(|q| total > 0 && q.used + total > q.hard)?;
    Some(format!(
        "spec.gpus: the job needs {total} GPUs (gpus x replicas) and the namespace has {} of its {}-GPU quota left (ResourceQuota {})",
        (q.hard - q.used).max(0),
        q.hard,
        q.name
    ))
}

/// The job's tier (its `gryvia.io/priority-class` annotation) is above the tenant's default
/// tier and the tenant may not use high tiers (`tiers`: every GryviaPriority's value).
fn check_tier(job: &GryviaAIJob, t: &TenantFacts, tiers: &BTreeMap<String, i32>) -> Option<String> {
    let tier = annotation(job, labels::PRIORITY_CLASS).filter(|_| t.no_high_tiers)?;
    let field = format!("metadata.annotations[{}]", labels::PRIORITY_CLASS);
    let Some(value) = tiers.get(tier) else {
        return Some(format!(
            "{field}: GryviaPriority {tier} does not exist, and tenant {} may not use tiers above its default (spec.priorities.allowHighPriority is false)",
            t.name
        ));
    };
    let (baseline, of) = match t.default_tier.as_deref() {
        Some(d) => (
            tiers.get(d).copied().unwrap_or(0),
            format!("its default tier {d}"),
        ),
        None => (0, "0 (no default tier)".to_owned()),
    };
    (*value > baseline).then(|| {
        format!(
            "{field}: tier {tier} (value {value}) is above {of} (value {baseline}), and tenant {} may not use high-priority tiers (spec.priorities.allowHighPriority is false)",
            t.name
        )
    })
}

/// A shared GPU (`gpuFraction`) for a tenant whose data is confidential or restricted.
fn check_shared_gpu(job: &GryviaAIJob, t: &TenantFacts) -> Option<String> {
    let class = t.classification.filter(|c| c.isolating())?;
    job.spec.gpu_fraction?;
    Some(format!(
        "spec.gpuFraction: tenant {}'s data is {} (spec.governance.dataClassification), and its jobs never share a GPU: ask for whole GPUs",
        t.name,
        class.as_str()
    ))
}

/// The template the job's label names does not exist or is not valid.
fn check_template(job: &GryviaAIJob, template: Option<&TemplateState>) -> Option<String> {
    let tpl = job
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(labels::TEMPLATE))?;
    match template {
        Some(TemplateState::Valid) => None,
        Some(TemplateState::Invalid(why)) => Some(format!(
            "metadata.labels[{}]: template {tpl} is not valid: {why}",
            labels::TEMPLATE
        )),
        Some(TemplateState::Missing) | None => Some(format!(
            "metadata.labels[{}]: template {tpl} does not exist",
            labels::TEMPLATE
        )),
    }
}

/// The reservation the job's annotation names does not exist or belongs to another tenant,
/// project (namespace) or user.
fn check_reservation(job: &GryviaAIJob, world: &AdmissionWorld) -> Option<String> {
    let r = annotation(job, labels::RESERVATION)?;
    let Some(ReservationFacts {
        exists: true,
        owner,
        project,
        user,
    }) = &world.reservation
    else {
        return Some(format!(
            "metadata.annotations[{}]: reservation {r} does not exist",
            labels::RESERVATION
        ));
    };
    let field = format!("metadata.annotations[{}]", labels::RESERVATION);
    let namespace = job.metadata.namespace.as_deref().unwrap_or_default();
    if let Some(p) = project.as_ref().filter(|p| p.as_str() != namespace) {
        return Some(format!(
            "{field}: reservation {r} belongs to project {p} (jobs of namespace {p}), and this job is in namespace {namespace}"
        ));
    }
    if let Some(u) = user
        .as_ref()
        .filter(|u| world.requester.as_deref() != Some(u.as_str()))
    {
        return Some(format!(
            "{field}: reservation {r} belongs to user {u}, and this job is created by {}",
            world.requester.as_deref().unwrap_or("an unknown user")
        ));
    }
    let tenant = world.tenant.as_ref().map(|t| t.name.as_str());
    let o = owner.as_ref().filter(|o| tenant != Some(o.as_str()))?;
    Some(format!(
        "metadata.annotations[{}]: reservation {r} belongs to {o}, and this namespace belongs to {}",
        labels::RESERVATION,
        tenant.map_or("no tenant".to_owned(), |t| format!("tenant {t}"))
    ))
}

/// A toleration of the reservation taint (or of every taint) without the annotation of that
/// reservation.
fn check_tolerations(job: &GryviaAIJob, world: &AdmissionWorld) -> Option<String> {
    let reservation = annotation(job, labels::RESERVATION);
    let outranks = preemptible_for(job, world);
    job.spec.tolerations.iter().enumerate().find_map(|(i, t)| {
        let reserved = t.key.as_deref() == Some(labels::RESERVED_TAINT)
            || (t.key.is_none() && t.operator.as_deref() == Some("Exists"));
        let ok = t.key.as_deref() == Some(labels::RESERVED_TAINT)
            && t.value.as_deref().is_some_and(|v| {
                reservation == Some(v) || outranks.iter().any(|r| r == v)
            });
        (reserved && !ok).then(|| {
            format!(
                "spec.tolerations[{i}]: tolerating {} is only for jobs annotated {} with that reservation, or of a tier above the owner's of a preemptible one",
                labels::RESERVED_TAINT,
                labels::RESERVATION
            )
        })
    })
}

/// The value of the job's tier: its `gryvia.io/priority-class` annotation, else its tenant's
/// default tier (0 without one, or for a tier that does not exist).
fn tier_value(job: &GryviaAIJob, world: &AdmissionWorld) -> i32 {
    annotation(job, labels::PRIORITY_CLASS)
        .or_else(|| world.tenant.as_ref()?.default_tier.as_deref())
        .and_then(|t| world.tiers.get(t))
        .copied()
        .unwrap_or(0)
}

/// [`AdmissionWorld::preemptible`] from `reservations`: each exclusive one with
/// `guarantees.preemptible`, with the value (in `tiers`) of its owning tenant's default tier
/// (`default_tier_of` a tenant name; 0 without one, for a project or user owner, or for a tier
/// `tiers` lacks).
pub fn preemptible_reservations<'a>(
    reservations: impl IntoIterator<Item = &'a GryviaReservation>,
    default_tier_of: impl Fn(&str) -> Option<String>,
    tiers: &BTreeMap<String, i32>,
) -> BTreeMap<String, i32> {
    reservations
        .into_iter()
        .filter(|r| {
            r.spec
                .guarantees
                .as_ref()
                .is_some_and(|g| g.preemptible && g.exclusive)
        })
        .map(|r| {
            let baseline = ReservationFacts::of(Some(r))
                .owner
                .and_then(|t| default_tier_of(&t))
                .and_then(|d| tiers.get(&d).copied())
                .unwrap_or(0);
            (r.metadata.name.clone().unwrap_or_default(), baseline)
        })
        .collect()
}

/// The preemptible reservations the job outranks (its tier's value above the reservation's
/// baseline), by name: it may use their nodes and the scheduler may preempt their owner's
/// pods for it.
pub fn preemptible_for(job: &GryviaAIJob, world: &AdmissionWorld) -> Vec<String> {
    let value = tier_value(job, world);
    world
        .preemptible
        .iter()
        .filter(|(_, baseline)| value > **baseline)
        .map(|(name, _)| name.clone())
        .collect()
}

/// Decides whether a new job is admitted: the first check that fails, in order, denies it
/// (priority, the tenant's tiers, shared GPUs for confidential data, blocked budgets, the
/// tenant's prepaid balance and monthly money and GPU-hour quotas, the tenant's SKUs and
/// per-product limits, the namespace's quota, the template, the reservation, reservation
/// tolerations).
pub fn validate_job(job: &GryviaAIJob, world: &AdmissionWorld) -> Decision {
    let spec = &job.spec;
    let total = i64::from(spec.gpus) * i64::from(spec.replicas);
    let tenant = world.tenant.as_ref().filter(|_| spec.gpus > 0);
    check_priority(job)
        .or_else(|| {
            world
                .tenant
                .as_ref()
                .and_then(|t| check_tier(job, t, &world.tiers))
        })
        .or_else(|| tenant.and_then(|t| check_shared_gpu(job, t)))
        .or_else(|| check_budgets(total, world))
        .or_else(|| tenant.and_then(|t| check_spend(total, t, world.spend.as_ref())))
        .or_else(|| tenant.and_then(|t| check_skus(job, t, &world.skus)))
        .or_else(|| tenant.and_then(|t| check_type_limit(job, t, &world.skus, total)))
        .or_else(|| check_quota(total, world.gpu_quota.as_ref()))
        .or_else(|| check_template(job, world.template.as_ref()))
        .or_else(|| check_reservation(job, world))
        .or_else(|| check_tolerations(job, world))
        .map_or_else(Decision::allow, Decision::deny)
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

/// JSON Pointer escaping of one path segment (RFC 6901).
fn pointer(segment: &str) -> String {
    segment.replace('~', "~0").replace('/', "~1")
}

/// Sets `key` to `value` in the job's labels (`field` `labels`) or annotations.
fn set_meta(
    ops: &mut Vec<Value>,
    current: Option<&BTreeMap<String, String>>,
    field: &str,
    key: &str,
    value: &str,
) {
    match current {
        Some(m) if m.get(key).map(String::as_str) == Some(value) => {}
        Some(_) => ops.push(json!({"op": "add", "path": format!("/metadata/{field}/{}", pointer(key)), "value": value})),
        None => ops.push(json!({"op": "add", "path": format!("/metadata/{field}"), "value": {key: value}})),
    }
}

/// The JSON Patch (RFC 6902) the mutating webhook returns for a new job; empty when nothing
/// is added. From `world`: its tenant's default tier goes on a job that names none, the
/// tenant's data classification on every job (replacing whatever the job says), and a
/// toleration of every preemptible reservation the job's tier outranks.
pub fn mutate_job(job: &GryviaAIJob, world: &AdmissionWorld) -> Vec<Value> {
    let tenant = world.tenant.as_ref();
    let mut ops = Vec::new();
    if let Some(c) = tenant.and_then(|t| t.classification) {
        set_meta(
            &mut ops,
            job.metadata.labels.as_ref(),
            "labels",
            labels::DATA_CLASSIFICATION,
            c.as_str(),
        );
    }
    if let Some(d) = tenant.and_then(|t| t.default_tier.as_deref())
        && annotation(job, labels::PRIORITY_CLASS).is_none()
    {
        set_meta(
            &mut ops,
            job.metadata.annotations.as_ref(),
            "annotations",
            labels::PRIORITY_CLASS,
            d,
        );
    }
    let extra = training_env(job);
    if !extra.is_empty() {
        let mut all = values(&job.spec.env);
        all.extend(extra);
        ops.push(json!({"op": "add", "path": "/spec/env", "value": all}));
    }
    let mut tolerated: Vec<String> = preemptible_for(job, world);
    let own = annotation(job, labels::RESERVATION);
    if let Some(r) = own {
        tolerated.push(r.to_owned());
    }
    let missing: Vec<Value> = tolerated
        .iter()
        .filter(|r| {
            !job.spec.tolerations.iter().any(|t| {
                t.key.as_deref() == Some(labels::RESERVED_TAINT)
                    && t.value.as_deref() == Some(r.as_str())
            })
        })
        .map(|r| json!({"key": labels::RESERVED_TAINT, "operator": "Equal", "value": r, "effect": "NoSchedule"}))
        .collect();
    if !missing.is_empty() {
        let mut all = values(&job.spec.tolerations);
        all.extend(missing);
        ops.push(json!({"op": "add", "path": "/spec/tolerations", "value": all}));
    }
    if let Some(r) = own
        && job
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
    ops
}

#[cfg(test)]
mod tests {
    use super::*;
    use gryvia_types::testing::ai_job;

    fn job(spec: Value) -> GryviaAIJob {
        let mut j = ai_job("ns", "j", "img");
        let mut s = serde_json::to_value(&j.spec).unwrap();
        for (k, v) in spec.as_object().unwrap() {
            s[k] = v.clone();
        }
        j.spec = serde_json::from_value(s).unwrap();
        j
    }

    fn annotated(mut j: GryviaAIJob, key: &str, value: &str) -> GryviaAIJob {
        j.metadata
            .annotations
            .get_or_insert_with(BTreeMap::new)
            .insert(key.to_owned(), value.to_owned());
        j
    }

    fn tenant() -> TenantFacts {
        TenantFacts {
            name: "ml".into(),
            allowed_skus: vec!["h100".into()],
            gpus_per_type: BTreeMap::from([("H100".to_owned(), 4)]),
            gpus_in_use_by_type: BTreeMap::from([("H100".to_owned(), 3)]),
            ..TenantFacts::default()
        }
    }

    fn spend(usd: i64, hours: i64, runtime: Option<(i64, &str)>) -> MonthSpend {
        MonthSpend {
            usd_micros: usd * 1_000_000,
            total_usd_micros: usd * 1_000_000,
            gpu_seconds: hours * 3600,
            price_micros: Some(4_000_000),
            runtime: runtime.map(|(seconds, basis)| Runtime {
                seconds,
                basis: basis.to_owned(),
            }),
        }
    }

    #[test]
    fn a_job_whose_estimate_would_pass_the_monthly_spend_quota_is_rejected_with_the_numbers() {
        let t = TenantFacts {
            cost_usd_monthly: Some(500),
            ..tenant()
        };
        let fits = spend(480, 0, Some((1800, "activeDeadlineSeconds")));
        assert_eq!(
            check_spend(2, &t, Some(&fits)),
            None,
            "2 GPUs x 0.5 h x 4 = 4 USD"
        );
        let over = spend(480, 0, Some((3600, "activeDeadlineSeconds")));
        assert_eq!(
            check_spend(8, &t, Some(&over)).unwrap(),
            "tenant ml's monthly spend quota (spec.quotas.costUSD.monthly) is 500 USD: 480 USD spent this month, and this job's estimate of 32 USD (8 GPUs for 3600 s, activeDeadlineSeconds, at 4 USD a GPU-hour) would exceed it"
        );
        // Spent already: any GPU job is refused, even without an estimate.
        let spent = spend(500, 0, None);
        assert!(check_spend(1, &t, Some(&spent)).unwrap().contains(
            "estimate of no estimate (no activeDeadlineSeconds, no runs of its template)"
        ));
        assert_eq!(
            check_spend(0, &t, Some(&spent)),
            None,
            "jobs without GPUs pass"
        );
        assert_eq!(
            check_spend(1, &t, None),
            None,
            "no spend known (the gate off)"
        );
    }

    #[test]
    fn the_gpu_hour_quota_counts_its_burst() {
        let t = TenantFacts {
            gpu_hours_monthly: Some((100, 20)),
            ..tenant()
        };
        let within_burst = spend(0, 110, Some((3600, "activeDeadlineSeconds")));
        assert_eq!(check_spend(8, &t, Some(&within_burst)), None);
        let past = spend(0, 118, Some((3600, "activeDeadlineSeconds")));
        assert_eq!(
            check_spend(4, &t, Some(&past)).unwrap(),
            "tenant ml's monthly GPU-hour quota (spec.quotas.gpuHours: 100 and 20 burst) is 120 GPU-hours: 118 used this month, and this job's estimate of 4 GPU-hours would exceed it"
        );
    }

    #[test]
    fn the_expected_runtime_is_the_deadline_or_the_median_of_the_templates_last_runs() {
        let mut j = job(json!({"gpus": 2}));
        assert_eq!(expected_runtime(&j, Some("finetune"), &[]), None);
        assert_eq!(expected_runtime(&j, None, &[100, 200]), None);
        let r = expected_runtime(&j, Some("finetune"), &[900, 100, 300]).unwrap();
        assert_eq!(r.seconds, 300);
        assert_eq!(
            r.basis,
            "the median of the last 3 runs of template finetune"
        );
        let many: Vec<i64> = (1..=30).collect();
        let r = expected_runtime(&j, Some("finetune"), &many).unwrap();
        assert_eq!(
            (r.seconds, r.basis.as_str()),
            (21, "the median of the last 20 runs of template finetune")
        );
        j.spec.active_deadline_seconds = Some(7200);
        let r = expected_runtime(&j, Some("finetune"), &many).unwrap();
        assert_eq!(
            (r.seconds, r.basis.as_str()),
            (7200, "activeDeadlineSeconds")
        );
    }

    fn skus() -> BTreeMap<String, String> {
        BTreeMap::from([("h100".to_owned(), "H100".to_owned())])
    }

    #[test]
    fn a_priority_outside_0_to_100_is_named() {
        assert_eq!(check_priority(&job(json!({"priority": 100}))), None);
        assert_eq!(
            check_priority(&job(json!({"priority": 101}))).as_deref(),
            Some("spec.priority: 101 is outside 0..100")
        );
    }

    #[test]
    fn a_blocked_budget_stops_only_gpu_jobs() {
        let world = AdmissionWorld {
            blocked_budgets: vec![BlockedBudget {
                name: "b".into(),
                spend_usd: None,
            }],
            ..AdmissionWorld::default()
        };
        assert!(check_budgets(0, &world).is_none());
        assert!(check_budgets(1, &world).unwrap().contains("spend ? USD"));
    }

    #[test]
    fn the_gpu_type_must_be_an_allowed_sku_or_its_product() {
        let t = tenant();
        assert!(check_skus(&job(json!({"gpuType": "h100"})), &t, &skus()).is_none());
        assert!(check_skus(&job(json!({"gpuType": "H100"})), &t, &skus()).is_none());
        assert!(
            check_skus(&job(json!({"gpuType": "A100"})), &t, &skus())
                .unwrap()
                .contains("A100 is not allowed for tenant ml")
        );
        assert!(
            check_skus(&job(json!({})), &t, &BTreeMap::new())
                .unwrap()
                .ends_with("(none is defined)")
        );
    }

    #[test]
    fn the_per_product_limit_counts_what_the_tenant_uses() {
        let t = tenant();
        assert!(check_type_limit(&job(json!({"gpuType": "h100"})), &t, &skus(), 1).is_none());
        assert!(
            check_type_limit(&job(json!({"gpuType": "h100"})), &t, &skus(), 2)
                .unwrap()
                .contains("uses 3 of its 4")
        );
    }

    #[test]
    fn the_quota_must_have_room_for_every_gpu() {
        let q = GpuQuota {
            name: "rq".into(),
            hard: 4,
            used: 3,
        };
        assert!(check_quota(1, Some(&q)).is_none());
        assert!(
            check_quota(2, Some(&q))
                .unwrap()
                .contains("has 1 of its 4-GPU quota left")
        );
        assert!(check_quota(2, None).is_none());
    }

    #[test]
    fn a_template_label_needs_a_valid_template() {
        let mut j = job(json!({}));
        assert!(check_template(&j, None).is_none());
        j.metadata.labels = Some(BTreeMap::from([(
            labels::TEMPLATE.to_owned(),
            "t".to_owned(),
        )]));
        assert!(check_template(&j, Some(&TemplateState::Valid)).is_none());
        assert!(
            check_template(&j, None)
                .unwrap()
                .ends_with("template t does not exist")
        );
        assert!(
            check_template(&j, Some(&TemplateState::Invalid("bad".into())))
                .unwrap()
                .ends_with("is not valid: bad")
        );
    }

    #[test]
    fn a_reservation_must_exist_and_be_the_tenants() {
        let j = annotated(job(json!({})), labels::RESERVATION, "r1");
        let mut world = AdmissionWorld::default();
        assert!(
            check_reservation(&j, &world)
                .unwrap()
                .ends_with("does not exist")
        );
        world.reservation = Some(ReservationFacts {
            exists: true,
            owner: Some("ml".into()),
            ..ReservationFacts::default()
        });
        assert!(
            check_reservation(&j, &world)
                .unwrap()
                .ends_with("belongs to ml, and this namespace belongs to no tenant")
        );
        world.tenant = Some(tenant());
        assert!(check_reservation(&j, &world).is_none());
    }

    #[test]
    fn only_the_annotated_reservation_may_be_tolerated() {
        let tolerating = job(json!({"tolerations": [
            {"key": labels::RESERVED_TAINT, "operator": "Equal", "value": "r1"}]}));
        assert!(
            check_tolerations(&tolerating, &AdmissionWorld::default())
                .unwrap()
                .starts_with("spec.tolerations[0]")
        );
        let j = annotated(tolerating, labels::RESERVATION, "r1");
        assert!(check_tolerations(&j, &AdmissionWorld::default()).is_none());
        let everything = job(json!({"tolerations": [{"operator": "Exists"}]}));
        assert!(check_tolerations(&everything, &AdmissionWorld::default()).is_some());
    }

    #[test]
    fn tenant_facts_come_from_the_spec_and_the_status() {
        let mut t = gryvia_types::testing::tenant("ml", 4);
        t.spec.allowed_skus = vec!["h100".into()];
        let f = TenantFacts::of("ml", &t);
        assert_eq!(f.allowed_skus, vec!["h100"]);
        assert!(f.gpus_in_use_by_type.is_empty());
    }

    #[test]
    fn the_tightest_quota_has_the_fewest_gpus_left() {
        let rq = |name: &str, hard: &str, used: &str| -> ResourceQuota {
            serde_json::from_value(json!({"metadata": {"name": name}, "status": {
                "hard": {"requests.nvidia.com/gpu": hard}, "used": {"requests.nvidia.com/gpu": used}}}))
            .unwrap()
        };
        let none: ResourceQuota =
            serde_json::from_value(json!({"metadata": {"name": "cpu"}})).unwrap();
        let quotas = [rq("a", "8", "2"), rq("b", "4", "3"), none];
        assert_eq!(
            GpuQuota::tightest(&quotas),
            Some(GpuQuota {
                name: "b".into(),
                hard: 4,
                used: 3
            })
        );
        assert_eq!(GpuQuota::tightest(&quotas[2..]), None);
    }

    #[test]
    fn a_template_is_valid_only_with_its_valid_condition_true() {
        assert_eq!(TemplateState::of(None), TemplateState::Missing);
        let mut t: GryviaTemplate = serde_json::from_value(json!({
            "apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaTemplate",
            "metadata": {"name": "t"},
            "spec": {"category": "training", "defaults": {"image": "i"}}
        }))
        .unwrap();
        assert_eq!(
            TemplateState::of(Some(&t)),
            TemplateState::Invalid("the ai-operator has not checked it yet".into())
        );
        t.status = Some(
            serde_json::from_value(json!({"conditions": [{
            "type": "Valid", "status": "True", "reason": "Valid", "message": "",
            "lastTransitionTime": "2026-01-01T00:00:00Z"}]}))
            .unwrap(),
        );
        assert_eq!(TemplateState::of(Some(&t)), TemplateState::Valid);
    }

    #[test]
    fn a_project_reservation_is_for_its_namespace_and_a_user_reservation_for_its_user() {
        let j = annotated(job(json!({})), labels::RESERVATION, "r1");
        let mut world = AdmissionWorld {
            reservation: Some(ReservationFacts {
                exists: true,
                project: Some("vision".into()),
                ..ReservationFacts::default()
            }),
            ..AdmissionWorld::default()
        };
        assert_eq!(
            check_reservation(&j, &world).unwrap(),
            "metadata.annotations[gryvia.io/reservation]: reservation r1 belongs to project vision (jobs of namespace vision), and this job is in namespace ns"
        );
        world.reservation.as_mut().unwrap().project = Some("ns".into());
        assert_eq!(check_reservation(&j, &world), None);
        world.reservation = Some(ReservationFacts {
            exists: true,
            user: Some("alice".into()),
            ..ReservationFacts::default()
        });
        assert_eq!(
            check_reservation(&j, &world).unwrap(),
            "metadata.annotations[gryvia.io/reservation]: reservation r1 belongs to user alice, and this job is created by an unknown user"
        );
        world.requester = Some("bob".into());
        assert!(
            check_reservation(&j, &world)
                .unwrap()
                .ends_with("is created by bob")
        );
        world.requester = Some("alice".into());
        assert_eq!(check_reservation(&j, &world), None);
    }

    #[test]
    fn a_reservation_belongs_to_a_tenant_for_team_and_tenant_owners() {
        assert_eq!(ReservationFacts::of(None), ReservationFacts::default());
        let r: GryviaReservation = serde_json::from_value(json!({
            "apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaReservation",
            "metadata": {"name": "r"},
            "spec": {"owner": {"type": "team", "name": "ml"},
                     "resources": {"gpuType": "H100", "gpuCount": 8},
                     "schedule": {"type": "immediate"}}
        }))
        .unwrap();
        assert_eq!(ReservationFacts::of(Some(&r)).owner.as_deref(), Some("ml"));
        let mut r = r;
        r.spec.owner.type_ = OwnerType::Project;
        let f = ReservationFacts::of(Some(&r));
        assert_eq!((f.owner, f.project.as_deref()), (None, Some("ml")));
        r.spec.owner.type_ = OwnerType::User;
        assert_eq!(ReservationFacts::of(Some(&r)).user.as_deref(), Some("ml"));
    }

    #[test]
    fn blocked_budgets_carry_their_spend() {
        let b: GryviaBudget = serde_json::from_value(json!({
            "apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaBudget",
            "metadata": {"name": "ml"},
            "spec": {"scope": {"type": "tenant", "name": "ml"}, "period": {"type": "monthly"},
                     "limits": {"costUSD": 1}},
            "status": {"state": "blocked", "spendUSD": "2.5"}
        }))
        .unwrap();
        let all = [b];
        assert_eq!(
            blocked_budgets(&all, Some("ml"), "tenant-ml"),
            vec![BlockedBudget {
                name: "ml".into(),
                spend_usd: Some("2.5".into())
            }]
        );
        assert!(blocked_budgets(&all, Some("cv"), "tenant-cv").is_empty());
    }

    fn tiers() -> BTreeMap<String, i32> {
        BTreeMap::from([
            ("low".to_owned(), 100),
            ("normal".to_owned(), 1000),
            ("high".to_owned(), 10_000),
        ])
    }

    fn tiered(tier: &str) -> GryviaAIJob {
        annotated(job(json!({"gpus": 1})), labels::PRIORITY_CLASS, tier)
    }

    #[test]
    fn a_tenant_without_high_priority_may_not_name_a_tier_above_its_default() {
        let t = TenantFacts {
            default_tier: Some("normal".into()),
            no_high_tiers: true,
            ..tenant()
        };
        assert_eq!(check_tier(&tiered("normal"), &t, &tiers()), None);
        assert_eq!(check_tier(&tiered("low"), &t, &tiers()), None);
        assert_eq!(
            check_tier(&tiered("high"), &t, &tiers()).unwrap(),
            "metadata.annotations[gryvia.io/priority-class]: tier high (value 10000) is above its default tier normal (value 1000), and tenant ml may not use high-priority tiers (spec.priorities.allowHighPriority is false)"
        );
        assert!(
            check_tier(&tiered("nope"), &t, &tiers())
                .unwrap()
                .contains("GryviaPriority nope does not exist"),
            "a tier that cannot be weighed is refused"
        );
        assert_eq!(check_tier(&job(json!({})), &t, &tiers()), None, "no tier");
        let no_default = TenantFacts {
            default_tier: None,
            ..t.clone()
        };
        assert!(
            check_tier(&tiered("low"), &no_default, &tiers())
                .unwrap()
                .contains("is above 0 (no default tier)")
        );
        let allowed = TenantFacts {
            no_high_tiers: false,
            ..t
        };
        assert_eq!(check_tier(&tiered("high"), &allowed, &tiers()), None);
        assert_eq!(check_tier(&tiered("nope"), &allowed, &tiers()), None);
    }

    #[test]
    fn a_tenant_with_priorities_is_held_to_them_and_one_without_is_not() {
        let mut t: GryviaTenant = serde_json::from_value(json!({
            "metadata": {"name": "ml"},
            "spec": {"displayName": "ml"}
        }))
        .unwrap();
        assert!(!TenantFacts::of("ml", &t).no_high_tiers);
        t.spec.priorities = Some(gryvia_types::TenantPriorities {
            default: Some("normal".into()),
            allow_high_priority: false,
        });
        let f = TenantFacts::of("ml", &t);
        assert!(f.no_high_tiers);
        assert_eq!(f.default_tier.as_deref(), Some("normal"));
        let world = AdmissionWorld {
            tenant: Some(f),
            tiers: tiers(),
            ..AdmissionWorld::default()
        };
        assert!(!validate_job(&tiered("high"), &world).allowed);
        let mut cpu_only = tiered("high");
        cpu_only.spec.gpus = 0;
        assert!(
            !validate_job(&cpu_only, &world).allowed,
            "tiers order CPU jobs too"
        );
    }

    #[test]
    fn confidential_data_never_gets_a_shared_gpu() {
        let mut t = tenant();
        let half = job(json!({"gpus": 1, "gpuFraction": 0.5}));
        assert_eq!(check_shared_gpu(&half, &t), None);
        t.classification = Some(DataClassification::Internal);
        assert_eq!(check_shared_gpu(&half, &t), None);
        t.classification = Some(DataClassification::Confidential);
        assert_eq!(
            check_shared_gpu(&half, &t).unwrap(),
            "spec.gpuFraction: tenant ml's data is confidential (spec.governance.dataClassification), and its jobs never share a GPU: ask for whole GPUs"
        );
        assert_eq!(check_shared_gpu(&job(json!({"gpus": 1})), &t), None);
    }

    #[test]
    fn a_prepaid_balance_is_counted_down_by_all_spend_and_refuses_once_spent() {
        let mut t: GryviaTenant = serde_json::from_value(json!({
            "metadata": {"name": "ml"},
            "spec": {"displayName": "ml", "billing": {"paymentMethod": "prepaid", "prepaidBalance": "100"}}
        }))
        .unwrap();
        let f = TenantFacts::of("ml", &t);
        assert_eq!(f.prepaid_micros, Some(100_000_000));
        assert!(f.has_spend_quota());
        // This month's spend is 0; 90 USD were spent in earlier months.
        let mut s = spend(0, 0, Some((3600, "activeDeadlineSeconds")));
        s.total_usd_micros = 90_000_000;
        assert_eq!(check_spend(2, &f, Some(&s)), None, "8 USD of 10 left");
        assert_eq!(
            check_spend(4, &f, Some(&s)).unwrap(),
            "tenant ml's prepaid balance (spec.billing.prepaidBalance) is 100 USD: 90 USD spent, 10 USD left, and this job's estimate of 16 USD (4 GPUs for 3600 s, activeDeadlineSeconds, at 4 USD a GPU-hour) would overspend it"
        );
        s.total_usd_micros = 100_500_000;
        s.runtime = None;
        assert_eq!(
            check_spend(1, &f, Some(&s)).unwrap(),
            "tenant ml's prepaid balance (spec.billing.prepaidBalance) is 100 USD: 100.5 USD spent, 0 USD left, and new GPU jobs are refused until it is topped up"
        );
        // Paid by invoice, the balance means nothing.
        t.spec.billing.as_mut().unwrap().payment_method = Some(PaymentMethod::Invoice);
        assert_eq!(TenantFacts::of("ml", &t).prepaid_micros, None);
    }

    #[test]
    fn the_mutating_webhook_stamps_the_classification_and_the_default_tier() {
        let t = TenantFacts {
            default_tier: Some("normal".into()),
            classification: Some(DataClassification::Restricted),
            ..tenant()
        };
        let w = AdmissionWorld {
            tenant: Some(t),
            ..AdmissionWorld::default()
        };
        let ops = mutate_job(&job(json!({})), &w);
        assert!(ops.contains(&json!({"op": "add", "path": "/metadata/labels", "value": {"gryvia.io/data-classification": "restricted"}})), "{ops:?}");
        assert!(ops.contains(&json!({"op": "add", "path": "/metadata/annotations", "value": {"gryvia.io/priority-class": "normal"}})), "{ops:?}");
        // A job's own tier stays; its own classification label is replaced.
        let mut j = tiered("low");
        j.metadata.labels = Some(BTreeMap::from([(
            labels::DATA_CLASSIFICATION.to_owned(),
            "public".to_owned(),
        )]));
        let meta = |ops: Vec<Value>| -> Vec<Value> {
            ops.into_iter()
                .filter(|o| o["path"].as_str().unwrap().starts_with("/metadata"))
                .collect()
        };
        assert_eq!(
            meta(mutate_job(&j, &w)),
            vec![
                json!({"op": "add", "path": "/metadata/labels/gryvia.io~1data-classification", "value": "restricted"})
            ]
        );
        assert!(meta(mutate_job(&job(json!({})), &AdmissionWorld::default())).is_empty());
    }

    #[test]
    fn a_job_of_a_tier_above_a_preemptible_reservations_baseline_tolerates_it() {
        let world = AdmissionWorld {
            tiers: tiers(),
            preemptible: BTreeMap::from([("r-low".to_owned(), 100), ("r-high".to_owned(), 10_000)]),
            ..AdmissionWorld::default()
        };
        let j = tiered("normal");
        assert_eq!(preemptible_for(&j, &world), vec!["r-low".to_owned()]);
        assert!(
            preemptible_for(&job(json!({})), &world).is_empty(),
            "value 0"
        );
        let ops = mutate_job(&j, &world);
        let tol = ops
            .iter()
            .find(|o| o["path"] == "/spec/tolerations")
            .expect("a toleration");
        assert_eq!(
            tol["value"],
            json!([{"key": "gryvia.io/reserved", "operator": "Equal", "value": "r-low", "effect": "NoSchedule"}])
        );
        let mut mutated = j.clone();
        mutated.spec.tolerations = serde_json::from_value(tol["value"].clone()).unwrap();
        assert_eq!(check_tolerations(&mutated, &world), None);
        assert!(
            mutate_job(&mutated, &world)
                .iter()
                .all(|o| o["path"] != "/spec/tolerations"),
            "idempotent"
        );
        let mut greedy = mutated.clone();
        greedy.spec.tolerations = serde_json::from_value(json!([
            {"key": "gryvia.io/reserved", "operator": "Equal", "value": "r-high", "effect": "NoSchedule"}
        ]))
        .unwrap();
        assert!(
            check_tolerations(&greedy, &world)
                .unwrap()
                .contains("or of a tier above the owner's of a preemptible one")
        );
    }

    #[test]
    fn a_preemptible_reservations_baseline_is_its_tenants_default_tier() {
        let r = |name: &str, owner: &str, guarantees: Value| -> GryviaReservation {
            serde_json::from_value(json!({
                "metadata": {"name": name},
                "spec": {"owner": {"type": owner, "name": "ml"},
                         "resources": {"gpuType": "H100", "gpuCount": 8},
                         "schedule": {"type": "immediate", "endTime": "2099-01-01T00:00:00Z"},
                         "guarantees": guarantees}
            }))
            .unwrap()
        };
        let all = [
            r("soft", "tenant", json!({"preemptible": true})),
            r("hard", "tenant", json!({"preemptible": false})),
            r(
                "open",
                "tenant",
                json!({"preemptible": true, "exclusive": false}),
            ),
            r("project", "project", json!({"preemptible": true})),
        ];
        let got =
            preemptible_reservations(&all, |t| (t == "ml").then(|| "normal".to_owned()), &tiers());
        assert_eq!(
            got,
            BTreeMap::from([("soft".to_owned(), 1000), ("project".to_owned(), 0)]),
            "exclusive and preemptible only; a project has no default tier"
        );
    }
}
