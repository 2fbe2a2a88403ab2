//! Tenants and namespace quotas.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::money::Decimal;

// ---------------------------------------------------------------------------------------------
// GryviaTenant
// ---------------------------------------------------------------------------------------------

/// A team that shares the GPU fleet. The quota-operator gives it the namespace
/// `tenant-<name>` with a ResourceQuota, a LimitRange, an optional NetworkPolicy and, opt-in,
/// RoleBindings for its members.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "gryvia.io",
    version = "v1alpha1",
    kind = "GryviaTenant",
    status = "GryviaTenantStatus",
    shortname = "gtn",
    category = "gryvia",
    validation = Rule::new("size(self.metadata.name) <= 56 && !self.metadata.name.contains('.')").message("metadata.name: a tenant name has at most 56 characters and no dots (its namespace is tenant-<name>)"),
    printcolumn(
        name = "Display Name",
        type_ = "string",
        json_path = ".spec.displayName"
    ),
    printcolumn(
        name = "GPUs",
        type_ = "integer",
        json_path = ".spec.quotas.concurrentGPUs"
    ),
    printcolumn(name = "In Use", type_ = "integer", json_path = ".status.gpusInUse"),
    printcolumn(name = "Namespace", type_ = "string", json_path = ".status.namespace"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[x_kube(validation = Rule::new("!has(self.parentTenant) || self.parentTenant != ''").message("spec.parentTenant must not be empty when set"))]
#[serde(rename_all = "camelCase")]
pub struct GryviaTenantSpec {
    /// Name shown to people.
    #[schemars(length(min = 1, max = 256))]
    pub display_name: String,
    /// People of the tenant and their roles.
    #[serde(default)]
    #[schemars(length(max = 1000))]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["kind", "username"]))]
    pub members: Vec<TenantMember>,
    /// Resource limits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quotas: Option<TenantQuotas>,
    /// Priority settings of the tenant's jobs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priorities: Option<TenantPriorities>,
    /// Storage requests allowed per storage class (for example `home: 10Ti`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub storage_quotas: BTreeMap<String, Quantity>,
    /// Billing details.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub billing: Option<TenantBilling>,
    /// Governance: the data classification isolates the namespace and forbids shared GPUs
    /// (confidential, restricted) and is stamped on the tenant's pods and usage records.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub governance: Option<TenantGovernance>,
    /// Parent tenant: this tenant's quotas are capped by what the parent has left.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_tenant: Option<String>,
    /// Network isolation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_policy: Option<TenantNetworkPolicy>,
    /// Where the tenant's notices go.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notifications: Option<TenantNotifications>,
    /// GPU SKUs (GryviaGpuSku names) the tenant's jobs may request; any when empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub allowed_skus: Vec<String>,
    /// What happens to the namespace when the tenant is deleted.
    #[serde(default)]
    pub deletion_policy: DeletionPolicy,
}

/// A member of a tenant.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TenantMember {
    /// User name as the API server authenticates it (OIDC subject or user name), or the name of
    /// a group when `kind` is `Group`.
    #[schemars(length(min = 1, max = 253))]
    pub username: String,
    /// Whether `username` names one user or a group of users (an OIDC `groups` claim value):
    /// the tenant's RoleBindings name it with this subject kind, and the gateway maps a token's
    /// groups to tenants through it.
    #[serde(default)]
    pub kind: MemberKind,
    /// Role in the tenant.
    pub role: MemberRole,
}

/// What a tenant member's name names.
#[derive(
    Serialize,
    Deserialize,
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    JsonSchema,
)]
pub enum MemberKind {
    /// One user.
    #[default]
    User,
    /// A group of users.
    Group,
}

/// Role of a member.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum MemberRole {
    /// Manages the tenant's namespace (ClusterRole `admin`).
    Admin,
    /// Submits and manages jobs (ClusterRole `edit`).
    Member,
    /// Reads (ClusterRole `view`).
    Viewer,
}

