//! AI jobs: what a GryviaAIJob should make exist, and what its status says, as pure functions.
//!
//! A job becomes a batch Job named like it: one pod per worker (`Indexed` with a headless
//! Service for more than one worker, every worker told its rank, the world size and the master
//! address), `nvidia.com/gpu` limits, the GPU product as a node selector, `spec.storage` as a
//! PersistentVolumeClaim mounted at `/data`, and the PriorityClass named by the
//! `gryvia.io/priority-class` annotation.
//!
//! Retries, beyond the features guide: failed pods are classified. A pod that failed because of
//! the infrastructure (evicted by a drain, preempted, its node quarantined or gone, rejected by
//! the kubelet) does not use up `retryLimit`:
//! - the Job's `podFailurePolicy` ignores pods with a `DisruptionTarget` condition (the Eviction
//!   API, the taint manager, preemption and node shutdown set it), so the Job controller never
//!   counts them;
//! - any other infrastructure failure (a pod that crashed on a node that is then quarantined,
//!   a node that disappeared) is counted by the Job controller, so the controller raises the
//!   Job's `backoffLimit` by one for each (`backoffLimit` is mutable).
//!
//! A quarantined node is cordoned and tainted `gryvia.io/gpu-unhealthy`, so the retry lands
//! elsewhere; `status.avoidedNodes` lists those nodes.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::time::Duration;

use gryvia_types::conditions::{self, Status};
use gryvia_types::{
    AccessMode, FailureClass, GryviaAIJob, GryviaAIJobSpec, GryviaAIJobStatus, JobAdmission,
    JobPhase, PodFailure, PreemptionNotice, labels,
};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{
    Node, PersistentVolumeClaim, PersistentVolumeClaimSpec, Pod, Service, ServicePort, ServiceSpec,
    VolumeResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::facts::{self, PodPhase, PodView};
use crate::{Child, EventType, ObjectRef, Plan, Timestamp};

/// Condition type: every worker has a node.
pub const SCHEDULED: &str = "Scheduled";
/// Condition type of a job the native queue preempts.
pub const PREEMPTED: &str = "Preempted";
/// Condition type: workers are running.
pub const RUNNING: &str = "Running";
/// Condition type: the job succeeded.
pub const SUCCEEDED: &str = "Succeeded";
/// Condition type: the job failed.
pub const FAILED: &str = "Failed";
/// Port every worker can reach the master worker on (`MASTER_PORT`).
pub const MASTER_PORT: i32 = 29500;
/// Mount path of `spec.storage`.
pub const DATA_PATH: &str = "/data";
/// Name of the volume of `spec.storage` in the pods.
pub const DATA_VOLUME: &str = "gryvia-data";
/// Name of the worker container.
pub const WORKER: &str = "worker";
/// Name of the downward API volume through which the workers of a job a queue admitted can
/// read a preemption notice.
pub const NOTICE_VOLUME: &str = "gryvia-notice";
/// Where that volume is mounted: its file `preemption` holds the pod's
/// `gryvia.io/preemption-notice` annotation (empty until the queue preempts the job).
pub const NOTICE_PATH: &str = "/etc/gryvia/notice";
/// Pod annotation the Job controller sets to the worker's index.
pub const COMPLETION_INDEX: &str = labels::JOB_COMPLETION_INDEX;
/// Failure records kept in the status.
pub const MAX_FAILURES: usize = 200;
/// How often an unfinished job is re-read (node quarantines do not trigger a watch event).
pub const RESYNC: Duration = Duration::from_secs(30);

/// Pod `status.reason`s the kubelet or the node lifecycle set when the node, not the workload,
/// is at fault.
const INFRA_REASONS: &[&str] = &[
    "Evicted",
    "NodeLost",
    "NodeShutdown",
    "Shutdown",
    "Terminated",
    "UnexpectedAdmissionError",
    "NodeAffinity",
];

/// The batch Job of a GryviaAIJob, as observed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObservedJob {
    /// Whether its controller owner reference names this GryviaAIJob (uid).
    pub owned: bool,
    /// `spec.backoffLimit`.
    pub backoff_limit: i32,
    /// `status.active`.
    pub active: i32,
    /// `status.ready`.
    pub ready: i32,
    /// `status.succeeded`.
    pub succeeded: i32,
    /// `status.failed` (pods the Job controller counted).
    pub failed: i32,
    /// `status.startTime`.
    pub start_time: Option<Timestamp>,
    /// When it completed (`status.completionTime`) or failed (the Failed condition's time).
    pub finish_time: Option<Timestamp>,
    /// `Complete=True`.
    pub complete: bool,
    /// `Failed=True`: reason and message.
    pub failed_condition: Option<(String, String)>,
    /// `spec.suspend`.
    #[serde(default)]
    pub suspended: bool,
    /// The admission it was made for (its `gryvia.io/admitted-at` annotation).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admitted_at: Option<String>,
    /// The Kueue LocalQueue it was made for (its `kueue.x-k8s.io/queue-name` label).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kueue_queue: Option<String>,
}

impl ObservedJob {
    /// Summarises a Job; `owner_uid` is the GryviaAIJob's uid.
    pub fn of(job: &Job, owner_uid: &str) -> Self {
        let owned = job.metadata.owner_references.as_ref().is_some_and(|refs| {
            refs.iter()
                .any(|r| r.uid == owner_uid && r.kind == "GryviaAIJob")
        });
        let status = job.status.clone().unwrap_or_default();
        let conds = status.conditions.unwrap_or_default();
        let cond = |t: &str| conds.iter().find(|c| c.type_ == t && c.status == "True");
        let failed = cond("Failed");
        ObservedJob {
            owned,
            backoff_limit: job.spec.as_ref().and_then(|s| s.backoff_limit).unwrap_or(6),
            active: status.active.unwrap_or(0),
            ready: status.ready.unwrap_or(0),
            succeeded: status.succeeded.unwrap_or(0),
            failed: status.failed.unwrap_or(0),
            start_time: status.start_time.map(|t| t.0),
            finish_time: status
                .completion_time
                .map(|t| t.0)
                .or_else(|| failed.and_then(|c| c.last_transition_time.as_ref().map(|t| t.0))),
            complete: cond("Complete").is_some(),
            suspended: job.spec.as_ref().and_then(|s| s.suspend) == Some(true),
            admitted_at: job
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(labels::ADMITTED_AT))
                .cloned(),
            kueue_queue: job
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(gryvia_types::kueue::QUEUE_NAME))
                .cloned(),
            failed_condition: failed.map(|c| {
                (
                    c.reason.clone().unwrap_or_default(),
                    c.message.clone().unwrap_or_default(),
                )
            }),
        }
    }
}

/// A pod of the job, as observed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObservedPod {
    /// Name.
    pub name: String,
    /// Node it is bound to.
    pub node: Option<String>,
    /// `status.phase` (`Pending`, `Running`, `Succeeded`, `Failed`, `Unknown`); read it with
    /// [`ObservedPod::pod_phase`].
    pub phase: String,
    /// Being deleted.
    pub deleting: bool,
    /// Reason of a `DisruptionTarget=True` condition (eviction, preemption, taint manager).
    pub disruption: Option<String>,
    /// Message of a `PodScheduled=False` condition (why the scheduler could not place it).
    pub unschedulable: Option<String>,
    /// `status.reason`.
    pub reason: Option<String>,
    /// Exit code of the first container that terminated with a non-zero code.
    pub exit_code: Option<i32>,
    /// When the kubelet took the pod (`status.startTime`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Timestamp>,
    /// The job it makes room for, when the native queue preempted this pod's job (from its
    /// `gryvia.io/preemption-notice` annotation), or `Kueue` when Kueue evicted it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preempted: Option<String>,
}

impl ObservedPod {
    /// The phase, typed.
    pub fn pod_phase(&self) -> PodPhase {
        PodPhase::parse(&self.phase)
    }

    /// Summarises a pod.
    pub fn of(pod: &Pod) -> Self {
        let status = pod.status.clone().unwrap_or_default();
        let conds = status.conditions.unwrap_or_default();
        ObservedPod {
            name: pod.metadata.name.clone().unwrap_or_default(),
            node: facts::node_of(pod).map(str::to_owned),
            phase: facts::pod_phase(pod).as_str().to_owned(),
            deleting: pod.metadata.deletion_timestamp.is_some(),
            disruption: conds
                .iter()
                .find(|c| c.type_ == "DisruptionTarget" && c.status == "True")
                .map(|c| c.reason.clone().unwrap_or_else(|| "Disrupted".to_owned())),
            unschedulable: conds
                .iter()
                .find(|c| c.type_ == "PodScheduled" && c.status == "False")
                .map(|c| {
                    c.message
                        .clone()
                        .or_else(|| c.reason.clone())
                        .unwrap_or_else(|| "not scheduled".to_owned())
                }),
            reason: status.reason,
            exit_code: status
                .container_statuses
                .unwrap_or_default()
                .iter()
                .filter_map(|c| c.state.as_ref()?.terminated.as_ref())
                .map(|t| t.exit_code)
                .find(|c| *c != 0),
            start_time: status.start_time.map(|t| t.0),
            preempted: pod
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(labels::PREEMPTION_NOTICE))
                .map(|n| preempted_by(n)),
        }
    }
}

/// The job a preemption notice (`by=<job>; reason=...`) names, or the whole notice.
fn preempted_by(notice: &str) -> String {
    notice
        .split(';')
        .find_map(|part| part.trim().strip_prefix("by="))
        .unwrap_or(notice)
        .to_owned()
}

/// A node a pod of the job is (or was) on, as observed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObservedNode {
    /// Value of the `gryvia.io/gpu-unhealthy` taint (the health check that quarantined it).
    pub quarantined: Option<String>,
}

impl ObservedNode {
    /// Summarises a node.
    pub fn of(node: &Node) -> Self {
        ObservedNode {
            quarantined: facts::quarantined_by(node),
        }
    }
}

/// What the AI job reconcile knows about the cluster.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AIJobWorld {
    /// A GryviaQueue of the native queue scheduler covers the job's namespace: its batch Job
    /// exists only while the queue admits it (`status.admission`).
    #[serde(default)]
    pub queued: bool,
    /// The batch Job of the same name, when it exists.
    pub job: Option<ObservedJob>,
    /// Pods of the job (label `gryvia.io/job-name`), sorted by name.
    pub pods: Vec<ObservedPod>,
    /// The nodes those pods are bound to that still exist.
    pub nodes: BTreeMap<String, ObservedNode>,
    /// The PriorityClass the annotation names, when it exists.
    pub priority_class_exists: bool,
    /// `sla.maxQueueSeconds` of the GryviaPriority the annotation names, when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sla_seconds: Option<i64>,
    /// With the Kueue integration: the job's LocalQueue, priority class and Workload.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kueue: Option<KueueJobWorld>,
}

/// What the Kueue integration knows about a job.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KueueJobWorld {
    /// The LocalQueue the job goes to: the one its batch Job was made for, else the job's own
    /// `kueue.x-k8s.io/queue-name` label, else Gryvia's LocalQueue of the namespace
    /// ([`crate::kueue::LOCAL_QUEUE`]), else one named `default`; `None`: the namespace has
    /// no LocalQueue, and the job runs without Kueue.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local_queue: Option<String>,
    /// Whether the WorkloadPriorityClass of the job ([`crate::kueue::priority_class`]) exists.
    #[serde(default)]
    pub priority_class_exists: bool,
    /// Kueue's Workload of the batch Job, once it made one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workload: Option<crate::kueue::ObservedWorkload>,
}

/// The LocalQueue a job goes to under the Kueue integration, when it does.
fn kueue_queue(world: &AIJobWorld) -> Option<&str> {
    world.kueue.as_ref()?.local_queue.as_deref()
}

/// The WorkloadPriorityClass of `job` (its tier annotation and `spec.priority`).
pub fn kueue_priority_class(job: &GryviaAIJob) -> String {
    crate::kueue::priority_class(priority_class_of(job).as_deref(), job.spec.priority)
}

