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
use std::time::Duration;

use gryvia_types::conditions::{self, Status};
use gryvia_types::k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, Time};
use gryvia_types::labels;
use gryvia_types::{
    ActionRecord, CheckType, DrainStatus, GpuHealthResult, GpuObservation, GryviaGpuNode,
    GryviaGpuNodeStatus, GryviaHealthCheck, GryviaHealthCheckSpec, GryviaHealthCheckStatus,
    HealthCheckItem, NodeHealthResult, NodeRemediationState, RemediationAction, RemediationSpec,
    StepPhase, TargetType, Threshold, Verdict, VerdictSummary,
};
use serde_json::json;

use crate::cron::Schedule;
use crate::plan::{Child, EventType, Eviction, NodeOp, Plan, Taint, TaintEffect};
use crate::{Reconcile, Timestamp};

/// How many action records a status keeps (newest last).
pub const MAX_ACTIONS: usize = 50;
/// How many reason lines a node result keeps.
pub const MAX_REASONS: usize = 16;
/// How soon to look again while a drain or a remediation step is in progress.
pub const PROGRESS_INTERVAL: Duration = Duration::from_secs(3);
/// XID codes that count for `gpu-xid`.
pub const CRITICAL_XIDS: [i32; 10] = [48, 63, 64, 74, 79, 92, 94, 95, 119, 120];

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

/// What a health check's reconcile needs to know.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct HealthWorld {
    /// Every node of the cluster.
    pub nodes: Vec<NodeInfo>,
    /// GryviaGpuNodes by `spec.nodeName`.
    pub gpu_nodes: BTreeMap<String, GryviaGpuNode>,
    /// Pods on the nodes this check quarantined, by node name.
    pub pods: BTreeMap<String, Vec<PodInfo>>,
    /// PodDisruptionBudgets in the namespaces of those pods.
    pub pdbs: Vec<PdbInfo>,
    /// Nodes under remediation by other health checks (counted against their own limits).
    pub remediating_elsewhere: BTreeSet<String>,
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
            || matches!(pod.phase.as_str(), "Succeeded" | "Failed")
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
                .filter(|n| {
                    spec.target
                        .node_selector
                        .iter()
                        .all(|(k, v)| n.labels.get(k) == Some(v))
                })
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
        if let Ok(child) = Child::from_json(object) {
            self.plan.apply_child(child.unowned());
        }
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

impl Reconcile for HealthCheckReconciler {
    type Object = GryviaHealthCheck;
    type World = HealthWorld;
    type Status = GryviaHealthCheckStatus;

