//! ML workflows: hyperparameter tuning, DAG workflows, the model registry, inference
//! services and interactive workspaces.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::ai::{GryviaAIJobSpec, JobPhase, TemplateRef};

// ---------------------------------------------------------------------------------------------
// GryviaAutoTuner
// ---------------------------------------------------------------------------------------------

/// A hyperparameter study: trials are GryviaAIJobs made from `trialTemplate` with sampled
/// parameter values, and the objective metric they report picks the best.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "gryvia.io",
    version = "v1alpha1",
    kind = "GryviaAutoTuner",
    namespaced,
    status = "GryviaAutoTunerStatus",
    shortname = "gat",
    category = "gryvia",
    printcolumn(name = "Algorithm", type_ = "string", json_path = ".spec.algorithm"),
    printcolumn(
        name = "Trials",
        type_ = "integer",
        json_path = ".status.completedTrials"
    ),
    printcolumn(name = "Best", type_ = "string", json_path = ".status.bestTrial.name"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[x_kube(validation = Rule::new("self.parallelTrials <= self.maxTrials").message("spec.parallelTrials must not exceed spec.maxTrials"))]
#[serde(rename_all = "camelCase")]
pub struct GryviaAutoTunerSpec {
    /// What is optimised.
    pub objective: Objective,
    /// Search algorithm.
    pub algorithm: TunerAlgorithm,
    /// The search space.
    #[schemars(length(min = 1, max = 32))]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub parameters: Vec<SearchParameter>,
    /// Trials in total.
    #[schemars(range(min = 1, max = 10000))]
    pub max_trials: i32,
    /// Trials running at once.
    #[serde(default = "default_parallel")]
    #[schemars(range(min = 1, max = 1000))]
    pub parallel_trials: i32,
    /// Job of every trial; `{{ .param }}` placeholders in its strings get the sampled values.
    pub trial_template: GryviaAIJobSpec,
    /// Early stopping (ASHA rungs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub early_stopping: Option<EarlyStopping>,
    /// Seed of the sampler, so a study is reproducible.
    #[serde(default)]
    pub seed: i64,
}

fn default_parallel() -> i32 {
    1
}

/// Objective of a study.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Objective {
    /// Metric name the trials report (a line `gryvia-metric <name>=<value>` in the logs, or
    /// the trial's termination message).
    #[schemars(length(min = 1, max = 128))]
    pub metric: String,
    /// Direction.
    pub goal: Goal,
}

/// Direction of optimisation.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Goal {
    /// Larger is better.
    Maximize,
    /// Smaller is better.
    Minimize,
}

/// Search algorithm.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum TunerAlgorithm {
    /// Every combination of the discrete values.
    Grid,
    /// Independent uniform (or log-uniform) samples.
    Random,
    /// Model-based sampling from the results so far.
    Bayesian,
    /// Asynchronous successive halving.
    Asha,
}

/// One dimension of the search space.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[x_kube(validation = Rule::new("self.type == 'categorical' ? size(self.values) > 0 : (has(self.min) && has(self.max) && self.min < self.max)").message("a categorical parameter needs values; a numeric one needs min < max"))]
#[serde(rename_all = "camelCase")]
pub struct SearchParameter {
    /// Name used in placeholders.
    #[schemars(regex(pattern = r"^[A-Za-z_][A-Za-z0-9_]{0,62}$"), length(max = 63))]
    pub name: String,
    /// Value type.
    #[serde(rename = "type")]
    pub type_: SearchParameterType,
    /// Lower bound (numeric types).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min: Option<f64>,
    /// Upper bound (numeric types).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<f64>,
    /// Values (categorical; also the grid points of a numeric parameter under `grid`).
    #[serde(default)]
    #[schemars(length(max = 1000))]
    pub values: Vec<String>,
    /// Sample on a log scale (numeric types; `min` must then be above 0).
    #[serde(default)]
    pub log_scale: bool,
    /// Grid points of a numeric parameter under `grid` without `values`: evenly spaced from
    /// `min` to `max` (on the log scale with `logScale`). Required for a double; an int
    /// without it takes every integer from `min` to `max`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 2, max = 1000))]
    pub grid_points: Option<i32>,
}