/// How the batch Job of a job Kueue admits is made: labelled with its LocalQueue and priority
/// class, created suspended (Kueue unsuspends it on admission and suspends it again on
/// eviction; an existing Job keeps what Kueue set).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KueueSubmission {
    /// The LocalQueue.
    pub local_queue: String,
    /// The WorkloadPriorityClass.
    pub priority_class: String,
    /// `spec.suspend` to apply.
    pub suspend: bool,
}

/// `job_object` (a rendered batch Job) submitted to Kueue as `submission` says.
pub fn submit_to_kueue(mut job_object: Value, submission: &KueueSubmission) -> Value {
    job_object["metadata"]["labels"][gryvia_types::kueue::QUEUE_NAME] =
        submission.local_queue.clone().into();
    job_object["metadata"]["labels"][gryvia_types::kueue::PRIORITY_CLASS] =
        submission.priority_class.clone().into();
    job_object["spec"]["suspend"] = submission.suspend.into();
    job_object
}

/// Why a pod failed, as the retry accounting sees it. Its text ([`fmt::Display`]) is the
/// `reason` of the [`PodFailure`] recorded in the status.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FailureCause {
    /// A `DisruptionTarget=True` condition with this reason (the Eviction API, preemption,
    /// the taint manager, node shutdown): the Job's pod failure policy ignores the pod, so the
    /// Job controller never counts it.
    Disrupted(String),
    /// The node the pod ran on is gone.
    NodeGone(String),
    /// The node the pod ran on is quarantined by this health check.
    NodeQuarantined {
        /// The node.
        node: String,
        /// The health check.
        check: String,
    },
    /// The kubelet or the node lifecycle rejected or evicted the pod (`status.reason`).
    RejectedByNode(String),
    /// A container exited with this code.
    Exited(i32),
    /// The pod's `status.reason`.
    Reason(String),
    /// Nothing says why.
    Unknown,
    /// The native queue preempted the job (its pods carry the preemption notice, or were
    /// stopped while the job's status held one), or Kueue evicted it (its pods stopped while
    /// Kueue held the batch Job suspended): the job queues again, no retry used.
    Preempted(String),
}

impl FailureCause {
    /// Application failures use a retry; the others are the infrastructure's.
    pub fn class(&self) -> FailureClass {
        match self {
            FailureCause::Exited(_) | FailureCause::Reason(_) | FailureCause::Unknown => {
                FailureClass::Application
            }
            FailureCause::Disrupted(_)
            | FailureCause::NodeGone(_)
            | FailureCause::NodeQuarantined { .. }
            | FailureCause::RejectedByNode(_)
            | FailureCause::Preempted(_) => FailureClass::Infrastructure,
        }
    }

    /// Whether the Job controller counts the failure against `backoffLimit` (all but the
    /// disruptions the pod failure policy ignores).
    pub fn counted_by_job_controller(&self) -> bool {
        // A preempted job's batch Job is deleted before it runs again: its failures do not
        // carry over to the next one.
        !matches!(
            self,
            FailureCause::Disrupted(_) | FailureCause::Preempted(_)
        )
    }

    /// Reads the cause of a failure recorded in the status back from its class and reason
    /// (the status keeps the text; this is the one place that reads it).
    pub fn of_recorded(failure: &PodFailure) -> Self {
        let r = failure.reason.as_str();
        if failure.class == FailureClass::Application {
            return match r.strip_prefix("exited with code ").map(str::parse) {
                Some(Ok(code)) => FailureCause::Exited(code),
                _ if r == "failed" => FailureCause::Unknown,
                _ => FailureCause::Reason(r.to_owned()),
            };
        }
        if let Some(by) = r.strip_prefix("preempted for ") {
            return FailureCause::Preempted(by.to_owned());
        }
        if let Some(d) = r.strip_prefix("disrupted:") {
            return FailureCause::Disrupted(d.trim_start().to_owned());
        }
        if let Some(why) = r.strip_prefix("rejected or evicted by the node: ") {
            return FailureCause::RejectedByNode(why.to_owned());
        }
        let quarantine = format!(" is quarantined ({}=", labels::GPU_UNHEALTHY_TAINT);
        let node = r.strip_prefix("node ");
        if let Some((node, check)) = node.and_then(|n| n.split_once(quarantine.as_str())) {
            return FailureCause::NodeQuarantined {
                node: node.to_owned(),
                check: check.strip_suffix(')').unwrap_or(check).to_owned(),
            };
        }
        match node.and_then(|n| n.strip_suffix(" is gone")) {
            Some(node) => FailureCause::NodeGone(node.to_owned()),
            None => FailureCause::RejectedByNode(r.to_owned()),
        }
    }
}

impl fmt::Display for FailureCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FailureCause::Disrupted(d) => write!(f, "disrupted: {d}"),
            FailureCause::NodeGone(node) => write!(f, "node {node} is gone"),
            FailureCause::NodeQuarantined { node, check } => write!(
                f,
                "node {node} is quarantined ({}={check})",
                labels::GPU_UNHEALTHY_TAINT
            ),
            FailureCause::RejectedByNode(r) => write!(f, "rejected or evicted by the node: {r}"),
            FailureCause::Exited(code) => write!(f, "exited with code {code}"),
            FailureCause::Reason(r) => f.write_str(r),
            FailureCause::Unknown => f.write_str("failed"),
            FailureCause::Preempted(by) => write!(f, "preempted for {by}"),
        }
    }
}

/// Why a failed pod failed, from what the pod and its node say; `None` when it has not
/// failed.
pub fn failure_cause(
    pod: &ObservedPod,
    nodes: &BTreeMap<String, ObservedNode>,
) -> Option<FailureCause> {
    if pod.pod_phase() != PodPhase::Failed {
        return None;
    }
    if let Some(by) = &pod.preempted {
        return Some(FailureCause::Preempted(by.clone()));
    }
    if let Some(d) = &pod.disruption {
        return Some(FailureCause::Disrupted(d.clone()));
    }
    if let Some(node) = &pod.node {
        match nodes.get(node) {
            None => return Some(FailureCause::NodeGone(node.clone())),
            Some(ObservedNode {
                quarantined: Some(check),
            }) => {
                return Some(FailureCause::NodeQuarantined {
                    node: node.clone(),
                    check: check.clone(),
                });
            }
            Some(_) => {}
        }
    }
    if let Some(r) = &pod.reason
        && (INFRA_REASONS.contains(&r.as_str()) || r.starts_with("OutOf"))
    {
        return Some(FailureCause::RejectedByNode(r.clone()));
    }
    Some(match (pod.exit_code, &pod.reason) {
        (Some(code), _) => FailureCause::Exited(code),
        (None, Some(r)) => FailureCause::Reason(r.clone()),
        (None, None) => FailureCause::Unknown,
    })
}

/// Classifies a failed pod: `None` when it has not failed.
pub fn classify(pod: &ObservedPod, nodes: &BTreeMap<String, ObservedNode>) -> Option<PodFailure> {
    let cause = failure_cause(pod, nodes)?;
    Some(PodFailure {
        pod: pod.name.clone(),
        node: pod.node.clone(),
        class: cause.class(),
        reason: cause.to_string(),
        exit_code: pod.exit_code,
    })
}

/// Merges the recorded failures with the pods seen now. A recorded failure keeps its record,
/// except that an application failure becomes an infrastructure failure when its node is
/// found quarantined later (the GPU that crashed the pod is what the health check caught);
/// never the other way round, so a released node does not take a retry back.
pub fn merge_failures(recorded: &[PodFailure], world: &AIJobWorld) -> Vec<PodFailure> {
    let mut by_pod: BTreeMap<String, PodFailure> = BTreeMap::new();
    let mut order: Vec<String> = Vec::new();
    for f in recorded {
        if by_pod.insert(f.pod.clone(), f.clone()).is_none() {
            order.push(f.pod.clone());
        }
    }
    for pod in &world.pods {
        let Some(fresh) = classify(pod, &world.nodes) else {
            continue;
        };
        match by_pod.get_mut(&pod.name) {
            Some(old) => {
                if old.class == FailureClass::Application
                    && fresh.class == FailureClass::Infrastructure
                {
                    *old = fresh;
                }
            }
            None => {
                order.push(pod.name.clone());
                by_pod.insert(pod.name.clone(), fresh);
            }
        }
    }
    let mut out: Vec<PodFailure> = order
        .into_iter()
        .filter_map(|name| by_pod.remove(&name))
        .collect();
    if out.len() > MAX_FAILURES {
        out.drain(..out.len() - MAX_FAILURES);
    }
    out
}

/// The Job's `backoffLimit`: `retryLimit` plus one for each infrastructure failure the Job
/// controller counted (those without a `DisruptionTarget` condition, which the pod failure
/// policy already ignores).
pub fn backoff_limit(retry_limit: i32, failures: &[PodFailure]) -> i32 {
    let counted_infra = failures
        .iter()
        .filter(|f| {
            f.class == FailureClass::Infrastructure
                && FailureCause::of_recorded(f).counted_by_job_controller()
        })
        .count();
    retry_limit.saturating_add(i32::try_from(counted_infra).unwrap_or(i32::MAX))
}

/// Name of the PVC made for `spec.storage`.
pub fn claim_name(job: &str) -> String {
    format!("{job}-data")
}

/// What is wrong with a job's spec that the schema cannot say, naming the field.
pub fn invalid_spec(job: &GryviaAIJob) -> Option<String> {
    let spec = &job.spec;
    if spec.volumes.iter().any(|v| v.name == NOTICE_VOLUME) {
        return Some(format!(
            "spec.volumes: the name {NOTICE_VOLUME} is reserved for the preemption notice"
        ));
    }
    if spec.storage.is_some() {
        if spec.volumes.iter().any(|v| v.name == DATA_VOLUME) {
            return Some(format!(
                "spec.volumes: the name {DATA_VOLUME} is reserved for spec.storage"
            ));
        }
        if spec.volume_mounts.iter().any(|m| m.mount_path == DATA_PATH) {
            return Some(format!(
                "spec.volumeMounts: {DATA_PATH} is where spec.storage is mounted"
            ));
        }
    }
    if let Some(t) = &spec.gpu_type
        && !is_label_value(t)
    {
        return Some(format!(
            "spec.gpuType: {t:?} is not a valid label value (letters, digits, '-', '_', '.'; at most 63)"
        ));
    }
    for (k, v) in &spec.node_selector {
        if !is_label_value(v) {
            return Some(format!(
                "spec.nodeSelector[{k}]: {v:?} is not a valid label value"
            ));
        }
    }
    None
}

fn is_label_value(v: &str) -> bool {
    v.len() <= 63
        && (v.is_empty()
            || (v
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
                && v.starts_with(|c: char| c.is_ascii_alphanumeric())
                && v.ends_with(|c: char| c.is_ascii_alphanumeric())))
}

fn env(name: &str, value: impl Into<String>) -> Value {
    json!({"name": name, "value": value.into()})
}

/// The environment every worker gets from the controller: its rank, the world size, the master
/// address and port, the GPUs per worker. Variables of the same name in `spec.env` win.
pub fn worker_env(job: &GryviaAIJob) -> Vec<Value> {
    let name = job.metadata.name.clone().unwrap_or_default();
    let spec = &job.spec;
    let multi = spec.replicas > 1;
    let mut out = vec![
        env("GRYVIA_JOB_NAME", name.clone()),
        env("GRYVIA_GPUS_PER_WORKER", spec.gpus.to_string()),
        env("WORLD_SIZE", spec.replicas.to_string()),
    ];
    if multi {
        out.push(json!({"name": "RANK", "valueFrom": {"fieldRef": {
            "fieldPath": format!("metadata.annotations['{COMPLETION_INDEX}']")
        }}}));
        out.push(env("MASTER_ADDR", format!("{name}-0.{name}")));
    } else {
        out.push(env("RANK", "0"));
        out.push(env("MASTER_ADDR", "localhost"));
    }
    out.push(env("MASTER_PORT", MASTER_PORT.to_string()));
    let user: BTreeSet<&str> = spec.env.iter().map(|e| e.name.as_str()).collect();
    out.retain(|e| !user.contains(e["name"].as_str().unwrap_or_default()));
    out
}

