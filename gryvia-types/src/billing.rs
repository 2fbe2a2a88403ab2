//! Budgets, metering and the GPU price catalogue.
//!
//! Every amount is an estimate from metered usage and catalogue prices in one currency; money
//! is [`Decimal`] text or whole dollars, never a float.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::ai::SecretKeyRef;
use crate::money::Decimal;

// ---------------------------------------------------------------------------------------------
// GryviaBudget
// ---------------------------------------------------------------------------------------------

/// A spend limit for a scope and period, with alert thresholds and optional enforcement.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "gryvia.io",
    version = "v1alpha1",
    kind = "GryviaBudget",
    status = "GryviaBudgetStatus",
    shortname = "gbud",
    category = "gryvia",
    printcolumn(name = "Scope", type_ = "string", json_path = ".spec.scope.name"),
    printcolumn(name = "Period", type_ = "string", json_path = ".spec.period.type"),
    printcolumn(name = "State", type_ = "string", json_path = ".status.state"),
    printcolumn(name = "Spend", type_ = "string", json_path = ".status.spendUSD"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[x_kube(validation = Rule::new("has(self.limits.costUSD) || has(self.limits.gpuHours)").message("spec.limits must set costUSD or gpuHours"))]
#[serde(rename_all = "camelCase")]
pub struct GryviaBudgetSpec {
    /// Whose spend is counted.
    pub scope: BudgetScope,
    /// The period the limits apply to.
    pub period: BudgetPeriod,
    /// The limits.
    pub limits: BudgetLimits,
    /// Thresholds, in percent of the limit, and what happens when spend crosses them.
    #[serde(default)]
    #[schemars(length(max = 16))]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["threshold"]))]
    pub alerts: Vec<BudgetAlert>,
    /// Blocking of new jobs (acted on by the ai-operator's opt-in admission gate).
    #[serde(default)]
    pub enforcement: BudgetEnforcement,
    /// Who gets the e-mail of alerts with the `email` action, besides the quota-operator's
    /// `--budget-email-to`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 20))]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    #[schemars(inner(regex(pattern = r"^[^@\s]+@[^@\s]+\.[^@\s]+$"), length(max = 254)))]
    pub email_recipients: Vec<String>,
}

/// Whose spend a budget counts.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BudgetScope {
    /// Kind of scope.
    #[serde(rename = "type")]
    pub type_: BudgetScopeType,
    /// Name (tenant, team or namespace name).
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
}

/// Kind of budget scope.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum BudgetScopeType {
    /// A team (a GryviaTenant).
    Team,
    /// A tenant.
    Tenant,
    /// A namespace.
    Namespace,
    /// The whole cluster.
    Cluster,
}

/// Period of a budget.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BudgetPeriod {
    /// Length of a period; periods follow the UTC calendar.
    #[serde(rename = "type")]
    pub type_: PeriodType,
}

/// Length of a period.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum PeriodType {
    /// A UTC day.
    Daily,
    /// A week from Monday 00:00 UTC.
    Weekly,
    /// A calendar month.
    Monthly,
    /// A calendar quarter.
    Quarterly,
    /// A calendar year.
    Yearly,
}

/// Limits of a budget.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BudgetLimits {
    /// Spend limit, whole US dollars.
    #[serde(default, rename = "costUSD", skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub cost_usd: Option<i64>,
    /// GPU-hour limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub gpu_hours: Option<i64>,
}

/// An alert threshold.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BudgetAlert {
    /// Percent of the limit (above 100 alerts on overspend).
    #[schemars(range(min = 1, max = 1000))]
    pub threshold: i32,
    /// What happens when spend crosses it.
    #[serde(default)]
    #[schemars(length(max = 4))]
    pub actions: Vec<AlertAction>,
}