/// Type of a search parameter.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum SearchParameterType {
    /// Real number.
    Double,
    /// Integer.
    Int,
    /// One of `values`.
    Categorical,
}

/// Early stopping settings.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EarlyStopping {
    /// Trials that complete before any is stopped early.
    #[schemars(range(min = 1))]
    pub min_trials: i32,
    /// Keep the best 1/`reductionFactor` at each rung.
    #[serde(default = "default_reduction")]
    #[schemars(range(min = 2, max = 10))]
    pub reduction_factor: i32,
    /// Step of the first rung; rung k is at step `minStep` x `reductionFactor`^k (the steps
    /// are those the trials report with their metric, `step=N`).
    #[serde(default = "default_min_step")]
    #[schemars(range(min = 1))]
    pub min_step: i64,
}

fn default_reduction() -> i32 {
    3
}

fn default_min_step() -> i64 {
    1
}

/// Progress of a study.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GryviaAutoTunerStatus {
    /// Where the study stands: Running while trials run or are to come; Succeeded when every
    /// trial has finished and one reported the objective; Failed when none did, or the spec
    /// is invalid.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<JobPhase>,
    /// Trials finished (succeeded, failed, stopped early or vanished).
    #[serde(default)]
    pub completed_trials: i32,
    /// Trials created and not finished.
    #[serde(default)]
    pub running_trials: i32,
    /// Trials that succeeded.
    #[serde(default)]
    pub succeeded_trials: i32,
    /// Trials that failed (their job failed or vanished).
    #[serde(default)]
    pub failed_trials: i32,
    /// Trials stopped early by ASHA.
    #[serde(default)]
    pub early_stopped_trials: i32,
    /// Every trial so far, by index.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub trials: Vec<Trial>,
    /// The best trial with an objective value (finished or stopped early).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub best_trial: Option<Trial>,
    /// When the study finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<Time>,
    /// Conditions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// One trial.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Trial {
    /// Name of the trial's GryviaAIJob.
    pub name: String,
    /// Index of the trial in the study, from 0.
    #[serde(default)]
    pub index: i32,
    /// Sampled values.
    pub parameters: BTreeMap<String, String>,
    /// Phase of the trial's job (the last one seen for a trial stopped early or vanished).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<JobPhase>,
    /// The objective: the last value the trial reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub objective_value: Option<f64>,
    /// Step of the last value reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<i64>,
    /// The objective at each ASHA rung the trial reached.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rungs: Vec<RungValue>,
    /// Whether the trial was stopped early.
    #[serde(default)]
    pub early_stopped: bool,
    /// Whether the trial's job disappeared before it finished (deleted by someone else).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub vanished: bool,
    /// When the trial's job was created.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub creation_time: Option<Time>,
    /// When the trial finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<Time>,
    /// Why it ended as it did (failed, stopped early, vanished, reported no objective).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

impl Trial {
    /// A trial just made: its job's name, its index and its values, nothing reported yet.
    pub fn new(name: impl Into<String>, index: i32, parameters: BTreeMap<String, String>) -> Self {
        Trial {
            name: name.into(),
            index,
            parameters,
            phase: None,
            objective_value: None,
            step: None,
            rungs: Vec::new(),
            early_stopped: false,
            vanished: false,
            creation_time: None,
            completion_time: None,
            message: None,
        }
    }
}

/// The objective a trial reported at an ASHA rung.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RungValue {
    /// The rung, from 0.
    pub rung: i32,
    /// The step of the value (the first report at or after the rung's step).
    pub step: i64,
    /// The value.
    pub value: f64,
}

// ---------------------------------------------------------------------------------------------
// GryviaWorkflow
// ---------------------------------------------------------------------------------------------