/// The labels of the job's children: managed by Gryvia, the job's name, its template.
fn job_labels(job: &GryviaAIJob) -> BTreeMap<String, String> {
    let mut out = BTreeMap::from([
        (
            labels::MANAGED_BY.to_owned(),
            labels::MANAGED_BY_VALUE.to_owned(),
        ),
        (
            labels::JOB_NAME.to_owned(),
            job.metadata.name.clone().unwrap_or_default(),
        ),
    ]);
    for key in [labels::TEMPLATE, labels::DATA_CLASSIFICATION] {
        if let Some(v) = job.metadata.labels.as_ref().and_then(|l| l.get(key)) {
            out.insert(key.to_owned(), v.clone());
        }
    }
    if let Some(t) = job.spec.type_ {
        out.insert(labels::JOB_TYPE.to_owned(), t.as_str().to_owned());
    }
    if let Some(r) = job
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(labels::RESERVATION))
    {
        out.insert(labels::RESERVATION.to_owned(), r.clone());
    }
    out
}

fn label_map(job: &GryviaAIJob) -> serde_json::Map<String, Value> {
    job_labels(job)
        .into_iter()
        .map(|(k, v)| (k, Value::String(v)))
        .collect()
}

/// The metadata of the child `name` of `job`, in its namespace with its labels.
fn child_meta(job: &GryviaAIJob, name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_owned()),
        namespace: Some(job.metadata.namespace.clone().unwrap_or_default()),
        labels: Some(job_labels(job)),
        ..ObjectMeta::default()
    }
}

/// The container's `resources`: the GPUs as limits and requests, the CPU as a request, the
/// memory as both.
fn resources(spec: &GryviaAIJobSpec, admission: Option<&JobAdmission>) -> Value {
    let mut limits = serde_json::Map::new();
    let mut requests = serde_json::Map::new();
    // An admitted job asks for what the queue placed it on (whole GPUs, a MIG slice or
    // time-slicing replicas).
    let gpu = match admission.filter(|a| !a.resource.is_empty()) {
        Some(a) => Some((a.resource.clone(), a.per_worker)),
        None => (spec.gpus > 0).then(|| (labels::NVIDIA_GPU_RESOURCE.to_owned(), spec.gpus)),
    };
    if let Some((resource, n)) = gpu {
        limits.insert(resource.clone(), n.into());
        requests.insert(resource, n.into());
    }
    if let Some(cpu) = &spec.cpu {
        requests.insert("cpu".into(), cpu.0.clone().into());
    }
    if let Some(mem) = &spec.memory {
        requests.insert("memory".into(), mem.0.clone().into());
        limits.insert("memory".into(), mem.0.clone().into());
    }
    json!({"limits": limits, "requests": requests})
}

/// The pod's volumes: `spec.volumes`, then the claim of `spec.storage`.
fn volumes(job: &GryviaAIJob) -> Vec<Value> {
    let name = job.metadata.name.clone().unwrap_or_default();
    let spec = &job.spec;
    let mut volumes: Vec<Value> = spec
        .volumes
        .iter()
        .map(|v| {
            let mut out = json!({"name": v.name});
            if let Some(p) = &v.persistent_volume_claim {
                out["persistentVolumeClaim"] =
                    json!({"claimName": p.claim_name, "readOnly": p.read_only});
            } else if let Some(c) = &v.config_map {
                out["configMap"] = json!({"name": c.name});
            } else if let Some(s) = &v.secret {
                out["secret"] = json!({"secretName": s.name});
            } else if let Some(e) = &v.empty_dir {
                out["emptyDir"] = serde_json::to_value(e).unwrap_or_else(|_| json!({}));
            } else if let Some(h) = &v.host_path {
                out["hostPath"] = json!({"path": h.path});
            }
            out
        })
        .collect();
    if spec.storage.is_some() {
        volumes.push(
            json!({"name": DATA_VOLUME, "persistentVolumeClaim": {"claimName": claim_name(&name)}}),
        );
    }
    if admitted(job) {
        volumes.push(json!({"name": NOTICE_VOLUME, "downwardAPI": {"items": [
            {"path": "preemption", "fieldRef": {"fieldPath": format!("metadata.annotations['{}']", labels::PREEMPTION_NOTICE)}}
        ]}}));
    }
    volumes
}

/// Whether a queue admitted `job` (`status.admission`).
fn admitted(job: &GryviaAIJob) -> bool {
    job.status.as_ref().is_some_and(|s| s.admission.is_some())
}

/// The worker's volume mounts: `spec.volumeMounts`, then `spec.storage` at [`DATA_PATH`],
/// then the preemption notice at [`NOTICE_PATH`] when a queue admitted the job.
fn volume_mounts(job: &GryviaAIJob) -> Vec<Value> {
    let spec = &job.spec;
    let mut mounts: Vec<Value> = spec
        .volume_mounts
        .iter()
        .map(|m| {
            let mut v = json!({"name": m.name, "mountPath": m.mount_path, "readOnly": m.read_only});
            if let Some(sp) = &m.sub_path {
                v["subPath"] = sp.clone().into();
            }
            v
        })
        .collect();
    if spec.storage.is_some() {
        mounts.push(json!({"name": DATA_VOLUME, "mountPath": DATA_PATH}));
    }
    if admitted(job) {
        mounts.push(json!({"name": NOTICE_VOLUME, "mountPath": NOTICE_PATH, "readOnly": true}));
    }
    mounts
}

/// The worker container: image, command, the controller's environment then `spec.env`,
/// resources and mounts.
fn worker_container(job: &GryviaAIJob) -> Value {
    let spec = &job.spec;
    let mut envs = worker_env(job);
    envs.extend(
        spec.env
            .iter()
            .map(|e| serde_json::to_value(e).unwrap_or(Value::Null)),
    );
    let mut container = json!({
        "name": WORKER,
        "image": spec.image,
        "env": envs,
        "resources": resources(spec, job.status.as_ref().and_then(|s| s.admission.as_ref())),
    });
    if !spec.command.is_empty() {
        container["command"] = json!(spec.command);
    }
    if !spec.args.is_empty() {
        container["args"] = json!(spec.args);
    }
    let mounts = volume_mounts(job);
    if !mounts.is_empty() {
        container["volumeMounts"] = json!(mounts);
    }
    container
}

/// `spec.nodeSelector` with the GPU product of `spec.gpuType`.
fn node_selector(spec: &GryviaAIJobSpec) -> serde_json::Map<String, Value> {
    let mut node_selector: serde_json::Map<String, Value> = spec
        .node_selector
        .iter()
        .map(|(k, v)| (k.clone(), Value::String(v.clone())))
        .collect();
    if let Some(t) = &spec.gpu_type {
        node_selector.insert(labels::NVIDIA_GPU_PRODUCT.into(), t.clone().into());
    }
    node_selector
}

/// `spec.tolerations`, plus a toleration of the GPU resource's taint for a GPU job (what the
/// ExtendedResourceToleration admission plugin adds: GPU pools are often tainted so that only
/// GPU workloads land there).
fn tolerations(spec: &GryviaAIJobSpec) -> Vec<Value> {
    let mut tolerations: Vec<Value> = spec
        .tolerations
        .iter()
        .map(|t| serde_json::to_value(t).unwrap_or(Value::Null))
        .collect();
    if spec.gpus > 0
        && !spec
            .tolerations
            .iter()
            .any(|t| t.key.as_deref() == Some(labels::NVIDIA_GPU_RESOURCE))
    {
        tolerations.push(json!({"key": labels::NVIDIA_GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}));
    }
    tolerations
}

/// The pod template's spec.
/// The nodes an admitted job's workers may run on: those the queue placed them on.
fn admitted_affinity(admission: &JobAdmission) -> Option<Value> {
    let mut nodes: Vec<&str> = admission.nodes.iter().map(String::as_str).collect();
    nodes.sort_unstable();
    nodes.dedup();
    (!nodes.is_empty()).then(|| {
        json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": nodes}]}
        ]}}})
    })
}

fn pod_spec(job: &GryviaAIJob, priority_class: Option<&str>) -> Value {
    let spec = &job.spec;
    let admission = job.status.as_ref().and_then(|s| s.admission.as_ref());
    let mut pod_spec = json!({
        "restartPolicy": "Never",
        "enableServiceLinks": false,
        "containers": [worker_container(job)],
    });
    let volumes = volumes(job);
    if !volumes.is_empty() {
        pod_spec["volumes"] = json!(volumes);
    }
    let node_selector = node_selector(spec);
    if !node_selector.is_empty() {
        pod_spec["nodeSelector"] = Value::Object(node_selector);
    }
    let tolerations = tolerations(spec);
    if !tolerations.is_empty() {
        pod_spec["tolerations"] = json!(tolerations);
    }
    if spec.replicas > 1 {
        pod_spec["subdomain"] = job.metadata.name.clone().unwrap_or_default().into();
    }
    if let Some(pc) = priority_class {
        pod_spec["priorityClassName"] = pc.into();
    }
    if let Some(a) = admission {
        if let Some(affinity) = admitted_affinity(a) {
            pod_spec["affinity"] = affinity;
        }
        if let (Some(product), None) = (&a.product, &spec.gpu_type) {
            pod_spec["nodeSelector"][labels::NVIDIA_GPU_PRODUCT] = product.clone().into();
        }
        // SIGTERM to SIGKILL when a preemption stops the workers: their time to checkpoint.
        pod_spec["terminationGracePeriodSeconds"] = spec.preemption_grace_period_seconds.into();
    }
    pod_spec
}

/// The pod template's metadata: the job's labels with `spec.podLabels` (which cannot replace
/// them), and `spec.podAnnotations`.
fn pod_metadata(job: &GryviaAIJob) -> Value {
    let mut pod_labels = label_map(job);
    for (k, v) in &job.spec.pod_labels {
        pod_labels
            .entry(k.clone())
            .or_insert_with(|| v.clone().into());
    }
    let mut template_meta = json!({"labels": pod_labels});
    if !job.spec.pod_annotations.is_empty() {
        template_meta["annotations"] = json!(job.spec.pod_annotations);
    }
    template_meta
}

/// The batch Job of `job` with the given `backoffLimit` and PriorityClass.
pub fn render_job(job: &GryviaAIJob, backoff_limit: i32, priority_class: Option<&str>) -> Value {
    let name = job.metadata.name.clone().unwrap_or_default();
    let namespace = job.metadata.namespace.clone().unwrap_or_default();
    let spec = &job.spec;
    let multi = spec.replicas > 1;
    let mut job_spec = json!({
        "backoffLimit": backoff_limit,
        "completions": spec.replicas,
        "parallelism": spec.replicas,
        "completionMode": if multi { "Indexed" } else { "NonIndexed" },
        "podFailurePolicy": {"rules": [
            {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}
        ]},
        "template": {"metadata": pod_metadata(job), "spec": pod_spec(job, priority_class)},
    });
    if let Some(d) = spec.active_deadline_seconds {
        job_spec["activeDeadlineSeconds"] = d.into();
    }
    if let Some(t) = spec.ttl_seconds_after_finished {
        job_spec["ttlSecondsAfterFinished"] = t.into();
    }
    // A preempted job is suspended: the Job controller stops its pods (SIGTERM, then the
    // grace period) without counting them as failures.
    let status = job.status.as_ref();
    if status.is_some_and(|s| s.admission.is_some() && s.preemption.is_some()) {
        job_spec["suspend"] = true.into();
    }
    let mut metadata = json!({"name": name, "namespace": namespace, "labels": label_map(job)});
    if let Some(a) = status.and_then(|s| s.admission.as_ref()) {
        metadata["annotations"] = json!({labels::ADMITTED_AT: admission_id(a)});
    }
    json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": metadata,
        "spec": job_spec,
    })
}

