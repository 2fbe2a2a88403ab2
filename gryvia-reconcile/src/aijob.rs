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
use std::time::Duration;

use gryvia_types::conditions::{self, Status};
use gryvia_types::{FailureClass, GryviaAIJob, GryviaAIJobStatus, JobPhase, PodFailure, labels};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::{Child, EventType, Plan, Timestamp};

/// Condition type: every worker has a node.
pub const SCHEDULED: &str = "Scheduled";
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
/// Pod annotation the Job controller sets to the worker's index.
pub const COMPLETION_INDEX: &str = "batch.kubernetes.io/job-completion-index";
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
    /// `status.phase` (`Pending`, `Running`, `Succeeded`, `Failed`, `Unknown`).
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
}

impl ObservedPod {
    /// Summarises a pod.
    pub fn of(pod: &Pod) -> Self {
        let status = pod.status.clone().unwrap_or_default();
        let conds = status.conditions.unwrap_or_default();
        ObservedPod {
            name: pod.metadata.name.clone().unwrap_or_default(),
            node: pod.spec.as_ref().and_then(|s| s.node_name.clone()),
            phase: status.phase.unwrap_or_else(|| "Pending".to_owned()),
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
        }
    }
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
            quarantined: node
                .spec
                .as_ref()
                .and_then(|s| s.taints.as_ref())
                .and_then(|ts| ts.iter().find(|t| t.key == labels::GPU_UNHEALTHY_TAINT))
                .map(|t| t.value.clone().unwrap_or_default()),
        }
    }
}

/// What the AI job reconcile knows about the cluster.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AIJobWorld {
    /// The batch Job of the same name, when it exists.
    pub job: Option<ObservedJob>,
    /// Pods of the job (label `gryvia.io/job-name`), sorted by name.
    pub pods: Vec<ObservedPod>,
    /// The nodes those pods are bound to that still exist.
    pub nodes: BTreeMap<String, ObservedNode>,
    /// The PriorityClass the annotation names, when it exists.
    pub priority_class_exists: bool,
}