/// What an alert does.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum AlertAction {
    /// A Kubernetes Event on the budget (always emitted).
    Event,
    /// A signed JSON POST to the quota-operator's budget webhook (`--budget-webhook-url`).
    Webhook,
    /// An e-mail to `emailRecipients` and the quota-operator's `--budget-email-to`, through
    /// the SMTP server of its `--smtp-server`.
    Email,
    /// Block new jobs in the scope (with the admission gate enabled).
    Block,
}

/// Enforcement of a budget.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BudgetEnforcement {
    /// Whether the budget blocks anything.
    #[serde(default)]
    pub enabled: bool,
    /// What enforcement does when the limit is reached.
    #[serde(default)]
    pub action: EnforcementAction,
}

/// What enforcement does.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum EnforcementAction {
    /// Reject new jobs in the scope.
    #[default]
    Block,
    /// Admit, with a warning.
    Warn,
}

/// Observed spend of a budget.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GryviaBudgetStatus {
    /// Where spend stands against the limits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<BudgetState>,
    /// Spend in the current period, US dollars.
    #[serde(default, rename = "spendUSD", skip_serializing_if = "Option::is_none")]
    pub spend_usd: Option<Decimal>,
    /// GPU-hours in the current period.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_hours: Option<Decimal>,
    /// Forecast spend at the end of the period, US dollars.
    #[serde(
        default,
        rename = "forecastUSD",
        skip_serializing_if = "Option::is_none"
    )]
    pub forecast_usd: Option<Decimal>,
    /// Start of the current period.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub period_start: Option<Time>,
    /// Thresholds already alerted in this period.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub alerted_thresholds: Vec<i32>,
    /// Currencies of usage records that could not be counted (mixed currencies).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub uncounted_currencies: Vec<String>,
    /// Alert deliveries (webhook and e-mail) of threshold crossings: every pending one and
    /// the newest finished ones.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deliveries: Vec<AlertDelivery>,
    /// Conditions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// One alert of a threshold crossing on one channel, delivered at least once.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AlertDelivery {
    /// Unique id (budget, period, threshold, channel), sent as `webhook-id` and
    /// `X-Gryvia-Delivery` (or the e-mail's Message-ID) so receivers can drop duplicates.
    pub id: String,
    /// `webhook` or `email`.
    pub channel: AlertChannel,
    /// The threshold crossed, percent.
    pub threshold: i32,
    /// Utilisation when it was crossed, percent.
    pub percent: i64,
    /// Spend when it was crossed, US dollars.
    #[serde(rename = "spendUSD")]
    pub spend_usd: Decimal,
    /// GPU-hours when it was crossed.
    pub gpu_hours: Decimal,
    /// Start of the period it was crossed in.
    pub period_start: Time,
    /// When it was crossed.
    pub time: Time,
    /// Attempts so far.
    pub attempts: i32,
    /// When the last attempt was made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_attempt: Option<Time>,
    /// The receiver's answer to the last attempt (HTTP status, or SMTP reply code).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_code: Option<i32>,
    /// Why the last attempt failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// `Pending`, `Delivered` or `GaveUp`.
    pub state: crate::ai::DeliveryState,
}

/// Where an alert goes.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum AlertChannel {
    /// The budget webhook.
    Webhook,
    /// E-mail.
    Email,
}

/// Budget state.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum BudgetState {
    /// Below every alert threshold.
    Ok,
    /// Past an alert threshold below 100 %.
    Warning,
    /// At or past 100 %.
    Exceeded,
    /// Past 100 % with enforcement on: new jobs are rejected.
    Blocked,
}

// ---------------------------------------------------------------------------------------------
// GryviaUsageRecord
// ---------------------------------------------------------------------------------------------

