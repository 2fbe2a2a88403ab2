//! GPU health: evaluation of GryviaHealthChecks against GryviaGpuNode observations, and the
//! remediation that follows a failure (quarantine, PDB-respecting drain, the escalation
//! ladder of GPU reset, driver reload and reboot, release after a passing check).
//!
//! Everything here is pure. The gpu-operator observes the world into a [`HealthWorld`] and
//! applies the Plan; the node agent carries out remediation steps the Plan requests through
//! `GryviaGpuNode.spec.remediationRequest`.
//!
//! # Semantics
//! - A check runs on its schedule (cron, UTC; see [`crate::cron`]). A spec change runs it at
//!   once. Between runs the previous verdicts stand, and drains and remediation steps carry on.
//! - A fatal reading ([`fatal_reading`]: an uncorrected ECC error for a `gpuEccErrors` item,
//!   XID 48 or 79 for a `gpuXid` item, an NVLink link down for a `gpuNvlink` item) is evaluated
//!   as soon as the agent reports it, not at the next run: that node alone is evaluated, by the
//!   same policy, and the evaluation counts as one of its runs (flap damping and the guard
//!   below hold as for a run). One report counts once: the node's result remembers the newest
//!   observation its last evaluation counted (`lastObservation`).
//! - The status lists only the nodes that are not healthy or carry state (a failure count, a
//!   quarantine, a drain, a remediation); healthy ones are counted in the summary.
//! - Per GPU, every check gives Healthy, Warning or Failed; a missing reading or an
//!   observation older than `staleAfterSeconds` gives Unknown. A node's verdict is Failed when
//!   any GPU failed, else Unknown when any is unknown, else Warning when any warns, else
//!   Healthy. A node without a GryviaGpuNode is Unknown.
//! - Flap damping: a failing run adds one to the node's counter, a healthy or warning run
//!   resets it, an unknown run leaves it as it is. Action starts when the counter reaches
//!   `onFailure.consecutiveFailures`. Unknown never triggers action.
//! - Quarantine (`onFailure.cordon`): cordon and taint `gryvia.io/gpu-unhealthy=<check
//!   name>:NoSchedule`. The taint is the record of the quarantine, so a restarted operator
//!   continues from the nodes themselves. The guard: a node is quarantined only while the
//!   quarantined nodes (by any check) stay within `maxQuarantinedPercent` of the targeted
//!   nodes, rounded down; the rest is held back and reported.
//! - Drain (`onFailure.drain`): pods of a quarantined node are evicted through the Eviction
//!   API (never deleted), except DaemonSet pods, mirror pods and finished pods. A pod whose
//!   PodDisruptionBudget allows no disruption is reported as blocked and retried.
//! - Remediation (`onFailure.autoRemediate` with `spec.remediation`): once the drain is done,
//!   quarantined nodes climb `spec.remediation.steps` (by default GPU reset, driver reload,
//!   reboot), at most `maxConcurrentNodes` nodes at a time. A step that fails or exceeds
//!   `stepTimeoutSeconds` escalates to the next; a step that succeeds is verified by the next
//!   run on observations taken after it: passing releases the node (taint removed,
//!   uncordoned unless it is in manual maintenance), failing escalates. When the last step
//!   fails the node stays quarantined for a human (`gryvia maintenance end`).
//! - Without `onFailure.autoRemediate` a quarantined node stays quarantined until a human
//!   releases it, as in the features guide.
//! - Action needs the operator's `--gpu-remediation`; without it checks are evaluated and
//!   reported only.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use gryvia_types::conditions::{self, Status};
use gryvia_types::k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, Time};
use gryvia_types::labels;
use gryvia_types::{
    ActionRecord, CheckType, DrainStatus, GpuHealthResult, GpuObservation, GryviaGpuNode,
    GryviaGpuNodeStatus, GryviaHealthCheck, GryviaHealthCheckSpec, GryviaHealthCheckStatus,
    HealthCheckItem, NodeHealthResult, NodeRemediationState, RemediationAction, RemediationResult,
    RemediationSpec, StepPhase, TargetType, Threshold, Verdict, VerdictSummary,
};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use serde_json::json;

use crate::cron::Schedule;
use crate::facts::{self, PodPhase, PodView};
use crate::plan::{Child, EventType, Eviction, NodeOp, Plan, Taint, TaintEffect};
use crate::{Reconcile, Timestamp};

pub mod report;

/// How many action records a status keeps (newest last).
pub const MAX_ACTIONS: usize = 50;
/// How many reason lines a node result keeps.
pub const MAX_REASONS: usize = 16;
/// How soon to look again while a drain or a remediation step is in progress.
pub const PROGRESS_INTERVAL: Duration = Duration::from_secs(3);
/// XID codes that count for `gpu-xid`.
pub const CRITICAL_XIDS: [i32; 10] = [48, 63, 64, 74, 79, 92, 94, 95, 119, 120];
/// XID codes that are evaluated as soon as they are reported (48: double-bit ECC error, 79: GPU
/// fallen off the bus).
pub const FATAL_XIDS: [i32; 2] = [48, 79];

/// Operator-wide switches.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct HealthOptions {
    /// `--gpu-remediation`: act on failures (quarantine, drain, remediation). Without it,
    /// checks are evaluated and reported only.
    pub remediation: bool,
}

/// A Kubernetes node as the health policy sees it.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct NodeInfo {
    /// Node name.
    pub name: String,
    /// Node labels.
    pub labels: BTreeMap<String, String>,
    /// `nvidia.com/gpu` capacity.
    pub gpu_capacity: i64,
    /// `spec.unschedulable`.
    pub unschedulable: bool,
    /// Value of the `gryvia.io/gpu-unhealthy` taint (the name of the check that quarantined
    /// the node), when the node has it.
    pub quarantined_by: Option<String>,
    /// The node is in manual maintenance (`gryvia.io/maintenance` annotation).
    pub maintenance: bool,
}

impl NodeInfo {
    /// What the health policy needs to know about a Node (its GPUs by capacity: a node whose
    /// every GPU is unhealthy is still a GPU node to check).
    pub fn of(node: &Node) -> Self {
        NodeInfo {
            name: node.metadata.name.clone().unwrap_or_default(),
            labels: node.metadata.labels.clone().unwrap_or_default(),
            gpu_capacity: facts::gpus_capacity(node),
            unschedulable: facts::cordoned(node),
            quarantined_by: facts::quarantined_by(node),
            maintenance: facts::in_maintenance(node),
        }
    }
}

/// A pod as a drain sees it.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct PodInfo {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// Labels (matched against PodDisruptionBudget selectors).
    pub labels: BTreeMap<String, String>,
    /// Kind of the controlling owner, if any (`DaemonSet` pods are not evicted).
    pub owner_kind: Option<String>,
    /// A static (mirror) pod, which the API cannot evict.
    pub mirror: bool,
    /// `status.phase`.
    pub phase: String,
    /// The pod has a deletion timestamp (its eviction went through).
    pub terminating: bool,
}

impl PodInfo {
    /// What a drain needs to know about a Pod.
    pub fn of(pod: &(impl PodView + ?Sized)) -> Self {
        let meta = pod.pod_meta();
        PodInfo {
            namespace: meta.namespace.clone().unwrap_or_default(),
            name: meta.name.clone().unwrap_or_default(),
            labels: meta.labels.clone().unwrap_or_default(),
            owner_kind: facts::controller_kind(pod).map(str::to_owned),
            mirror: facts::is_mirror(pod),
            phase: pod.phase().unwrap_or_default().to_owned(),
            terminating: meta.deletion_timestamp.is_some(),
        }
    }

    /// `namespace/name`.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

/// A PodDisruptionBudget as a drain sees it.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct PdbInfo {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// Selector of the pods it covers.
    pub selector: Option<LabelSelector>,
    /// `status.disruptionsAllowed`.
    pub disruptions_allowed: i32,
}

impl PdbInfo {
    /// What a drain needs to know about a PodDisruptionBudget.
    pub fn of(pdb: &PodDisruptionBudget) -> Self {
        PdbInfo {
            namespace: pdb.metadata.namespace.clone().unwrap_or_default(),
            name: pdb.metadata.name.clone().unwrap_or_default(),
            selector: pdb.spec.as_ref().and_then(|s| s.selector.clone()),
            disruptions_allowed: pdb.status.as_ref().map_or(0, |s| s.disruptions_allowed),
        }
    }
}

/// What a health check's reconcile needs to know.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct HealthWorld {
    /// Every node of the cluster.
    pub nodes: Vec<NodeInfo>,
    /// GryviaGpuNodes by `spec.nodeName` (shared with the cache they come from: a fleet's
    /// observations are not copied for every reconcile).
    pub gpu_nodes: BTreeMap<String, Arc<GryviaGpuNode>>,
    /// Pods on the nodes this check quarantined, by node name.
    pub pods: BTreeMap<String, Vec<PodInfo>>,
    /// PodDisruptionBudgets in the namespaces of those pods.
    pub pdbs: Vec<PdbInfo>,
    /// Nodes under remediation by other health checks (counted against their own limits).
    pub remediating_elsewhere: BTreeSet<String>,
}

/// The nodes other health checks than `name` are remediating (a step requested and not given
/// up on): [`HealthWorld::remediating_elsewhere`].
pub fn remediating_elsewhere(checks: &[GryviaHealthCheck], name: &str) -> BTreeSet<String> {
    checks
        .iter()
        .filter(|other| other.metadata.name.as_deref() != Some(name))
        .filter_map(|other| other.status.as_ref())
        .flat_map(|s| s.nodes.iter())
        .filter(|r| {
            r.remediation
                .as_ref()
                .is_some_and(|s| s.phase != StepPhase::Failed)
        })
        .map(|r| r.node.clone())
        .collect()
}