/// A DAG of job steps: each step runs when every step it depends on has succeeded.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "gryvia.io",
    version = "v1alpha1",
    kind = "GryviaWorkflow",
    namespaced,
    status = "GryviaWorkflowStatus",
    shortname = "gwf",
    category = "gryvia",
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(
        name = "Steps",
        type_ = "integer",
        json_path = ".status.succeededSteps"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[x_kube(validation = Rule::new("self.steps.all(s, s.dependsOn.all(d, self.steps.exists(t, t.name == d)))").message("spec.steps: dependsOn must name steps of this workflow"))]
#[serde(rename_all = "camelCase")]
pub struct GryviaWorkflowSpec {
    /// The steps.
    #[schemars(length(min = 1, max = 50))]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub steps: Vec<WorkflowStep>,
    /// What happens to the other steps when one fails.
    #[serde(default)]
    pub failure_policy: FailurePolicy,
    /// Steps running at once (unlimited when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1000))]
    pub parallelism: Option<i32>,
}

/// A workflow step: a job given inline or rendered from a template.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[x_kube(validation = Rule::new("has(self.job) != has(self.templateRef)").message("a step needs exactly one of job and templateRef"))]
#[serde(rename_all = "camelCase")]
pub struct WorkflowStep {
    /// Step name.
    #[schemars(
        regex(pattern = r"^[a-z0-9]([-a-z0-9]{0,50}[a-z0-9])?$"),
        length(max = 52)
    )]
    pub name: String,
    /// Steps that must succeed first.
    #[serde(default)]
    #[schemars(length(max = 8), inner(length(max = 52)))]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    pub depends_on: Vec<String>,
    /// The job, inline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<GryviaAIJobSpec>,
    /// The job, from a template.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template_ref: Option<TemplateRef>,
}

/// Failure policy of a workflow.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum FailurePolicy {
    /// Stop starting steps; running ones finish.
    #[default]
    StopOnFailure,
    /// Run every step whose dependencies succeeded.
    ContinueIndependent,
}

/// Progress of a workflow.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GryviaWorkflowStatus {
    /// Where the workflow stands.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<JobPhase>,
    /// Steps finished successfully.
    #[serde(default)]
    pub succeeded_steps: i32,
    /// Per-step state, in spec order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub steps: Vec<StepStatus>,
    /// Conditions (InvalidSpec names a dependency cycle).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// State of one step.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StepStatus {
    /// Step name.
    pub name: String,
    /// Phase of the step's job (`Pending` while waiting for dependencies).
    pub phase: JobPhase,
    /// Name of the step's GryviaAIJob.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_name: Option<String>,
    /// When the step started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
    /// When the step finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<Time>,
}

// ---------------------------------------------------------------------------------------------
// GryviaModelRegistry
// ---------------------------------------------------------------------------------------------

/// Versions of one model with their lifecycle stage; a version promoted to `production` can
/// be served automatically.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "gryvia.io",
    version = "v1alpha1",
    kind = "GryviaModelRegistry",
    namespaced,
    status = "GryviaModelRegistryStatus",
    shortname = "gmr",
    category = "gryvia",
    printcolumn(name = "Model", type_ = "string", json_path = ".spec.modelName"),
    printcolumn(
        name = "Production",
        type_ = "string",
        json_path = ".status.productionVersion"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[x_kube(validation = Rule::new("self.versions.filter(v, v.stage == 'production').size() <= 1").message("spec.versions: at most one version may be in stage production"))]
#[serde(rename_all = "camelCase")]
pub struct GryviaModelRegistrySpec {
    /// Model name.
    #[schemars(length(min = 1, max = 253))]
    pub model_name: String,
    /// Versions.
    #[serde(default)]
    #[schemars(length(max = 500))]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["version"]))]
    pub versions: Vec<ModelVersion>,
    /// Serve the production version automatically.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto_serve: Option<AutoServe>,
}

/// One model version.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ModelVersion {
    /// Version label.
    #[schemars(length(min = 1, max = 63))]
    pub version: String,
    /// Where the weights are (`s3://`, `pvc://<claim>/<path>`, `hf://`, ...).
    #[schemars(length(min = 1, max = 2048))]
    pub uri: String,
    /// Lifecycle stage.
    #[serde(default)]
    pub stage: ModelStage,
    /// Framework or format (for example `pytorch`, `safetensors`, `onnx`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub framework: Option<String>,
    /// Evaluation metrics.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub metrics: BTreeMap<String, f64>,
}

/// Lifecycle stage of a model version.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ModelStage {
    /// Registered only.
    #[default]
    None,
    /// Being validated.
    Staging,
    /// Serving traffic.
    Production,
    /// Retired.
    Archived,
}

