//! AI jobs, job templates and job hooks.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{EnvVar, Toleration};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

// ---------------------------------------------------------------------------------------------
// GryviaAIJob
// ---------------------------------------------------------------------------------------------

/// A GPU training, fine-tuning, evaluation or batch-inference job.
///
/// The ai-operator turns it into a batch Job (Indexed for several workers) whose pods request
/// `nvidia.com/gpu`, retries failed pods up to `retryLimit`, and reports phases and conditions.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "gryvia.io",
    version = "v1alpha1",
    kind = "GryviaAIJob",
    namespaced,
    status = "GryviaAIJobStatus",
    shortname = "gaj",
    category = "gryvia",
    validation = Rule::new("size(self.metadata.name) <= 52").message("metadata.name: a job name has at most 52 characters (its pods are named <job>-<index>-<suffix>)"),
    validation = Rule::new("self.spec == oldSelf.spec").message("spec is immutable: delete the job and submit it again"),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(name = "GPUs", type_ = "integer", json_path = ".spec.gpus"),
    printcolumn(name = "Workers", type_ = "integer", json_path = ".spec.replicas"),
    printcolumn(name = "Priority", type_ = "integer", json_path = ".spec.priority"),
    printcolumn(name = "Retries", type_ = "integer", json_path = ".status.retries"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[x_kube(validation = Rule::new("!has(self.gpuType) || self.gpus > 0").message("spec.gpuType requires spec.gpus > 0"))]
#[x_kube(validation = Rule::new("!has(self.gpuFraction) || self.gpuFraction == 0.5 || self.gpuFraction == 0.25 || self.gpuFraction == 0.125").message("spec.gpuFraction must be 0.5, 0.25 or 0.125"))]
#[x_kube(validation = Rule::new("!has(self.gpuFraction) || self.gpus == 1").message("spec.gpuFraction asks for part of one GPU: spec.gpus must be 1"))]
#[x_kube(validation = Rule::new("self.volumeMounts.all(m, self.volumes.exists(v, v.name == m.name))").message("spec.volumeMounts: every mount must name a volume in spec.volumes"))]
#[serde(rename_all = "camelCase")]
pub struct GryviaAIJobSpec {
    /// Container image of every worker.
    #[schemars(length(min = 1, max = 1024))]
    pub image: String,
    /// Entrypoint (the image's when empty).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 256))]
    pub command: Vec<String>,
    /// Arguments to the entrypoint.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 256))]
    pub args: Vec<String>,
    /// Environment variables of every worker.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 256))]
    pub env: Vec<EnvVar>,
    /// GPUs per worker (`nvidia.com/gpu`).
    #[serde(default = "default_gpus")]
    #[schemars(range(min = 0, max = 64))]
    pub gpus: i32,
    /// GPU product the workers need; matched against the node label `nvidia.com/gpu.product`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 128))]
    pub gpu_type: Option<String>,
    /// Part of one GPU per worker: 0.5, 0.25 or 0.125 (with `gpus: 1`). The native queue
    /// counts the fraction against quota and places the worker on a shared GPU: a MIG
    /// slice of that size (`nvidia.com/mig-<profile>`) or time-slicing replicas
    /// (`nvidia.com/gpu.shared`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_fraction: Option<f64>,
    /// Number of workers. More than one makes an Indexed Job with a headless Service, and
    /// every worker gets its rank, the world size and the master address in its environment.
    #[serde(default = "default_replicas")]
    #[schemars(range(min = 1, max = 1024))]
    pub replicas: i32,
    /// Training framework; selects the distributed-training environment that is injected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub framework: Option<Framework>,
    /// What the job does: its pods and usage records are labelled `gryvia.io/job-type`, so
    /// usage, invoices and dashboards can be grouped by it. Nothing else depends on it.
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub type_: Option<JobType>,
    /// Priority from 0 (lowest) to 100 (highest); orders the native queue and Kueue workloads.
    #[serde(default = "default_priority")]
    #[schemars(range(min = 0, max = 100))]
    pub priority: i32,
    /// Failed pods retried before the job fails (the batch Job's backoffLimit). Failures caused
    /// by the infrastructure (a quarantined node, a failed GPU) do not count.
    #[serde(default = "default_retry_limit")]
    #[schemars(range(min = 0, max = 100))]
    pub retry_limit: i32,
    /// CPU request of each worker.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<Quantity>,
    /// Memory request of each worker.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<Quantity>,
    /// Volumes the workers can mount.
    #[serde(default)]
    #[schemars(length(max = 32))]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub volumes: Vec<JobVolume>,
    /// Where the volumes are mounted in every worker.
    #[serde(default)]
    #[schemars(length(max = 32))]
    pub volume_mounts: Vec<JobVolumeMount>,
    /// A PersistentVolumeClaim created for the job and mounted at `/data`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage: Option<JobStorage>,
    /// Extra node labels the workers require.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,
    /// Taints the workers tolerate (a reservation's toleration is added by the admission
    /// webhook).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub tolerations: Vec<Toleration>,
    /// Labels of every worker pod.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub pod_labels: BTreeMap<String, String>,
    /// Annotations of every worker pod.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub pod_annotations: BTreeMap<String, String>,
    /// Seconds a preempted job's workers get between the preemption notice (the
    /// `Preempted` condition, the `gryvia.io/preemption-notice` pod annotation and SIGTERM)
    /// and their end, to write a checkpoint.
    #[serde(
        default = "default_preemption_grace",
        skip_serializing_if = "is_default_preemption_grace"
    )]
    #[schemars(range(min = 0, max = 3600))]
    pub preemption_grace_period_seconds: i64,
    /// Seconds the job may run before it is stopped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub active_deadline_seconds: Option<i64>,
    /// Seconds after finishing before the job's pods are cleaned up.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub ttl_seconds_after_finished: Option<i32>,
    /// The GryviaTemplate this job was rendered from, with the parameters used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template_ref: Option<TemplateRef>,
}