/// The headless Service that gives the workers of a multi-worker job stable names
/// (`<job>-<index>.<job>`).
pub fn render_service(job: &GryviaAIJob) -> Service {
    let name = job.metadata.name.clone().unwrap_or_default();
    Service {
        metadata: child_meta(job, &name),
        spec: Some(ServiceSpec {
            cluster_ip: Some("None".to_owned()),
            publish_not_ready_addresses: Some(true),
            selector: Some(BTreeMap::from([(labels::JOB_NAME.to_owned(), name)])),
            ports: Some(vec![ServicePort {
                name: Some("master".to_owned()),
                port: MASTER_PORT,
                target_port: Some(IntOrString::Int(MASTER_PORT)),
                ..ServicePort::default()
            }]),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    }
}

/// The access mode as Kubernetes names it.
fn access_mode(mode: AccessMode) -> &'static str {
    match mode {
        AccessMode::ReadWriteOnce => "ReadWriteOnce",
        AccessMode::ReadWriteMany => "ReadWriteMany",
        AccessMode::ReadOnlyMany => "ReadOnlyMany",
    }
}

/// The PersistentVolumeClaim of `spec.storage`, when there is one.
pub fn render_claim(job: &GryviaAIJob) -> Option<PersistentVolumeClaim> {
    let storage = job.spec.storage.as_ref()?;
    let name = job.metadata.name.clone().unwrap_or_default();
    Some(PersistentVolumeClaim {
        metadata: child_meta(job, &claim_name(&name)),
        spec: Some(PersistentVolumeClaimSpec {
            access_modes: Some(vec![access_mode(storage.access_mode).to_owned()]),
            resources: Some(VolumeResourceRequirements {
                requests: Some(BTreeMap::from([(
                    "storage".to_owned(),
                    storage.size.clone(),
                )])),
                ..VolumeResourceRequirements::default()
            }),
            storage_class_name: storage.storage_class_name.clone(),
            ..PersistentVolumeClaimSpec::default()
        }),
        ..PersistentVolumeClaim::default()
    })
}

/// The GryviaAIJob controller's policy.
#[derive(Clone, Debug, Default)]
pub struct AIJobReconciler;

/// The status fields only the queue scheduler writes (`admission`, `queue`, `preemption`):
/// the AI job controller neither writes them (its server-side apply would take them over)
/// nor compares them.
pub fn without_queue_fields(mut status: GryviaAIJobStatus) -> GryviaAIJobStatus {
    status.admission = None;
    status.queue = None;
    status.preemption = None;
    status
}

/// Whether the job's batch Job was running workers before its namespace got a queue (not
/// suspended, a worker on a node): it runs on outside the queue's quota rather than being
/// stopped (its workers count as used room on their nodes).
fn runs_outside_queue(world: &AIJobWorld) -> bool {
    world.job.as_ref().is_some_and(|j| {
        j.owned
            && !j.suspended
            && j.admitted_at.is_none()
            && world.pods.iter().any(|p| p.node.is_some())
    })
}

/// What a batch Job made for admission `a` says it was made for (its
/// `gryvia.io/admitted-at` annotation): the admission's time, then a hash of what its pod
/// template takes from it (product, resource, per-worker count, nodes). The time alone has
/// whole seconds: a job preempted and admitted again within the second, to other nodes, would
/// look like the same admission, and its Job's template, which cannot change, would be applied
/// anew and refused.
pub fn admission_id(a: &JobAdmission) -> String {
    // FNV-1a, 64 bits: the same on every build (the id outlives the operator's version).
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |bytes: &[u8]| {
        for b in bytes {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        h ^= 0xff;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    };
    eat(a.product.as_deref().unwrap_or_default().as_bytes());
    eat(a.resource.as_bytes());
    eat(&a.per_worker.to_le_bytes());
    for n in &a.nodes {
        eat(n.as_bytes());
    }
    format!("{}/{h:016x}", a.admitted_at.0)
}

/// Whether a batch Job whose annotation says `made_for` was made for admission `a`. A Job made
/// before the annotation carried the hash says the time alone.
fn made_for(made_for: Option<&str>, a: &JobAdmission) -> bool {
    made_for.is_some_and(|m| m == admission_id(a) || m == a.admitted_at.0.to_string())
}

/// The job's own batch Job when it was not made for admission `a`.
fn made_for_other<'a>(world: &'a AIJobWorld, a: &JobAdmission) -> Option<&'a ObservedJob> {
    world
        .job
        .as_ref()
        .filter(|j| j.owned && !made_for(j.admitted_at.as_deref(), a))
}

/// An admitted job whose batch Job was made for an earlier admission, or before the queue
/// admitted it (a Job's pod template cannot change): the Job is deleted and made anew for
/// this admission once it is gone.
fn replace_for_admission(
    plan: &mut Plan<GryviaAIJobStatus>,
    status: &mut GryviaAIJobStatus,
    job: &GryviaAIJob,
    stale: &ObservedJob,
    now: Timestamp,
) {
    let name = job.metadata.name.clone().unwrap_or_default();
    let namespace = job.metadata.namespace.clone().unwrap_or_default();
    plan.delete
        .push(ObjectRef::namespaced("batch/v1", "Job", &namespace, &name));
    let message = format!(
        "replacing batch Job {name} (made for {}) with one for its admission",
        stale.admitted_at.as_deref().map_or_else(
            || "no admission".to_owned(),
            |t| format!(
                "the admission of {}",
                t.split_once('/').map_or(t, |(time, _)| time)
            )
        )
    );
    set(
        status,
        SCHEDULED,
        Status::False,
        "Admitted",
        message.clone(),
        job.metadata.generation,
        now,
    );
    status.phase = Some(JobPhase::Pending);
    status.active = 0;
    status.job_name = None;
    status.message = Some(message);
    plan.requeue(ADMISSION_RECHECK);
}

/// How soon a job whose batch Job is being replaced is looked at again.
pub const ADMISSION_RECHECK: Duration = Duration::from_secs(2);

/// A job of a queue's namespace that the queue has not admitted (or has released after a
/// preemption): no batch Job (a suspended one left by a preemption is deleted), `Pending`,
/// and `Scheduled=False/Queued` saying where it stands.
fn wait_for_queue(
    plan: &mut Plan<GryviaAIJobStatus>,
    status: &mut GryviaAIJobStatus,
    job: &GryviaAIJob,
    world: &AIJobWorld,
    current: &GryviaAIJobStatus,
    now: Timestamp,
) {
    let name = job.metadata.name.clone().unwrap_or_default();
    let namespace = job.metadata.namespace.clone().unwrap_or_default();
    if world.job.as_ref().is_some_and(|j| j.owned) {
        plan.delete
            .push(ObjectRef::namespaced("batch/v1", "Job", &namespace, &name));
    }
    // The standing itself changes with every cycle and is in status.queue; the condition
    // only names the queue (this controller is not woken by the queue's writes).
    let message = current.queue.as_ref().map_or_else(
        || "waiting for the native queue to admit it".to_owned(),
        |q| {
            format!(
                "waiting for queue {} to admit it (status.queue: position, why, expected start)",
                q.queue
            )
        },
    );
    set(
        status,
        SCHEDULED,
        Status::False,
        "Queued",
        message.clone(),
        job.metadata.generation,
        now,
    );
    status.conditions.retain(|c| c.type_ != PREEMPTED);
    stop_running(status, "its queue", job.metadata.generation, now);
    set(
        status,
        conditions::READY,
        Status::True,
        conditions::REASON_RECONCILED,
        "no batch Job until its queue admits it",
        job.metadata.generation,
        now,
    );
    status.phase = Some(JobPhase::Pending);
    status.active = 0;
    // No batch Job while it waits (one left by a preemption is deleted above): its absence
    // is expected, not a Job deleted under it.
    status.job_name = None;
    status.message = Some(message);
}

fn set(
    status: &mut GryviaAIJobStatus,
    type_: &str,
    s: Status,
    reason: &str,
    message: impl Into<String>,
    generation: Option<i64>,
    now: Timestamp,
) {
    conditions::set(
        &mut status.conditions,
        conditions::new(type_, s, reason, message, generation, now),
    );
}

/// Records the end of a job: `phase`, its condition (`Succeeded` or `Failed`) True and
/// `Running` False with `reason`, the message, when it ended, no active worker.
fn finish(
    status: &mut GryviaAIJobStatus,
    phase: JobPhase,
    reason: &str,
    msg: &str,
    at: Timestamp,
    generation: Option<i64>,
    now: Timestamp,
) {
    let type_ = if phase == JobPhase::Succeeded {
        SUCCEEDED
    } else {
        FAILED
    };
    set(status, type_, Status::True, reason, msg, generation, now);
    set(status, RUNNING, Status::False, reason, msg, generation, now);
    status.phase = Some(phase);
    status.message = Some(msg.to_owned());
    status.completion_time = Some(Time(at));
    status.active = 0;
}

fn phase_name(p: JobPhase) -> &'static str {
    match p {
        JobPhase::Pending => "Pending",
        JobPhase::Scheduled => "Scheduled",
        JobPhase::Running => "Running",
        JobPhase::Succeeded => "Succeeded",
        JobPhase::Failed => "Failed",
    }
}

fn count(n: usize) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

/// Records a spec the schema could not reject: Ready=False and the job Failed, naming the
/// field, with a Warning Event.
fn reject_invalid_spec(
    plan: &mut Plan<GryviaAIJobStatus>,
    status: &mut GryviaAIJobStatus,
    msg: String,
    generation: Option<i64>,
    now: Timestamp,
) {
    set(
        status,
        conditions::READY,
        Status::False,
        conditions::REASON_INVALID_SPEC,
        msg.clone(),
        generation,
        now,
    );
    finish(
        status,
        JobPhase::Failed,
        conditions::REASON_INVALID_SPEC,
        &msg,
        now,
        generation,
        now,
    );
    plan.event(EventType::Warning, conditions::REASON_INVALID_SPEC, msg);
}

/// The PriorityClass the `gryvia.io/priority-class` annotation names.
pub(crate) fn priority_class_of(job: &GryviaAIJob) -> Option<String> {
    job.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(labels::PRIORITY_CLASS))
        .cloned()
}

/// Why the batch Job is not (re)created.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Hold {
    /// A batch Job of the same name that is not this job's.
    Conflict(String),
    /// The PriorityClass the annotation names does not exist (yet).
    NoPriorityClass(String),
    /// The Kueue integration has not made the job's WorkloadPriorityClass yet.
    NoWorkloadPriorityClass(String),
    /// The batch Job was deleted before it finished.
    Deleted(String),
}

/// Whether something holds the batch Job back, and what.
fn hold(
    job: &GryviaAIJob,
    world: &AIJobWorld,
    current: &GryviaAIJobStatus,
    priority_class: Option<&str>,
) -> Option<Hold> {
    let name = job.metadata.name.as_deref().unwrap_or_default();
    if world.job.as_ref().is_some_and(|o| !o.owned) {
        return Some(Hold::Conflict(format!(
            "a batch Job named {name} exists in this namespace and does not belong to this GryviaAIJob; delete it or rename the job"
        )));
    }
    if let Some(pc) = priority_class
        && world.job.is_none()
        && !world.priority_class_exists
    {
        return Some(Hold::NoPriorityClass(format!(
            "annotation {}: PriorityClass {pc:?} does not exist (create a GryviaPriority of that name)",
            labels::PRIORITY_CLASS
        )));
    }
    if world.job.is_none()
        && world
            .kueue
            .as_ref()
            .is_some_and(|k| k.local_queue.is_some() && !k.priority_class_exists)
    {
        return Some(Hold::NoWorkloadPriorityClass(format!(
            "WorkloadPriorityClass {:?} does not exist yet (the Kueue integration makes one per priority tier and spec.priority)",
            kueue_priority_class(job)
        )));
    }
    if world.job.is_none() && current.job_name.is_some() {
        return Some(Hold::Deleted(format!(
            "the batch Job {name} was deleted before it finished; submit the job again to rerun it"
        )));
    }
    None
}