/// Classifies a failed pod: `None` when it has not failed.
pub fn classify(pod: &ObservedPod, nodes: &BTreeMap<String, ObservedNode>) -> Option<PodFailure> {
    if pod.phase != "Failed" {
        return None;
    }
    let infra = |reason: String| {
        Some(PodFailure {
            pod: pod.name.clone(),
            node: pod.node.clone(),
            class: FailureClass::Infrastructure,
            reason,
            exit_code: pod.exit_code,
        })
    };
    if let Some(d) = &pod.disruption {
        return infra(format!("disrupted: {d}"));
    }
    if let Some(node) = &pod.node {
        match nodes.get(node) {
            None => return infra(format!("node {node} is gone")),
            Some(ObservedNode {
                quarantined: Some(check),
            }) => {
                return infra(format!(
                    "node {node} is quarantined ({}={check})",
                    labels::GPU_UNHEALTHY_TAINT
                ));
            }
            Some(_) => {}
        }
    }
    if let Some(r) = &pod.reason
        && (INFRA_REASONS.contains(&r.as_str()) || r.starts_with("OutOf"))
    {
        return infra(format!("rejected or evicted by the node: {r}"));
    }
    Some(PodFailure {
        pod: pod.name.clone(),
        node: pod.node.clone(),
        class: FailureClass::Application,
        reason: match (pod.exit_code, &pod.reason) {
            (Some(code), _) => format!("exited with code {code}"),
            (None, Some(r)) => r.clone(),
            (None, None) => "failed".to_owned(),
        },
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
        .filter(|f| f.class == FailureClass::Infrastructure && !f.reason.starts_with("disrupted:"))
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

fn label_map(job: &GryviaAIJob) -> serde_json::Map<String, Value> {
    let name = job.metadata.name.clone().unwrap_or_default();
    let mut labels_out = serde_json::Map::new();
    labels_out.insert(labels::MANAGED_BY.into(), labels::MANAGED_BY_VALUE.into());
    labels_out.insert(labels::JOB_NAME.into(), name.into());
    if let Some(t) = job
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(labels::TEMPLATE))
    {
        labels_out.insert(labels::TEMPLATE.into(), t.clone().into());
    }
    labels_out
}

/// The batch Job of `job` with the given `backoffLimit` and PriorityClass.
pub fn render_job(job: &GryviaAIJob, backoff_limit: i32, priority_class: Option<&str>) -> Value {
    let name = job.metadata.name.clone().unwrap_or_default();
    let namespace = job.metadata.namespace.clone().unwrap_or_default();
    let spec = &job.spec;
    let multi = spec.replicas > 1;
    let job_labels = label_map(job);
    let mut pod_labels = job_labels.clone();
    for (k, v) in &spec.pod_labels {
        pod_labels
            .entry(k.clone())
            .or_insert_with(|| v.clone().into());
    }

    let mut limits = serde_json::Map::new();
    let mut requests = serde_json::Map::new();
    if spec.gpus > 0 {
        limits.insert(labels::NVIDIA_GPU_RESOURCE.into(), spec.gpus.into());
        requests.insert(labels::NVIDIA_GPU_RESOURCE.into(), spec.gpus.into());
    }
    if let Some(cpu) = &spec.cpu {
        requests.insert("cpu".into(), cpu.0.clone().into());
    }
    if let Some(mem) = &spec.memory {
        requests.insert("memory".into(), mem.0.clone().into());
        limits.insert("memory".into(), mem.0.clone().into());
    }

    let mut envs = worker_env(job);
    envs.extend(
        spec.env
            .iter()
            .map(|e| serde_json::to_value(e).unwrap_or(Value::Null)),
    );

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
        mounts.push(json!({"name": DATA_VOLUME, "mountPath": DATA_PATH}));
    }

    let mut container = json!({
        "name": WORKER,
        "image": spec.image,
        "env": envs,
        "resources": {"limits": limits, "requests": requests},
    });
    if !spec.command.is_empty() {
        container["command"] = json!(spec.command);
    }
    if !spec.args.is_empty() {
        container["args"] = json!(spec.args);
    }
    if !mounts.is_empty() {
        container["volumeMounts"] = json!(mounts);
    }

    let mut node_selector: serde_json::Map<String, Value> = spec
        .node_selector
        .iter()
        .map(|(k, v)| (k.clone(), Value::String(v.clone())))
        .collect();
    if let Some(t) = &spec.gpu_type {
        node_selector.insert(labels::NVIDIA_GPU_PRODUCT.into(), t.clone().into());
    }
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
        // What the ExtendedResourceToleration admission plugin adds: GPU pools are often
        // tainted so that only GPU workloads land there.
        tolerations.push(json!({"key": labels::NVIDIA_GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}));
    }

    let mut pod_spec = json!({
        "restartPolicy": "Never",
        "enableServiceLinks": false,
        "containers": [container],
    });
    if !volumes.is_empty() {
        pod_spec["volumes"] = json!(volumes);
    }
    if !node_selector.is_empty() {
        pod_spec["nodeSelector"] = Value::Object(node_selector);
    }
    if !tolerations.is_empty() {
        pod_spec["tolerations"] = json!(tolerations);
    }
    if multi {
        pod_spec["subdomain"] = name.clone().into();
    }
    if let Some(pc) = priority_class {
        pod_spec["priorityClassName"] = pc.into();
    }
    let mut template_meta = json!({"labels": pod_labels});
    if !spec.pod_annotations.is_empty() {
        template_meta["annotations"] = json!(spec.pod_annotations);
    }

    let mut job_spec = json!({
        "backoffLimit": backoff_limit,
        "completions": spec.replicas,
        "parallelism": spec.replicas,
        "completionMode": if multi { "Indexed" } else { "NonIndexed" },
        "podFailurePolicy": {"rules": [
            {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}
        ]},
        "template": {"metadata": template_meta, "spec": pod_spec},
    });
    if let Some(d) = spec.active_deadline_seconds {
        job_spec["activeDeadlineSeconds"] = d.into();
    }
    if let Some(t) = spec.ttl_seconds_after_finished {
        job_spec["ttlSecondsAfterFinished"] = t.into();
    }
    json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "labels": job_labels},
        "spec": job_spec,
    })
}