/// The GryviaHealthCheck reconciler.
#[derive(Clone, Debug, Default)]
pub struct HealthCheckReconciler {
    /// Operator-wide switches.
    pub options: HealthOptions,
}

// ---------------------------------------------------------------------------------------------
// Evaluation
// ---------------------------------------------------------------------------------------------

/// The worse of two verdicts: Failed, then Unknown, then Warning, then Healthy.
pub fn worst(a: Verdict, b: Verdict) -> Verdict {
    fn rank(v: Verdict) -> u8 {
        match v {
            Verdict::Healthy => 0,
            Verdict::Warning => 1,
            Verdict::Unknown => 2,
            Verdict::Failed => 3,
        }
    }
    if rank(b) > rank(a) { b } else { a }
}

fn fmt_num(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

/// Compares `value` with `threshold`; `what` describes the value in the reason.
fn judge(check: &str, what: &str, value: f64, threshold: &Threshold) -> (Verdict, Option<String>) {
    if let Some(max) = threshold.max
        && value > max
    {
        return (
            Verdict::Failed,
            Some(format!(
                "{check}: {what} {} above max {}",
                fmt_num(value),
                fmt_num(max)
            )),
        );
    }
    if let Some(min) = threshold.min
        && value < min
    {
        return (
            Verdict::Failed,
            Some(format!(
                "{check}: {what} {} below min {}",
                fmt_num(value),
                fmt_num(min)
            )),
        );
    }
    if let Some(w) = threshold.warning
        && value > w
    {
        return (
            Verdict::Warning,
            Some(format!(
                "{check}: {what} {} above warning {}",
                fmt_num(value),
                fmt_num(w)
            )),
        );
    }
    (Verdict::Healthy, None)
}

fn missing(check: &str, what: &str) -> (Verdict, Option<String>) {
    (
        Verdict::Unknown,
        Some(format!("{check}: no {what} reading")),
    )
}

/// One check on one GPU.
fn check_gpu(item: &HealthCheckItem, gpu: &GpuObservation) -> (Verdict, Option<String>) {
    let name = item.name.as_str();
    let t = &item.threshold;
    #[expect(
        clippy::cast_precision_loss,
        reason = "counts and MiB far below 2^52 convert exactly"
    )]
    let f = |v: i64| v as f64;
    match item.type_ {
        CheckType::GpuTemperature => gpu.temperature_c.map_or_else(
            || missing(name, "temperature"),
            |v| judge(name, "temperature (C)", f64::from(v), t),
        ),
        CheckType::GpuUtilization => gpu.utilization_percent.map_or_else(
            || missing(name, "utilization"),
            |v| judge(name, "utilization (%)", f64::from(v), t),
        ),
        CheckType::GpuMemory => match (gpu.memory_used_mib, gpu.memory_total_mib) {
            (Some(used), Some(total)) if total > 0 => {
                judge(name, "memory used (%)", f(used) * 100.0 / f(total), t)
            }
            _ => missing(name, "memory"),
        },
        CheckType::GpuEccErrors => {
            let Some(dbe) = gpu.ecc_double_bit else {
                return missing(name, "ECC");
            };
            if t.max.is_some_and(|m| f(dbe) > m) || t.min.is_some_and(|m| f(dbe) < m) {
                return judge(
                    name,
                    "uncorrected ECC errors",
                    f(dbe),
                    &Threshold {
                        warning: None,
                        ..t.clone()
                    },
                );
            }
            match (gpu.ecc_single_bit, t.warning) {
                (Some(sbe), Some(w)) if f(sbe) > w => (
                    Verdict::Warning,
                    Some(format!(
                        "{name}: corrected ECC errors {sbe} above warning {}",
                        fmt_num(w)
                    )),
                ),
                _ => (Verdict::Healthy, None),
            }
        }
        CheckType::GpuNvlink => match &gpu.nvlink {
            // A GPU without NVLink has nothing to check.
            None => (Verdict::Healthy, None),
            Some(l) => {
                let down = i64::from(l.links_total.saturating_sub(l.links_up).max(0));
                let errors = l.crc_errors + l.replay_errors + l.recovery_errors;
                judge(
                    name,
                    &format!("NVLink links down ({down}) plus errors ({errors})"),
                    f(down + errors),
                    t,
                )
            }
        },
        CheckType::GpuPower => gpu.power_draw_watts.map_or_else(
            || missing(name, "power"),
            |v| judge(name, "power draw (W)", v, t),
        ),
        CheckType::GpuXid => {
            let codes: Vec<i32> = gpu
                .xid_events
                .iter()
                .map(|x| x.code)
                .filter(|c| CRITICAL_XIDS.contains(c))
                .collect();
            let (v, reason) = judge(
                name,
                "critical XID errors",
                f(i64::try_from(codes.len()).unwrap_or(i64::MAX)),
                &Threshold {
                    max: Some(t.max.unwrap_or(0.0)),
                    ..t.clone()
                },
            );
            let reason = reason.map(|r| {
                let list: Vec<String> = codes.iter().map(i32::to_string).collect();
                format!("{r} (XID {})", list.join(", "))
            });
            (v, reason)
        }
    }
}

fn age_seconds(at: &Time, now: Timestamp) -> i64 {
    now.as_second() - at.0.as_second()
}

/// Evaluates every check of `spec` on one GPU observed by the agent.
pub fn evaluate_gpu(
    spec: &GryviaHealthCheckSpec,
    gpu: &GpuObservation,
    now: Timestamp,
) -> GpuHealthResult {
    let age = age_seconds(&gpu.observed_at, now);
    if age > i64::from(spec.stale_after_seconds) {
        return GpuHealthResult {
            index: gpu.index,
            verdict: Verdict::Unknown,
            reasons: vec![format!(
                "observation is {age}s old (staleAfterSeconds {})",
                spec.stale_after_seconds
            )],
        };
    }
    let mut verdict = Verdict::Healthy;
    let mut reasons = Vec::new();
    for item in &spec.checks {
        let (v, reason) = check_gpu(item, gpu);
        verdict = worst(verdict, v);
        reasons.extend(reason);
    }
    GpuHealthResult {
        index: gpu.index,
        verdict,
        reasons,
    }
}

/// The verdict on one node: the worst over its GPUs, with the non-healthy GPUs listed.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeEvaluation {
    /// Worst GPU verdict (Unknown without observations).
    pub verdict: Verdict,
    /// One line per finding, prefixed with the GPU index.
    pub reasons: Vec<String>,
    /// Verdicts of the GPUs that are not healthy.
    pub gpus: Vec<GpuHealthResult>,
    /// When the oldest GPU observation of the node was taken.
    pub observed_at: Option<Timestamp>,
}

/// Evaluates `spec` on a node's observations (`None`: the node has no GryviaGpuNode).
pub fn evaluate_node(
    spec: &GryviaHealthCheckSpec,
    status: Option<&GryviaGpuNodeStatus>,
    now: Timestamp,
) -> NodeEvaluation {
    let unknown = |reason: &str| NodeEvaluation {
        verdict: Verdict::Unknown,
        reasons: vec![reason.to_owned()],
        gpus: Vec::new(),
        observed_at: None,
    };
    let Some(status) = status else {
        return unknown("no GryviaGpuNode reports this node");
    };
    if status.gpus.is_empty() {
        return unknown("no GPU observations");
    }
    let mut verdict = Verdict::Healthy;
    let mut reasons = Vec::new();
    let mut gpus = Vec::new();
    let mut oldest: Option<Timestamp> = None;
    for gpu in &status.gpus {
        let r = evaluate_gpu(spec, gpu, now);
        verdict = worst(verdict, r.verdict);
        oldest = Some(oldest.map_or(gpu.observed_at.0, |o| o.min(gpu.observed_at.0)));
        if r.verdict != Verdict::Healthy {
            for reason in &r.reasons {
                if reasons.len() < MAX_REASONS {
                    reasons.push(format!("gpu {}: {reason}", r.index));
                }
            }
            gpus.push(r);
        }
    }
    NodeEvaluation {
        verdict,
        reasons,
        gpus,
        observed_at: oldest,
    }
}

/// The check types a reading can be fatal for.
const FATAL_TYPES: [CheckType; 3] = [
    CheckType::GpuEccErrors,
    CheckType::GpuXid,
    CheckType::GpuNvlink,
];

/// Whether `gpu` shows a reading that is fatal for checks of `type_`: an uncorrected ECC error
/// (`gpuEccErrors`), a fatal XID ([`FATAL_XIDS`], `gpuXid`), an NVLink link down
/// (`gpuNvlink`); other types have no fatal readings.
fn fatal_for(type_: CheckType, gpu: &GpuObservation) -> bool {
    match type_ {
        CheckType::GpuEccErrors => gpu.ecc_double_bit.is_some_and(|d| d > 0),
        CheckType::GpuXid => gpu.xid_events.iter().any(|x| FATAL_XIDS.contains(&x.code)),
        CheckType::GpuNvlink => gpu
            .nvlink
            .as_ref()
            .is_some_and(|l| l.links_up < l.links_total),
        CheckType::GpuTemperature
        | CheckType::GpuUtilization
        | CheckType::GpuMemory
        | CheckType::GpuPower => false,
    }
}

/// Whether `item` fails on `gpu` for a fatal reading ([`fatal_for`]).
fn fatal(item: &HealthCheckItem, gpu: &GpuObservation) -> bool {
    fatal_for(item.type_, gpu) && check_gpu(item, gpu).0 == Verdict::Failed
}

/// Whether a node's observations carry a reading that fails `spec` fatally (on a fresh
/// observation: a stale one is Unknown, never fatal).
pub fn fatal_reading(
    spec: &GryviaHealthCheckSpec,
    status: &GryviaGpuNodeStatus,
    now: Timestamp,
) -> bool {
    status.gpus.iter().any(|gpu| {
        age_seconds(&gpu.observed_at, now) <= i64::from(spec.stale_after_seconds)
            && spec.checks.iter().any(|item| fatal(item, gpu))
    })
}

