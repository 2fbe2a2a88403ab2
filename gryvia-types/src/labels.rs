//! Labels, annotations, taints and finalizers Gryvia puts on Kubernetes objects.
//!
//! One place for every string key, so that controllers, webhooks, the CLI and tests agree.

/// Label or annotation on a job naming the GryviaReservation it runs in.
pub const RESERVATION: &str = "gryvia.io/reservation";
/// Annotation on a job naming the GryviaPriority (PriorityClass) its pods get.
pub const PRIORITY_CLASS: &str = "gryvia.io/priority-class";
/// Label on a job naming the GryviaTemplate it was rendered from.
pub const TEMPLATE: &str = "gryvia.io/template";
/// Taint key of a node quarantined because of unhealthy GPUs.
pub const GPU_UNHEALTHY_TAINT: &str = "gryvia.io/gpu-unhealthy";
/// Taint key (and label key) of a node held by a GryviaReservation.
pub const RESERVED_TAINT: &str = "gryvia.io/reserved";
/// Label on every object a Gryvia controller creates.
pub const MANAGED_BY: &str = "app.kubernetes.io/managed-by";
/// Value of [`MANAGED_BY`] on Gryvia's objects.
pub const MANAGED_BY_VALUE: &str = "gryvia";
/// Label on a tenant's namespace and children naming the tenant.
pub const TENANT: &str = "gryvia.io/tenant";
/// Label on a job's children naming the GryviaAIJob.
pub const JOB_NAME: &str = "gryvia.io/job-name";
/// Label on a workflow step's job naming the GryviaWorkflow.
pub const WORKFLOW: &str = "gryvia.io/workflow";
/// Label on a tuner trial naming the GryviaAutoTuner.
pub const AUTOTUNER: &str = "gryvia.io/autotuner";
/// Label on nodes with the GPU product name (set by NVIDIA GPU feature discovery).
pub const NVIDIA_GPU_PRODUCT: &str = "nvidia.com/gpu.product";
/// Label on nodes with the per-GPU memory in MiB (set by NVIDIA GPU feature discovery).
pub const NVIDIA_GPU_MEMORY: &str = "nvidia.com/gpu.memory";
/// Label on nodes with the GPU count (set by NVIDIA GPU feature discovery).
pub const NVIDIA_GPU_COUNT: &str = "nvidia.com/gpu.count";
/// The extended resource name of NVIDIA GPUs.
pub const NVIDIA_GPU_RESOURCE: &str = "nvidia.com/gpu";
/// Finalizer Gryvia controllers put on objects whose deletion needs cleanup.
pub const FINALIZER: &str = "gryvia.io/cleanup";
/// Annotation on a node in manual maintenance (`gryvia maintenance start`), with the reason.
/// While it is set, no controller uncordons the node.
pub const MAINTENANCE: &str = "gryvia.io/maintenance";
/// Annotation on a node cordoned by `gryvia maintenance start`: the node was schedulable
/// before, so `gryvia maintenance end` uncordons it.
pub const MAINTENANCE_CORDONED: &str = "gryvia.io/maintenance-cordoned";
/// Label on the ResourceQuotas a GryviaQuota makes, naming the GryviaQuota.
pub const QUOTA: &str = "gryvia.io/quota";
/// Annotation on a namespace a deleted GryviaTenant left behind (its `deletionPolicy` kept it
/// because it still held workloads), naming the tenant.
pub const RETAINED_FROM_TENANT: &str = "gryvia.io/retained-from-tenant";
/// Label on a workflow step's GryviaAIJob naming the step.
pub const WORKFLOW_STEP: &str = "gryvia.io/workflow-step";
/// Finalizer that closes the usage record of a deleted GryviaAIJob.
pub const METERING_FINALIZER: &str = "gryvia.io/metering";
/// Pod annotation the Job controller sets to the worker's index in an Indexed Job.
pub const JOB_COMPLETION_INDEX: &str = "batch.kubernetes.io/job-completion-index";
/// Annotation the kubelet puts on a static (mirror) pod.
pub const MIRROR_POD: &str = "kubernetes.io/config.mirror";
/// The quota resource of GPU requests (`requests.` and [`NVIDIA_GPU_RESOURCE`]).
pub const NVIDIA_GPU_REQUESTS: &str = "requests.nvidia.com/gpu";
/// The taint effect Gryvia's quarantine and reservation taints carry.
pub const NO_SCHEDULE: &str = "NoSchedule";
/// Time-slicing replicas: each GPU of the node is advertised as this resource once per
/// replica (NVIDIA device plugin, `renameByDefault`).
pub const NVIDIA_GPU_SHARED_RESOURCE: &str = "nvidia.com/gpu.shared";
/// Time-slicing replicas per GPU (label of GPU feature discovery).
pub const NVIDIA_GPU_REPLICAS: &str = "nvidia.com/gpu.replicas";
/// Prefix of the MIG slice resources (`nvidia.com/mig-3g.40gb`; NVIDIA device plugin, mixed
/// strategy).
pub const NVIDIA_MIG_PREFIX: &str = "nvidia.com/mig-";
/// Pod annotation the queue scheduler sets on a preempted job's workers
/// (`by=<job>; reason=<why>; noticeAt=<RFC 3339>; graceSeconds=<n>`): readable in the pod
/// through the downward API before SIGTERM.
pub const PREEMPTION_NOTICE: &str = "gryvia.io/preemption-notice";
/// Annotation of the batch Job of a job a queue admitted: the admission's time (RFC 3339) and a
/// hash of what the pod template takes from it (`<time>/<hash>`), so a Job made for an earlier
/// admission (or none) is replaced, not patched.
pub const ADMITTED_AT: &str = "gryvia.io/admitted-at";
/// Label on a tenant's jobs, their pods and usage records with the tenant's
/// `governance.dataClassification` (set by the mutating webhook from the tenant, never by the
/// job).
pub const DATA_CLASSIFICATION: &str = "gryvia.io/data-classification";
/// Label on a job's pods and usage records with its `spec.type` (`training`, `fine-tuning`,
/// `evaluation`, `batch-inference`).
pub const JOB_TYPE: &str = "gryvia.io/job-type";
/// Label on a tuner trial's GryviaAIJob with the trial's index in its study.
pub const TRIAL_INDEX: &str = "gryvia.io/trial-index";
/// Annotation on a tuner trial's GryviaAIJob with its parameter values (a JSON object), so a
/// study rebuilds its trials from their jobs.
pub const TRIAL_PARAMETERS: &str = "gryvia.io/trial-parameters";