fn default_gpus() -> i32 {
    1
}
fn default_replicas() -> i32 {
    1
}
fn default_priority() -> i32 {
    50
}
fn default_retry_limit() -> i32 {
    3
}
fn default_preemption_grace() -> i64 {
    30
}
#[expect(
    clippy::trivially_copy_pass_by_ref,
    reason = "serde's skip_serializing_if signature"
)]
fn is_default_preemption_grace(v: &i64) -> bool {
    *v == default_preemption_grace()
}

/// Training framework.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Framework {
    /// PyTorch (torchrun / torch.distributed).
    Pytorch,
    /// TensorFlow (TF_CONFIG).
    Tensorflow,
    /// JAX.
    Jax,
    /// DeepSpeed.
    Deepspeed,
    /// MPI (Horovod and friends).
    Mpi,
    /// Anything else; only generic rank variables are injected.
    Custom,
}

/// What a job does.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum JobType {
    /// Training from scratch.
    Training,
    /// Fine-tuning a pretrained model.
    FineTuning,
    /// Evaluating a model.
    Evaluation,
    /// Offline batch inference.
    BatchInference,
}

impl JobType {
    /// The name as the schema writes it (the value of the `gryvia.io/job-type` label).
    pub fn as_str(self) -> &'static str {
        match self {
            JobType::Training => "training",
            JobType::FineTuning => "fine-tuning",
            JobType::Evaluation => "evaluation",
            JobType::BatchInference => "batch-inference",
        }
    }
}

/// A volume of a job: exactly one source.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[x_kube(validation = Rule::new("(has(self.persistentVolumeClaim) ? 1 : 0) + (has(self.configMap) ? 1 : 0) + (has(self.secret) ? 1 : 0) + (has(self.emptyDir) ? 1 : 0) + (has(self.hostPath) ? 1 : 0) == 1").message("a volume must have exactly one of persistentVolumeClaim, configMap, secret, emptyDir, hostPath"))]
#[serde(rename_all = "camelCase")]
pub struct JobVolume {
    /// Volume name, referenced by `volumeMounts[].name`.
    #[schemars(
        regex(pattern = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"),
        length(max = 63)
    )]
    pub name: String,
    /// An existing PersistentVolumeClaim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub persistent_volume_claim: Option<PvcSource>,
    /// A ConfigMap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map: Option<NamedSource>,
    /// A Secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<NamedSource>,
    /// Scratch space that lives as long as the pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub empty_dir: Option<EmptyDirSource>,
    /// A directory of the node (admins only; usually forbidden by pod security).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_path: Option<HostPathSource>,
}