/// When the newest of a node's GPU observations was taken.
pub fn newest_observation(status: &GryviaGpuNodeStatus) -> Option<Timestamp> {
    status.gpus.iter().map(|g| g.observed_at.0).max()
}

/// Whether a node is evaluated although no run is due: a fatal reading on an observation newer
/// than the newest its last evaluation counted (`prev`).
pub fn evaluate_at_once(
    spec: &GryviaHealthCheckSpec,
    status: Option<&GryviaGpuNodeStatus>,
    prev: Option<&NodeHealthResult>,
    now: Timestamp,
) -> bool {
    let Some(status) = status else {
        return false;
    };
    let counted = prev.and_then(|p| p.last_observation.as_ref()).map(|t| t.0);
    let newer = match (newest_observation(status), counted) {
        (Some(newest), Some(counted)) => newest > counted,
        (Some(_), None) => true,
        (None, _) => false,
    };
    !spec.suspend && newer && fatal_reading(spec, status, now)
}

/// The newest observation of a node when any of its GPUs shows a reading some check could
/// find fatal (an uncorrected ECC error, XID 48 or 79, an NVLink link down): what wakes the
/// health checks between their runs (`None`: nothing fatal, no hurry).
pub fn fatal_signal(status: &GryviaGpuNodeStatus) -> Option<Timestamp> {
    let fatal = status
        .gpus
        .iter()
        .any(|g| FATAL_TYPES.into_iter().any(|t| fatal_for(t, g)));
    fatal.then(|| newest_observation(status)).flatten()
}

/// The result of a healthy node without state: what a targeted node the status does not list
/// stands at.
pub fn healthy_result(node: &str) -> NodeHealthResult {
    NodeHealthResult {
        node: node.to_owned(),
        verdict: Verdict::Healthy,
        reasons: Vec::new(),
        consecutive_failures: 0,
        gpus: Vec::new(),
        quarantined: false,
        remediation: None,
        drain: None,
        last_observation: None,
    }
}

/// Whether a node's result goes into the status: not healthy, or carrying state.
pub fn notable(r: &NodeHealthResult) -> bool {
    r.verdict != Verdict::Healthy
        || r.consecutive_failures > 0
        || r.quarantined
        || r.remediation.is_some()
        || r.drain.is_some()
}

/// Whether `labels` match a Kubernetes label selector (`matchLabels` and `matchExpressions`
/// with In, NotIn, Exists, DoesNotExist). An empty selector matches everything; `None`
/// matches nothing, as for a PodDisruptionBudget.
pub fn selector_matches(
    selector: Option<&LabelSelector>,
    labels: &BTreeMap<String, String>,
) -> bool {
    let Some(sel) = selector else { return false };
    if let Some(ml) = &sel.match_labels
        && ml.iter().any(|(k, v)| labels.get(k) != Some(v))
    {
        return false;
    }
    for e in sel.match_expressions.iter().flatten() {
        let values = e.values.as_deref().unwrap_or_default();
        let have = labels.get(&e.key);
        let ok = match e.operator.as_str() {
            "In" => have.is_some_and(|v| values.contains(v)),
            "NotIn" => have.is_none_or(|v| !values.contains(v)),
            "Exists" => have.is_some(),
            "DoesNotExist" => have.is_none(),
            _ => false,
        };
        if !ok {
            return false;
        }
    }
    true
}

/// What draining a node means for its pods.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct DrainPlan {
    /// Pods to evict now (namespace/name).
    pub evict: Vec<PodInfo>,
    /// Pods a PodDisruptionBudget allowing no disruption keeps; they are evicted (and
    /// refused) again on the next try.
    pub blocked: Vec<BlockedPod>,
    /// Pods already on their way out (deletion timestamp set).
    pub terminating: Vec<String>,
    /// Pods a drain leaves alone: DaemonSet, mirror and finished pods.
    pub skipped: Vec<String>,
}

/// A pod whose eviction a PodDisruptionBudget refuses.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BlockedPod {
    /// The pod.
    pub pod: PodInfo,
    /// Name of the budget.
    pub pdb: String,
}

impl std::fmt::Display for BlockedPod {
    /// `namespace/name (pdb <name>)`, as status and messages show it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} (pdb {})", self.pod.key(), self.pdb)
    }
}

impl DrainPlan {
    /// No evictable pod is left on the node.
    pub fn complete(&self) -> bool {
        self.evict.is_empty() && self.blocked.is_empty() && self.terminating.is_empty()
    }
}

/// Decides what a drain does with the pods of a node, as `kubectl drain` would with
/// `--ignore-daemonsets`: DaemonSet pods, mirror pods and finished pods stay; the rest are
/// evicted, and those a PodDisruptionBudget with no disruption left covers are reported as
/// blocked.
pub fn drain_plan(pods: &[PodInfo], pdbs: &[PdbInfo]) -> DrainPlan {
    let mut plan = DrainPlan::default();
    let mut pods: Vec<&PodInfo> = pods.iter().collect();
    pods.sort_by_key(|p| p.key());
    for pod in pods {
        if pod.owner_kind.as_deref() == Some("DaemonSet")
            || pod.mirror
            || PodPhase::parse(&pod.phase).is_finished()
        {
            plan.skipped.push(pod.key());
            continue;
        }
        if pod.terminating {
            plan.terminating.push(pod.key());
            continue;
        }
        let blocking = pdbs.iter().find(|b| {
            b.namespace == pod.namespace
                && b.disruptions_allowed <= 0
                && selector_matches(b.selector.as_ref(), &pod.labels)
        });
        match blocking {
            Some(b) => plan.blocked.push(BlockedPod {
                pod: pod.clone(),
                pdb: b.name.clone(),
            }),
            None => plan.evict.push(pod.clone()),
        }
    }
    plan
}

// ---------------------------------------------------------------------------------------------
// Targeting
// ---------------------------------------------------------------------------------------------

/// The nodes a check covers, sorted by name; for `type: nodes`, listed names without a Node
/// are returned too (they evaluate as Unknown).
pub fn target_nodes(spec: &GryviaHealthCheckSpec, nodes: &[NodeInfo]) -> Vec<String> {
    let mut out: BTreeSet<String> = BTreeSet::new();
    match spec.target.type_ {
        TargetType::Cluster => {
            out.extend(
                nodes
                    .iter()
                    .filter(|n| n.gpu_capacity > 0)
                    .map(|n| n.name.clone()),
            );
        }
        TargetType::Nodes => out.extend(spec.target.nodes.iter().cloned()),
        TargetType::Selector => out.extend(
            nodes
                .iter()
                .filter(|n| facts::labels_match(&spec.target.node_selector, &n.labels))
                .map(|n| n.name.clone()),
        ),
    }
    out.into_iter().collect()
}

/// How many of `targeted` nodes may be quarantined at once: `percent` of them, rounded down.
pub fn quarantine_limit(targeted: usize, percent: i32) -> usize {
    let percent = usize::try_from(percent.clamp(0, 100)).unwrap_or(0);
    targeted * percent / 100
}

// ---------------------------------------------------------------------------------------------
// The reconcile
// ---------------------------------------------------------------------------------------------

fn t(ts: Timestamp) -> Time {
    Time(ts)
}

struct Run<'a> {
    name: &'a str,
    now: Timestamp,
    plan: Plan<GryviaHealthCheckStatus>,
    actions: Vec<ActionRecord>,
}

impl Run<'_> {
    fn record(&mut self, node: &str, action: &str, message: String, event: Option<EventType>) {
        if let Some(type_) = event {
            self.plan
                .event(type_, action, format!("node {node}: {message}"));
        }
        self.actions.push(ActionRecord {
            time: t(self.now),
            node: node.to_owned(),
            action: action.to_owned(),
            message,
        });
    }

    fn quarantine(&mut self, node: &NodeInfo) {
        if !node.unschedulable {
            self.plan.node_ops.push(NodeOp::Cordon {
                node: node.name.clone(),
            });
        }
        self.plan.node_ops.push(NodeOp::Taint {
            node: node.name.clone(),
            taint: Taint {
                key: labels::GPU_UNHEALTHY_TAINT.to_owned(),
                value: self.name.to_owned(),
                effect: TaintEffect::NoSchedule,
            },
        });
    }

    fn release(&mut self, node: &NodeInfo) {
        self.plan.node_ops.push(NodeOp::RemoveTaint {
            node: node.name.clone(),
            key: labels::GPU_UNHEALTHY_TAINT.to_owned(),
            effect: TaintEffect::NoSchedule,
        });
        if node.unschedulable && !node.maintenance {
            self.plan.node_ops.push(NodeOp::Uncordon {
                node: node.name.clone(),
            });
        }
    }

    /// Asks the node agent for `action` (server-side apply of the GryviaGpuNode's
    /// `spec.remediationRequest`, not owned by the health check).
    fn request_step(
        &mut self,
        gpu_node: &GryviaGpuNode,
        action: RemediationAction,
        gpus: &[i32],
        step: usize,
        ladder: &RemediationSpec,
    ) -> String {
        let timeout = ladder.step_timeout_seconds;
        let id = format!(
            "{}-{}-{step}-{}",
            self.name,
            gpu_node.spec.node_name,
            self.now.as_second()
        );
        let mut request = json!({
            "id": id,
            "action": action,
            "gpuIndices": gpus,
            "requestedAt": t(self.now),
            "timeoutSeconds": timeout,
        });
        if action == RemediationAction::Reboot {
            request["rebootMethod"] = json!(ladder.reboot_method);
        }
        let object = json!({
            "apiVersion": gryvia_types::API_VERSION,
            "kind": "GryviaGpuNode",
            "metadata": { "name": gpu_node.metadata.name },
            "spec": {
                "nodeName": gpu_node.spec.node_name,
                "remediationRequest": request,
            }
        });
        // A partial object: server-side apply owns only the fields sent, and a typed
        // GryviaGpuNodeSpec would claim the agent's `reportIntervalSeconds` too.
        self.plan
            .apply_built(Child::from_json(object).map(Child::unowned));
        id
    }
}