/// Automatic serving of the production version.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AutoServe {
    /// Whether to serve.
    #[serde(default)]
    pub enabled: bool,
    /// Inference service settings (its `model` is filled in from the registry).
    pub runtime: ServingRuntime,
    /// Serving image.
    #[schemars(length(min = 1, max = 1024))]
    pub image: String,
    /// GPUs per replica.
    #[serde(default)]
    #[schemars(range(min = 0, max = 64))]
    pub gpus: i32,
    /// GPU product (node selector `nvidia.com/gpu.product`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_type: Option<String>,
    /// Port the server listens on.
    #[serde(default = "default_port")]
    #[schemars(range(min = 1, max = 65535))]
    pub port: i32,
    /// Replica bounds of the inference service.
    #[serde(default)]
    pub replicas: ReplicaBounds,
    /// Autoscaling of the inference service.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autoscaling: Option<Autoscaling>,
    /// How a new production version replaces the serving one: a canary with these settings
    /// (its `version` is the new production version). Absent: a canary of 10 percent for the
    /// default analysis, promoted and rolled back automatically.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub canary: Option<AutoServeCanary>,
}

/// The canary settings of automatic serving (a [`Canary`] without its version).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AutoServeCanary {
    /// Share of the pods running the new version, percent.
    #[serde(default = "default_canary_percent")]
    #[schemars(range(min = 1, max = 99))]
    pub traffic_percent: i32,
    /// Seconds of analysis before the decision.
    #[serde(default = "default_analysis")]
    #[schemars(range(min = 10, max = 86400))]
    pub analysis_seconds: i32,
    /// Highest error rate that passes a check, percent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.0, max = 100.0))]
    pub max_error_rate_percent: Option<f64>,
    /// Highest p99 latency that passes a check, milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 3_600_000))]
    pub max_latency_ms: Option<i64>,
}

impl Default for AutoServeCanary {
    fn default() -> Self {
        AutoServeCanary {
            traffic_percent: default_canary_percent(),
            analysis_seconds: default_analysis(),
            max_error_rate_percent: None,
            max_latency_ms: None,
        }
    }
}

fn default_canary_percent() -> i32 {
    10
}

/// One stage change of a model version, as the audit trail records it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StageChange {
    /// The version.
    pub version: String,
    /// Stage before (absent for a version that was just registered).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<ModelStage>,
    /// Stage after (absent for a version that was removed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<ModelStage>,
    /// Who made the change (the user of the API request, recorded by the admission webhook);
    /// absent when the change was seen without the webhook.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// When (the admission request's time, or when the controller saw the change).
    pub time: Time,
}

/// Observed state of a registry.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GryviaModelRegistryStatus {
    /// Version in production.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub production_version: Option<String>,
    /// Inference service serving it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inference_service: Option<String>,
    /// Version the inference service serves now (the production version once its canary
    /// was promoted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serving_version: Option<String>,
    /// The stage of each version when the controller last looked (what the next change is
    /// compared with).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub stages: BTreeMap<String, ModelStage>,
    /// Audit trail: every stage change, oldest first (the newest 500 are kept).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 500))]
    pub history: Vec<StageChange>,
    /// Conditions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

// ---------------------------------------------------------------------------------------------
// GryviaInferenceService
// ---------------------------------------------------------------------------------------------