/// The headless Service that gives the workers of a multi-worker job stable names
/// (`<job>-<index>.<job>`).
pub fn render_service(job: &GryviaAIJob) -> Value {
    let name = job.metadata.name.clone().unwrap_or_default();
    json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": name,
            "namespace": job.metadata.namespace.clone().unwrap_or_default(),
            "labels": label_map(job),
        },
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": true,
            "selector": {labels::JOB_NAME: name},
            "ports": [{"name": "master", "port": MASTER_PORT, "targetPort": MASTER_PORT}],
        },
    })
}

/// The PersistentVolumeClaim of `spec.storage`, when there is one.
pub fn render_claim(job: &GryviaAIJob) -> Option<Value> {
    let storage = job.spec.storage.as_ref()?;
    let name = job.metadata.name.clone().unwrap_or_default();
    let mode = serde_json::to_value(storage.access_mode).unwrap_or(Value::Null);
    let mut spec = json!({
        "accessModes": [mode],
        "resources": {"requests": {"storage": storage.size.0}},
    });
    if let Some(sc) = &storage.storage_class_name {
        spec["storageClassName"] = sc.clone().into();
    }
    Some(json!({
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": claim_name(&name),
            "namespace": job.metadata.namespace.clone().unwrap_or_default(),
            "labels": label_map(job),
        },
        "spec": spec,
    }))
}