fn action_name(a: RemediationAction) -> &'static str {
    match a {
        RemediationAction::GpuReset => "GpuReset",
        RemediationAction::DriverReload => "DriverReload",
        RemediationAction::Reboot => "Reboot",
    }
}

fn invalid(
    hc: &GryviaHealthCheck,
    message: String,
    now: Timestamp,
) -> Plan<GryviaHealthCheckStatus> {
    let current = hc.status.clone().unwrap_or_default();
    let mut status = current.clone();
    status.observed_generation = hc.metadata.generation;
    conditions::set(
        &mut status.conditions,
        conditions::new(
            conditions::READY,
            Status::False,
            conditions::REASON_INVALID_SPEC,
            message,
            hc.metadata.generation,
            now,
        ),
    );
    let mut plan = Plan::new();
    plan.set_status_if_changed(hc.status.as_ref(), status);
    plan
}

/// What is wrong with a health check's spec that the schema cannot say, naming the field.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
enum SpecError {
    /// `spec.schedule` does not parse.
    #[error("spec.schedule: {0}")]
    Schedule(#[source] crate::cron::ParseError),
    /// A step appears twice in `spec.remediation.steps`.
    #[error("spec.remediation.steps: a step may appear only once")]
    RepeatedStep,
}

/// The parsed schedule, or what is wrong with the spec.
fn check_spec(spec: &GryviaHealthCheckSpec) -> Result<Schedule, SpecError> {
    let schedule = Schedule::parse(&spec.schedule).map_err(SpecError::Schedule)?;
    if let Some(rem) = &spec.remediation
        && rem.steps.iter().collect::<BTreeSet<_>>().len() != rem.steps.len()
    {
        return Err(SpecError::RepeatedStep);
    }
    Ok(schedule)
}

/// Whether a run is due: not suspended, and the spec changed or the scheduled time came.
fn is_due(hc: &GryviaHealthCheck, current: &GryviaHealthCheckStatus, now: Timestamp) -> bool {
    let spec_changed = current.observed_generation != hc.metadata.generation;
    !hc.spec.suspend && (spec_changed || current.next_run.as_ref().is_none_or(|n| now >= n.0))
}

/// The flap-damping counter after a run with `verdict`: a failure adds one, a pass resets it,
/// Unknown leaves it as it was.
fn next_failure_count(previous: i32, verdict: Verdict) -> i32 {
    match verdict {
        Verdict::Failed => previous.saturating_add(1),
        Verdict::Unknown => previous,
        Verdict::Healthy | Verdict::Warning => 0,
    }
}

/// A fresh verdict on one targeted node (`exists`: the Node is there), carrying the
/// counter, the remediation and the drain over from `prev`.
fn fresh_result(
    spec: &GryviaHealthCheckSpec,
    node: &str,
    exists: bool,
    gpu_node: Option<&GryviaGpuNodeStatus>,
    prev: Option<&NodeHealthResult>,
    now: Timestamp,
) -> (NodeHealthResult, Option<Timestamp>) {
    let eval = if exists {
        evaluate_node(spec, gpu_node, now)
    } else {
        NodeEvaluation {
            verdict: Verdict::Unknown,
            reasons: vec!["node not found".to_owned()],
            gpus: Vec::new(),
            observed_at: None,
        }
    };
    let result = NodeHealthResult {
        node: node.to_owned(),
        verdict: eval.verdict,
        reasons: eval.reasons,
        consecutive_failures: next_failure_count(
            prev.map_or(0, |p| p.consecutive_failures),
            eval.verdict,
        ),
        gpus: eval.gpus,
        quarantined: false,
        remediation: prev.and_then(|p| p.remediation.clone()),
        drain: prev.and_then(|p| p.drain.clone()),
        last_observation: gpu_node
            .and_then(newest_observation)
            .map(t)
            .or_else(|| prev.and_then(|p| p.last_observation.clone())),
    };
    (result, eval.observed_at)
}

/// The verdicts on the targeted nodes: fresh on a run and for a node with a new fatal reading
/// ([`evaluate_at_once`]), with a `GpuUnhealthy` Event for a node that starts failing when
/// `onFailure.alert`; carried over otherwise (a node healthy at the last run has no result:
/// it stays healthy). Also returns when each freshly evaluated node's oldest observation was
/// taken (its keys are the nodes evaluated now).
fn verdicts(
    spec: &GryviaHealthCheckSpec,
    world: &HealthWorld,
    by_name: &BTreeMap<&str, &NodeInfo>,
    targets: &[String],
    previous: &[NodeHealthResult],
    due: bool,
    run: &mut Run<'_>,
) -> (Vec<NodeHealthResult>, BTreeMap<String, Option<Timestamp>>) {
    let previous: BTreeMap<&str, &NodeHealthResult> =
        previous.iter().map(|r| (r.node.as_str(), r)).collect();
    let mut results = Vec::with_capacity(targets.len());
    let mut observed_at = BTreeMap::new();
    for node in targets {
        let prev = previous.get(node.as_str()).copied();
        let info = by_name.get(node.as_str()).copied();
        let gpu_node = world.gpu_nodes.get(node).and_then(|g| g.status.as_ref());
        let now_due = due || (info.is_some() && evaluate_at_once(spec, gpu_node, prev, run.now));
        if !now_due {
            match prev {
                Some(prev) => {
                    results.push(prev.clone());
                    continue;
                }
                // Healthy at the last run.
                None if info.is_none_or(|i| i.quarantined_by.as_deref() != Some(run.name)) => {
                    continue;
                }
                // Quarantined by this check without a result (its status was lost): its
                // state is rebuilt from the node.
                None => {}
            }
        }
        let (result, observed) = fresh_result(spec, node, info.is_some(), gpu_node, prev, run.now);
        if now_due
            && spec.on_failure.alert
            && result.verdict == Verdict::Failed
            && prev.is_none_or(|p| p.verdict != Verdict::Failed)
        {
            run.plan.event(
                EventType::Warning,
                "GpuUnhealthy",
                format!("node {node}: {}", result.reasons.join("; ")),
            );
        }
        if now_due {
            observed_at.insert(node.clone(), observed);
        }
        results.push(result);
    }
    (results, observed_at)
}

/// Whether a node that this check has not quarantined is to be quarantined now: evaluated now
/// (a run, or a fatal reading), the failure counter at `onFailure.consecutiveFailures`,
/// cordoning on, and no other check's taint on the node.
fn wants_quarantine(
    spec: &GryviaHealthCheckSpec,
    evaluated: bool,
    result: &NodeHealthResult,
    node: &NodeInfo,
) -> bool {
    evaluated
        && spec.on_failure.cordon
        && result.verdict == Verdict::Failed
        && result.consecutive_failures >= spec.on_failure.consecutive_failures
        && node.quarantined_by.is_none()
}

/// What a step the agent was asked for came to, as far as the ladder is concerned.
#[derive(Clone, Debug, PartialEq, Eq)]
enum StepOutcome {
    /// Still running (or no answer yet) and within its time.
    Running,
    /// The agent reports success, at `finished`, with its message.
    Succeeded {
        /// When the step ended.
        finished: Time,
        /// The agent's message.
        message: String,
    },
    /// Failed or timed out: climb to the next step, for this reason.
    Escalate(String),
}

/// The outcome of the running step `state`, from the agent's `result` (only one that answers
/// this request counts) and the step timeout.
fn step_outcome(
    state: &NodeRemediationState,
    result: Option<&RemediationResult>,
    timeout_seconds: i32,
    now: Timestamp,
) -> StepOutcome {
    let result = result.filter(|res| res.id == state.request_id);
    let message = || {
        result
            .and_then(|res| res.message.clone())
            .unwrap_or_default()
    };
    match result.map(|res| res.phase) {
        Some(StepPhase::Succeeded) => StepOutcome::Succeeded {
            finished: result
                .and_then(|res| res.finished_at.clone())
                .unwrap_or_else(|| t(now)),
            message: message(),
        },
        Some(StepPhase::Failed) => StepOutcome::Escalate(format!(
            "{} failed: {}",
            action_name(state.action),
            message()
        )),
        Some(StepPhase::Running) | None => {
            if age_seconds(&state.started_at, now) > i64::from(timeout_seconds) {
                StepOutcome::Escalate(format!(
                    "{} timed out after {timeout_seconds}s",
                    action_name(state.action)
                ))
            } else {
                StepOutcome::Running
            }
        }
    }
}

/// What a run after a successful step decides.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Verification {
    /// No verdict on observations taken after the step yet.
    Wait,
    /// Passing: release the node.
    Release,
    /// Still failing: climb, for this reason.
    Escalate(String),
}

/// Verifies a successful step on observations taken after it ended (`observed`: when the
/// node's oldest observation of this run was taken).
fn verify_step(
    state: &NodeRemediationState,
    result: &NodeHealthResult,
    observed: Option<Timestamp>,
) -> Verification {
    let fresh = match (observed, &state.finished_at) {
        (Some(obs), Some(done)) => obs > done.0,
        _ => false,
    };
    if !fresh {
        return Verification::Wait;
    }
    match result.verdict {
        Verdict::Healthy | Verdict::Warning => Verification::Release,
        Verdict::Failed => Verification::Escalate(format!(
            "still failing after {}: {}",
            action_name(state.action),
            result.reasons.join("; ")
        )),
        Verdict::Unknown => Verification::Wait,
    }
}

