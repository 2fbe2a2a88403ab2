//! GPU health: per-node GPU observations, health checks and their verdicts, storage and
//! network status kinds.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Pattern of a five-field cron schedule (six with leading seconds) or an `@hourly`-style macro.
pub const CRON_PATTERN: &str =
    r"^(@(yearly|annually|monthly|weekly|daily|hourly)|\s*(\S+\s+){4,5}\S+\s*)$";

/// Pattern of a DNS-1123 label (names of checks, steps, parameters).
pub const DNS_LABEL_PATTERN: &str = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$";

// ---------------------------------------------------------------------------------------------
// GryviaGpuNode
// ---------------------------------------------------------------------------------------------

/// The GPUs of one Kubernetes node as the node agent observes them.
///
/// The node agent (`gryvia-node-agent`) writes `status` every interval from NVML or from a
/// recorded trace. The gpu-operator reads it to evaluate health checks and, when remediation is
/// enabled, asks the agent for a remediation step through `spec.remediationRequest`.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "gryvia.io",
    version = "v1alpha1",
    kind = "GryviaGpuNode",
    status = "GryviaGpuNodeStatus",
    shortname = "ggn",
    category = "gryvia",
    printcolumn(name = "Node", type_ = "string", json_path = ".spec.nodeName"),
    printcolumn(name = "GPUs", type_ = "integer", json_path = ".status.gpuCount"),
    printcolumn(name = "Source", type_ = "string", json_path = ".status.source"),
    printcolumn(name = "Observed", type_ = "date", json_path = ".status.observedAt"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct GryviaGpuNodeSpec {
    /// Name of the Kubernetes Node these GPUs belong to.
    #[schemars(length(min = 1, max = 253))]
    pub node_name: String,
    /// Seconds between two observations written by the node agent.
    #[serde(default = "default_report_interval")]
    #[schemars(range(min = 1, max = 3600))]
    pub report_interval_seconds: i32,
    /// A remediation step the gpu-operator asks the node agent to carry out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remediation_request: Option<RemediationRequest>,
}

fn default_report_interval() -> i32 {
    30
}

/// A remediation step requested from the node agent.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RemediationRequest {
    /// Unique id of the request; the agent echoes it in `status.remediationResult`.
    #[schemars(length(min = 1, max = 128))]
    pub id: String,
    /// The step to carry out.
    pub action: RemediationAction,
    /// GPU indices the step applies to (empty: all GPUs of the node).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpu_indices: Vec<i32>,
    /// When the operator asked.
    pub requested_at: Time,
    /// Seconds after which the operator treats the step as failed.
    #[schemars(range(min = 1, max = 86400))]
    pub timeout_seconds: i32,
    /// How to reboot, for `action: reboot` (from the health check's `remediation.rebootMethod`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reboot_method: Option<RebootMethod>,
}

/// One rung of the remediation ladder.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum RemediationAction {
    /// `nvidia-smi --gpu-reset` of the affected GPUs.
    GpuReset,
    /// Unload and reload the NVIDIA kernel modules.
    DriverReload,
    /// Reboot the node (through a kured sentinel or nsenter).
    Reboot,
}

/// Observed state of a node's GPUs.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GryviaGpuNodeStatus {
    /// Per-GPU observations, sorted by index.
    #[serde(default)]
    pub gpus: Vec<GpuObservation>,
    /// Number of GPUs observed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_count: Option<i32>,
    /// NVIDIA driver version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver_version: Option<String>,
    /// CUDA version the driver supports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cuda_version: Option<String>,
    /// Where the observations come from: `nvml` or `file:<path>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// When the agent wrote this status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_at: Option<Time>,
    /// Result of the last remediation step the agent carried out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remediation_result: Option<RemediationResult>,
    /// The agent's probes of the GryviaStorages mounted on the node, sorted by name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 256))]
    pub storage: Vec<StorageProbe>,
    /// Conditions of the node's GPUs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// One probe of a GryviaStorage's mount on a node (at the status's `observedAt`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StorageProbe {
    /// The GryviaStorage.
    pub name: String,
    /// The path probed.
    pub mount_path: String,
    /// Whether the path is a mount point (a missing mount leaves an empty directory of the
    /// root filesystem, where writes would land unnoticed).
    pub mounted: bool,
    /// Time to write, sync, read back and remove a 4 KiB file, milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_millis: Option<i64>,
    /// Size of the filesystem, bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity_bytes: Option<i64>,
    /// Bytes in use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub used_bytes: Option<i64>,
    /// Why the probe failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// What one GPU looked like at one instant.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GpuObservation {
    /// GPU index on the node (as NVML numbers them).
    #[schemars(range(min = 0, max = 63))]
    pub index: i32,
    /// GPU UUID.
    #[serde(default)]
    pub uuid: String,
    /// Product name, for example `NVIDIA H100 80GB HBM3`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub product: Option<String>,
    /// Core temperature in degrees Celsius.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature_c: Option<i32>,
    /// GPU utilisation in percent over the last sample period.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 100))]
    pub utilization_percent: Option<i32>,
    /// Frame-buffer memory in use, MiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    #[serde(rename = "memoryUsedMiB")]
    pub memory_used_mib: Option<i64>,
    /// Total frame-buffer memory, MiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    #[serde(rename = "memoryTotalMiB")]
    pub memory_total_mib: Option<i64>,
    /// Volatile corrected (single-bit) ECC errors since the last driver load.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub ecc_single_bit: Option<i64>,
    /// Volatile uncorrected (double-bit) ECC errors since the last driver load.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub ecc_double_bit: Option<i64>,
    /// NVLink state of this GPU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nvlink: Option<NvLinkObservation>,
    /// Power draw in watts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.0))]
    pub power_draw_watts: Option<f64>,
    /// Enforced power limit in watts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.0))]
    pub power_limit_watts: Option<f64>,
    /// XID errors the driver reported since the previous observation.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub xid_events: Vec<XidEvent>,
    /// When this GPU was sampled.
    pub observed_at: Time,
}