/// Resource limits of a tenant.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TenantQuotas {
    /// GPU-hours per period.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_hours: Option<GpuHoursQuota>,
    /// Spend limit in US dollars.
    #[serde(default, rename = "costUSD", skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<CostQuota>,
    /// GPUs the tenant's pods may request at once (`requests.nvidia.com/gpu`).
    #[serde(
        default,
        rename = "concurrentGPUs",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(range(min = 0, max = 1000000))]
    pub concurrent_gpus: Option<i32>,
    /// GPUs per GPU product (the node label `nvidia.com/gpu.product`, for example
    /// `NVIDIA-H100-80GB-HBM3`) the tenant's pods may use at once. A ResourceQuota cannot select
    /// by node label, so the quota-operator reports usage per product and a
    /// `GpuTypeLimitExceeded` condition; new jobs are held to it at admission.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub gpus_per_type: BTreeMap<String, i32>,
}

/// GPU-hour limits.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GpuHoursQuota {
    /// GPU-hours per month.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub monthly: Option<i64>,
    /// Extra GPU-hours that may be used above `monthly`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub burst: Option<i64>,
}

/// A spend limit in whole US dollars.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CostQuota {
    /// Dollars per month.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub monthly: Option<i64>,
}

/// Priority settings of a tenant (acted on by the ai-operator's admission webhooks).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TenantPriorities {
    /// GryviaPriority the tenant's jobs get when they name none: the mutating webhook sets
    /// their `gryvia.io/priority-class` annotation to it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub default: Option<String>,
    /// May the tenant's jobs use high-priority tiers: GryviaPriorities whose value is above
    /// the value of `default` (or above 0 without a default, the value of pods without a
    /// PriorityClass). When false, the validating webhook refuses such jobs, and jobs naming a
    /// tier that does not exist.
    #[serde(default)]
    pub allow_high_priority: bool,
}

/// Billing details of a tenant.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TenantBilling {
    /// Cost center invoices are addressed to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_center: Option<String>,
    /// How the tenant pays.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payment_method: Option<PaymentMethod>,
    /// Credit bought in total, in US dollars (for `prepaid`; raise it to top up). Every usage
    /// record of the tenant, priced at the catalogue, counts it down; with the ai-operator's
    /// `--admission-gate`, new GPU jobs are refused once it is spent or when a job's estimate
    /// would overspend it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prepaid_balance: Option<Decimal>,
}

/// Payment method.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum PaymentMethod {
    /// Billed after use against a credit line.
    Credit,
    /// Invoiced monthly.
    Invoice,
    /// Paid in advance.
    Prepaid,
}

/// Governance labels of a tenant.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TenantGovernance {
    /// Most sensitive data the tenant handles.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_classification: Option<DataClassification>,
    /// Compliance regimes the tenant is under (for example SOC2, HIPAA): recorded, and shown
    /// on the tenant's namespace as labels `compliance.gryvia.io/<regime>: "true"` so
    /// cluster policy (admission policies, audit filters) can select them; Gryvia enforces
    /// nothing per regime.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    #[schemars(inner(regex(pattern = r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")))]
    pub compliance_requirements: Vec<String>,
}

/// Data classification. `confidential` and `restricted` tenants are always network-isolated
/// (restricted ones admit no other tenant, whatever `networkPolicy.allowedTenants` says) and
/// never get a shared GPU (`gpuFraction` is refused at admission); every classification is
/// stamped on the tenant's jobs, pods and usage records (`gryvia.io/data-classification`).
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum DataClassification {
    /// Public.
    Public,
    /// Internal.
    Internal,
    /// Confidential.
    Confidential,
    /// Restricted.
    Restricted,
}

impl DataClassification {
    /// The name as the schema writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            DataClassification::Public => "public",
            DataClassification::Internal => "internal",
            DataClassification::Confidential => "confidential",
            DataClassification::Restricted => "restricted",
        }
    }

    /// Whether the tenant's namespace is always isolated and its GPUs never shared.
    pub fn isolating(self) -> bool {
        self >= DataClassification::Confidential
    }
}