/// The action pass over the targeted nodes: quarantine, drain, the ladder, release. It counts
/// quarantined and remediating nodes against the check's limits as it goes.
struct Action<'a> {
    spec: &'a GryviaHealthCheckSpec,
    world: &'a HealthWorld,
    name: &'a str,
    due: bool,
    ladder: Option<&'a RemediationSpec>,
    targeted: usize,
    allowed: usize,
    quarantined: usize,
    remediating: usize,
    max_remediating: usize,
    in_progress: bool,
}

impl<'a> Action<'a> {
    /// Counts what is quarantined (by any check) and under remediation (by this one and
    /// others) before the pass.
    fn new(
        spec: &'a GryviaHealthCheckSpec,
        world: &'a HealthWorld,
        by_name: &BTreeMap<&str, &NodeInfo>,
        name: &'a str,
        due: bool,
        targets: &[String],
        results: &[NodeHealthResult],
    ) -> Self {
        let node = |n: &str| by_name.get(n).copied();
        let ladder = spec
            .remediation
            .as_ref()
            .filter(|_| spec.on_failure.auto_remediate);
        let quarantined = targets
            .iter()
            .filter(|n| node(n).is_some_and(|i| i.quarantined_by.is_some()))
            .count();
        let remediating = world.remediating_elsewhere.len()
            + results
                .iter()
                .filter(|r| {
                    r.remediation
                        .as_ref()
                        .is_some_and(|s| s.phase != StepPhase::Failed)
                        && node(&r.node).is_some_and(|i| i.quarantined_by.as_deref() == Some(name))
                })
                .count();
        Action {
            spec,
            world,
            name,
            due,
            ladder,
            targeted: targets.len(),
            allowed: quarantine_limit(targets.len(), spec.max_quarantined_percent),
            quarantined,
            remediating,
            max_remediating: ladder
                .map_or(0, |l| usize::try_from(l.max_concurrent_nodes).unwrap_or(1)),
            in_progress: false,
        }
    }

    /// Acts on one node: quarantine it when it is due, or, when this check quarantined it,
    /// drain it and climb the ladder (`observed`: when the observations of the node were
    /// taken, `None` when it was not evaluated now).
    fn node(
        &mut self,
        run: &mut Run<'_>,
        r: &mut NodeHealthResult,
        node: &NodeInfo,
        observed: Option<Option<Timestamp>>,
    ) {
        if node.quarantined_by.as_deref() != Some(self.name) {
            // A node released by a human or by another check carries no state from us.
            r.remediation = None;
            r.drain = None;
            if wants_quarantine(self.spec, observed.is_some(), r, node) {
                self.quarantine(run, r, node);
            }
            return;
        }
        r.quarantined = true;
        let drained = !self.spec.on_failure.drain || self.drain(run, r);
        if let Some(ladder) = self.ladder {
            self.climb(run, r, (node, observed.flatten()), drained, ladder);
        }
    }

    /// Quarantines the node, or holds the quarantine back when the guard is reached.
    fn quarantine(&mut self, run: &mut Run<'_>, r: &mut NodeHealthResult, node: &NodeInfo) {
        if self.quarantined < self.allowed {
            self.quarantined += 1;
            run.quarantine(node);
            run.record(
                &r.node,
                "Quarantine",
                format!(
                    "cordoned and tainted {}: {}",
                    labels::GPU_UNHEALTHY_TAINT,
                    r.reasons.join("; ")
                ),
                Some(EventType::Warning),
            );
            r.quarantined = true;
            self.in_progress = true;
        } else {
            run.record(
                &r.node,
                "QuarantineHeldBack",
                format!(
                    "{} of {} targeted nodes are quarantined, the most maxQuarantinedPercent {} allows",
                    self.quarantined, self.targeted, self.spec.max_quarantined_percent
                ),
                Some(EventType::Warning),
            );
        }
    }

    /// One round of the drain of a quarantined node; true when it is complete.
    fn drain(&mut self, run: &mut Run<'_>, r: &mut NodeHealthResult) -> bool {
        let pods = self
            .world
            .pods
            .get(&r.node)
            .map(Vec::as_slice)
            .unwrap_or_default();
        let dp = drain_plan(pods, &self.world.pdbs);
        let prev = r.drain.clone().unwrap_or_default();
        let mut evicting: Vec<String> = Vec::new();
        for pod in &dp.evict {
            let key = pod.key();
            if !prev.evicting.contains(&key) {
                run.record(
                    &r.node,
                    "Evict",
                    format!("evicting pod {key}"),
                    Some(EventType::Normal),
                );
            }
            run.plan.evictions.push(Eviction {
                namespace: pod.namespace.clone(),
                pod: pod.name.clone(),
                reason: format!("GPU health check {} quarantined node {}", self.name, r.node),
            });
            evicting.push(key);
        }
        evicting.extend(dp.terminating.iter().cloned());
        evicting.sort();
        let blocked: Vec<String> = dp.blocked.iter().map(ToString::to_string).collect();
        for b in blocked.iter().filter(|b| !prev.blocked.contains(b)) {
            run.record(
                &r.node,
                "EvictionBlocked",
                format!("{b} allows no disruption; retrying"),
                Some(EventType::Warning),
            );
        }
        let complete = dp.complete();
        if complete && !prev.complete {
            run.record(
                &r.node,
                "Drained",
                "no evictable pod left".to_owned(),
                Some(EventType::Normal),
            );
        }
        self.in_progress |= !complete;
        r.drain = Some(DrainStatus {
            evicting,
            blocked,
            complete,
        });
        complete
    }

    /// The failing GPUs of a node (those a step is asked to act on).
    fn failing_gpus(r: &NodeHealthResult) -> Vec<i32> {
        r.gpus
            .iter()
            .filter(|g| g.verdict == Verdict::Failed)
            .map(|g| g.index)
            .collect()
    }

    /// The remediation ladder of a quarantined node: start it once the drain is done and a
    /// slot is free, follow the running step, verify a successful one.
    fn climb(
        &mut self,
        run: &mut Run<'_>,
        r: &mut NodeHealthResult,
        node: (&NodeInfo, Option<Timestamp>),
        drained: bool,
        ladder: &RemediationSpec,
    ) {
        let world = self.world;
        let gpu_node = world.gpu_nodes.get(&r.node);
        match r.remediation.clone() {
            None => {
                if !drained || self.remediating >= self.max_remediating {
                    return;
                }
                let (Some(first), Some(gn)) = (ladder.steps.first(), gpu_node) else {
                    return;
                };
                let id = run.request_step(gn, *first, &Self::failing_gpus(r), 0, ladder);
                run.record(
                    &r.node,
                    action_name(*first),
                    format!("step 1 of {}: requested {id}", ladder.steps.len()),
                    Some(EventType::Normal),
                );
                r.remediation = Some(running_state(0, *first, id, run.now, String::new()));
                self.remediating += 1;
                self.in_progress = true;
            }
            Some(state) if state.phase == StepPhase::Failed => {}
            Some(state) => self.follow(run, r, node, state, ladder),
        }
    }

    /// Follows a step in progress or verifies a successful one; escalates when it failed.
    fn follow(
        &mut self,
        run: &mut Run<'_>,
        r: &mut NodeHealthResult,
        (node, observed): (&NodeInfo, Option<Timestamp>),
        mut state: NodeRemediationState,
        ladder: &RemediationSpec,
    ) {
        self.in_progress = true;
        let world = self.world;
        let result = world
            .gpu_nodes
            .get(&r.node)
            .and_then(|g| g.status.as_ref())
            .and_then(|s| s.remediation_result.as_ref());
        let mut escalate: Option<String> = None;
        if state.phase == StepPhase::Running {
            match step_outcome(&state, result, ladder.step_timeout_seconds, run.now) {
                StepOutcome::Running => {}
                StepOutcome::Succeeded { finished, message } => {
                    state.phase = StepPhase::Succeeded;
                    state.message =
                        "step succeeded; waiting for a passing check on fresh observations"
                            .to_owned();
                    run.record(
                        &r.node,
                        &format!("{}Succeeded", action_name(state.action)),
                        message,
                        Some(EventType::Normal),
                    );
                    state.finished_at = Some(finished);
                }
                StepOutcome::Escalate(why) => escalate = Some(why),
            }
        } else if self.due {
            match verify_step(&state, r, observed) {
                Verification::Wait => {}
                Verification::Release => {
                    self.release(run, r, node, state.action);
                    return;
                }
                Verification::Escalate(why) => escalate = Some(why),
            }
        }
        if let Some(why) = escalate {
            state = self.escalate(run, r, state, why, ladder);
        }
        r.remediation = Some(state);
    }

    /// Releases a node whose check passes after a step: taint removed, uncordoned unless it
    /// is in manual maintenance, its state cleared.
    fn release(
        &mut self,
        run: &mut Run<'_>,
        r: &mut NodeHealthResult,
        node: &NodeInfo,
        action: RemediationAction,
    ) {
        run.release(node);
        run.record(
            &r.node,
            "Recovered",
            format!(
                "passing check after {}; taint removed{}",
                action_name(action),
                if node.maintenance {
                    " (node stays cordoned: manual maintenance)"
                } else {
                    ", uncordoned"
                }
            ),
            Some(EventType::Normal),
        );
        r.quarantined = false;
        r.remediation = None;
        r.drain = None;
        r.consecutive_failures = 0;
        self.remediating = self.remediating.saturating_sub(1);
    }