/// Metered GPU use of one job on one SKU over an interval. Open records (no `endTime`) are
/// counted up to now.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "gryvia.io",
    version = "v1alpha1",
    kind = "GryviaUsageRecord",
    status = "GryviaUsageRecordStatus",
    shortname = "gur",
    category = "gryvia",
    printcolumn(name = "Tenant", type_ = "string", json_path = ".spec.tenant"),
    printcolumn(name = "SKU", type_ = "string", json_path = ".spec.sku"),
    printcolumn(name = "GPUs", type_ = "integer", json_path = ".spec.gpuCount"),
    printcolumn(name = "Start", type_ = "date", json_path = ".spec.startTime"),
    printcolumn(name = "End", type_ = "date", json_path = ".spec.endTime")
)]
#[x_kube(validation = Rule::new("!has(self.endTime) || self.startTime <= self.endTime").message("spec.endTime must not be before spec.startTime"))]
#[x_kube(validation = Rule::new("self == oldSelf || !has(oldSelf.endTime)").message("a closed usage record is immutable"))]
#[x_kube(validation = Rule::new("has(self.network) || (has(self.sku) && size(self.sku) > 0)").message("spec.sku is required on a GPU usage record"))]
#[x_kube(validation = Rule::new("!has(self.network) || self.gpuCount == 0").message("a network usage record (spec.network) has spec.gpuCount 0"))]
#[serde(rename_all = "camelCase")]
pub struct GryviaUsageRecordSpec {
    /// Tenant charged.
    #[schemars(length(min = 1, max = 253))]
    pub tenant: String,
    /// Namespace of the job.
    #[schemars(length(min = 1, max = 63))]
    pub namespace: String,
    /// The metered workload.
    pub workload: WorkloadRef,
    /// GryviaGpuSku name (a GPU record's; a network record has none).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(max = 253))]
    pub sku: String,
    /// GPUs in use during the interval.
    #[schemars(range(min = 0, max = 1000000))]
    pub gpu_count: i32,
    /// Start of the interval.
    pub start_time: Time,
    /// End of the interval (open while the job runs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_time: Option<Time>,
    /// The GryviaTemplate the job was made from (its `gryvia.io/template` label): the admission
    /// gate estimates a new job of the template from the last runs' lengths.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub template: Option<String>,
    /// Percent off the SKU's price (a reservation's `billing.discount` on its idle GPU time).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 100))]
    pub discount_percent: Option<i32>,
    /// A network record (written by the network-operator from a GryviaNetworkCost): the
    /// priced transfer of the namespace's pods over the interval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<NetworkUsage>,
}

/// The priced network transfer of a network usage record.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NetworkUsage {
    /// Bytes sent out of the cluster.
    #[schemars(range(min = 0))]
    pub egress_bytes: i64,
    /// Bytes exchanged with other zones.
    #[schemars(range(min = 0))]
    pub cross_zone_bytes: i64,
    /// What they cost.
    pub amount: Decimal,
    /// Currency of `amount` (ISO 4217).
    #[schemars(regex(pattern = r"^[A-Z]{3}$"))]
    pub currency: String,
}

/// A metered workload.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadRef {
    /// Kind (`GryviaAIJob`, `GryviaInferenceService`, `GryviaWorkspace`, ...).
    pub kind: String,
    /// Name.
    pub name: String,
    /// UID.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
}

/// Priced view of a usage record.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GryviaUsageRecordStatus {
    /// GPU-seconds metered (up to now for an open record).
    #[serde(default)]
    pub gpu_seconds: i64,
    /// Estimated cost.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<Decimal>,
    /// Currency of `cost`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub currency: Option<String>,
    /// How busy the job's GPUs were, from the node agents' readings (when they report).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub utilisation: Option<RecordUtilisation>,
}

/// How busy a usage record's GPUs were over the part of its interval the node agents' readings
/// cover (sampled when the record is priced: at least every minute while it is open).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RecordUtilisation {
    /// Mean GPU utilisation over the sampled time, percent.
    pub mean_percent: i32,
    /// Seconds of the interval the readings cover.
    pub sampled_seconds: i64,
    /// Utilisation percent times seconds, summed over the samples (the mean's numerator).
    pub percent_seconds: i64,
    /// GPU-seconds the GPUs idled: GPUs x sampled seconds x (100 - utilisation) / 100.
    pub idle_gpu_seconds: i64,
    /// When it was last sampled.
    pub sampled_at: Time,
}