/// Where a volume is mounted in every worker.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct JobVolumeMount {
    /// Name of the volume in `spec.volumes`.
    #[schemars(length(min = 1, max = 63))]
    pub name: String,
    /// Absolute path in the container.
    #[schemars(regex(pattern = r"^/"), length(max = 1024))]
    pub mount_path: String,
    /// Path inside the volume to mount instead of its root.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub sub_path: Option<String>,
    /// Mount read-only.
    #[serde(default)]
    pub read_only: bool,
}

/// A PersistentVolumeClaim volume.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PvcSource {
    /// Name of the claim in the job's namespace.
    #[schemars(length(min = 1, max = 253))]
    pub claim_name: String,
    /// Mount read-only.
    #[serde(default)]
    pub read_only: bool,
}

/// A ConfigMap or Secret volume.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NamedSource {
    /// Name of the ConfigMap or Secret.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
}

/// An emptyDir volume.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EmptyDirSource {
    /// `Memory` for a tmpfs (shared memory for data loaders), empty for node disk.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub medium: Option<String>,
    /// Size limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size_limit: Option<Quantity>,
}

/// A hostPath volume.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HostPathSource {
    /// Absolute path on the node.
    #[schemars(regex(pattern = r"^/"))]
    pub path: String,
}

/// A claim created for the job and mounted at `/data`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct JobStorage {
    /// Requested size.
    pub size: Quantity,
    /// StorageClass (the cluster default when empty).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_class_name: Option<String>,
    /// Access mode; use ReadWriteMany for several workers on several nodes.
    #[serde(default)]
    pub access_mode: AccessMode,
}

/// PersistentVolume access mode.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum AccessMode {
    /// One node reads and writes.
    #[default]
    ReadWriteOnce,
    /// Many nodes read and write.
    ReadWriteMany,
    /// Many nodes read.
    ReadOnlyMany,
}

/// Reference to the template a job was rendered from.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TemplateRef {
    /// Name of the GryviaTemplate.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// Parameter values used, as text.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub parameters: BTreeMap<String, String>,
}

/// Observed state of an AI job.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GryviaAIJobStatus {
    /// Generation of the spec last acted on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Where the job stands.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<JobPhase>,
    /// Failed pods that used up a retry.
    #[serde(default)]
    pub retries: i32,
    /// Failed pods blamed on the infrastructure (not counted against `retryLimit`).
    #[serde(default)]
    pub infrastructure_failures: i32,
    /// Nodes the job avoids after an infrastructure failure there.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub avoided_nodes: Vec<String>,
    /// The failed pods, oldest first (at most 50), each classified.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failures: Vec<PodFailure>,
    /// PriorityClass of the workers (from the `gryvia.io/priority-class` annotation).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_class_name: Option<String>,
    /// Name of the batch Job that runs the workers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_name: Option<String>,
    /// Workers running.
    #[serde(default)]
    pub active: i32,
    /// Workers finished successfully.
    #[serde(default)]
    pub succeeded: i32,
    /// When the first worker started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
    /// When the job finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<Time>,
    /// Human-readable summary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Conditions: Scheduled, Running, Succeeded, Failed (and Ready=False/InvalidSpec).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// The native queue's admission of the job: where its workers run and what it is charged
    /// (written by the queue scheduler only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admission: Option<JobAdmission>,
    /// Where the job waits in its queue and why (written by the queue scheduler only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<QueueStanding>,
    /// The preemption under way (written by the queue scheduler only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preemption: Option<PreemptionNotice>,
    /// With the Kueue integration: what Kueue decided about the job's Workload.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kueue: Option<KueueStanding>,
}