    /// Requests the next step of the ladder, or gives up when there is none.
    fn escalate(
        &mut self,
        run: &mut Run<'_>,
        r: &NodeHealthResult,
        mut state: NodeRemediationState,
        why: String,
        ladder: &RemediationSpec,
    ) -> NodeRemediationState {
        let next = usize::try_from(state.step_index).unwrap_or(0) + 1;
        let world = self.world;
        match (ladder.steps.get(next), world.gpu_nodes.get(&r.node)) {
            (Some(action), Some(gn)) => {
                let id = run.request_step(gn, *action, &Self::failing_gpus(r), next, ladder);
                run.record(
                    &r.node,
                    action_name(*action),
                    format!(
                        "{why}; step {} of {}: requested {id}",
                        next + 1,
                        ladder.steps.len()
                    ),
                    Some(EventType::Warning),
                );
                running_state(next, *action, id, run.now, why)
            }
            _ => {
                run.record(
                    &r.node,
                    "RemediationExhausted",
                    format!("{why}; no step left, the node stays quarantined for an operator"),
                    Some(EventType::Warning),
                );
                state.phase = StepPhase::Failed;
                state.message = why;
                self.remediating = self.remediating.saturating_sub(1);
                state
            }
        }
    }
}

/// The state of a step just requested.
fn running_state(
    step: usize,
    action: RemediationAction,
    request_id: String,
    now: Timestamp,
    message: String,
) -> NodeRemediationState {
    NodeRemediationState {
        step_index: i32::try_from(step).unwrap_or(i32::MAX),
        action,
        request_id,
        phase: StepPhase::Running,
        started_at: t(now),
        finished_at: None,
        message,
    }
}

/// Counts the verdicts and the quarantined nodes of `targeted` nodes, those without a result
/// healthy.
fn summarize(results: &[NodeHealthResult], targeted: usize) -> VerdictSummary {
    let mut summary = VerdictSummary {
        healthy: i32::try_from(targeted.saturating_sub(results.len())).unwrap_or(i32::MAX),
        ..VerdictSummary::default()
    };
    for r in results {
        match r.verdict {
            Verdict::Healthy => summary.healthy += 1,
            Verdict::Warning => summary.warning += 1,
            Verdict::Failed => summary.failed += 1,
            Verdict::Unknown => summary.unknown += 1,
        }
        if r.quarantined {
            summary.quarantined += 1;
        }
    }
    summary
}

/// The Ready condition's status, reason and message (`act`: remediation is enabled).
fn ready(
    status: &GryviaHealthCheckStatus,
    suspend: bool,
    act: bool,
) -> (Status, &'static str, String) {
    if suspend {
        return (
            Status::False,
            "Suspended",
            "spec.suspend is true; no evaluation runs".to_owned(),
        );
    }
    let s = &status.summary;
    (
        Status::True,
        conditions::REASON_RECONCILED,
        format!(
            "{} nodes: {} healthy, {} warning, {} failed, {} unknown, {} quarantined{}",
            s.healthy + s.warning + s.failed + s.unknown,
            s.healthy,
            s.warning,
            s.failed,
            s.unknown,
            s.quarantined,
            if act {
                ""
            } else {
                " (evaluation only: remediation is not enabled)"
            }
        ),
    )
}

/// The action log with `new` appended, the oldest dropped beyond [`MAX_ACTIONS`].
fn keep_actions(mut actions: Vec<ActionRecord>, new: Vec<ActionRecord>) -> Vec<ActionRecord> {
    actions.extend(new);
    if actions.len() > MAX_ACTIONS {
        actions.drain(..actions.len() - MAX_ACTIONS);
    }
    actions
}

/// When the next run is: none while suspended, the next scheduled time after a run (or when
/// none is recorded), else the recorded one.
fn next_run(
    schedule: &Schedule,
    suspend: bool,
    due: bool,
    recorded: Option<Time>,
    now: Timestamp,
) -> Option<Time> {
    if suspend {
        None
    } else if due || recorded.is_none() {
        schedule.next_after(now).map(t)
    } else {
        recorded
    }
}

/// What the run leaves in the status: the results, their summary, the action log, the run
/// times and the Ready condition.
struct Outcome {
    results: Vec<NodeHealthResult>,
    targeted: usize,
    actions: Vec<ActionRecord>,
    due: bool,
    act: bool,
}

fn write_status(
    hc: &GryviaHealthCheck,
    schedule: &Schedule,
    outcome: Outcome,
    now: Timestamp,
) -> GryviaHealthCheckStatus {
    let spec = &hc.spec;
    let generation = hc.metadata.generation;
    let mut status = hc.status.clone().unwrap_or_default();
    status.observed_generation = generation;
    status.summary = summarize(&outcome.results, outcome.targeted);
    status.nodes = outcome.results.into_iter().filter(notable).collect();
    status.actions = keep_actions(std::mem::take(&mut status.actions), outcome.actions);
    if outcome.due {
        status.last_run = Some(t(now));
    }
    status.next_run = next_run(
        schedule,
        spec.suspend,
        outcome.due,
        status.next_run.take(),
        now,
    );
    let (cond_status, reason, message) = ready(&status, spec.suspend, outcome.act);
    conditions::set(
        &mut status.conditions,
        conditions::new(
            conditions::READY,
            cond_status,
            reason,
            message,
            generation,
            now,
        ),
    );
    status
}

impl Reconcile for HealthCheckReconciler {
    type Object = GryviaHealthCheck;
    type World = HealthWorld;
    type Status = GryviaHealthCheckStatus;