// ---------------------------------------------------------------------------------------------
// GryviaGpuSku
// ---------------------------------------------------------------------------------------------

/// A GPU product in the price catalogue.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "gryvia.io",
    version = "v1alpha1",
    kind = "GryviaGpuSku",
    shortname = "gsku",
    category = "gryvia",
    printcolumn(name = "Product", type_ = "string", json_path = ".spec.gpuProduct"),
    printcolumn(
        name = "Price/GPU-h",
        type_ = "string",
        json_path = ".spec.pricePerGpuHour"
    ),
    printcolumn(name = "Currency", type_ = "string", json_path = ".spec.currency"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct GryviaGpuSkuSpec {
    /// Name shown to people.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub display_name: Option<String>,
    /// Value of the node label `nvidia.com/gpu.product` for this SKU.
    #[schemars(length(min = 1, max = 128))]
    pub gpu_product: String,
    /// Memory per GPU, MiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    #[serde(rename = "memoryMiB")]
    pub memory_mib: Option<i64>,
    /// Price of one GPU for one hour.
    pub price_per_gpu_hour: Decimal,
    /// ISO 4217 currency code.
    #[serde(default = "default_currency")]
    #[schemars(regex(pattern = r"^[A-Z]{3}$"))]
    pub currency: String,
}

fn default_currency() -> String {
    "USD".to_owned()
}

// ---------------------------------------------------------------------------------------------
// GryviaInvoice
// ---------------------------------------------------------------------------------------------

/// A tenant's charges for a period, priced from usage records and the catalogue: open while
/// the period runs, issued (final) once it has ended.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "gryvia.io",
    version = "v1alpha1",
    kind = "GryviaInvoice",
    status = "GryviaInvoiceStatus",
    shortname = "ginv",
    category = "gryvia",
    printcolumn(name = "Tenant", type_ = "string", json_path = ".spec.tenant"),
    printcolumn(name = "Total", type_ = "string", json_path = ".status.total"),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[x_kube(validation = Rule::new("self.periodStart < self.periodEnd").message("spec.periodStart must be before spec.periodEnd"))]
#[x_kube(validation = Rule::new("self == oldSelf").message("an invoice's spec is immutable"))]
#[serde(rename_all = "camelCase")]
pub struct GryviaInvoiceSpec {
    /// Tenant invoiced.
    #[schemars(length(min = 1, max = 253))]
    pub tenant: String,
    /// Start of the period (inclusive).
    pub period_start: Time,
    /// End of the period (exclusive).
    pub period_end: Time,
    /// Currency of the invoice; records in other currencies are listed, not summed.
    #[serde(default = "default_currency")]
    #[schemars(regex(pattern = r"^[A-Z]{3}$"))]
    pub currency: String,
    /// Signed webhook notified when the invoice is issued.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhook: Option<InvoiceWebhook>,
}

/// Webhook of an invoice.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[x_kube(validation = Rule::new("self.url.startsWith('https://') || self.allowInsecure").message("webhook.url must be https:// unless webhook.allowInsecure is true"))]
#[serde(rename_all = "camelCase")]
pub struct InvoiceWebhook {
    /// Where to POST (https, or http with `allowInsecure`).
    #[schemars(regex(pattern = r"^https?://[^\s]+$"))]
    pub url: String,
    /// Allow a plain `http://` URL (a receiver on the same host or network).
    #[serde(default)]
    pub allow_insecure: bool,
    /// Secret with the HMAC key (in the quota-operator's namespace).
    pub secret_ref: SecretKeyRef,
}

/// Computed content of an invoice.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GryviaInvoiceStatus {
    /// Where the invoice stands.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<InvoicePhase>,
    /// When it was issued (its lines final from then on).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub issued_at: Option<Time>,
    /// One line per SKU priced in the invoice's currency.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub line_items: Vec<InvoiceLine>,
    /// One line per GryviaNetworkCost whose network usage records are priced in the
    /// invoice's currency.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub network_lines: Vec<InvoiceNetworkLine>,
    /// The charges per job (namespace, workload and SKU) that make up the lines.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub jobs: Vec<InvoiceJob>,
    /// Sum of the lines, in the invoice's currency.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total: Option<Decimal>,
    /// GPU-hours of every line.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_hours: Option<Decimal>,
    /// Of `gpuHours`, those the GPUs idled, where the node agents reported utilisation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_gpu_hours: Option<Decimal>,
    /// Usage priced in other currencies, listed per currency and not added to the total.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub other_currencies: Vec<CurrencyAmount>,
    /// Usage of SKUs missing from the catalogue: GPU-hours per SKU, not priced.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unpriced: Vec<UnpricedUsage>,
    /// Usage records counted.
    #[serde(default)]
    pub records: i32,
    /// Whether the webhook accepted the invoice.
    #[serde(default)]
    pub webhook_delivered: bool,
    /// The webhook delivery of the issued invoice.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhook_delivery: Option<WebhookDelivery>,
    /// Conditions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// Phase of an invoice.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum InvoicePhase {
    /// The period has not ended; lines grow.
    Open,
    /// The period has ended; lines are final.
    Issued,
}