/// A job admitted by the native queue scheduler.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct JobAdmission {
    /// The GryviaQueue that admitted it.
    pub queue: String,
    /// The queue's quota entry it is charged to (`spec.resources[].gpuType`, maybe `*`).
    pub gpu_type: String,
    /// The GPU product its workers run on (`nvidia.com/gpu.product`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub product: Option<String>,
    /// The extended resource each worker requests: `nvidia.com/gpu`, `nvidia.com/gpu.shared`
    /// or a MIG profile such as `nvidia.com/mig-3g.40gb`.
    pub resource: String,
    /// How many of `resource` each worker requests.
    pub per_worker: i32,
    /// Quota charged, in thousandths of a GPU.
    pub milli_gpus: i64,
    /// The node of each worker, as planned (the workers may only run on these nodes).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nodes: Vec<String>,
    /// Part of the charge borrowed from the cohort, in thousandths of a GPU.
    #[serde(default)]
    pub borrowed_milli_gpus: i64,
    /// Part of the charge over the queue's quota, allowed by the job's tier
    /// (`quotaOverride.percent` of the entry's nominal), in thousandths of a GPU.
    #[serde(default, skip_serializing_if = "no_milli")]
    pub over_quota_milli_gpus: i64,
    /// When it was admitted.
    pub admitted_at: Time,
}

fn no_milli(n: &i64) -> bool {
    *n == 0
}

/// Where a job waits in its queue.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct QueueStanding {
    /// The GryviaQueue.
    pub queue: String,
    /// Position among the queue's pending jobs, from 1.
    pub position: i32,
    /// Why it is not admitted, in numbers.
    pub reason: String,
    /// When it is expected to start (absent when that cannot be known: a running job without
    /// `activeDeadlineSeconds` holds what it needs, or it can never fit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_start: Option<Time>,
}

/// Where a job stands in Kueue (the Kueue integration): its Workload's admission, read from
/// the Workload's conditions.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KueueStanding {
    /// The LocalQueue the job was submitted to.
    pub local_queue: String,
    /// Kueue's Workload of the batch Job (absent until Kueue made it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workload: Option<String>,
    /// The ClusterQueue that admitted it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_queue: Option<String>,
    /// `Pending` (no quota yet), `QuotaReserved`, `Admitted`, `Evicted` (preempted or
    /// withdrawn, requeued) or `Finished`.
    pub state: String,
    /// Kueue's reason for that state (for example `Pending`, `Preempted`, `InCohortReclamation`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Kueue's message (why it waits: quota short by how much, in which flavor).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The flavors it was admitted to (ResourceFlavor names).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub flavors: Vec<String>,
    /// Times Kueue evicted it so far (each a requeue that cost no retry).
    #[serde(default)]
    pub evictions: i32,
}

/// A preemption notice: the job's workers are stopped after `graceSeconds`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PreemptionNotice {
    /// The job it makes room for (`namespace/name`).
    pub by: String,
    /// Why: `WithinQueue` (a higher-priority job of the same queue) or `Reclaim` (the
    /// cohort queue that lent the GPUs takes them back).
    pub reason: String,
    /// When the notice was given.
    pub notice_at: Time,
    /// Seconds the workers have to write a checkpoint.
    pub grace_seconds: i64,
}

/// A failed pod of a job and what the controller made of it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodFailure {
    /// Pod name.
    pub pod: String,
    /// Node it ran on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// `Application` (uses a retry) or `Infrastructure` (does not).
    pub class: FailureClass,
    /// Why, in one line (the pod's reason, the disruption, or the node's state).
    pub reason: String,
    /// Exit code of the first failed container, when one exited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
}

/// Who is to blame for a failed pod.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum FailureClass {
    /// The workload failed; counts against `retryLimit`.
    Application,
    /// The node or GPU failed, or the pod was evicted or preempted; does not count.
    Infrastructure,
}

/// Phase of an AI job.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum JobPhase {
    /// Accepted, not yet placed.
    Pending,
    /// Every worker has a node.
    Scheduled,
    /// Workers are running.
    Running,
    /// Every worker finished successfully.
    Succeeded,
    /// The job failed (retries used up, deadline passed or invalid spec).
    Failed,
}

impl JobPhase {
    /// Succeeded or Failed: nothing more happens.
    pub fn is_finished(self) -> bool {
        matches!(self, JobPhase::Succeeded | JobPhase::Failed)
    }
}

