//! Priorities, the native queue scheduler's queues, and reservations.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

// ---------------------------------------------------------------------------------------------
// GryviaPriority
// ---------------------------------------------------------------------------------------------

/// A priority tier. The ai-operator creates a Kubernetes PriorityClass of the same name, and
/// jobs annotated `gryvia.io/priority-class: <name>` run their pods with it.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "gryvia.io",
    version = "v1alpha1",
    kind = "GryviaPriority",
    status = "GryviaPriorityStatus",
    shortname = "gpri",
    category = "gryvia",
    printcolumn(name = "Value", type_ = "integer", json_path = ".spec.value"),
    printcolumn(
        name = "Preemption",
        type_ = "string",
        json_path = ".spec.preemptionPolicy"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct GryviaPrioritySpec {
    /// Priority value of the PriorityClass (higher runs first; user classes stay at or below
    /// one billion).
    #[schemars(range(min = -2147483648, max = 1000000000))]
    pub value: i32,
    /// Whether pods of this class preempt lower-priority pods.
    #[serde(default)]
    pub preemption_policy: PreemptionPolicy,
    /// What the tier is for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// How far jobs of this tier may exceed their native queue's GPU quota (the native queue
    /// scheduler admits them over a quota entry's nominal by that share of it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quota_override: Option<QuotaOverride>,
    /// Service level promised to jobs of this tier: a job waiting longer to start gets the
    /// condition `SLABreached` and a Warning Event, goes ahead of its tier's jobs within
    /// theirs in its native queue, and is counted in `status.slaBreaches`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sla: Option<PrioritySla>,
}

/// Preemption policy of a PriorityClass.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum PreemptionPolicy {
    /// Preempt lower-priority pods when needed.
    #[default]
    PreemptLowerPriority,
    /// Never preempt.
    Never,
}

/// Quota override of a priority tier.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct QuotaOverride {
    /// Extra GPUs, as a percentage of the queue's quota entry (`nominal`): the tier's jobs
    /// together may use that much over the queue's quota and what it may borrow.
    #[schemars(range(min = 0, max = 100))]
    pub percent: i32,
}

/// Service level of a priority tier.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PrioritySla {
    /// Longest a job of this tier should wait in a queue, seconds.
    #[schemars(range(min = 1))]
    pub max_queue_seconds: i64,
}

/// Observed state of a priority tier.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GryviaPriorityStatus {
    /// Name of the PriorityClass made from it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_class_name: Option<String>,
    /// With `sla`: the tier's jobs (of those that exist now) judged against it, having
    /// started or waited past `maxQueueSeconds` (their `SLABreached` condition).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sla_jobs: Option<i32>,
    /// With `sla`: of those, the jobs that waited longer than `maxQueueSeconds`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sla_breaches: Option<i32>,
    /// Conditions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

// ---------------------------------------------------------------------------------------------
// GryviaQueue
// ---------------------------------------------------------------------------------------------

/// A queue of the native scheduler: nominal GPU quota per GPU type, borrowing inside a
/// cohort, gang admission and priority preemption.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "gryvia.io",
    version = "v1alpha1",
    kind = "GryviaQueue",
    status = "GryviaQueueStatus",
    shortname = "gq",
    category = "gryvia",
    printcolumn(name = "Cohort", type_ = "string", json_path = ".spec.cohort"),
    printcolumn(name = "Pending", type_ = "integer", json_path = ".status.pendingJobs"),
    printcolumn(
        name = "Admitted",
        type_ = "integer",
        json_path = ".status.admittedJobs"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct GryviaQueueSpec {
    /// Namespaces whose jobs enter this queue.
    #[schemars(length(min = 1, max = 256))]
    pub namespaces: Vec<String>,
    /// Queues of one cohort lend each other unused quota.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cohort: Option<String>,
    /// GPU quota per GPU type.
    #[schemars(length(min = 1, max = 32))]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["gpuType"]))]
    pub resources: Vec<QueueResource>,
    /// Order of admission.
    #[serde(default)]
    pub queueing_strategy: QueueingStrategy,
    /// Preemption rules.
    #[serde(default)]
    pub preemption: QueuePreemption,
    /// Admit a multi-worker job only when all its workers fit.
    #[serde(default = "default_true")]
    pub gang_admission: bool,
}

fn default_true() -> bool {
    true
}

/// Quota of one GPU type in a queue.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[x_kube(validation = Rule::new("!has(self.lendingLimit) || self.lendingLimit <= self.nominal").message("lendingLimit must not exceed nominal"))]
#[serde(rename_all = "camelCase")]
pub struct QueueResource {
    /// GPU product (`nvidia.com/gpu.product`), or `*` for any.
    #[schemars(length(min = 1, max = 128))]
    pub gpu_type: String,
    /// GPUs guaranteed to this queue.
    #[schemars(range(min = 0, max = 1000000))]
    pub nominal: i32,
    /// Extra GPUs this queue may borrow from its cohort (unlimited when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 1000000))]
    pub borrowing_limit: Option<i32>,
    /// GPUs of `nominal` this queue may lend to its cohort (all when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 1000000))]
    pub lending_limit: Option<i32>,
}

/// Order of admission.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum QueueingStrategy {
    /// Highest priority first, then oldest; a job that does not fit blocks those behind it.
    #[default]
    StrictFIFO,
    /// Like StrictFIFO, but jobs behind one that does not fit may be admitted.
    BestEffortFIFO,
}