/// Where a tenant's notices go.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TenantNotifications {
    /// Who gets the e-mail of threshold alerts (action `email`) of the budgets whose scope is
    /// the tenant (`team` or `tenant` of its name), besides each budget's `emailRecipients`
    /// and the quota-operator's `--budget-email-to`. Quarantine notices are Events on the
    /// tenant's jobs whose pods a quarantine evicts (`docs/gpu-health.md`), not e-mail.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 20))]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    #[schemars(inner(regex(pattern = r"^[^@\s]+@[^@\s]+\.[^@\s]+$"), length(max = 254)))]
    pub email: Vec<String>,
}

/// Network isolation of a tenant.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TenantNetworkPolicy {
    /// Deny traffic from other tenants' namespaces.
    #[serde(default)]
    pub isolated: bool,
    /// Tenants allowed in although `isolated` is set.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allowed_tenants: Vec<String>,
}

/// What happens to a tenant's namespace when the tenant is deleted.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum DeletionPolicy {
    /// Keep a namespace that still holds workloads (the status and an Event say so).
    #[default]
    Retain,
    /// Delete the namespace and everything in it.
    Delete,
}

/// Observed state of a tenant.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GryviaTenantStatus {
    /// Generation of the spec last acted on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The tenant's namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// GPUs requested by the tenant's pods now.
    #[serde(default)]
    pub gpus_in_use: i32,
    /// GPUs the tenant may use (after the parent's cap).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_limit: Option<i32>,
    /// GPUs in use per GPU product (node label `nvidia.com/gpu.product`) of the nodes the
    /// tenant's running pods are on.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub gpus_in_use_by_type: BTreeMap<String, i32>,
    /// `gpusInUse` as a percentage of `gpuLimit`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_utilization_percent: Option<i32>,
    /// Pods of the tenant.
    #[serde(default)]
    pub pods: i32,
    /// Conditions (`Ready`, `QuotaCapped` when the parent caps a quota).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

// ---------------------------------------------------------------------------------------------
// GryviaQuota
// ---------------------------------------------------------------------------------------------

/// Hard limits for a list of namespaces, kept as a ResourceQuota in each.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "gryvia.io",
    version = "v1alpha1",
    kind = "GryviaQuota",
    status = "GryviaQuotaStatus",
    shortname = "gqt",
    category = "gryvia",
    printcolumn(name = "GPUs", type_ = "integer", json_path = ".spec.hard.gpus"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[x_kube(validation = Rule::new("has(self.hard.gpus) || has(self.hard.cpu) || has(self.hard.memory) || has(self.hard.storage) || has(self.hard.pods) || size(self.hard.gpusPerType) > 0").message("spec.hard must set at least one limit"))]
#[serde(rename_all = "camelCase")]
pub struct GryviaQuotaSpec {
    /// Namespaces the limits apply to (each gets its own ResourceQuota with these limits).
    #[schemars(length(min = 1, max = 1000))]
    pub namespaces: Vec<String>,
    /// The limits.
    pub hard: QuotaLimits,
}

/// Hard limits of a quota.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct QuotaLimits {
    /// `requests.nvidia.com/gpu`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 1000000))]
    pub gpus: Option<i32>,
    /// GPUs per GPU type (SKU name to count).
    #[serde(default)]
    pub gpus_per_type: BTreeMap<String, i32>,
    /// `requests.cpu`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<Quantity>,
    /// `requests.memory`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<Quantity>,
    /// `requests.storage`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage: Option<Quantity>,
    /// `pods`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub pods: Option<i32>,
}

/// Observed state of a quota.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GryviaQuotaStatus {
    /// Generation of the spec last acted on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// GPUs requested per namespace.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub gpus_used: BTreeMap<String, i32>,
    /// Conditions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}