// ---------------------------------------------------------------------------------------------
// GryviaTemplate
// ---------------------------------------------------------------------------------------------

/// A reusable, parameterised job: `defaults` has the shape of a GryviaAIJob spec, and
/// `{{ .param }}` placeholders in its strings are filled from typed parameters.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "gryvia.io",
    version = "v1alpha1",
    kind = "GryviaTemplate",
    status = "GryviaTemplateStatus",
    shortname = "gtpl",
    category = "gryvia",
    printcolumn(name = "Category", type_ = "string", json_path = ".spec.category"),
    printcolumn(
        name = "Valid",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Valid\")].status"
    ),
    printcolumn(
        name = "Jobs",
        type_ = "integer",
        json_path = ".status.instantiatedJobs"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct GryviaTemplateSpec {
    /// What the template is for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Kind of work.
    pub category: TemplateCategory,
    /// Values of the rendered job's spec; strings may hold `{{ .name }}` placeholders.
    pub defaults: TemplateDefaults,
    /// Typed parameters that fill the placeholders.
    #[serde(default)]
    #[schemars(length(max = 64))]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub parameters: Vec<TemplateParameter>,
}

/// Kind of work a template describes.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum TemplateCategory {
    /// Training.
    Training,
    /// Fine-tuning.
    FineTuning,
    /// Evaluation.
    Evaluation,
    /// Batch inference.
    Inference,
    /// Data preparation.
    DataProcessing,
    /// Anything else.
    Custom,
}

/// Template defaults: the fields of a GryviaAIJob spec, every one optional.
///
/// `resources.gpuType` / `resources.gpuCount` is the older form that the features guide's
/// example uses; it is accepted and means the same as `gpuType` / `gpus` (setting both forms
/// of one value is rejected).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[x_kube(validation = Rule::new("!has(self.resources) || !has(self.resources.gpuCount) || !has(self.gpus)").message("defaults: set gpus or resources.gpuCount, not both"))]
#[x_kube(validation = Rule::new("!has(self.resources) || !has(self.resources.gpuType) || !has(self.gpuType)").message("defaults: set gpuType or resources.gpuType, not both"))]
#[serde(rename_all = "camelCase")]
pub struct TemplateDefaults {
    /// See GryviaAIJob `spec.image`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// See GryviaAIJob `spec.command`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<Vec<String>>,
    /// See GryviaAIJob `spec.args`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub args: Option<Vec<String>>,
    /// See GryviaAIJob `spec.env`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<Vec<EnvVar>>,
    /// See GryviaAIJob `spec.gpus`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 64))]
    pub gpus: Option<i32>,
    /// See GryviaAIJob `spec.gpuType`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_type: Option<String>,
    /// See GryviaAIJob `spec.gpuFraction`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_fraction: Option<f64>,
    /// See GryviaAIJob `spec.preemptionGracePeriodSeconds`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 3600))]
    pub preemption_grace_period_seconds: Option<i64>,
    /// See GryviaAIJob `spec.replicas`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1024))]
    pub replicas: Option<i32>,
    /// See GryviaAIJob `spec.framework`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub framework: Option<Framework>,
    /// See GryviaAIJob `spec.type`.
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub type_: Option<JobType>,
    /// See GryviaAIJob `spec.priority`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 100))]
    pub priority: Option<i32>,
    /// See GryviaAIJob `spec.retryLimit`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 100))]
    pub retry_limit: Option<i32>,
    /// See GryviaAIJob `spec.cpu`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<Quantity>,
    /// See GryviaAIJob `spec.memory`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<Quantity>,
    /// See GryviaAIJob `spec.volumes`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volumes: Option<Vec<JobVolume>>,
    /// See GryviaAIJob `spec.volumeMounts`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_mounts: Option<Vec<JobVolumeMount>>,
    /// See GryviaAIJob `spec.storage`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage: Option<JobStorage>,
    /// See GryviaAIJob `spec.nodeSelector`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<BTreeMap<String, String>>,
    /// See GryviaAIJob `spec.tolerations`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 32))]
    pub tolerations: Option<Vec<Toleration>>,
    /// See GryviaAIJob `spec.podLabels`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_labels: Option<BTreeMap<String, String>>,
    /// See GryviaAIJob `spec.podAnnotations`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_annotations: Option<BTreeMap<String, String>>,
    /// See GryviaAIJob `spec.activeDeadlineSeconds`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub active_deadline_seconds: Option<i64>,
    /// See GryviaAIJob `spec.ttlSecondsAfterFinished`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub ttl_seconds_after_finished: Option<i32>,
    /// Older form of `gpuType` / `gpus` (kept so existing templates stay valid).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<LegacyResources>,
}