/// Preemption rules of a queue.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct QueuePreemption {
    /// Preempt lower-priority jobs of the same queue.
    #[serde(default)]
    pub within_queue: PreemptWithin,
    /// Reclaim nominal quota lent to other queues of the cohort.
    #[serde(default)]
    pub reclaim_within_cohort: bool,
}

/// Preemption inside a queue.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum PreemptWithin {
    /// Never.
    #[default]
    Never,
    /// Jobs of lower priority may be preempted.
    LowerPriority,
}

/// Observed state of a queue.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GryviaQueueStatus {
    /// Jobs waiting.
    #[serde(default)]
    pub pending_jobs: i32,
    /// Jobs admitted and not finished.
    #[serde(default)]
    pub admitted_jobs: i32,
    /// GPUs charged to this queue per quota entry (`spec.resources[].gpuType`); fractions of
    /// a GPU count as such.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub gpus_in_use: BTreeMap<String, f64>,
    /// GPUs borrowed from the cohort per quota entry.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub gpus_borrowed: BTreeMap<String, f64>,
    /// GPUs of this queue's nominal quota lent to the cohort, per quota entry.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub gpus_lent: BTreeMap<String, f64>,
    /// Conditions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

// ---------------------------------------------------------------------------------------------
// GryviaReservation
// ---------------------------------------------------------------------------------------------

/// Nodes held for one owner during a time window: they are tainted
/// `gryvia.io/reserved:NoSchedule` and labelled, and only jobs annotated
/// `gryvia.io/reservation: <name>` tolerate the taint.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "gryvia.io",
    version = "v1alpha1",
    kind = "GryviaReservation",
    status = "GryviaReservationStatus",
    shortname = "grsv",
    category = "gryvia",
    printcolumn(name = "Owner", type_ = "string", json_path = ".spec.owner.name"),
    printcolumn(
        name = "GPU Type",
        type_ = "string",
        json_path = ".spec.resources.gpuType"
    ),
    printcolumn(
        name = "GPUs",
        type_ = "integer",
        json_path = ".spec.resources.gpuCount"
    ),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct GryviaReservationSpec {
    /// Who the nodes are reserved for.
    pub owner: ReservationOwner,
    /// What is reserved.
    pub resources: ReservationResources,
    /// When.
    pub schedule: ReservationSchedule,
    /// Promises made to the owner.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guarantees: Option<ReservationGuarantees>,
    /// How the reservation is charged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub billing: Option<ReservationBilling>,
}

/// Owner of a reservation.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReservationOwner {
    /// Kind of owner.
    #[serde(rename = "type")]
    pub type_: OwnerType,
    /// Owner name (for a tenant or team, the GryviaTenant name).
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
}

/// Kind of owner.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum OwnerType {
    /// A team (a GryviaTenant).
    Team,
    /// A tenant.
    Tenant,
    /// A project.
    Project,
    /// A single user.
    User,
}

/// What a reservation holds.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReservationResources {
    /// GPU product; matched against the node label `nvidia.com/gpu.product`.
    #[schemars(length(min = 1, max = 128))]
    pub gpu_type: String,
    /// GPUs to reserve; whole nodes are reserved until the count is covered.
    #[schemars(range(min = 1, max = 100000))]
    pub gpu_count: i32,
}

/// When a reservation holds its nodes.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[x_kube(validation = Rule::new("self.type != 'recurring' || has(self.recurrence)").message("schedule.recurrence is required when schedule.type is recurring"))]
#[x_kube(validation = Rule::new("self.type != 'immediate' || has(self.endTime)").message("schedule.endTime is required when schedule.type is immediate"))]
#[x_kube(validation = Rule::new("!has(self.startTime) || !has(self.endTime) || timestamp(self.startTime) < timestamp(self.endTime)").message("schedule.startTime must be before schedule.endTime"))]
#[serde(rename_all = "camelCase")]
pub struct ReservationSchedule {
    /// `immediate` (from now or `startTime` until `endTime`) or `recurring` (windows from
    /// `recurrence`, optionally bounded by `startTime` and `endTime`).
    #[serde(rename = "type")]
    pub type_: ScheduleType,
    /// Start of the reservation (RFC 3339). Now when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(
        pattern = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?(Z|[+-][0-9]{2}:[0-9]{2})$"
    ))]
    pub start_time: Option<String>,
    /// End of the reservation (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(
        pattern = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?(Z|[+-][0-9]{2}:[0-9]{2})$"
    ))]
    pub end_time: Option<String>,
    /// Recurring windows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recurrence: Option<Recurrence>,
    /// Minutes before each window opens that the nodes are already held (labelled, and
    /// tainted for an exclusive reservation): no new work lands on them, so the window opens
    /// with free GPUs; work still there when the owner's pods wait for room is evicted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 1440))]
    pub lead_minutes: Option<i32>,
}