/// Records a [`Hold`] in the status: Pending and looked at again for a conflict or a missing
/// PriorityClass, Failed for a deleted batch Job.
fn record_hold(
    plan: &mut Plan<GryviaAIJobStatus>,
    status: &mut GryviaAIJobStatus,
    hold: Hold,
    generation: Option<i64>,
    now: Timestamp,
) {
    let (reason, msg, again) = match hold {
        Hold::Conflict(msg) => ("JobConflict", msg, RESYNC),
        Hold::NoPriorityClass(msg) => ("PriorityClassNotFound", msg, Duration::from_secs(10)),
        Hold::NoWorkloadPriorityClass(msg) => ("WaitingForKueue", msg, ADMISSION_RECHECK),
        Hold::Deleted(msg) => {
            finish(
                status,
                JobPhase::Failed,
                "JobDeleted",
                &msg,
                now,
                generation,
                now,
            );
            return;
        }
    };
    set(
        status,
        SCHEDULED,
        Status::False,
        reason,
        msg.clone(),
        generation,
        now,
    );
    status.phase = Some(JobPhase::Pending);
    status.message = Some(msg);
    plan.requeue(again);
}

/// The nodes retries avoid: those recorded, and the nodes of infrastructure failures that are
/// gone or quarantined.
fn avoided_nodes(
    recorded: &[String],
    failures: &[PodFailure],
    nodes: &BTreeMap<String, ObservedNode>,
) -> Vec<String> {
    let mut avoided: BTreeSet<String> = recorded.iter().cloned().collect();
    for f in failures
        .iter()
        .filter(|f| f.class == FailureClass::Infrastructure)
    {
        if let Some(n) = &f.node
            && nodes.get(n).is_none_or(|o| o.quarantined.is_some())
        {
            avoided.insert(n.clone());
        }
    }
    avoided.into_iter().collect()
}

/// The Events of failures new since `recorded` (and of failures reclassified as
/// infrastructure), with the retry count after them.
fn failure_events(
    recorded: &[PodFailure],
    failures: &[PodFailure],
    retries: i32,
    retry_limit: i32,
) -> Vec<(EventType, &'static str, String)> {
    let before: BTreeMap<&str, FailureClass> =
        recorded.iter().map(|f| (f.pod.as_str(), f.class)).collect();
    let mut out = Vec::new();
    for f in failures {
        let node = f.node.as_deref().unwrap_or("-");
        match (before.get(f.pod.as_str()), f.class) {
            (None, FailureClass::Application) => out.push((
                EventType::Warning,
                "PodFailed",
                format!(
                    "pod {} failed on node {node} ({}); retry {retries} of {retry_limit}",
                    f.pod, f.reason
                ),
            )),
            (None, FailureClass::Infrastructure) => out.push((
                EventType::Normal,
                "InfrastructureFailure",
                format!(
                    "pod {} on node {node}: {}; its retry does not count against retryLimit",
                    f.pod, f.reason
                ),
            )),
            (Some(FailureClass::Application), FailureClass::Infrastructure) => out.push((
                EventType::Normal,
                "InfrastructureFailure",
                format!(
                    "pod {} failed on node {node}, which is now quarantined; the failure no longer counts against retryLimit",
                    f.pod
                ),
            )),
            _ => {}
        }
    }
    out
}

/// Classifies the job's failures into the status (retries, infrastructure failures, avoided
/// nodes) with an Event for each new one; returns the number of application failures.
fn account_failures(
    plan: &mut Plan<GryviaAIJobStatus>,
    job: &GryviaAIJob,
    world: &AIJobWorld,
    current: &GryviaAIJobStatus,
    status: &mut GryviaAIJobStatus,
) -> usize {
    let failures = merge_failures(&current.failures, world);
    let app = failures
        .iter()
        .filter(|f| f.class == FailureClass::Application)
        .count();
    status.retries = count(app).min(job.spec.retry_limit);
    status.infrastructure_failures = count(failures.len() - app);
    status.avoided_nodes = avoided_nodes(&current.avoided_nodes, &failures, &world.nodes);
    for (type_, reason, message) in failure_events(
        &current.failures,
        &failures,
        status.retries,
        job.spec.retry_limit,
    ) {
        plan.event(type_, reason, message);
    }
    status.failures = failures;
    app
}

/// The batch Job, the headless Service of a multi-worker job and the claim of
/// `spec.storage`.
fn apply_children(
    plan: &mut Plan<GryviaAIJobStatus>,
    job: &GryviaAIJob,
    backoff_limit: i32,
    priority_class: Option<&str>,
    kueue: Option<&KueueSubmission>,
) {
    let mut batch = render_job(job, backoff_limit, priority_class);
    if let Some(k) = kueue {
        batch = submit_to_kueue(batch, k);
    }
    plan.apply_built(Child::from_json(batch));
    if job.spec.replicas > 1 {
        plan.apply_built(Child::from_resource(&render_service(job)));
    }
    if let Some(claim) = render_claim(job) {
        plan.apply_built(Child::from_resource(&claim));
    }
}

/// The workers that are alive: not being deleted, Pending or Running.
fn live_pods(pods: &[ObservedPod]) -> Vec<&ObservedPod> {
    pods.iter()
        .filter(|p| !p.deleting && p.pod_phase().is_live())
        .collect()
}

/// The Scheduled condition from the live workers: the scheduler's word on an unschedulable
/// one, all placed, or how many are; `None` between attempts (no live pod), when the
/// condition keeps its last word.
fn scheduled(live: &[&ObservedPod], replicas: i32) -> Option<(Status, &'static str, String)> {
    let bound = count(live.iter().filter(|p| p.node.is_some()).count());
    if let Some(why) = live.iter().find_map(|p| p.unschedulable.clone()) {
        Some((Status::False, "Unschedulable", why))
    } else if !live.is_empty() && bound == count(live.len()) {
        Some((
            Status::True,
            "AllWorkersPlaced",
            format!("{bound} of {replicas} workers have a node"),
        ))
    } else if !live.is_empty() {
        Some((
            Status::False,
            "Pending",
            format!("{bound} of {} workers have a node", live.len()),
        ))
    } else {
        None
    }
}

/// Where a job in progress stands: Running (with its condition), Scheduled or Pending, from
/// its live workers.
fn track_progress(
    status: &mut GryviaAIJobStatus,
    job: &GryviaAIJob,
    pods: &[ObservedPod],
    succeeded: i32,
    now: Timestamp,
) {
    let generation = job.metadata.generation;
    let replicas = job.spec.replicas;
    let live = live_pods(pods);
    if let Some((s, reason, message)) = scheduled(&live, replicas) {
        set(status, SCHEDULED, s, reason, message, generation, now);
    }
    let bound = live.iter().filter(|p| p.node.is_some()).count();
    let running = live
        .iter()
        .filter(|p| p.pod_phase() == PodPhase::Running)
        .count();
    let unschedulable = live.iter().find_map(|p| p.unschedulable.clone());
    // Every worker succeeded, and the batch Job has not said it is complete yet: still
    // running (not back to Pending), finishing.
    let done = pods
        .iter()
        .filter(|p| !p.deleting && p.pod_phase() == PodPhase::Succeeded)
        .count();
    if live.is_empty() && done > 0 && done >= usize::try_from(replicas).unwrap_or(usize::MAX) {
        let message = format!(
            "{done} of {replicas} workers succeeded, waiting for the batch Job to complete"
        );
        set(
            status,
            RUNNING,
            Status::True,
            "WorkersFinishing",
            message.clone(),
            generation,
            now,
        );
        status.phase = Some(JobPhase::Running);
        status.message = Some(message);
    } else if running > 0 {
        set(
            status,
            RUNNING,
            Status::True,
            "WorkersRunning",
            format!("{running} of {replicas} workers running"),
            generation,
            now,
        );
        status.phase = Some(JobPhase::Running);
        status.message = Some(format!(
            "{running} of {replicas} workers running, {succeeded} succeeded"
        ));
    } else if !live.is_empty() && conditions::is_true(&status.conditions, SCHEDULED) {
        status.phase = Some(JobPhase::Scheduled);
        status.message = Some(format!("{bound} of {replicas} workers placed"));
    } else {
        status.phase = Some(JobPhase::Pending);
        status.message = Some(match &unschedulable {
            Some(why) => format!("waiting for GPUs: {why}"),
            None if live.is_empty() && !status.failures.is_empty() => {
                "waiting for the Job controller to retry a failed pod".to_owned()
            }
            None => "waiting for the workers to be placed".to_owned(),
        });
    }
}

/// Where the job stands once its batch Job exists: finished when the Job completed or
/// failed, else in progress (looked at again after [`RESYNC`]).
fn track(
    plan: &mut Plan<GryviaAIJobStatus>,
    status: &mut GryviaAIJobStatus,
    job: &GryviaAIJob,
    world: &AIJobWorld,
    observed: &ObservedJob,
    application_failures: usize,
    now: Timestamp,
) {
    let generation = job.metadata.generation;
    status.active = observed.active;
    status.succeeded = observed.succeeded;
    // The first worker's start (a node's kubelet took it), not the batch Job's: a job whose
    // pods wait for a node has not started.
    if status.start_time.is_none()
        && let Some(t) = world.pods.iter().filter_map(|p| p.start_time).min()
    {
        status.start_time = Some(Time(t));
    }
    let at = observed.finish_time.unwrap_or(now);
    if observed.complete {
        let msg = format!(
            "{} of {} workers succeeded",
            observed.succeeded, job.spec.replicas
        );
        finish(
            status,
            JobPhase::Succeeded,
            "Completed",
            &msg,
            at,
            generation,
            now,
        );
    } else if let Some((reason, message)) = &observed.failed_condition {
        let msg = match reason.as_str() {
            "BackoffLimitExceeded" => format!(
                "{application_failures} failed pods used up retryLimit {} ({message})",
                job.spec.retry_limit
            ),
            _ => message.clone(),
        };
        finish(status, JobPhase::Failed, reason, &msg, at, generation, now);
    } else {
        track_progress(status, job, &world.pods, observed.succeeded, now);
        plan.requeue(RESYNC);
    }
}

/// Ready: the batch Job is in place, or the job finished.
fn set_ready(status: &mut GryviaAIJobStatus, name: &str, generation: Option<i64>, now: Timestamp) {
    let message = if status.phase.is_some_and(JobPhase::is_finished) {
        "finished".to_owned()
    } else {
        format!("batch Job {name} is in place")
    };
    set(
        status,
        conditions::READY,
        Status::True,
        conditions::REASON_RECONCILED,
        message,
        generation,
        now,
    );
}

/// `world` with its pods being deleted taken as stopped by a preemption for `by` (they use no
/// retry).
fn stopped_by_preemption(world: &AIJobWorld, by: &str) -> AIJobWorld {
    let mut stopping = world.clone();
    for pod in &mut stopping.pods {
        if pod.deleting && pod.preempted.is_none() {
            pod.preempted = Some(by.to_owned());
        }
    }
    stopping
}