/// The older `resources` block of template defaults.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LegacyResources {
    /// Same as `gpuType`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_type: Option<String>,
    /// Same as `gpus`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 64))]
    pub gpu_count: Option<i32>,
}

/// A typed template parameter.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[x_kube(validation = Rule::new("!has(self.validation) || !has(self.validation.min) || !has(self.validation.max) || self.validation.min <= self.validation.max").message("parameter validation.min must not exceed validation.max"))]
#[x_kube(validation = Rule::new("!(self.required && has(self.default))").message("a required parameter must not have a default"))]
#[serde(rename_all = "camelCase")]
pub struct TemplateParameter {
    /// Name used in placeholders: `{{ .name }}`.
    #[schemars(regex(pattern = r"^[A-Za-z_][A-Za-z0-9_]{0,62}$"), length(max = 63))]
    pub name: String,
    /// Value type.
    #[serde(default, rename = "type")]
    pub type_: ParameterType,
    /// Whether a value must be given.
    #[serde(default)]
    pub required: bool,
    /// Value used when none is given, as text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<String>,
    /// What the parameter means.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Constraints on the value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub validation: Option<ParameterValidation>,
}

/// Type of a template parameter.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ParameterType {
    /// Text.
    #[default]
    String,
    /// Whole number.
    Integer,
    /// Decimal number.
    Number,
    /// `true` or `false`.
    Boolean,
}

/// Constraints on a parameter value.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ParameterValidation {
    /// Smallest allowed number.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min: Option<f64>,
    /// Largest allowed number.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<f64>,
    /// Regular expression a string must match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pattern: Option<String>,
    /// Allowed values.
    #[serde(default, rename = "enum", skip_serializing_if = "Vec::is_empty")]
    pub allowed: Vec<String>,
}

/// Observed state of a template.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GryviaTemplateStatus {
    /// Generation of the spec last validated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Jobs labelled `gryvia.io/template: <name>`.
    #[serde(default)]
    pub instantiated_jobs: i32,
    /// Conditions (`Valid`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

// ---------------------------------------------------------------------------------------------
// GryviaJobHook
// ---------------------------------------------------------------------------------------------

/// A signed webhook called when matching AI jobs or workflows reach a phase.
///
/// The body is JSON; the `X-Gryvia-Signature` header carries `sha256=<hex HMAC>` of the body
/// with the key from `secretRef`. Delivery is at least once: a failed POST is retried with
/// backoff up to `maxAttempts`.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "gryvia.io",
    version = "v1alpha1",
    kind = "GryviaJobHook",
    namespaced,
    status = "GryviaJobHookStatus",
    shortname = "gjh",
    category = "gryvia",
    printcolumn(name = "URL", type_ = "string", json_path = ".spec.url"),
    printcolumn(name = "Delivered", type_ = "integer", json_path = ".status.delivered"),
    printcolumn(name = "Failed", type_ = "integer", json_path = ".status.failed"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[x_kube(validation = Rule::new("self.url.startsWith('https://') || self.allowInsecure").message("spec.url must be https:// unless spec.allowInsecure is true"))]
#[serde(rename_all = "camelCase")]
pub struct GryviaJobHookSpec {
    /// Phases that trigger the hook.
    #[schemars(length(min = 1, max = 4))]
    pub events: Vec<HookEvent>,
    /// Which jobs and workflows in the namespace the hook watches.
    #[serde(default)]
    pub selector: HookSelector,
    /// Where to POST.
    #[schemars(regex(pattern = r"^https?://[^\s]+$"), length(max = 2048))]
    pub url: String,
    /// Allow a plain `http://` URL (for in-cluster receivers).
    #[serde(default)]
    pub allow_insecure: bool,
    /// Secret holding the HMAC key.
    pub secret_ref: SecretKeyRef,
    /// Seconds to wait for the receiver.
    #[serde(default = "default_hook_timeout")]
    #[schemars(range(min = 1, max = 60))]
    pub timeout_seconds: i32,
    /// Attempts before a delivery is given up.
    #[serde(default = "default_hook_attempts")]
    #[schemars(range(min = 1, max = 20))]
    pub max_attempts: i32,
}

fn default_hook_timeout() -> i32 {
    10
}
fn default_hook_attempts() -> i32 {
    5
}

/// Phase change that triggers a hook.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, JsonSchema,
)]
pub enum HookEvent {
    /// The job started running.
    Started,
    /// The job succeeded.
    Succeeded,
    /// The job failed.
    Failed,
    /// A failed pod was retried.
    Retried,
}