/// Kind of schedule.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ScheduleType {
    /// One window.
    Immediate,
    /// Repeating windows.
    Recurring,
}

/// A repeating window: on the given days, from `startTime` for `durationMinutes`, in a time
/// zone. A window may cross midnight.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Recurrence {
    /// Days the window opens (every day when empty).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 7))]
    pub days_of_week: Vec<Weekday>,
    /// Local opening time, `HH:MM` (24 h).
    #[schemars(regex(pattern = r"^([01][0-9]|2[0-3]):[0-5][0-9]$"))]
    pub start_time: String,
    /// Length of each window, minutes (at most a week).
    #[schemars(range(min = 1, max = 10080))]
    pub duration_minutes: i32,
    /// IANA time zone of `startTime`, for example `Europe/Berlin`.
    #[serde(default = "default_tz")]
    #[schemars(length(min = 1, max = 64))]
    pub time_zone: String,
}

fn default_tz() -> String {
    "UTC".to_owned()
}

/// Day of the week.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, JsonSchema,
)]
pub enum Weekday {
    /// Monday.
    Mon,
    /// Tuesday.
    Tue,
    /// Wednesday.
    Wed,
    /// Thursday.
    Thu,
    /// Friday.
    Fri,
    /// Saturday.
    Sat,
    /// Sunday.
    Sun,
}

/// Promises of a reservation.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReservationGuarantees {
    /// Only the owner's jobs may use the reserved nodes (they are tainted; the default). When
    /// false, the nodes are only labelled: other work may use idle reserved GPUs, and is
    /// evicted (through the Eviction API, newest first) when the owner's pods wait for room.
    #[serde(default = "default_true")]
    pub exclusive: bool,
    /// Whether higher-priority work may take the reserved GPUs (an exclusive reservation):
    /// jobs whose tier (GryviaPriority value) is above the owner tenant's default tier (0
    /// without one, and for project and user owners) get a toleration of its taint from the
    /// mutating webhook, so the scheduler places them on idle reserved GPUs and preempts the
    /// owner's lower-priority pods for them. A non-exclusive reservation is open to all already.
    #[serde(default)]
    pub preemptible: bool,
    /// Promised service level.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sla: Option<ReservationSla>,
}

impl Default for ReservationGuarantees {
    fn default() -> Self {
        Self {
            exclusive: true,
            preemptible: false,
            sla: None,
        }
    }
}

/// Promised service level.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReservationSla {
    /// Availability in percent: the share of each window's reserved GPU time the reserved GPUs
    /// were really held and healthy (`status.availability`; condition `SLAMet`).
    #[schemars(range(min = 0.0, max = 100.0))]
    pub availability: f64,
}

/// Charging of a reservation.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReservationBilling {
    /// Charge the owner (a tenant or team) for reserved GPUs while no pod uses them: with the
    /// quota-operator's `--metering`, idle reserved GPU time becomes usage records of the
    /// reservation, on the owner's invoices and budgets.
    #[serde(default)]
    pub charge_when_idle: bool,
    /// Discount on the SKU price of the idle reserved GPU time, percent.
    #[serde(default)]
    #[schemars(range(min = 0, max = 100))]
    pub discount: i32,
}

/// Observed state of a reservation.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GryviaReservationStatus {
    /// Where the reservation stands.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<ReservationPhase>,
    /// Nodes held now, sorted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reserved_nodes: Vec<String>,
    /// GPUs on the held nodes.
    #[serde(default)]
    pub reserved_gpus: i32,
    /// Start of the current or next window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window_start: Option<Time>,
    /// End of the current or next window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window_end: Option<Time>,
    /// Reserved GPU-seconds during which no pod used the GPU.
    #[serde(default)]
    pub idle_gpu_seconds: i64,
    /// Reserved GPUs no pod uses now (0 while the reservation holds nothing).
    #[serde(default)]
    pub idle_gpus: i32,
    /// When idle GPU time was last counted (while the reservation holds nodes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_sampled_at: Option<Time>,
    /// How much of the current (or last) window's promised GPU time was really available.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub availability: Option<ReservationAvailability>,
    /// GPU pods of others evicted to give the owner its GPUs back, in all.
    #[serde(default)]
    pub evictions: i64,
    /// Details (for example why fewer GPUs than requested are held).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Conditions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// A window's availability: of the GPU time promised so far (`gpuCount` for every second the
/// window was open), what was held on healthy nodes.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReservationAvailability {
    /// Opening of the window counted.
    pub window_start: Time,
    /// GPU-seconds promised so far.
    pub promised_gpu_seconds: i64,
    /// GPU-seconds held on nodes that were neither quarantined nor cordoned.
    pub available_gpu_seconds: i64,
    /// `availableGpuSeconds` over `promisedGpuSeconds`, percent (two decimals).
    pub percent: f64,
}

/// Phase of a reservation.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum ReservationPhase {
    /// Waiting for its window.
    Pending,
    /// Holding nodes.
    Active,
    /// Holding fewer GPUs than requested.
    Partial,
    /// The last window has ended.
    Expired,
}