/// Where a job Kueue decides about stands: `status.kueue` from its Workload; while its batch
/// Job is suspended (not admitted yet, or evicted and requeued) it is Pending and
/// `Scheduled=False` says Kueue's word; an eviction sets `Preempted=True` with Kueue's reason
/// (and an Event), a new admission sets it False again.
fn track_kueue(
    plan: &mut Plan<GryviaAIJobStatus>,
    status: &mut GryviaAIJobStatus,
    job: &GryviaAIJob,
    world: &AIJobWorld,
    current: &GryviaAIJobStatus,
    local_queue: &str,
    now: Timestamp,
) {
    let generation = job.metadata.generation;
    let workload = world.kueue.as_ref().and_then(|k| k.workload.as_ref());
    let standing = crate::kueue::standing(local_queue, workload, current.kueue.as_ref());
    let said = standing.message.clone().unwrap_or_default();
    let evicted = standing.state == "Evicted";
    if evicted && current.kueue.as_ref().is_none_or(|k| k.state != "Evicted") {
        plan.event(
            EventType::Warning,
            "Preempted",
            format!(
                "Kueue evicted the job ({}): {said}; it is requeued and uses no retry",
                standing.reason.as_deref().unwrap_or("Evicted")
            ),
        );
    }
    if evicted {
        set(
            status,
            PREEMPTED,
            Status::True,
            standing.reason.as_deref().unwrap_or("Evicted"),
            format!("Kueue evicted it: {said}"),
            generation,
            now,
        );
    } else if standing.state == "Admitted" && conditions::is_true(&status.conditions, PREEMPTED) {
        set(
            status,
            PREEMPTED,
            Status::False,
            "Readmitted",
            format!(
                "Kueue admitted it again to {}",
                standing.cluster_queue.as_deref().unwrap_or(local_queue)
            ),
            generation,
            now,
        );
    }
    let finished = status.phase.is_some_and(JobPhase::is_finished);
    if world.job.as_ref().is_none_or(|j| j.suspended) && !finished {
        let message = format!("Kueue ({local_queue}): {}: {said}", standing.state);
        set(
            status,
            SCHEDULED,
            Status::False,
            if evicted { "Evicted" } else { "Queued" },
            message.clone(),
            generation,
            now,
        );
        stop_running(status, "Kueue", generation, now);
        status.phase = Some(JobPhase::Pending);
        status.message = Some(message);
    }
    status.kueue = Some(standing);
}

/// A job that waits again (requeued after a preemption or an eviction): what its last run
/// left in `Running` says nothing about now.
fn stop_running(
    status: &mut GryviaAIJobStatus,
    waits_for: &str,
    generation: Option<i64>,
    now: Timestamp,
) {
    if conditions::is_true(&status.conditions, RUNNING) {
        set(
            status,
            RUNNING,
            Status::False,
            "Queued",
            format!("its workers stopped; it waits for {waits_for}"),
            generation,
            now,
        );
    }
}

/// A job the native queue preempted (`status.preemption`): its batch Job is suspended, so
/// the Job controller stops the workers (SIGTERM, then `preemptionGracePeriodSeconds` to
/// write a checkpoint); workers that fail while stopping are recorded as preempted and use no
/// retry, and a batch Job failing meanwhile does not finish the job. It stays `Pending` with
/// `Preempted=True` until the queue releases it (its workers gone) and admits it again.
fn stop_for_preemption(
    plan: &mut Plan<GryviaAIJobStatus>,
    status: &mut GryviaAIJobStatus,
    job: &GryviaAIJob,
    world: &AIJobWorld,
    current: &GryviaAIJobStatus,
    notice: &PreemptionNotice,
    now: Timestamp,
) {
    let generation = job.metadata.generation;
    let stopping = stopped_by_preemption(world, &notice.by);
    account_failures(plan, job, &stopping, current, status);
    let limit = backoff_limit(job.spec.retry_limit, &status.failures);
    apply_children(
        plan,
        job,
        limit,
        status.priority_class_name.as_deref(),
        None,
    );
    status.job_name = job.metadata.name.clone();
    status.active = world.job.as_ref().map_or(0, |j| j.active);
    let message = format!(
        "preempted ({}) for {}: its workers got SIGTERM at {} and {} s to write a checkpoint; it queues again once they are gone",
        notice.reason, notice.by, notice.notice_at.0, notice.grace_seconds
    );
    set(
        status,
        PREEMPTED,
        Status::True,
        notice.reason.as_str(),
        message.clone(),
        generation,
        now,
    );
    set(
        status,
        SCHEDULED,
        Status::False,
        "Preempted",
        format!("preempted for {}", notice.by),
        generation,
        now,
    );
    status.phase = Some(JobPhase::Pending);
    status.message = Some(message);
}

impl crate::Reconcile for AIJobReconciler {
    type Object = GryviaAIJob;
    type World = AIJobWorld;
    type Status = GryviaAIJobStatus;

    fn name(&self) -> &'static str {
        "gryvia-ai-jobs"
    }

    fn reconcile(
        &self,
        job: &GryviaAIJob,
        world: &AIJobWorld,
        now: Timestamp,
    ) -> Plan<GryviaAIJobStatus> {
        let mut plan = self.lifecycle(job, world, now);
        track_sla(&mut plan, job, world, now);
        plan
    }
}

/// Condition type: the job waited longer to start than its tier's `sla.maxQueueSeconds`
/// (True, with a Warning Event), or started within it (False).
pub const SLA_BREACHED: &str = "SLABreached";

/// Records the job's wait against its tier's SLA: while it has not started, `SLABreached`
/// turns True once it has waited longer than `maxQueueSeconds` (a Warning Event; a reconcile
/// is asked for that moment); when it starts in time, False with how long it waited. Once
/// set, the outcome stays.
pub fn track_sla(
    plan: &mut Plan<GryviaAIJobStatus>,
    job: &GryviaAIJob,
    world: &AIJobWorld,
    now: Timestamp,
) {
    let Some(sla) = world.sla_seconds else {
        return;
    };
    let owned = job.status.clone().map(without_queue_fields);
    let mut status = plan
        .status
        .clone()
        .or_else(|| owned.clone())
        .unwrap_or_default();
    if conditions::find(&status.conditions, SLA_BREACHED).is_some() {
        return;
    }
    let Some(created) = job.metadata.creation_timestamp.as_ref().map(|t| t.0) else {
        return;
    };
    let tier = priority_class_of(job).unwrap_or_default();
    let started = status.start_time.as_ref().map(|t| t.0);
    let waited = (started.unwrap_or(now) - created).get_seconds().max(0);
    let (value, reason, message) = match started {
        _ if waited > sla => (
            Status::True,
            "QueueTimeExceeded",
            format!(
                "waited {waited} s{}, past tier {tier}'s SLA of {sla} s (sla.maxQueueSeconds)",
                if started.is_some() {
                    " to start"
                } else {
                    " and has not started"
                }
            ),
        ),
        Some(_) => (
            Status::False,
            "StartedInTime",
            format!("started after {waited} s, within tier {tier}'s SLA of {sla} s"),
        ),
        None if status.phase.is_some_and(JobPhase::is_finished) => return,
        None => {
            plan.requeue(Duration::from_secs(
                u64::try_from(sla - waited + 1).unwrap_or(1),
            ));
            return;
        }
    };
    if value == Status::True {
        plan.event(EventType::Warning, "SLABreached", message.clone());
    }
    conditions::set(
        &mut status.conditions,
        conditions::new(
            SLA_BREACHED,
            value,
            reason,
            message,
            job.metadata.generation,
            now,
        ),
    );
    plan.set_status_if_changed(owned.as_ref(), status);
}

impl AIJobReconciler {
    /// The job's lifecycle: what it makes exist and what its status says (without the SLA).
    fn lifecycle(
        &self,
        job: &GryviaAIJob,
        world: &AIJobWorld,
        now: Timestamp,
    ) -> Plan<GryviaAIJobStatus> {
        let mut plan = Plan::new();
        let generation = job.metadata.generation;
        let name = job.metadata.name.clone().unwrap_or_default();
        let current = job.status.clone().unwrap_or_default();
        let owned = job.status.clone().map(without_queue_fields);
        let mut status = without_queue_fields(current.clone());
        status.observed_generation = generation;
        if current.phase.is_some_and(JobPhase::is_finished) {
            // Finished: nothing is re-created (the Job may be gone after its TTL); the record
            // stays as it is.
            plan.set_status_if_changed(owned.as_ref(), status);
            return plan;
        }
        if let Some(msg) = invalid_spec(job) {
            reject_invalid_spec(&mut plan, &mut status, msg, generation, now);
            plan.set_status_if_changed(owned.as_ref(), status);
            return plan;
        }
        if world.queued && current.admission.is_none() && !runs_outside_queue(world) {
            wait_for_queue(&mut plan, &mut status, job, world, &current, now);
            emit_transitions(&mut plan, &current, &status);
            plan.set_status_if_changed(owned.as_ref(), status);
            return plan;
        }
        let priority_class = priority_class_of(job);
        if let Some(hold) = hold(job, world, &current, priority_class.as_deref()) {
            if matches!(hold, Hold::Deleted(_)) {
                status.priority_class_name = priority_class;
            }
            record_hold(&mut plan, &mut status, hold, generation, now);
            emit_transitions(&mut plan, &current, &status);
            plan.set_status_if_changed(owned.as_ref(), status);
            return plan;
        }
        status.priority_class_name = priority_class.clone();
        if let Some(a) = &current.admission
            && let Some(stale) = made_for_other(world, a)
        {
            replace_for_admission(&mut plan, &mut status, job, stale, now);
            emit_transitions(&mut plan, &current, &status);
            plan.set_status_if_changed(owned.as_ref(), status);
            return plan;
        }
        if let Some(p) = &current.preemption {
            stop_for_preemption(&mut plan, &mut status, job, world, &current, p, now);
            emit_transitions(&mut plan, &current, &status);
            plan.set_status_if_changed(owned.as_ref(), status);
            return plan;
        }
        let kueue = kueue_queue(world).map(|lq| KueueSubmission {
            local_queue: lq.to_owned(),
            priority_class: kueue_priority_class(job),
            suspend: world.job.as_ref().is_none_or(|j| j.suspended),
        });
        // Pods that stop while Kueue holds the Job suspended were stopped by an eviction.
        let app = if kueue.is_some() && world.job.as_ref().is_some_and(|j| j.suspended) {
            let stopping = stopped_by_preemption(world, "Kueue");
            account_failures(&mut plan, job, &stopping, &current, &mut status)
        } else {
            account_failures(&mut plan, job, world, &current, &mut status)
        };
        let limit = backoff_limit(job.spec.retry_limit, &status.failures);
        apply_children(
            &mut plan,
            job,
            limit,
            priority_class.as_deref(),
            kueue.as_ref(),
        );
        status.job_name = Some(name.clone());
        match &world.job {
            None => {
                set(
                    &mut status,
                    SCHEDULED,
                    Status::False,
                    "Creating",
                    format!("creating batch Job {name}"),
                    generation,
                    now,
                );
                status.phase = Some(JobPhase::Pending);
                status.message = Some("waiting for the batch Job to be created".to_owned());
            }
            Some(observed) => track(&mut plan, &mut status, job, world, observed, app, now),
        }
        if let Some(k) = &kueue {
            track_kueue(
                &mut plan,
                &mut status,
                job,
                world,
                &current,
                &k.local_queue,
                now,
            );
        }
        set_ready(&mut status, &name, generation, now);
        emit_transitions(&mut plan, &current, &status);
        plan.set_status_if_changed(owned.as_ref(), status);
        plan
    }
}

fn rank(p: Option<JobPhase>) -> u8 {
    match p {
        None => 0,
        Some(JobPhase::Pending) => 1,
        Some(JobPhase::Scheduled) => 2,
        Some(JobPhase::Running) => 3,
        Some(JobPhase::Succeeded | JobPhase::Failed) => 4,
    }
}

/// An Event when the job moves forward (Pending, Scheduled, Running, then Succeeded or
/// Failed). Going back to Pending between retries is in the status, not an Event each time.
fn emit_transitions(
    plan: &mut Plan<GryviaAIJobStatus>,
    old: &GryviaAIJobStatus,
    new: &GryviaAIJobStatus,
) {
    if rank(new.phase) <= rank(old.phase) {
        return;
    }
    let Some(phase) = new.phase else { return };
    let msg = new.message.clone().unwrap_or_default();
    let type_ = if phase == JobPhase::Failed {
        EventType::Warning
    } else {
        EventType::Normal
    };
    plan.event(type_, phase_name(phase), msg);
}