/// The GryviaAIJob controller's policy.
#[derive(Clone, Debug, Default)]
pub struct AIJobReconciler;

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
        let mut plan = Plan::new();
        let generation = job.metadata.generation;
        let name = job.metadata.name.clone().unwrap_or_default();
        let current = job.status.clone().unwrap_or_default();
        let mut status = current.clone();
        status.observed_generation = generation;
        let terminal = current.phase.is_some_and(JobPhase::is_finished);

        if terminal {
            // Finished: nothing is re-created (the Job may be gone after its TTL); the record
            // stays as it is.
            plan.set_status_if_changed(job.status.as_ref(), status);
            return plan;
        }

        if let Some(msg) = invalid_spec(job) {
            set(
                &mut status,
                conditions::READY,
                Status::False,
                conditions::REASON_INVALID_SPEC,
                msg.clone(),
                generation,
                now,
            );
            finish(
                &mut status,
                JobPhase::Failed,
                conditions::REASON_INVALID_SPEC,
                &msg,
                now,
                generation,
                now,
            );
            plan.event(EventType::Warning, conditions::REASON_INVALID_SPEC, msg);
            plan.set_status_if_changed(job.status.as_ref(), status);
            return plan;
        }

        if let Some(observed) = &world.job
            && !observed.owned
        {
            let msg = format!(
                "a batch Job named {name} exists in this namespace and does not belong to this GryviaAIJob; delete it or rename the job"
            );
            set(
                &mut status,
                SCHEDULED,
                Status::False,
                "JobConflict",
                msg.clone(),
                generation,
                now,
            );
            status.phase = Some(JobPhase::Pending);
            status.message = Some(msg);
            plan.requeue(RESYNC);
            emit_transitions(&mut plan, &current, &status);
            plan.set_status_if_changed(job.status.as_ref(), status);
            return plan;
        }

        let priority_class = job
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(labels::PRIORITY_CLASS))
            .cloned();
        if let Some(pc) = &priority_class
            && world.job.is_none()
            && !world.priority_class_exists
        {
            let msg = format!(
                "annotation {}: PriorityClass {pc:?} does not exist (create a GryviaPriority of that name)",
                labels::PRIORITY_CLASS
            );
            set(
                &mut status,
                SCHEDULED,
                Status::False,
                "PriorityClassNotFound",
                msg.clone(),
                generation,
                now,
            );
            status.phase = Some(JobPhase::Pending);
            status.message = Some(msg);
            plan.requeue(Duration::from_secs(10));
            emit_transitions(&mut plan, &current, &status);
            plan.set_status_if_changed(job.status.as_ref(), status);
            return plan;
        }
        status.priority_class_name = priority_class.clone();

        if world.job.is_none() && current.job_name.is_some() {
            let msg = format!(
                "the batch Job {name} was deleted before it finished; submit the job again to rerun it"
            );
            finish(
                &mut status,
                JobPhase::Failed,
                "JobDeleted",
                &msg,
                now,
                generation,
                now,
            );
            emit_transitions(&mut plan, &current, &status);
            plan.set_status_if_changed(job.status.as_ref(), status);
            return plan;
        }

        // Failures and the backoff limit that keeps infrastructure failures free.
        let failures = merge_failures(&current.failures, world);
        let app = failures
            .iter()
            .filter(|f| f.class == FailureClass::Application)
            .count();
        let infra = failures.len() - app;
        status.retries = count(app).min(job.spec.retry_limit);
        status.infrastructure_failures = count(infra);
        let mut avoided: BTreeSet<String> = current.avoided_nodes.iter().cloned().collect();
        for f in failures
            .iter()
            .filter(|f| f.class == FailureClass::Infrastructure)
        {
            if let Some(n) = &f.node
                && world.nodes.get(n).is_none_or(|o| o.quarantined.is_some())
            {
                avoided.insert(n.clone());
            }
        }
        status.avoided_nodes = avoided.into_iter().collect();
        let before: BTreeMap<&str, FailureClass> = current
            .failures
            .iter()
            .map(|f| (f.pod.as_str(), f.class))
            .collect();
        for f in &failures {
            let node = f.node.as_deref().unwrap_or("-");
            match (before.get(f.pod.as_str()), f.class) {
                (None, FailureClass::Application) => {
                    plan.event(
                        EventType::Warning,
                        "PodFailed",
                        format!(
                            "pod {} failed on node {node} ({}); retry {} of {}",
                            f.pod, f.reason, status.retries, job.spec.retry_limit
                        ),
                    );
                }
                (None, FailureClass::Infrastructure) => {
                    plan.event(
                        EventType::Normal,
                        "InfrastructureFailure",
                        format!(
                            "pod {} on node {node}: {}; its retry does not count against retryLimit",
                            f.pod, f.reason
                        ),
                    );
                }
                (Some(FailureClass::Application), FailureClass::Infrastructure) => {
                    plan.event(
                        EventType::Normal,
                        "InfrastructureFailure",
                        format!(
                            "pod {} failed on node {node}, which is now quarantined; the failure no longer counts against retryLimit",
                            f.pod
                        ),
                    );
                }
                _ => {}
            }
        }
        status.failures = failures;
        let limit = backoff_limit(job.spec.retry_limit, &status.failures);

        // Children.
        match Child::from_json(render_job(job, limit, priority_class.as_deref())) {
            Ok(c) => {
                plan.apply_child(c);
            }
            Err(e) => {
                plan.event(EventType::Warning, "RenderFailed", e.to_string());
            }
        }
        if job.spec.replicas > 1
            && let Ok(c) = Child::from_json(render_service(job))
        {
            plan.apply_child(c);
        }
        if let Some(claim) = render_claim(job)
            && let Ok(c) = Child::from_json(claim)
        {
            plan.apply_child(c);
        }
        status.job_name = Some(name.clone());

        // Where the job stands.
        let replicas = job.spec.replicas;
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
            Some(observed) => {
                status.active = observed.active;
                status.succeeded = observed.succeeded;
                // The first worker's start (a node's kubelet took it), not the batch Job's:
                // a job whose pods wait for a node has not started.
                if status.start_time.is_none()
                    && let Some(t) = world.pods.iter().filter_map(|p| p.start_time).min()
                {
                    status.start_time = Some(Time(t));
                }
                if observed.complete {
                    let msg = format!("{} of {replicas} workers succeeded", observed.succeeded);
                    let at = observed.finish_time.unwrap_or(now);
                    finish(
                        &mut status,
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
                            "{} failed pods used up retryLimit {} ({message})",
                            app, job.spec.retry_limit
                        ),
                        _ => message.clone(),
                    };
                    let at = observed.finish_time.unwrap_or(now);
                    finish(
                        &mut status,
                        JobPhase::Failed,
                        reason,
                        &msg,
                        at,
                        generation,
                        now,
                    );
                } else {
                    let live: Vec<&ObservedPod> = world
                        .pods
                        .iter()
                        .filter(|p| {
                            !p.deleting && matches!(p.phase.as_str(), "Pending" | "Running")
                        })
                        .collect();
                    let bound = count(live.iter().filter(|p| p.node.is_some()).count());
                    let running = live.iter().filter(|p| p.phase == "Running").count();
                    let unschedulable = live.iter().find_map(|p| p.unschedulable.clone());
                    // Between attempts (no live pod) the condition keeps its last word.
                    if let Some(why) = &unschedulable {
                        set(
                            &mut status,
                            SCHEDULED,
                            Status::False,
                            "Unschedulable",
                            why.clone(),
                            generation,
                            now,
                        );
                    } else if !live.is_empty() && bound == count(live.len()) {
                        set(
                            &mut status,
                            SCHEDULED,
                            Status::True,
                            "AllWorkersPlaced",
                            format!("{bound} of {replicas} workers have a node"),
                            generation,
                            now,
                        );
                    } else if !live.is_empty() {
                        set(
                            &mut status,
                            SCHEDULED,
                            Status::False,
                            "Pending",
                            format!("{bound} of {} workers have a node", live.len()),
                            generation,
                            now,
                        );
                    }
                    if running > 0 {
                        set(
                            &mut status,
                            RUNNING,
                            Status::True,
                            "WorkersRunning",
                            format!("{running} of {replicas} workers running"),
                            generation,
                            now,
                        );
                        status.phase = Some(JobPhase::Running);
                        status.message = Some(format!(
                            "{running} of {replicas} workers running, {} succeeded",
                            observed.succeeded
                        ));
                    } else if !live.is_empty() && conditions::is_true(&status.conditions, SCHEDULED)
                    {
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
                    plan.requeue(RESYNC);
                }
            }
        }
        if !status.phase.is_some_and(JobPhase::is_finished) {
            set(
                &mut status,
                conditions::READY,
                Status::True,
                conditions::REASON_RECONCILED,
                format!("batch Job {name} is in place"),
                generation,
                now,
            );
        } else {
            set(
                &mut status,
                conditions::READY,
                Status::True,
                conditions::REASON_RECONCILED,
                "finished",
                generation,
                now,
            );
        }
        emit_transitions(&mut plan, &current, &status);
        plan.set_status_if_changed(job.status.as_ref(), status);
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
pub fn capacity(nodes: &[Node], pods: &[Pod]) -> Vec<NodeCapacity> {
    let used = crate::tenancy::gpus_by_node(pods);
    let mut out: Vec<NodeCapacity> = nodes
        .iter()
        .filter_map(|n| {
            let name = n.metadata.name.clone().unwrap_or_default();
            let allocatable = crate::tenancy::node_gpus(n);
            if allocatable == 0 {
                return None;
            }
            let spec = n.spec.clone().unwrap_or_default();
            let taints = spec.taints.unwrap_or_default();
            let unavailable =
                if let Some(t) = taints.iter().find(|t| t.key == labels::GPU_UNHEALTHY_TAINT) {
                    Some(format!(
                        "quarantined ({})",
                        t.value.clone().unwrap_or_default()
                    ))
                } else if spec.unschedulable.unwrap_or(false) {
                    Some("cordoned".to_owned())
                } else {
                    taints
                        .iter()
                        .find(|t| t.key == labels::RESERVED_TAINT)
                        .map(|t| format!("reserved ({})", t.value.clone().unwrap_or_default()))
                };
            let u = used.get(&name).copied().unwrap_or(0);
            Some(NodeCapacity {
                gpu_type: n
                    .metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(labels::NVIDIA_GPU_PRODUCT))
                    .cloned()
                    .unwrap_or_else(|| "unknown".to_owned()),
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
        .filter(|p| p.spec.as_ref().is_some_and(|s| s.node_name.is_some()))
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