/// NVLink state of one GPU.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NvLinkObservation {
    /// Links the GPU has.
    #[schemars(range(min = 0, max = 64))]
    pub links_total: i32,
    /// Links that are up.
    #[schemars(range(min = 0, max = 64))]
    pub links_up: i32,
    /// CRC errors summed over the links.
    #[serde(default)]
    #[schemars(range(min = 0))]
    pub crc_errors: i64,
    /// Replay errors summed over the links.
    #[serde(default)]
    #[schemars(range(min = 0))]
    pub replay_errors: i64,
    /// Recovery errors summed over the links.
    #[serde(default)]
    #[schemars(range(min = 0))]
    pub recovery_errors: i64,
}

/// One XID error reported by the NVIDIA driver.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct XidEvent {
    /// The XID code (for example 48 for a double-bit ECC error, 79 for a GPU off the bus).
    #[schemars(range(min = 0))]
    pub code: i32,
    /// When the driver reported it.
    pub observed_at: Time,
    /// Driver message, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// The node agent's report on a remediation step.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RemediationResult {
    /// Id of the request this answers.
    pub id: String,
    /// The step carried out.
    pub action: RemediationAction,
    /// Where the step stands.
    pub phase: StepPhase,
    /// When the agent started it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Time>,
    /// When the agent finished it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<Time>,
    /// What the executor printed or why it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// Phase of a remediation step.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum StepPhase {
    /// Started, not finished.
    Running,
    /// Finished without error.
    Succeeded,
    /// Finished with an error or timed out.
    Failed,
}

/// A health verdict.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, JsonSchema,
)]
pub enum Verdict {
    /// Every check passed.
    Healthy,
    /// A warning threshold was crossed, no failure.
    Warning,
    /// A failure threshold was crossed.
    Failed,
    /// No fresh observation: nothing is concluded and nothing is acted on.
    Unknown,
}

// ---------------------------------------------------------------------------------------------
// GryviaHealthCheck
// ---------------------------------------------------------------------------------------------

/// A scheduled evaluation of GPU health on a set of nodes, with what to do on failure.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "gryvia.io",
    version = "v1alpha1",
    kind = "GryviaHealthCheck",
    status = "GryviaHealthCheckStatus",
    shortname = "ghc",
    category = "gryvia",
    printcolumn(name = "Target", type_ = "string", json_path = ".spec.target.type"),
    printcolumn(name = "Schedule", type_ = "string", json_path = ".spec.schedule"),
    printcolumn(
        name = "Failed",
        type_ = "integer",
        json_path = ".status.summary.failed"
    ),
    printcolumn(name = "Last Run", type_ = "date", json_path = ".status.lastRun"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct GryviaHealthCheckSpec {
    /// Which nodes the checks cover.
    pub target: HealthTarget,
    /// When to evaluate, as a five-field cron expression in UTC (or `@hourly` and friends); a
    /// sixth, leading field gives seconds (`*/10 * * * * *`: every ten seconds).
    #[schemars(regex(
        pattern = r"^(@(yearly|annually|monthly|weekly|daily|hourly)|\s*(\S+\s+){4,5}\S+\s*)$"
    ))]
    pub schedule: String,
    /// The checks to evaluate on every GPU of every targeted node.
    #[schemars(length(min = 1, max = 16))]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub checks: Vec<HealthCheckItem>,
    /// Observations older than this many seconds count as missing (verdict Unknown).
    #[serde(default = "default_stale_after")]
    #[schemars(range(min = 10, max = 86400))]
    pub stale_after_seconds: i32,
    /// What to do when a node fails.
    #[serde(default)]
    pub on_failure: OnFailure,
    /// The escalation ladder used when `onFailure.autoRemediate` is true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remediation: Option<RemediationSpec>,
    /// At most this share (percent) of the targeted nodes is quarantined at once.
    #[serde(default = "default_max_quarantined")]
    #[schemars(range(min = 0, max = 100))]
    pub max_quarantined_percent: i32,
    /// When true, no evaluation runs.
    #[serde(default)]
    pub suspend: bool,
}