/// Free GPUs of one node, for `gryvia capacity`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeCapacity {
    /// Node name.
    pub node: String,
    /// `nvidia.com/gpu.product` (`unknown` without the label).
    pub gpu_type: String,
    /// Allocatable GPUs.
    pub allocatable: i32,
    /// GPUs requested by pods that hold them (scheduled, not finished).
    pub used: i32,
    /// GPUs a new pod could get (0 on a node that takes no new pods).
    pub free: i32,
    /// Why the node takes no new pods, if it does not: cordoned, quarantined, reserved.
    pub unavailable: Option<String>,
}

/// Free GPUs per node, sorted by GPU type then node; nodes without GPUs are left out.
pub fn capacity<P: PodView>(nodes: &[Node], pods: &[P]) -> Vec<NodeCapacity> {
    let used = crate::tenancy::gpus_by_node(pods);
    let mut out: Vec<NodeCapacity> = nodes
        .iter()
        .filter_map(|n| {
            let name = n.metadata.name.clone().unwrap_or_default();
            let allocatable = crate::tenancy::node_gpus(n);
            if allocatable == 0 {
                return None;
            }
            let unavailable = unavailable(n);
            let u = used.get(&name).copied().unwrap_or(0);
            Some(NodeCapacity {
                gpu_type: facts::gpu_product(n).unwrap_or("unknown").to_owned(),
                allocatable,
                used: u,
                free: if unavailable.is_some() {
                    0
                } else {
                    (allocatable - u).max(0)
                },
                unavailable,
                node: name,
            })
        })
        .collect();
    out.sort_by(|a, b| (&a.gpu_type, &a.node).cmp(&(&b.gpu_type, &b.node)));
    out
}

/// Why `node` takes no new pods, if it does not: quarantined (by which check), cordoned, or
/// reserved (for which reservation).
pub fn unavailable(node: &Node) -> Option<String> {
    if let Some(check) = facts::quarantined_by(node) {
        Some(format!("quarantined ({check})"))
    } else if facts::cordoned(node) {
        Some("cordoned".to_owned())
    } else {
        facts::reservation_taint(node).map(|r| format!("reserved ({r})"))
    }
}

/// The order `gryvia queue` lists waiting jobs in: those a native queue holds by queue and
/// position (`status.queue`, the queue's own order); then the others, which kube-scheduler
/// places as they come, by `spec.priority` (higher first), then creation, then name (the
/// generated name of a job not created yet).
pub fn queue_order(a: &GryviaAIJob, b: &GryviaAIJob) -> std::cmp::Ordering {
    let key = |j: &GryviaAIJob| {
        let standing = j.status.as_ref().and_then(|s| s.queue.as_ref());
        (
            standing.is_none(),
            standing.map(|q| (q.queue.clone(), q.position)),
            std::cmp::Reverse(j.spec.priority),
            j.metadata.creation_timestamp.as_ref().map(|t| t.0),
            j.metadata
                .name
                .clone()
                .or_else(|| j.metadata.generate_name.clone())
                .unwrap_or_default(),
        )
    };
    key(a).cmp(&key(b))
}

/// The jobs waiting for GPUs (no phase yet, or Pending), in [`queue_order`]: what
/// `gryvia queue` lists.
pub fn pending_queue(jobs: impl IntoIterator<Item = GryviaAIJob>) -> Vec<GryviaAIJob> {
    let mut out: Vec<GryviaAIJob> = jobs
        .into_iter()
        .filter(|j| {
            matches!(
                j.status.as_ref().and_then(|s| s.phase),
                None | Some(JobPhase::Pending)
            )
        })
        .collect();
    out.sort_by(queue_order);
    out
}