/// A model server: a Deployment, a Service, an autoscaler and an optional canary.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "gryvia.io",
    version = "v1alpha1",
    kind = "GryviaInferenceService",
    namespaced,
    status = "GryviaInferenceServiceStatus",
    shortname = "gis",
    category = "gryvia",
    printcolumn(name = "Model", type_ = "string", json_path = ".spec.model.name"),
    printcolumn(name = "Version", type_ = "string", json_path = ".spec.model.version"),
    printcolumn(name = "Ready", type_ = "integer", json_path = ".status.readyReplicas"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[x_kube(validation = Rule::new("self.replicas.min <= self.replicas.max").message("spec.replicas.min must not exceed spec.replicas.max"))]
#[x_kube(validation = Rule::new("self.replicas.min >= 1 || self.replicas.max == self.replicas.min").message("spec.replicas: an autoscaled service (max above min) needs min of at least 1"))]
#[x_kube(validation = Rule::new("!has(self.canary) || self.canary.version != self.model.version").message("spec.canary.version must differ from spec.model.version"))]
#[serde(rename_all = "camelCase")]
pub struct GryviaInferenceServiceSpec {
    /// The model served.
    pub model: ModelRef,
    /// Serving runtime.
    pub runtime: ServingRuntime,
    /// Serving image.
    #[schemars(length(min = 1, max = 1024))]
    pub image: String,
    /// Port the server listens on.
    #[serde(default = "default_port")]
    #[schemars(range(min = 1, max = 65535))]
    pub port: i32,
    /// GPUs per replica.
    #[serde(default)]
    #[schemars(range(min = 0, max = 64))]
    pub gpus: i32,
    /// GPU product.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_type: Option<String>,
    /// Replica bounds.
    #[serde(default)]
    pub replicas: ReplicaBounds,
    /// Autoscaling target.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autoscaling: Option<Autoscaling>,
    /// Canary of a new version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub canary: Option<Canary>,
}

fn default_port() -> i32 {
    8080
}

/// A model version to serve.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ModelRef {
    /// Model name (a GryviaModelRegistry's `modelName`, or free text with `uri`).
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// Version.
    #[schemars(length(min = 1, max = 63))]
    pub version: String,
    /// Weights location (taken from the registry when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uri: Option<String>,
}

/// Serving runtime.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ServingRuntime {
    /// vLLM.
    Vllm,
    /// NVIDIA Triton.
    Triton,
    /// Text Generation Inference.
    Tgi,
    /// Any image serving HTTP on `port`.
    Custom,
}

/// Replica bounds.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReplicaBounds {
    /// Fewest replicas.
    #[schemars(range(min = 0, max = 1000))]
    pub min: i32,
    /// Most replicas.
    #[schemars(range(min = 1, max = 1000))]
    pub max: i32,
}

impl Default for ReplicaBounds {
    fn default() -> Self {
        ReplicaBounds { min: 1, max: 1 }
    }
}

/// Autoscaling target.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("has(self.targetCPUUtilization) || has(self.metric)").message("spec.autoscaling: set targetCPUUtilization, metric or both"))]
pub struct Autoscaling {
    /// Target average CPU utilisation, percent.
    #[serde(
        rename = "targetCPUUtilization",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(range(min = 1, max = 100))]
    pub target_cpu_utilization: Option<i32>,
    /// A custom per-pod metric (served by a custom metrics adapter, for example requests in
    /// flight) with its target average value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metric: Option<PodMetric>,
}

/// A per-pod metric of the custom metrics API and its target average value.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodMetric {
    /// Metric name.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// Target average value per pod.
    pub target_average_value: Quantity,
}

/// A canary: a second Deployment of another version taking a share of the pods behind the
/// same Service (traffic by replica ratio), analysed for `analysisSeconds`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Canary {
    /// Version of the canary.
    #[schemars(length(min = 1, max = 63))]
    pub version: String,
    /// Weights location of the canary's version (taken from the registry when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uri: Option<String>,
    /// Share of the pods running the canary, percent.
    #[schemars(range(min = 1, max = 99))]
    pub traffic_percent: i32,
    /// Serve the canary's version on every replica once the analysis passed.
    #[serde(default)]
    pub auto_promote: bool,
    /// Remove the canary's pods once a check failed (its pods not ready, or a metric over
    /// its limit).
    #[serde(default)]
    pub auto_rollback: bool,
    /// Seconds of analysis from the moment the canary's first pod is ready.
    #[serde(default = "default_analysis")]
    #[schemars(range(min = 10, max = 86400))]
    pub analysis_seconds: i32,
    /// Highest error rate that passes a check, percent (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.0, max = 100.0))]
    pub max_error_rate_percent: Option<f64>,
    /// Highest p99 latency that passes a check, milliseconds (no limit when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 3_600_000))]
    pub max_latency_ms: Option<i64>,
    /// PromQL of the canary's error ratio (0 to 1) instead of the runtime's default;
    /// `$namespace`, `$pods` (a regular expression matching the canary's pod names),
    /// `$version` and `$window` (the check interval, for example `30s`) are replaced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 4096))]
    pub error_rate_query: Option<String>,
    /// PromQL of the canary's p99 latency in seconds instead of the default; the same
    /// placeholders.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 4096))]
    pub latency_query: Option<String>,
}