fn default_stale_after() -> i32 {
    300
}

fn default_max_quarantined() -> i32 {
    25
}

/// Which nodes a health check covers.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[x_kube(validation = Rule::new("self.type != 'nodes' || (has(self.nodes) && size(self.nodes) > 0)").message("target.nodes must list at least one node when target.type is nodes"))]
#[x_kube(validation = Rule::new("self.type != 'selector' || (has(self.nodeSelector) && size(self.nodeSelector) > 0)").message("target.nodeSelector must not be empty when target.type is selector"))]
#[serde(rename_all = "camelCase")]
pub struct HealthTarget {
    /// `cluster` (every node with GPUs), `nodes` (the listed nodes) or `selector` (nodes whose
    /// labels match `nodeSelector`).
    #[serde(rename = "type")]
    pub type_: TargetType,
    /// Node names, for `type: nodes`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 10000))]
    pub nodes: Vec<String>,
    /// Label selector, for `type: selector`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,
}

/// Kind of target.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum TargetType {
    /// Every node that has GPUs.
    Cluster,
    /// The listed nodes.
    Nodes,
    /// Nodes matching a label selector.
    Selector,
}

/// One check in a health check.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HealthCheckItem {
    /// Name of the check, unique in the health check.
    #[schemars(
        regex(pattern = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"),
        length(max = 63)
    )]
    pub name: String,
    /// What is measured.
    #[serde(rename = "type")]
    pub type_: CheckType,
    /// Limits of the measured value.
    #[serde(default)]
    pub threshold: Threshold,
}

/// What a check measures.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum CheckType {
    /// Core temperature, degrees Celsius.
    GpuTemperature,
    /// Utilisation, percent.
    GpuUtilization,
    /// Memory in use, percent of total.
    GpuMemory,
    /// Uncorrected (double-bit) ECC errors, count; corrected errors count towards `warning`.
    GpuEccErrors,
    /// NVLink links down plus link errors, count.
    GpuNvlink,
    /// Power draw, watts.
    GpuPower,
    /// Critical XID errors in the latest observation, count: 48 (double-bit ECC), 63 and 64
    /// (row remapping), 74 (NVLink), 79 (GPU fallen off the bus), 92, 94 and 95 (ECC
    /// contained / uncontained), 119 and 120 (GSP errors).
    GpuXid,
}

/// Limits of a measured value. A value above `max` or below `min` fails; above `warning` warns.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[x_kube(validation = Rule::new("!has(self.min) || !has(self.max) || self.min <= self.max").message("threshold.min must not exceed threshold.max"))]
#[x_kube(validation = Rule::new("!has(self.warning) || !has(self.max) || self.warning <= self.max").message("threshold.warning must not exceed threshold.max"))]
#[serde(rename_all = "camelCase")]
pub struct Threshold {
    /// Failure above this value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<f64>,
    /// Failure below this value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min: Option<f64>,
    /// Warning above this value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warning: Option<f64>,
}

/// What to do when a node fails its checks.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OnFailure {
    /// Cordon the node and taint it `gryvia.io/gpu-unhealthy:NoSchedule` (quarantine).
    #[serde(default)]
    pub cordon: bool,
    /// Evict the node's pods through the Eviction API, respecting PodDisruptionBudgets.
    #[serde(default)]
    pub drain: bool,
    /// Emit a Warning Event (and an alert notification where configured).
    #[serde(default)]
    pub alert: bool,
    /// Escalate through `spec.remediation` and uncordon after a passing check.
    #[serde(default)]
    pub auto_remediate: bool,
    /// Act only after this many consecutive failing evaluations (flap damping).
    #[serde(default = "default_consecutive")]
    #[schemars(range(min = 1, max = 100))]
    pub consecutive_failures: i32,
}