/// The pods to show for a job's logs: the newest attempt of each worker (by completion index),
/// only those bound to a node, only worker `worker` when given; sorted by index.
pub fn newest_attempts(pods: Vec<Pod>, worker: Option<u32>) -> Vec<Pod> {
    let index = |p: &Pod| {
        p.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(COMPLETION_INDEX))
            .cloned()
            .unwrap_or_else(|| "0".to_owned())
    };
    let mut pods: Vec<Pod> = pods
        .into_iter()
        .filter(|p| facts::node_of(p).is_some())
        .filter(|p| worker.is_none_or(|w| index(p) == w.to_string()))
        .collect();
    pods.sort_by_key(|p| p.metadata.creation_timestamp.as_ref().map(|t| t.0));
    let mut latest: BTreeMap<String, Pod> = BTreeMap::new();
    for p in pods {
        latest.insert(index(&p), p);
    }
    let mut out: Vec<Pod> = latest.into_values().collect();
    out.sort_by_key(|p| index(p).parse::<u32>().unwrap_or(0));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use gryvia_types::testing::ai_job;

    fn now() -> Timestamp {
        Timestamp::from_second(1_800_000_000).unwrap()
    }

    fn job(spec: Value) -> GryviaAIJob {
        let mut j = ai_job("ns", "train", "img:1");
        let mut s = serde_json::to_value(&j.spec).unwrap();
        for (k, v) in spec.as_object().unwrap() {
            s[k] = v.clone();
        }
        j.spec = serde_json::from_value(s).unwrap();
        j
    }

    fn pod(name: &str, node: Option<&str>, phase: &str) -> ObservedPod {
        ObservedPod {
            name: name.to_owned(),
            node: node.map(str::to_owned),
            phase: phase.to_owned(),
            ..ObservedPod::default()
        }
    }

    fn failure(pod: &str, node: &str, class: FailureClass) -> PodFailure {
        PodFailure {
            pod: pod.to_owned(),
            node: Some(node.to_owned()),
            class,
            reason: "exited with code 1".to_owned(),
            exit_code: Some(1),
        }
    }

    #[test]
    fn a_failure_cause_reads_back_from_its_recorded_text() {
        let causes = [
            FailureCause::Disrupted("EvictionByEvictionAPI".into()),
            FailureCause::NodeGone("n1".into()),
            FailureCause::NodeQuarantined {
                node: "n1".into(),
                check: "gpu-ecc".into(),
            },
            FailureCause::RejectedByNode("OutOfnvidia.com/gpu".into()),
            FailureCause::Exited(137),
            FailureCause::Reason("DeadlineExceeded".into()),
            FailureCause::Unknown,
        ];
        for cause in causes {
            let recorded = PodFailure {
                pod: "p".into(),
                node: None,
                class: cause.class(),
                reason: cause.to_string(),
                exit_code: None,
            };
            assert_eq!(FailureCause::of_recorded(&recorded), cause);
        }
        assert!(!FailureCause::Disrupted("x".into()).counted_by_job_controller());
        assert!(FailureCause::NodeGone("n".into()).counted_by_job_controller());
    }

    #[test]
    fn a_failed_pods_cause_is_its_disruption_its_node_or_its_exit() {
        let nodes = BTreeMap::from([("ok".to_owned(), ObservedNode::default())]);
        assert_eq!(
            failure_cause(&pod("a", Some("ok"), "Running"), &nodes),
            None
        );
        let mut failed = pod("a", Some("ok"), "Failed");
        failed.exit_code = Some(1);
        assert_eq!(
            failure_cause(&failed, &nodes),
            Some(FailureCause::Exited(1))
        );
        failed.reason = Some("OutOfcpu".into());
        assert_eq!(
            failure_cause(&failed, &nodes),
            Some(FailureCause::RejectedByNode("OutOfcpu".into()))
        );
        let gone = pod("b", Some("gone"), "Failed");
        assert_eq!(
            failure_cause(&gone, &nodes),
            Some(FailureCause::NodeGone("gone".into()))
        );
    }

    #[test]
    fn the_queue_serves_priority_then_age_then_name() {
        let j = |name: &str, priority: i32, created: i64, phase: Option<JobPhase>| {
            let mut j = job(json!({"priority": priority}));
            j.metadata.name = Some(name.to_owned());
            j.metadata.creation_timestamp = Some(Time(Timestamp::from_second(created).unwrap()));
            j.status = phase.map(|p| GryviaAIJobStatus {
                phase: Some(p),
                ..GryviaAIJobStatus::default()
            });
            j
        };
        let queue = pending_queue(vec![
            j("old-low", 10, 1, None),
            j("new-high", 90, 5, Some(JobPhase::Pending)),
            j("b", 50, 3, None),
            j("a", 50, 3, None),
            j("running", 99, 0, Some(JobPhase::Running)),
        ]);
        let names: Vec<&str> = queue
            .iter()
            .filter_map(|j| j.metadata.name.as_deref())
            .collect();
        assert_eq!(names, vec!["new-high", "a", "b", "old-low"]);
        assert_eq!(queue_order(&queue[1], &queue[2]), std::cmp::Ordering::Less);
        // Jobs a native queue holds come first, in its order, whatever their priority.
        let standing = |name: &str, position: i32| {
            let mut j = j(name, 0, 9, Some(JobPhase::Pending));
            if let Some(st) = j.status.as_mut() {
                st.queue = Some(gryvia_types::QueueStanding {
                    queue: "ml".to_owned(),
                    position,
                    reason: String::new(),
                    expected_start: None,
                });
            }
            j
        };
        let queue = pending_queue(vec![
            j("unqueued-high", 99, 1, None),
            standing("second", 2),
            standing("first", 1),
        ]);
        let names: Vec<&str> = queue
            .iter()
            .filter_map(|j| j.metadata.name.as_deref())
            .collect();
        assert_eq!(names, vec!["first", "second", "unqueued-high"]);
    }

    #[test]
    fn an_observed_phase_reads_typed() {
        assert_eq!(pod("a", None, "Failed").pod_phase(), PodPhase::Failed);
        assert_eq!(ObservedPod::default().pod_phase(), PodPhase::Pending);
    }

    #[test]
    fn gpus_are_limits_and_requests_and_memory_is_both() {
        let r = resources(
            &job(json!({"gpus": 2, "cpu": "4", "memory": "8Gi"})).spec,
            None,
        );
        assert_eq!(
            r,
            json!({"limits": {"nvidia.com/gpu": 2, "memory": "8Gi"},
                   "requests": {"nvidia.com/gpu": 2, "cpu": "4", "memory": "8Gi"}})
        );
        assert_eq!(
            resources(&job(json!({"gpus": 0})).spec, None),
            json!({"limits": {}, "requests": {}})
        );
    }

    #[test]
    fn storage_adds_a_claim_volume_after_the_users() {
        let j = job(
            json!({"volumes": [{"name": "cfg", "configMap": {"name": "c"}}],
                           "storage": {"size": "1Gi"}}),
        );
        let v = volumes(&j);
        assert_eq!(v[0], json!({"name": "cfg", "configMap": {"name": "c"}}));
        assert_eq!(
            v[1],
            json!({"name": DATA_VOLUME, "persistentVolumeClaim": {"claimName": "train-data"}})
        );
    }

    #[test]
    fn storage_is_mounted_at_data_after_the_users_mounts() {
        let j = job(
            json!({"volumeMounts": [{"name": "cfg", "mountPath": "/cfg"}],
                           "storage": {"size": "1Gi"}}),
        );
        assert_eq!(
            volume_mounts(&j),
            vec![
                json!({"name": "cfg", "mountPath": "/cfg", "readOnly": false}),
                json!({"name": DATA_VOLUME, "mountPath": DATA_PATH})
            ]
        );
    }

    #[test]
    fn the_worker_has_the_controllers_environment_before_the_users() {
        let c = worker_container(&job(
            json!({"command": ["python"], "env": [{"name": "A", "value": "1"}]}),
        ));
        assert_eq!(c["name"], WORKER);
        assert_eq!(c["command"], json!(["python"]));
        let env = c["env"].as_array().unwrap();
        assert_eq!(env[0]["name"], "GRYVIA_JOB_NAME");
        assert_eq!(env.last().unwrap(), &json!({"name": "A", "value": "1"}));
        assert!(c.get("args").is_none() && c.get("volumeMounts").is_none());
    }

    #[test]
    fn the_gpu_type_becomes_the_product_selector() {
        let s = node_selector(&job(json!({"gpuType": "H100", "nodeSelector": {"z": "a"}})).spec);
        assert_eq!(s.get(labels::NVIDIA_GPU_PRODUCT), Some(&json!("H100")));
        assert_eq!(s.get("z"), Some(&json!("a")));
    }

    #[test]
    fn a_gpu_job_tolerates_the_gpu_taint_unless_it_does_already() {
        let t = tolerations(&job(json!({"gpus": 1})).spec);
        assert_eq!(
            t,
            vec![
                json!({"key": labels::NVIDIA_GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"})
            ]
        );
        let own = tolerations(
            &job(json!({"gpus": 1, "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}]}))
                .spec,
        );
        assert_eq!(own.len(), 1);
        assert!(tolerations(&job(json!({"gpus": 0})).spec).is_empty());
    }

    #[test]
    fn a_multi_worker_pod_gets_the_subdomain_and_the_priority_class() {
        let s = pod_spec(&job(json!({"replicas": 2})), Some("high"));
        assert_eq!(s["subdomain"], "train");
        assert_eq!(s["priorityClassName"], "high");
        assert_eq!(s["restartPolicy"], "Never");
        let one = pod_spec(&job(json!({})), None);
        assert!(one.get("subdomain").is_none() && one.get("priorityClassName").is_none());
    }

    #[test]
    fn pod_labels_never_replace_the_controllers() {
        let m = pod_metadata(&job(
            json!({"podLabels": {"gryvia.io/job-name": "x", "team": "a"},
                                          "podAnnotations": {"a": "b"}}),
        ));
        assert_eq!(m["labels"]["gryvia.io/job-name"], "train");
        assert_eq!(m["labels"]["team"], "a");
        assert_eq!(m["annotations"]["a"], "b");
    }

    #[test]
    fn an_invalid_spec_fails_the_job_with_an_event() {
        let mut plan = Plan::new();
        let mut status = GryviaAIJobStatus::default();
        reject_invalid_spec(&mut plan, &mut status, "spec.x: bad".into(), Some(1), now());
        assert_eq!(status.phase, Some(JobPhase::Failed));
        assert!(!conditions::is_true(&status.conditions, conditions::READY));
        assert_eq!(plan.events[0].reason, conditions::REASON_INVALID_SPEC);
    }

    #[test]
    fn the_priority_class_comes_from_the_annotation() {
        let mut j = job(json!({}));
        assert_eq!(priority_class_of(&j), None);
        j.metadata.annotations = Some(BTreeMap::from([(
            labels::PRIORITY_CLASS.to_owned(),
            "high".to_owned(),
        )]));
        assert_eq!(priority_class_of(&j).as_deref(), Some("high"));
    }

    #[test]
    fn a_foreign_job_a_missing_class_or_a_deleted_job_holds_the_job_back() {
        let j = job(json!({}));
        let current = GryviaAIJobStatus::default();
        let mut world = AIJobWorld::default();
        assert_eq!(hold(&j, &world, &current, None), None);
        assert!(matches!(
            hold(&j, &world, &current, Some("high")),
            Some(Hold::NoPriorityClass(_))
        ));
        let deleted = GryviaAIJobStatus {
            job_name: Some("train".into()),
            ..GryviaAIJobStatus::default()
        };
        assert!(matches!(
            hold(&j, &world, &deleted, None),
            Some(Hold::Deleted(_))
        ));
        world.job = Some(ObservedJob::default());
        assert!(matches!(
            hold(&j, &world, &current, None),
            Some(Hold::Conflict(_))
        ));
    }

    #[test]
    fn a_held_job_is_pending_and_looked_at_again_unless_its_batch_job_was_deleted() {
        let mut plan = Plan::new();
        let mut status = GryviaAIJobStatus::default();
        record_hold(
            &mut plan,
            &mut status,
            Hold::Conflict("c".into()),
            None,
            now(),
        );
        assert_eq!(status.phase, Some(JobPhase::Pending));
        assert_eq!(plan.requeue_after(), Some(RESYNC));
        let mut plan = Plan::new();
        record_hold(
            &mut plan,
            &mut status,
            Hold::Deleted("d".into()),
            None,
            now(),
        );
        assert_eq!(status.phase, Some(JobPhase::Failed));
        assert_eq!(plan.requeue_after(), None);
    }

    #[test]
    fn retries_avoid_gone_and_quarantined_nodes_of_infrastructure_failures() {
        let nodes = BTreeMap::from([
            ("ok".to_owned(), ObservedNode::default()),
            (
                "bad".to_owned(),
                ObservedNode {
                    quarantined: Some("hc".into()),
                },
            ),
        ]);
        let failures = vec![
            failure("a", "ok", FailureClass::Infrastructure),
            failure("b", "bad", FailureClass::Infrastructure),
            failure("c", "gone", FailureClass::Infrastructure),
            failure("d", "gone2", FailureClass::Application),
        ];
        assert_eq!(
            avoided_nodes(&["old".to_owned()], &failures, &nodes),
            vec!["bad", "gone", "old"]
        );
    }

    #[test]
    fn new_and_reclassified_failures_raise_events() {
        let old = vec![failure("a", "n", FailureClass::Application)];
        let new = vec![
            failure("a", "n", FailureClass::Infrastructure),
            failure("b", "n", FailureClass::Application),
        ];
        let events = failure_events(&old, &new, 1, 3);
        let reasons: Vec<&str> = events.iter().map(|e| e.1).collect();
        assert_eq!(reasons, vec!["InfrastructureFailure", "PodFailed"]);
        assert!(events[1].2.ends_with("retry 1 of 3"));
        assert!(failure_events(&new, &new, 1, 3).is_empty());
    }

    #[test]
    fn failures_are_counted_into_the_status() {
        let j = job(json!({"retryLimit": 1}));
        let world = AIJobWorld {
            pods: vec![
                pod("p1", Some("n"), "Failed"),
                pod("p2", Some("n"), "Failed"),
            ],
            nodes: BTreeMap::from([("n".to_owned(), ObservedNode::default())]),
            ..AIJobWorld::default()
        };
        let mut plan = Plan::new();
        let mut status = GryviaAIJobStatus::default();
        let app = account_failures(
            &mut plan,
            &j,
            &world,
            &GryviaAIJobStatus::default(),
            &mut status,
        );
        assert_eq!(app, 2);
        assert_eq!(status.retries, 1, "capped at the retry limit");
        assert_eq!(status.failures.len(), 2);
        assert_eq!(plan.events.len(), 2);
    }

    #[test]
    fn the_children_are_the_job_its_service_and_its_claim() {
        let mut plan = Plan::new();
        apply_children(
            &mut plan,
            &job(json!({"replicas": 2, "storage": {"size": "1Gi"}})),
            3,
            None,
            None,
        );
        let kinds: Vec<&str> = plan
            .apply
            .iter()
            .map(|c| c.object_ref.kind.as_str())
            .collect();
        assert_eq!(kinds, vec!["Job", "Service", "PersistentVolumeClaim"]);
    }

    #[test]
    fn live_workers_are_pending_or_running_and_not_deleted() {
        let mut gone = pod("c", None, "Running");
        gone.deleting = true;
        let pods = vec![
            pod("a", None, "Pending"),
            pod("b", Some("n"), "Succeeded"),
            gone,
            pod("d", Some("n"), "Running"),
        ];
        let names: Vec<&str> = live_pods(&pods).iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, vec!["a", "d"]);
    }

    #[test]
    fn scheduled_reports_the_schedulers_word_or_how_many_are_placed() {
        let placed = pod("a", Some("n"), "Running");
        let waiting = pod("b", None, "Pending");
        let mut refused = pod("c", None, "Pending");
        refused.unschedulable = Some("0/3 nodes".into());
        assert_eq!(scheduled(&[], 2), None);
        assert_eq!(
            scheduled(&[&placed], 1),
            Some((
                Status::True,
                "AllWorkersPlaced",
                "1 of 1 workers have a node".into()
            ))
        );
        assert_eq!(
            scheduled(&[&placed, &waiting], 2).map(|s| s.1),
            Some("Pending")
        );
        assert_eq!(
            scheduled(&[&placed, &refused], 2),
            Some((Status::False, "Unschedulable", "0/3 nodes".into()))
        );
    }

    #[test]
    fn progress_is_running_scheduled_or_pending() {
        let j = job(json!({"replicas": 2}));
        let mut status = GryviaAIJobStatus::default();
        track_progress(&mut status, &j, &[pod("a", Some("n"), "Running")], 0, now());
        assert_eq!(status.phase, Some(JobPhase::Running));
        let mut status = GryviaAIJobStatus::default();
        track_progress(&mut status, &j, &[pod("a", Some("n"), "Pending")], 0, now());
        assert_eq!(status.phase, Some(JobPhase::Scheduled));
        let mut status = GryviaAIJobStatus::default();
        track_progress(&mut status, &j, &[], 0, now());
        assert_eq!(
            status.message.as_deref(),
            Some("waiting for the workers to be placed")
        );
    }

    #[test]
    fn a_completed_or_failed_batch_job_finishes_the_job() {
        let j = job(json!({}));
        let mut plan = Plan::new();
        let mut status = GryviaAIJobStatus::default();
        let done = ObservedJob {
            owned: true,
            complete: true,
            succeeded: 1,
            ..ObservedJob::default()
        };
        track(
            &mut plan,
            &mut status,
            &j,
            &AIJobWorld::default(),
            &done,
            0,
            now(),
        );
        assert_eq!(status.phase, Some(JobPhase::Succeeded));
        assert_eq!(plan.requeue_after(), None);
        let failed = ObservedJob {
            owned: true,
            failed_condition: Some(("BackoffLimitExceeded".into(), "limit".into())),
            ..ObservedJob::default()
        };
        let mut status = GryviaAIJobStatus::default();
        track(
            &mut plan,
            &mut status,
            &j,
            &AIJobWorld::default(),
            &failed,
            4,
            now(),
        );
        assert_eq!(
            status.message.as_deref(),
            Some("4 failed pods used up retryLimit 3 (limit)")
        );
        let mut status = GryviaAIJobStatus::default();
        let running = ObservedJob {
            owned: true,
            ..ObservedJob::default()
        };
        track(
            &mut plan,
            &mut status,
            &j,
            &AIJobWorld::default(),
            &running,
            0,
            now(),
        );
        assert_eq!(plan.requeue_after(), Some(RESYNC));
    }

    #[test]
    fn a_node_is_unavailable_when_quarantined_cordoned_or_reserved() {
        let node = |spec: Value| -> Node {
            serde_json::from_value(json!({"metadata": {"name": "n"}, "spec": spec})).unwrap()
        };
        let taint =
            |k: &str, v: &str| json!({"taints": [{"key": k, "value": v, "effect": "NoSchedule"}]});
        assert_eq!(unavailable(&node(json!({}))), None);
        assert_eq!(
            unavailable(&node(taint(labels::GPU_UNHEALTHY_TAINT, "hc"))).as_deref(),
            Some("quarantined (hc)")
        );
        assert_eq!(
            unavailable(&node(json!({"unschedulable": true}))).as_deref(),
            Some("cordoned")
        );
        assert_eq!(
            unavailable(&node(taint(labels::RESERVED_TAINT, "r1"))).as_deref(),
            Some("reserved (r1)")
        );
    }

    #[test]
    fn ready_says_finished_once_the_job_is() {
        let mut status = GryviaAIJobStatus::default();
        set_ready(&mut status, "train", None, now());
        assert_eq!(
            conditions::find(&status.conditions, conditions::READY).map(|c| c.message.as_str()),
            Some("batch Job train is in place")
        );
        status.phase = Some(JobPhase::Failed);
        set_ready(&mut status, "train", None, now());
        assert_eq!(
            conditions::find(&status.conditions, conditions::READY).map(|c| c.message.as_str()),
            Some("finished")
        );
    }
}