fn default_analysis() -> i32 {
    300
}

/// Observed state of an inference service.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GryviaInferenceServiceStatus {
    /// Ready replicas of the stable version.
    #[serde(default)]
    pub ready_replicas: i32,
    /// Ready replicas of the canary.
    #[serde(default)]
    pub canary_ready_replicas: i32,
    /// In-cluster URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Canary outcome: `Progressing`, `Passed` (awaiting promotion), `Promoted`, `Failed`
    /// (awaiting rollback) or `RolledBack`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub canary_phase: Option<String>,
    /// Version on the stable replicas (the canary's once promoted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stable_version: Option<String>,
    /// Weights location of the stable version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stable_uri: Option<String>,
    /// Version the canary fields are about.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub canary_version: Option<String>,
    /// When the canary's first pod was ready (the analysis starts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub canary_start_time: Option<Time>,
    /// Desired replicas of the canary.
    #[serde(default)]
    pub canary_replicas: i32,
    /// The canary's checks, oldest first (the newest 50 are kept).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 50))]
    pub checks: Vec<CanaryCheck>,
    /// The decision on the canary, with its numbers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision: Option<CanaryDecision>,
    /// Conditions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// One check of a canary.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CanaryCheck {
    /// When.
    pub time: Time,
    /// Error rate, percent (absent: no data).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_rate_percent: Option<f64>,
    /// p99 latency, milliseconds (absent: no data).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_ms: Option<f64>,
    /// Ready canary pods.
    pub ready_replicas: i32,
    /// `Passed`, `Failed` or `NoData`.
    pub result: String,
    /// Why, with the numbers and limits.
    pub message: String,
}

/// The decision on a canary.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CanaryDecision {
    /// When.
    pub time: Time,
    /// `Promoted`, `RolledBack`, `Passed` or `Failed`.
    pub outcome: String,
    /// Why, with the numbers.
    pub message: String,
}

// ---------------------------------------------------------------------------------------------
// GryviaWorkspace
// ---------------------------------------------------------------------------------------------

/// An interactive notebook or VS Code pod with optional GPUs and a persistent home.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "gryvia.io",
    version = "v1alpha1",
    kind = "GryviaWorkspace",
    namespaced,
    status = "GryviaWorkspaceStatus",
    shortname = "gws",
    category = "gryvia",
    printcolumn(name = "Type", type_ = "string", json_path = ".spec.type"),
    printcolumn(name = "Owner", type_ = "string", json_path = ".spec.owner"),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct GryviaWorkspaceSpec {
    /// Kind of workspace.
    #[serde(rename = "type")]
    pub type_: WorkspaceType,
    /// Image (a default per type when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// User the workspace belongs to.
    #[schemars(length(min = 1, max = 253))]
    pub owner: String,
    /// GPUs.
    #[serde(default)]
    #[schemars(range(min = 0, max = 8))]
    pub gpus: i32,
    /// GPU product.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_type: Option<String>,
    /// A persistent home directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage: Option<WorkspaceStorage>,
    /// Stop (cull) the pod after this many minutes without activity reported by the server
    /// itself (never when absent); its storage is kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 10080))]
    pub idle_timeout_minutes: Option<i32>,
    /// Desired state: true deletes the pod and keeps the storage.
    #[serde(default)]
    pub stopped: bool,
}

/// Kind of workspace.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum WorkspaceType {
    /// JupyterLab.
    Jupyter,
    /// code-server.
    Vscode,
}

/// Home directory of a workspace.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkspaceStorage {
    /// Size.
    pub size: Quantity,
    /// StorageClass.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_class_name: Option<String>,
}

/// Observed state of a workspace.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GryviaWorkspaceStatus {
    /// `Pending`, `Running`, `Stopped` or `Failed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// In-cluster URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Last activity seen.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_activity: Option<Time>,
    /// UID of the pod whose GPU time is being metered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_pod_uid: Option<String>,
    /// When that pod started (its usage record's start).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_start: Option<Time>,
    /// Conditions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}