    fn name(&self) -> &'static str {
        "gryvia-gpu-health"
    }

    fn reconcile(
        &self,
        hc: &GryviaHealthCheck,
        world: &HealthWorld,
        now: Timestamp,
    ) -> Plan<GryviaHealthCheckStatus> {
        let spec = &hc.spec;
        let name = hc.metadata.name.as_deref().unwrap_or_default();
        let schedule = match check_spec(spec) {
            Ok(s) => s,
            Err(e) => return invalid(hc, e.to_string(), now),
        };
        let current = hc.status.clone().unwrap_or_default();
        let due = is_due(hc, &current, now);
        let targets = target_nodes(spec, &world.nodes);
        let mut run = Run {
            name,
            now,
            plan: Plan::new(),
            actions: Vec::new(),
        };
        let by_name: BTreeMap<&str, &NodeInfo> =
            world.nodes.iter().map(|n| (n.name.as_str(), n)).collect();
        let (mut results, observed_at) = verdicts(
            spec,
            world,
            &by_name,
            &targets,
            &current.nodes,
            due,
            &mut run,
        );
        let act = self.options.remediation && !spec.suspend;
        let mut action = Action::new(spec, world, &by_name, name, due, &targets, &results);
        for r in &mut results {
            let Some(node) = by_name.get(r.node.as_str()).copied() else {
                continue;
            };
            if act {
                let observed = observed_at.get(&r.node).copied();
                action.node(&mut run, r, node, observed);
            } else {
                r.quarantined = node.quarantined_by.as_deref() == Some(name);
            }
        }
        let in_progress = action.in_progress;
        let outcome = Outcome {
            results,
            targeted: targets.len(),
            actions: run.actions,
            due,
            act,
        };
        let status = write_status(hc, &schedule, outcome, now);
        let mut plan = run.plan;
        plan.set_status_if_changed(hc.status.as_ref(), status.clone());
        if let Some(next) = &status.next_run {
            let wait = next.0.as_millisecond() - now.as_millisecond();
            plan.requeue(Duration::from_millis(
                u64::try_from(wait.max(0)).unwrap_or(0),
            ));
        }
        if in_progress {
            plan.requeue(PROGRESS_INTERVAL);
        }
        plan
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;

    #[test]
    fn the_worse_verdict_wins_failed_over_unknown_over_warning() {
        assert_eq!(worst(Verdict::Healthy, Verdict::Warning), Verdict::Warning);
        assert_eq!(worst(Verdict::Unknown, Verdict::Warning), Verdict::Unknown);
        assert_eq!(worst(Verdict::Unknown, Verdict::Failed), Verdict::Failed);
        assert_eq!(worst(Verdict::Failed, Verdict::Healthy), Verdict::Failed);
    }

    #[test]
    fn quarantine_limit_rounds_down() {
        assert_eq!(quarantine_limit(4, 25), 1);
        assert_eq!(quarantine_limit(3, 25), 0);
        assert_eq!(quarantine_limit(10, 100), 10);
        assert_eq!(quarantine_limit(10, 0), 0);
    }

    use gryvia_types::CheckType;
    use gryvia_types::testing::{gpu_node, health_check};

    fn now() -> Timestamp {
        Timestamp::from_second(1_800_000_000).unwrap()
    }

    fn ecc_check() -> GryviaHealthCheck {
        let mut hc = health_check("hc", CheckType::GpuEccErrors, 0.0);
        hc.spec.on_failure.cordon = true;
        hc.spec.on_failure.consecutive_failures = 1;
        hc
    }

    fn ladder(steps: Vec<RemediationAction>) -> RemediationSpec {
        RemediationSpec {
            steps,
            step_timeout_seconds: 60,
            reboot_method: Default::default(),
            max_concurrent_nodes: 1,
        }
    }

    fn result(node: &str, verdict: Verdict, failures: i32) -> NodeHealthResult {
        NodeHealthResult {
            verdict,
            reasons: vec!["gpu 0: bad".to_owned()],
            consecutive_failures: failures,
            gpus: vec![GpuHealthResult {
                index: 0,
                verdict,
                reasons: Vec::new(),
            }],
            ..healthy_result(node)
        }
    }

    fn info(name: &str, quarantined_by: Option<&str>) -> NodeInfo {
        NodeInfo {
            name: name.to_owned(),
            gpu_capacity: 8,
            unschedulable: quarantined_by.is_some(),
            quarantined_by: quarantined_by.map(str::to_owned),
            ..NodeInfo::default()
        }
    }

    fn run(name: &str) -> Run<'_> {
        Run {
            name,
            now: now(),
            plan: Plan::new(),
            actions: Vec::new(),
        }
    }

    fn state(phase: StepPhase, finished: Option<Timestamp>) -> NodeRemediationState {
        NodeRemediationState {
            step_index: 0,
            action: RemediationAction::GpuReset,
            request_id: "req".to_owned(),
            phase,
            started_at: t(now()),
            finished_at: finished.map(t),
            message: String::new(),
        }
    }

    fn answer(id: &str, phase: StepPhase) -> RemediationResult {
        RemediationResult {
            id: id.to_owned(),
            action: RemediationAction::GpuReset,
            phase,
            started_at: None,
            finished_at: None,
            message: Some("done".to_owned()),
        }
    }

    #[test]
    fn a_bad_schedule_or_a_repeated_step_is_named_by_its_field() {
        let mut hc = ecc_check();
        assert!(check_spec(&hc.spec).is_ok());
        hc.spec.remediation = Some(ladder(vec![
            RemediationAction::GpuReset,
            RemediationAction::GpuReset,
        ]));
        assert_eq!(
            check_spec(&hc.spec).err().map(|e| e.to_string()).as_deref(),
            Some("spec.remediation.steps: a step may appear only once")
        );
        hc.spec.schedule = "nonsense".to_owned();
        assert!(
            check_spec(&hc.spec)
                .unwrap_err()
                .to_string()
                .starts_with("spec.schedule: ")
        );
    }

    #[test]
    fn a_run_is_due_on_a_spec_change_or_at_the_scheduled_time_unless_suspended() {
        let mut hc = ecc_check();
        let mut status = GryviaHealthCheckStatus::default();
        assert!(is_due(&hc, &status, now()), "never observed: a spec change");
        status.observed_generation = hc.metadata.generation;
        status.next_run = Some(t(now() + jiff::SignedDuration::from_secs(60)));
        assert!(!is_due(&hc, &status, now()));
        status.next_run = Some(t(now()));
        assert!(is_due(&hc, &status, now()));
        hc.spec.suspend = true;
        assert!(!is_due(&hc, &status, now()));
    }

    #[test]
    fn failures_count_up_passes_reset_and_unknown_holds() {
        assert_eq!(next_failure_count(2, Verdict::Failed), 3);
        assert_eq!(next_failure_count(2, Verdict::Unknown), 2);
        assert_eq!(next_failure_count(2, Verdict::Warning), 0);
        assert_eq!(next_failure_count(2, Verdict::Healthy), 0);
    }

    #[test]
    fn a_fresh_result_carries_the_counter_and_the_remediation_over() {
        let hc = ecc_check();
        let mut gn = gpu_node("n1", 1, now());
        if let Some(s) = gn.status.as_mut() {
            s.gpus[0].ecc_double_bit = Some(1);
        }
        let mut prev = result("n1", Verdict::Failed, 2);
        prev.remediation = Some(state(StepPhase::Running, None));
        let (r, observed) =
            fresh_result(&hc.spec, "n1", true, gn.status.as_ref(), Some(&prev), now());
        assert_eq!((r.verdict, r.consecutive_failures), (Verdict::Failed, 3));
        assert_eq!(r.remediation, prev.remediation);
        assert_eq!(observed, Some(now()));
        let (gone, _) = fresh_result(&hc.spec, "n2", false, None, None, now());
        assert_eq!(gone.verdict, Verdict::Unknown);
        assert_eq!(gone.reasons, vec!["node not found"]);
    }

    #[test]
    fn verdicts_are_carried_over_between_runs_and_a_new_failure_alerts() {
        let mut hc = ecc_check();
        hc.spec.on_failure.alert = true;
        let mut gn = gpu_node("n1", 1, now());
        if let Some(s) = gn.status.as_mut() {
            s.gpus[0].ecc_double_bit = Some(1);
        }
        let world = HealthWorld {
            nodes: vec![info("n1", None)],
            gpu_nodes: BTreeMap::from([("n1".to_owned(), Arc::new(gn))]),
            ..HealthWorld::default()
        };
        let by_name: BTreeMap<&str, &NodeInfo> =
            world.nodes.iter().map(|n| (n.name.as_str(), n)).collect();
        let targets = vec!["n1".to_owned()];
        // One evaluation pass over n1 with `previous` results, a run when `due`.
        let pass = |previous: &[NodeHealthResult], due: bool| {
            let mut r = run("hc");
            let (results, observed) =
                verdicts(&hc.spec, &world, &by_name, &targets, previous, due, &mut r);
            (results, observed, r.plan.events)
        };
        let (fresh, _, events) = pass(&[], true);
        assert_eq!(fresh[0].verdict, Verdict::Failed);
        assert_eq!(events[0].reason, "GpuUnhealthy");
        // The fatal reading was counted (its observation is the newest counted): carried.
        let mut carried = result("n1", Verdict::Healthy, 0);
        carried.last_observation = Some(t(now()));
        let (kept, observed, events) = pass(std::slice::from_ref(&carried), false);
        assert_eq!(kept, vec![carried.clone()]);
        assert!(observed.is_empty() && events.is_empty());
        // An older observation counted: the fatal reading is evaluated at once, between runs.
        carried.last_observation = Some(t(now() - jiff::SignedDuration::from_secs(30)));
        let (fresh, observed, events) = pass(std::slice::from_ref(&carried), false);
        assert_eq!(fresh[0].verdict, Verdict::Failed);
        assert_eq!(fresh[0].consecutive_failures, 1);
        assert_eq!(fresh[0].last_observation, Some(t(now())));
        assert!(observed.contains_key("n1"));
        assert_eq!(events[0].reason, "GpuUnhealthy");
    }

    #[test]
    fn only_a_run_with_enough_failures_quarantines_a_node_no_check_holds() {
        let mut hc = ecc_check();
        hc.spec.on_failure.consecutive_failures = 2;
        let free = info("n1", None);
        assert!(!wants_quarantine(
            &hc.spec,
            true,
            &result("n1", Verdict::Failed, 1),
            &free
        ));
        assert!(wants_quarantine(
            &hc.spec,
            true,
            &result("n1", Verdict::Failed, 2),
            &free
        ));
        assert!(!wants_quarantine(
            &hc.spec,
            false,
            &result("n1", Verdict::Failed, 2),
            &free
        ));
        let held = info("n1", Some("other"));
        assert!(!wants_quarantine(
            &hc.spec,
            true,
            &result("n1", Verdict::Failed, 2),
            &held
        ));
    }

    #[test]
    fn a_step_succeeds_fails_or_times_out_by_the_agents_answer_to_its_request() {
        let running = state(StepPhase::Running, None);
        assert_eq!(
            step_outcome(&running, None, 60, now()),
            StepOutcome::Running
        );
        let other = answer("old", StepPhase::Failed);
        assert_eq!(
            step_outcome(&running, Some(&other), 60, now()),
            StepOutcome::Running,
            "an answer to another request does not count"
        );
        assert_eq!(
            step_outcome(
                &running,
                Some(&answer("req", StepPhase::Succeeded)),
                60,
                now()
            ),
            StepOutcome::Succeeded {
                finished: t(now()),
                message: "done".to_owned()
            }
        );
        assert_eq!(
            step_outcome(&running, Some(&answer("req", StepPhase::Failed)), 60, now()),
            StepOutcome::Escalate("GpuReset failed: done".to_owned())
        );
        let later = now() + jiff::SignedDuration::from_secs(61);
        assert_eq!(
            step_outcome(&running, None, 60, later),
            StepOutcome::Escalate("GpuReset timed out after 60s".to_owned())
        );
    }

    #[test]
    fn a_successful_step_is_judged_only_on_observations_taken_after_it() {
        let done = state(StepPhase::Succeeded, Some(now()));
        let after = Some(now() + jiff::SignedDuration::from_secs(1));
        let passing = result("n1", Verdict::Healthy, 0);
        assert_eq!(
            verify_step(&done, &passing, Some(now())),
            Verification::Wait
        );
        assert_eq!(verify_step(&done, &passing, after), Verification::Release);
        assert_eq!(
            verify_step(&done, &result("n1", Verdict::Unknown, 0), after),
            Verification::Wait
        );
        assert_eq!(
            verify_step(&done, &result("n1", Verdict::Failed, 1), after),
            Verification::Escalate("still failing after GpuReset: gpu 0: bad".to_owned())
        );
    }

    fn action_world() -> HealthWorld {
        HealthWorld {
            nodes: vec![info("n1", Some("hc")), info("n2", None)],
            gpu_nodes: BTreeMap::from([("n1".to_owned(), Arc::new(gpu_node("n1", 1, now())))]),
            ..HealthWorld::default()
        }
    }

    #[test]
    fn the_action_pass_counts_quarantines_and_holds_back_beyond_the_guard() {
        let hc = ecc_check();
        let world = action_world();
        let by_name: BTreeMap<&str, &NodeInfo> =
            world.nodes.iter().map(|n| (n.name.as_str(), n)).collect();
        let targets = vec!["n1".to_owned(), "n2".to_owned()];
        let results = vec![
            result("n1", Verdict::Failed, 1),
            result("n2", Verdict::Failed, 1),
        ];
        let mut action = Action::new(&hc.spec, &world, &by_name, "hc", true, &targets, &results);
        assert_eq!((action.quarantined, action.allowed), (1, 0));
        let mut r = run("hc");
        let mut n2 = results[1].clone();
        action.node(&mut r, &mut n2, by_name["n2"], Some(None));
        assert!(!n2.quarantined);
        assert_eq!(r.actions[0].action, "QuarantineHeldBack");
        let mut n1 = results[0].clone();
        action.node(&mut r, &mut n1, by_name["n1"], Some(None));
        assert!(n1.quarantined, "a node this check holds stays quarantined");
    }

    #[test]
    fn a_drain_round_evicts_and_completes_when_nothing_is_left() {
        let mut hc = ecc_check();
        hc.spec.on_failure.drain = true;
        let mut world = action_world();
        world.pods.insert(
            "n1".to_owned(),
            vec![PodInfo {
                namespace: "ns".into(),
                name: "p".into(),
                phase: "Running".into(),
                ..PodInfo::default()
            }],
        );
        let by_name: BTreeMap<&str, &NodeInfo> =
            world.nodes.iter().map(|n| (n.name.as_str(), n)).collect();
        let mut action = Action::new(&hc.spec, &world, &by_name, "hc", true, &[], &[]);
        let mut r = run("hc");
        let mut n1 = result("n1", Verdict::Failed, 1);
        assert!(!action.drain(&mut r, &mut n1));
        assert_eq!(r.plan.evictions.len(), 1);
        assert!(action.in_progress);
        assert_eq!(
            n1.drain.as_ref().map(|d| d.evicting.clone()),
            Some(vec!["ns/p".to_owned()])
        );
        world.pods.clear();
        let mut action = Action::new(&hc.spec, &world, &by_name, "hc", true, &[], &[]);
        assert!(action.drain(&mut r, &mut n1));
        assert_eq!(r.actions.last().map(|a| a.action.as_str()), Some("Drained"));
    }

    #[test]
    fn the_ladder_starts_follows_escalates_and_gives_up() {
        let mut hc = ecc_check();
        hc.spec.on_failure.auto_remediate = true;
        hc.spec.remediation = Some(ladder(vec![RemediationAction::GpuReset]));
        let world = action_world();
        let by_name: BTreeMap<&str, &NodeInfo> =
            world.nodes.iter().map(|n| (n.name.as_str(), n)).collect();
        let targets = vec!["n1".to_owned()];
        let mut action = Action::new(&hc.spec, &world, &by_name, "hc", true, &targets, &[]);
        let mut r = run("hc");
        let mut n1 = result("n1", Verdict::Failed, 1);
        action.node(&mut r, &mut n1, by_name["n1"], None);
        let started = n1.remediation.clone().unwrap();
        assert_eq!((started.phase, action.remediating), (StepPhase::Running, 1));
        assert_eq!(
            r.plan.apply.len(),
            1,
            "the agent is asked for the first step"
        );
        let spec = hc.spec.remediation.clone().unwrap();
        let failed = action.escalate(&mut r, &n1, started, "it broke".to_owned(), &spec);
        assert_eq!(failed.phase, StepPhase::Failed);
        assert_eq!(action.remediating, 0);
        assert_eq!(
            r.actions.last().map(|a| a.action.as_str()),
            Some("RemediationExhausted")
        );
    }

    #[test]
    fn a_passing_node_is_released_with_its_state_cleared() {
        let hc = ecc_check();
        let world = action_world();
        let by_name: BTreeMap<&str, &NodeInfo> =
            world.nodes.iter().map(|n| (n.name.as_str(), n)).collect();
        let mut action = Action::new(&hc.spec, &world, &by_name, "hc", true, &[], &[]);
        action.remediating = 1;
        let mut r = run("hc");
        let mut n1 = result("n1", Verdict::Healthy, 3);
        n1.quarantined = true;
        action.release(&mut r, &mut n1, by_name["n1"], RemediationAction::GpuReset);
        assert!(!n1.quarantined && n1.consecutive_failures == 0 && action.remediating == 0);
        assert_eq!(r.plan.node_ops.len(), 2, "untainted and uncordoned");
    }

    #[test]
    fn a_requested_step_starts_running_now() {
        let s = running_state(
            2,
            RemediationAction::Reboot,
            "id".into(),
            now(),
            "why".into(),
        );
        assert_eq!((s.step_index, s.phase), (2, StepPhase::Running));
        assert_eq!((s.started_at, s.finished_at), (t(now()), None));
    }

    #[test]
    fn the_summary_counts_verdicts_and_quarantines() {
        let mut q = result("a", Verdict::Failed, 1);
        q.quarantined = true;
        let s = summarize(
            &[
                q,
                result("b", Verdict::Healthy, 0),
                result("c", Verdict::Unknown, 0),
            ],
            5,
        );
        // Two targeted nodes without a result are healthy.
        assert_eq!(
            (s.healthy, s.warning, s.failed, s.unknown, s.quarantined),
            (3, 0, 1, 1, 1)
        );
    }

    #[test]
    fn ready_says_suspended_or_counts_the_nodes() {
        let mut status = GryviaHealthCheckStatus::default();
        status.nodes = vec![result("a", Verdict::Healthy, 0)];
        status.summary = summarize(&status.nodes, 1);
        assert_eq!(ready(&status, true, true).1, "Suspended");
        let (s, _, message) = ready(&status, false, false);
        assert_eq!(s, Status::True);
        assert_eq!(
            message,
            "1 nodes: 1 healthy, 0 warning, 0 failed, 0 unknown, 0 quarantined (evaluation only: remediation is not enabled)"
        );
    }

    #[test]
    fn the_action_log_keeps_the_newest() {
        let record = |i: usize| ActionRecord {
            time: t(now()),
            node: format!("n{i}"),
            action: "A".into(),
            message: String::new(),
        };
        let old: Vec<ActionRecord> = (0..MAX_ACTIONS).map(record).collect();
        let kept = keep_actions(old, vec![record(MAX_ACTIONS)]);
        assert_eq!(kept.len(), MAX_ACTIONS);
        assert_eq!(kept[0].node, "n1");
        assert_eq!(kept[MAX_ACTIONS - 1].node, format!("n{MAX_ACTIONS}"));
    }

    #[test]
    fn the_next_run_follows_the_schedule_after_a_run_and_stops_when_suspended() {
        let schedule = Schedule::parse("*/5 * * * *").unwrap();
        let recorded = Some(t(now() + jiff::SignedDuration::from_secs(7)));
        assert_eq!(
            next_run(&schedule, true, true, recorded.clone(), now()),
            None
        );
        assert_eq!(
            next_run(&schedule, false, false, recorded.clone(), now()),
            recorded
        );
        let after = next_run(&schedule, false, true, recorded, now()).unwrap();
        assert_eq!(Some(after.clone()), schedule.next_after(now()).map(t));
        assert_eq!(next_run(&schedule, false, false, None, now()), Some(after));
    }

    #[test]
    fn the_status_records_the_run() {
        let hc = ecc_check();
        let schedule = Schedule::parse(&hc.spec.schedule).unwrap();
        let outcome = Outcome {
            results: vec![result("a", Verdict::Healthy, 0)],
            targeted: 2,
            actions: Vec::new(),
            due: true,
            act: true,
        };
        let status = write_status(&hc, &schedule, outcome, now());
        assert_eq!(status.observed_generation, hc.metadata.generation);
        assert_eq!(status.last_run, Some(t(now())));
        assert_eq!(status.summary.healthy, 2);
        assert!(status.nodes.is_empty(), "healthy nodes are only counted");
        assert!(conditions::is_true(&status.conditions, conditions::READY));
    }

    #[test]
    fn a_node_is_read_with_its_capacity_quarantine_and_maintenance() {
        let node: Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "n1", "labels": {"pool": "a"},
                         "annotations": {labels::MAINTENANCE: "psu"}},
            "spec": {"unschedulable": true, "taints": [
                {"key": labels::GPU_UNHEALTHY_TAINT, "value": "hc", "effect": "NoSchedule"}]},
            "status": {"capacity": {"nvidia.com/gpu": "8"}, "allocatable": {"nvidia.com/gpu": "0"}}
        }))
        .unwrap();
        let info = NodeInfo::of(&node);
        assert_eq!(info.name, "n1");
        assert_eq!(info.gpu_capacity, 8, "capacity, not allocatable");
        assert!(info.unschedulable && info.maintenance);
        assert_eq!(info.quarantined_by.as_deref(), Some("hc"));
        assert_eq!(info.labels["pool"], "a");
    }

    #[test]
    fn a_pod_is_read_with_its_controller_mirror_flag_and_phase() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "ns",
                         "annotations": {labels::MIRROR_POD: "x"},
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet",
                                              "name": "d", "uid": "u", "controller": true}]},
            "status": {"phase": "Running"}
        }))
        .unwrap();
        let info = PodInfo::of(&pod);
        assert_eq!(info.key(), "ns/p");
        assert_eq!(info.owner_kind.as_deref(), Some("DaemonSet"));
        assert!(info.mirror && !info.terminating);
        assert_eq!(info.phase, "Running");
        assert_eq!(PodInfo::of(&Pod::default()).phase, "");
    }

    #[test]
    fn a_budget_is_read_with_its_selector_and_allowance() {
        let pdb: PodDisruptionBudget = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "b", "namespace": "ns"},
            "spec": {"selector": {"matchLabels": {"app": "x"}}},
            "status": {"disruptionsAllowed": 1, "currentHealthy": 1, "desiredHealthy": 1,
                       "expectedPods": 1}
        }))
        .unwrap();
        let info = PdbInfo::of(&pdb);
        assert_eq!((info.name.as_str(), info.disruptions_allowed), ("b", 1));
        assert!(info.selector.is_some());
    }

    #[test]
    fn only_other_checks_live_remediations_count_elsewhere() {
        let with = |name: &str, node: &str, phase: StepPhase| {
            let mut hc = ecc_check();
            hc.metadata.name = Some(name.to_owned());
            let mut r = result(node, Verdict::Failed, 1);
            r.remediation = Some(state(phase, None));
            hc.status = Some(GryviaHealthCheckStatus {
                nodes: vec![r],
                ..GryviaHealthCheckStatus::default()
            });
            hc
        };
        let checks = [
            with("hc", "n1", StepPhase::Running),
            with("other", "n2", StepPhase::Running),
            with("third", "n3", StepPhase::Failed),
        ];
        assert_eq!(
            remediating_elsewhere(&checks, "hc"),
            BTreeSet::from(["n2".to_owned()])
        );
    }
}