impl Default for OnFailure {
    fn default() -> Self {
        OnFailure {
            cordon: false,
            drain: false,
            alert: false,
            auto_remediate: false,
            consecutive_failures: default_consecutive(),
        }
    }
}

fn default_consecutive() -> i32 {
    3
}

/// The remediation ladder.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RemediationSpec {
    /// Steps in order of escalation.
    #[serde(default = "default_steps")]
    #[schemars(length(min = 1, max = 3))]
    pub steps: Vec<RemediationAction>,
    /// Seconds a step may take before it counts as failed.
    #[serde(default = "default_step_timeout")]
    #[schemars(range(min = 10, max = 86400))]
    pub step_timeout_seconds: i32,
    /// How a reboot is carried out.
    #[serde(default)]
    pub reboot_method: RebootMethod,
    /// Nodes remediated at the same time.
    #[serde(default = "default_one")]
    #[schemars(range(min = 1, max = 100))]
    pub max_concurrent_nodes: i32,
}

fn default_steps() -> Vec<RemediationAction> {
    vec![
        RemediationAction::GpuReset,
        RemediationAction::DriverReload,
        RemediationAction::Reboot,
    ]
}

fn default_step_timeout() -> i32 {
    600
}

fn default_one() -> i32 {
    1
}

/// How the node agent reboots a node.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum RebootMethod {
    /// Write the kured sentinel file and let kured drain and reboot.
    #[default]
    Kured,
    /// `nsenter` into the host's PID 1 namespace and reboot.
    Nsenter,
}

/// Results of a health check.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GryviaHealthCheckStatus {
    /// Generation of the spec last evaluated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// When the checks last ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_run: Option<Time>,
    /// When the checks run next.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_run: Option<Time>,
    /// Counts of nodes by verdict.
    #[serde(default)]
    pub summary: VerdictSummary,
    /// Results of the targeted nodes that are not healthy or carry state (a failure count, a
    /// quarantine, a drain, a remediation), sorted by node name: a healthy node is counted in
    /// `summary` only, so the status stays small on a large fleet.
    #[serde(default)]
    pub nodes: Vec<NodeHealthResult>,
    /// The most recent actions taken (newest last, at most 50).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub actions: Vec<ActionRecord>,
    /// Conditions (`Ready`, with `InvalidSpec` when the spec is unusable).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// Counts of nodes by verdict.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VerdictSummary {
    /// Healthy nodes.
    pub healthy: i32,
    /// Nodes with warnings.
    pub warning: i32,
    /// Failed nodes.
    pub failed: i32,
    /// Nodes without fresh observations.
    pub unknown: i32,
    /// Nodes currently quarantined by this health check.
    pub quarantined: i32,
}

/// The verdict on one node.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeHealthResult {
    /// Node name.
    pub node: String,
    /// Worst verdict over the node's GPUs.
    pub verdict: Verdict,
    /// Why, one line per finding.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reasons: Vec<String>,
    /// Consecutive failing evaluations (flap damping counter).
    #[serde(default)]
    pub consecutive_failures: i32,
    /// Per-GPU verdicts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpus: Vec<GpuHealthResult>,
    /// Whether this health check has quarantined the node.
    #[serde(default)]
    pub quarantined: bool,
    /// Remediation progress on this node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remediation: Option<NodeRemediationState>,
    /// Progress of the drain of a quarantined node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drain: Option<DrainStatus>,
    /// When the newest GPU observation the last evaluation of this node counted was taken: a
    /// fatal reading is evaluated at once only on a newer one, so one report counts once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_observation: Option<Time>,
}

/// Where the drain of a quarantined node stands.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DrainStatus {
    /// Pods (namespace/name) whose eviction was requested and that are still on the node.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub evicting: Vec<String>,
    /// Pods (namespace/name) a PodDisruptionBudget keeps on the node, with the budget's name;
    /// their eviction is retried.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub blocked: Vec<String>,
    /// True when no evictable pod is left on the node.
    #[serde(default)]
    pub complete: bool,
}

/// The verdict on one GPU.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GpuHealthResult {
    /// GPU index.
    pub index: i32,
    /// Verdict.
    pub verdict: Verdict,
    /// Why.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reasons: Vec<String>,
}

/// Where a node stands on the remediation ladder.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeRemediationState {
    /// Index into `spec.remediation.steps` of the current step.
    pub step_index: i32,
    /// The current step.
    pub action: RemediationAction,
    /// Id of the request sent to the node agent.
    pub request_id: String,
    /// Phase of the current step; `Failed` means the last step failed (ladder exhausted).
    pub phase: StepPhase,
    /// When the current step was requested.
    pub started_at: Time,
    /// When the node agent reported the current step finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<Time>,
    /// What happened last (agent output, timeout, verification result).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}