    fn name(&self) -> &'static str {
        "gryvia-gpu-health"
    }

    #[expect(
        clippy::too_many_lines,
        reason = "one pass over the nodes: evaluation, quarantine, drain, ladder, release"
    )]
    fn reconcile(
        &self,
        hc: &GryviaHealthCheck,
        world: &HealthWorld,
        now: Timestamp,
    ) -> Plan<GryviaHealthCheckStatus> {
        let spec = &hc.spec;
        let name = hc.metadata.name.as_deref().unwrap_or_default();
        let schedule = match Schedule::parse(&spec.schedule) {
            Ok(s) => s,
            Err(e) => return invalid(hc, format!("spec.schedule: {e}"), now),
        };
        if let Some(rem) = &spec.remediation
            && rem.steps.iter().collect::<BTreeSet<_>>().len() != rem.steps.len()
        {
            return invalid(
                hc,
                "spec.remediation.steps: a step may appear only once".to_owned(),
                now,
            );
        }
        let current = hc.status.clone().unwrap_or_default();
        let mut status = current.clone();
        let generation = hc.metadata.generation;
        let spec_changed = current.observed_generation != generation;
        let due =
            !spec.suspend && (spec_changed || current.next_run.as_ref().is_none_or(|n| now >= n.0));

        let by_name: BTreeMap<&str, &NodeInfo> =
            world.nodes.iter().map(|n| (n.name.as_str(), n)).collect();
        let targets = target_nodes(spec, &world.nodes);
        let previous: BTreeMap<&str, &NodeHealthResult> =
            current.nodes.iter().map(|r| (r.node.as_str(), r)).collect();

        let mut run = Run {
            name,
            now,
            plan: Plan::new(),
            actions: Vec::new(),
        };

        // 1. Verdicts: fresh on a run, carried over between runs.
        let mut results: Vec<NodeHealthResult> = Vec::with_capacity(targets.len());
        let mut observed_at: BTreeMap<String, Option<Timestamp>> = BTreeMap::new();
        for node in &targets {
            let prev = previous.get(node.as_str()).copied();
            if !due && let Some(prev) = prev {
                results.push(prev.clone());
                continue;
            }
            let eval = if by_name.contains_key(node.as_str()) {
                evaluate_node(
                    spec,
                    world.gpu_nodes.get(node).and_then(|g| g.status.as_ref()),
                    now,
                )
            } else {
                NodeEvaluation {
                    verdict: Verdict::Unknown,
                    reasons: vec!["node not found".to_owned()],
                    gpus: Vec::new(),
                    observed_at: None,
                }
            };
            let prev_count = prev.map_or(0, |p| p.consecutive_failures);
            let consecutive_failures = match eval.verdict {
                Verdict::Failed => prev_count.saturating_add(1),
                Verdict::Unknown => prev_count,
                Verdict::Healthy | Verdict::Warning => 0,
            };
            if due
                && spec.on_failure.alert
                && eval.verdict == Verdict::Failed
                && prev.is_none_or(|p| p.verdict != Verdict::Failed)
            {
                run.plan.event(
                    EventType::Warning,
                    "GpuUnhealthy",
                    format!("node {node}: {}", eval.reasons.join("; ")),
                );
            }
            observed_at.insert(node.clone(), eval.observed_at);
            results.push(NodeHealthResult {
                node: node.clone(),
                verdict: eval.verdict,
                reasons: eval.reasons,
                consecutive_failures,
                gpus: eval.gpus,
                quarantined: false,
                remediation: prev.and_then(|p| p.remediation.clone()),
                drain: prev.and_then(|p| p.drain.clone()),
            });
        }

        // 2. Action, from the nodes' taints (the record of a quarantine).
        let act = self.options.remediation && !spec.suspend;
        let ladder = spec
            .remediation
            .as_ref()
            .filter(|_| spec.on_failure.auto_remediate);
        let allowed = quarantine_limit(targets.len(), spec.max_quarantined_percent);
        let mut quarantined_any = targets
            .iter()
            .filter(|n| {
                by_name
                    .get(n.as_str())
                    .is_some_and(|i| i.quarantined_by.is_some())
            })
            .count();
        let mut remediating = world.remediating_elsewhere.len()
            + results
                .iter()
                .filter(|r| {
                    r.remediation
                        .as_ref()
                        .is_some_and(|s| s.phase != StepPhase::Failed)
                        && by_name
                            .get(r.node.as_str())
                            .is_some_and(|i| i.quarantined_by.as_deref() == Some(name))
                })
                .count();
        let max_remediating =
            ladder.map_or(0, |l| usize::try_from(l.max_concurrent_nodes).unwrap_or(1));
        let mut in_progress = false;

        for r in &mut results {
            let Some(node) = by_name.get(r.node.as_str()).copied() else {
                continue;
            };
            let ours = node.quarantined_by.as_deref() == Some(name);
            if !act {
                r.quarantined = ours;
                continue;
            }
            if !ours {
                // A node released by a human or by another check carries no state from us.
                r.remediation = None;
                r.drain = None;
                let threshold = spec.on_failure.consecutive_failures;
                if due
                    && spec.on_failure.cordon
                    && r.verdict == Verdict::Failed
                    && r.consecutive_failures >= threshold
                    && node.quarantined_by.is_none()
                {
                    if quarantined_any < allowed {
                        quarantined_any += 1;
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
                        in_progress = true;
                    } else {
                        run.record(
                            &r.node,
                            "QuarantineHeldBack",
                            format!(
                                "{quarantined_any} of {} targeted nodes are quarantined, the most maxQuarantinedPercent {} allows",
                                targets.len(),
                                spec.max_quarantined_percent
                            ),
                            Some(EventType::Warning),
                        );
                    }
                }
                continue;
            }
            r.quarantined = true;

            // Drain.
            let mut drained = true;
            if spec.on_failure.drain {
                let pods = world
                    .pods
                    .get(&r.node)
                    .map(Vec::as_slice)
                    .unwrap_or_default();
                let dp = drain_plan(pods, &world.pdbs);
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
                        reason: format!("GPU health check {name} quarantined node {}", r.node),
                    });
                    evicting.push(key);
                }
                evicting.extend(dp.terminating.iter().cloned());
                evicting.sort();
                let blocked: Vec<String> = dp.blocked.iter().map(ToString::to_string).collect();
                for b in &blocked {
                    if !prev.blocked.contains(b) {
                        run.record(
                            &r.node,
                            "EvictionBlocked",
                            format!("{b} allows no disruption; retrying"),
                            Some(EventType::Warning),
                        );
                    }
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
                if !complete {
                    in_progress = true;
                    drained = false;
                }
                r.drain = Some(DrainStatus {
                    evicting,
                    blocked,
                    complete,
                });
            }

            // The remediation ladder.
            let Some(ladder) = ladder else { continue };
            let gpu_node = world.gpu_nodes.get(&r.node);
            let failing_gpus: Vec<i32> = r
                .gpus
                .iter()
                .filter(|g| g.verdict == Verdict::Failed)
                .map(|g| g.index)
                .collect();
            let timeout = ladder.step_timeout_seconds;
            match r.remediation.clone() {
                None => {
                    if !drained || remediating >= max_remediating {
                        continue;
                    }
                    let (Some(first), Some(gn)) = (ladder.steps.first(), gpu_node) else {
                        continue;
                    };
                    let id = run.request_step(gn, *first, &failing_gpus, 0, ladder);
                    run.record(
                        &r.node,
                        action_name(*first),
                        format!("step 1 of {}: requested {id}", ladder.steps.len()),
                        Some(EventType::Normal),
                    );
                    r.remediation = Some(NodeRemediationState {
                        step_index: 0,
                        action: *first,
                        request_id: id,
                        phase: StepPhase::Running,
                        started_at: t(now),
                        finished_at: None,
                        message: String::new(),
                    });
                    remediating += 1;
                    in_progress = true;
                }
                Some(state) if state.phase == StepPhase::Failed => {}
                Some(mut state) => {
                    in_progress = true;
                    let result = gpu_node
                        .and_then(|g| g.status.as_ref())
                        .and_then(|s| s.remediation_result.as_ref())
                        .filter(|res| res.id == state.request_id);
                    let mut escalate: Option<String> = None;
                    if state.phase == StepPhase::Running {
                        match result.map(|res| res.phase) {
                            Some(StepPhase::Succeeded) => {
                                let finished = result
                                    .and_then(|res| res.finished_at.clone())
                                    .unwrap_or_else(|| t(now));
                                state.phase = StepPhase::Succeeded;
                                state.message = "step succeeded; waiting for a passing check on fresh observations".to_owned();
                                run.record(
                                    &r.node,
                                    &format!("{}Succeeded", action_name(state.action)),
                                    result
                                        .and_then(|res| res.message.clone())
                                        .unwrap_or_default(),
                                    Some(EventType::Normal),
                                );
                                state.finished_at = Some(finished);
                            }
                            Some(StepPhase::Failed) => {
                                escalate = Some(format!(
                                    "{} failed: {}",
                                    action_name(state.action),
                                    result
                                        .and_then(|res| res.message.clone())
                                        .unwrap_or_default()
                                ));
                            }
                            Some(StepPhase::Running) | None => {
                                if age_seconds(&state.started_at, now) > i64::from(timeout) {
                                    escalate = Some(format!(
                                        "{} timed out after {timeout}s",
                                        action_name(state.action)
                                    ));
                                }
                            }
                        }
                    } else if due {
                        // Succeeded: verify on observations taken after the step.
                        let fresh = match (
                            observed_at.get(&r.node).copied().flatten(),
                            &state.finished_at,
                        ) {
                            (Some(obs), Some(done)) => obs > done.0,
                            _ => false,
                        };
                        if fresh {
                            match r.verdict {
                                Verdict::Healthy | Verdict::Warning => {
                                    run.release(node);
                                    run.record(
                                        &r.node,
                                        "Recovered",
                                        format!(
                                            "passing check after {}; taint removed{}",
                                            action_name(state.action),
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
                                    remediating = remediating.saturating_sub(1);
                                    continue;
                                }
                                Verdict::Failed => {
                                    escalate = Some(format!(
                                        "still failing after {}: {}",
                                        action_name(state.action),
                                        r.reasons.join("; ")
                                    ));
                                }
                                Verdict::Unknown => {}
                            }
                        }
                    }
                    if let Some(why) = escalate {
                        let next = usize::try_from(state.step_index).unwrap_or(0) + 1;
                        match (ladder.steps.get(next), gpu_node) {
                            (Some(action), Some(gn)) => {
                                let id = run.request_step(gn, *action, &failing_gpus, next, ladder);
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
                                state = NodeRemediationState {
                                    step_index: i32::try_from(next).unwrap_or(i32::MAX),
                                    action: *action,
                                    request_id: id,
                                    phase: StepPhase::Running,
                                    started_at: t(now),
                                    finished_at: None,
                                    message: why,
                                };
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
                                remediating = remediating.saturating_sub(1);
                            }
                        }
                    }
                    r.remediation = Some(state);
                }
            }
        }

        // 3. Status.
        let mut summary = VerdictSummary::default();
        for r in &results {
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
        status.observed_generation = generation;
        status.nodes = results;
        status.summary = summary;
        let mut actions = std::mem::take(&mut status.actions);
        actions.extend(run.actions);
        if actions.len() > MAX_ACTIONS {
            actions.drain(..actions.len() - MAX_ACTIONS);
        }
        status.actions = actions;
        if due {
            status.last_run = Some(t(now));
        }
        status.next_run = if spec.suspend {
            None
        } else if due || status.next_run.is_none() {
            schedule.next_after(now).map(t)
        } else {
            status.next_run
        };
        let (cond_status, reason, message) = if spec.suspend {
            (
                Status::False,
                "Suspended",
                "spec.suspend is true; no evaluation runs".to_owned(),
            )
        } else {
            (
                Status::True,
                conditions::REASON_RECONCILED,
                format!(
                    "{} nodes: {} healthy, {} warning, {} failed, {} unknown, {} quarantined{}",
                    status.nodes.len(),
                    status.summary.healthy,
                    status.summary.warning,
                    status.summary.failed,
                    status.summary.unknown,
                    status.summary.quarantined,
                    if act {
                        ""
                    } else {
                        " (evaluation only: remediation is not enabled)"
                    }
                ),
            )
        };
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
}