/// Which objects a hook watches.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HookSelector {
    /// Only these names (all when empty).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub names: Vec<String>,
    /// Only objects with these labels.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub match_labels: BTreeMap<String, String>,
    /// Include GryviaWorkflows as well as GryviaAIJobs.
    #[serde(default)]
    pub include_workflows: bool,
}

/// A key in a Secret of the same namespace.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecretKeyRef {
    /// Secret name.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// Key in the Secret.
    #[serde(default = "default_secret_key")]
    pub key: String,
}

fn default_secret_key() -> String {
    "secret".to_owned()
}

/// Deliveries of a hook.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GryviaJobHookStatus {
    /// Deliveries that got a 2xx answer.
    #[serde(default)]
    pub delivered: i64,
    /// Deliveries given up after `maxAttempts`.
    #[serde(default)]
    pub failed: i64,
    /// Recent and pending deliveries (at most 100, oldest dropped first once delivered).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deliveries: Vec<HookDelivery>,
    /// What the hook has seen of each watched object that may still raise an event: objects
    /// not finished yet, and those that finished after `handledUntil`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tracked: Vec<HookTracked>,
    /// Every object that finished at or before this time has had its events raised (the
    /// hook's creation at first; it trails the controller's clock by a few minutes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handled_until: Option<Time>,
    /// Conditions: `Ready` (False with `SecretMissing` while the signing key cannot be read).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// What a hook has seen of one watched object.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HookTracked {
    /// UID of the object.
    pub uid: String,
    /// Its start was seen.
    #[serde(default, skip_serializing_if = "is_false")]
    pub started: bool,
    /// Retries seen.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub retries: i32,
    /// Its end (success or failure) was seen.
    #[serde(default, skip_serializing_if = "is_false")]
    pub finished: bool,
}

// One record per watched job: unset fields are left out to keep the status small.
fn is_false(b: &bool) -> bool {
    !b
}
fn is_zero(n: &i32) -> bool {
    *n == 0
}

/// One delivery of a hook.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HookDelivery {
    /// Unique id, sent as `X-Gryvia-Delivery` so receivers can drop duplicates.
    pub id: String,
    /// Kind of the object (`GryviaAIJob` or `GryviaWorkflow`).
    pub kind: String,
    /// Name of the object.
    pub name: String,
    /// UID of the object.
    #[serde(default)]
    pub uid: String,
    /// The event.
    pub event: HookEvent,
    /// Which retry, for `Retried` (1 for the first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<i32>,
    /// When the event happened, when the object says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time: Option<Time>,
    /// Attempts so far.
    pub attempts: i32,
    /// When the last attempt was made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_attempt: Option<Time>,
    /// HTTP status of the last attempt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_code: Option<i32>,
    /// Why the last attempt failed (no answer, or the answer's status).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// `Pending`, `Delivered` or `GaveUp`.
    pub state: DeliveryState,
}

/// State of a delivery.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum DeliveryState {
    /// Not yet delivered; will be retried.
    Pending,
    /// Answered with 2xx.
    Delivered,
    /// `maxAttempts` used up.
    GaveUp,
}