/// One action a controller took.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ActionRecord {
    /// When.
    pub time: Time,
    /// On which node.
    pub node: String,
    /// What, for example `Cordon`, `Evict`, `EvictionBlocked`, `GpuReset`, `Uncordon`.
    pub action: String,
    /// Details.
    #[serde(default)]
    pub message: String,
}

// ---------------------------------------------------------------------------------------------
// GryviaStorage and GryviaNetwork
// ---------------------------------------------------------------------------------------------

/// A storage system GPU jobs depend on, with its observed health.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "gryvia.io",
    version = "v1alpha1",
    kind = "GryviaStorage",
    status = "GryviaStorageStatus",
    shortname = "gst",
    category = "gryvia",
    printcolumn(name = "Type", type_ = "string", json_path = ".spec.type"),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[x_kube(validation = Rule::new("self.type == 'pvc' ? has(self.storageClassName) : has(self.endpoint)").message("spec.endpoint is required (spec.storageClassName for type pvc)"))]
#[serde(rename_all = "camelCase")]
pub struct GryviaStorageSpec {
    /// Storage technology.
    #[serde(rename = "type")]
    pub type_: StorageType,
    /// Address of the storage system (server:/export, monitor list, URL).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// StorageClass that provisions volumes on it, for `type: pvc`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_class_name: Option<String>,
    /// Provisioned capacity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<Quantity>,
    /// Where the storage is mounted on the nodes: each node agent probes it there (is it a
    /// mount point, its capacity, and the latency of a small synchronous write and read).
    /// Without it nothing is probed and the status stays Unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 2, max = 4096), regex(pattern = r"^/"))]
    pub mount_path: Option<String>,
    /// The nodes that mount it (all nodes with a node agent when empty).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,
    /// A probe slower than this, milliseconds, makes its node degraded.
    #[serde(default = "default_max_latency_millis")]
    #[schemars(range(min = 1, max = 600_000))]
    pub max_latency_millis: i32,
}

fn default_max_latency_millis() -> i32 {
    500
}

/// Storage technology.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum StorageType {
    /// NFS.
    Nfs,
    /// Ceph (RBD or CephFS).
    Ceph,
    /// Lustre.
    Lustre,
    /// IBM Storage Scale (GPFS).
    Gpfs,
    /// S3-compatible object store.
    S3,
    /// Volumes from a StorageClass.
    Pvc,
}

/// Observed health of a storage system.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GryviaStorageStatus {
    /// Overall state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<ComponentPhase>,
    /// Capacity in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity_bytes: Option<i64>,
    /// Bytes in use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub used_bytes: Option<i64>,
    /// Latency of the last probe, milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_millis: Option<i64>,
    /// When it was last checked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_checked: Option<Time>,
    /// Details.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Conditions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// Health of an infrastructure component.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum ComponentPhase {
    /// Working.
    Healthy,
    /// Working with reduced capacity or performance.
    Degraded,
    /// Not working.
    Unavailable,
    /// Not observed.
    Unknown,
}

/// A GPU fabric or cluster network, with its observed health.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "gryvia.io",
    version = "v1alpha1",
    kind = "GryviaNetwork",
    status = "GryviaNetworkStatus",
    shortname = "gnw",
    category = "gryvia",
    printcolumn(name = "Type", type_ = "string", json_path = ".spec.type"),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct GryviaNetworkSpec {
    /// Link technology.
    #[serde(rename = "type")]
    pub type_: NetworkType,
    /// Interface names on the nodes that belong to this network (for example `ib0`).
    #[serde(default)]
    #[schemars(length(max = 64))]
    pub interfaces: Vec<String>,
    /// Expected per-node bandwidth, Gbit/s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100000))]
    pub expected_bandwidth_gbps: Option<i32>,
    /// Nodes attached to this network.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,
}

/// Link technology.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum NetworkType {
    /// Ethernet.
    Ethernet,
    /// InfiniBand.
    Infiniband,
    /// RDMA over converged Ethernet.
    Roce,
}

/// Observed health of a network.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GryviaNetworkStatus {
    /// Overall state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<ComponentPhase>,
    /// Nodes attached.
    #[serde(default)]
    pub nodes_total: i32,
    /// Nodes with a degraded link.
    #[serde(default)]
    pub nodes_degraded: i32,
    /// Median measured per-node bandwidth, Gbit/s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measured_bandwidth_gbps: Option<f64>,
    /// When it was last checked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_checked: Option<Time>,
    /// Details.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Conditions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}