/// The charges of one job on one SKU within the invoice's period.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InvoiceJob {
    /// Namespace of the job.
    pub namespace: String,
    /// Kind of the workload.
    pub kind: String,
    /// Name of the workload.
    pub name: String,
    /// GryviaGpuSku name.
    pub sku: String,
    /// GPU-hours within the period.
    pub gpu_hours: Decimal,
    /// What they cost, in the SKU's currency.
    pub amount: Decimal,
    /// The SKU's currency.
    pub currency: String,
    /// Mean utilisation of the job's GPUs, percent, where the node agents reported it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mean_utilisation_percent: Option<i32>,
    /// Of `gpuHours`, those the GPUs idled (from the same readings).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_gpu_hours: Option<Decimal>,
}

/// An amount in a currency.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CurrencyAmount {
    /// ISO 4217 code.
    pub currency: String,
    /// The amount.
    pub amount: Decimal,
}

/// Usage that could not be priced.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UnpricedUsage {
    /// The SKU the records name.
    pub sku: String,
    /// GPU-hours within the period.
    pub gpu_hours: Decimal,
}

/// One outbound webhook delivery, at least once.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WebhookDelivery {
    /// Unique id, sent as `webhook-id` and `X-Gryvia-Delivery`.
    pub id: String,
    /// Attempts so far.
    pub attempts: i32,
    /// When the last attempt was made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_attempt: Option<Time>,
    /// HTTP status of the last attempt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_code: Option<i32>,
    /// Why the last attempt failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// `Pending`, `Delivered` or `GaveUp`.
    pub state: crate::ai::DeliveryState,
}

/// A network line of an invoice: the transfer its network usage records priced.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InvoiceNetworkLine {
    /// The GryviaNetworkCost that priced it.
    pub source: String,
    /// Bytes sent out of the cluster.
    pub egress_bytes: i64,
    /// Bytes exchanged with other zones.
    pub cross_zone_bytes: i64,
    /// What they cost.
    pub amount: Decimal,
}

/// One line of an invoice.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InvoiceLine {
    /// GryviaGpuSku name.
    pub sku: String,
    /// GPU-hours.
    pub gpu_hours: Decimal,
    /// Price per GPU-hour.
    pub unit_price: Decimal,
    /// `gpuHours × unitPrice`.
    pub amount: Decimal,
}
