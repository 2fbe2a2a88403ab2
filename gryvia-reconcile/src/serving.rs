//! Inference services, as pure functions: a GryviaInferenceService becomes a Deployment of its
//! stable version, a Service, a HorizontalPodAutoscaler and, with `spec.canary`, a second
//! Deployment of the canary's version behind the same Service, analysed and then promoted or
//! rolled back.
//!
//! - **Children.** Deployment `<name>` (the stable track), Deployment `<name>-canary` while a
//!   canary runs, Service `<name>` selecting both tracks (traffic splits by replica ratio:
//!   there is no mesh or Gateway API route), and HorizontalPodAutoscaler `<name>`
//!   (autoscaling/v2) of the stable Deployment when `replicas.max > replicas.min`: CPU
//!   utilisation (`autoscaling.targetCPUUtilization`, 80 when not set) and an optional
//!   per-pod custom metric. Without an autoscaler the stable Deployment has `replicas.min`
//!   replicas; with one the autoscaler owns the count.
//! - **Runtimes** ([`container`]): vLLM, TGI, Triton and custom images get their own
//!   arguments, ports and probes; the weights location comes from `spec.model.uri` or the
//!   GryviaModelRegistry of the model in the namespace.
//! - **Canary** ([`analyse`]): the canary gets `ceil(stable * p / (100 - p))` replicas (at
//!   least one) for `trafficPercent` p. Once its first pod is ready, a check every
//!   `check_interval` reads the error rate and the p99 latency of its pods from a
//!   Prometheus-compatible query API ([`queries`]); a check fails when a value is over its
//!   limit, when no canary pod is ready, or when its Deployment missed its progress deadline.
//!   A failed check ends the analysis: `RolledBack` with `autoRollback` (the canary's pods
//!   removed), else `Failed` (kept for a person to look at). After `analysisSeconds` with at
//!   least one passed check and none failed, `Promoted` with `autoPromote` (the stable
//!   Deployment serves the canary's version, the canary Deployment is removed), else `Passed`.
//!   Only checks without data (no series, the metrics source unreachable) for the whole
//!   analysis count as a failure: nothing is promoted without evidence. Without a metrics
//!   source the checks look at readiness alone (the message says so). Every check and the
//!   decision are in the status with their numbers.
//! - **Promotion is kept** while `spec.canary.version` names the promoted version; setting
//!   `spec.model.version` to it (what the model registry does) makes it the stable version
//!   for good.

use std::collections::BTreeMap;
use std::time::Duration;

use gryvia_types::conditions::{self, Status};
use gryvia_types::k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use gryvia_types::{
    CanaryCheck, CanaryDecision, GryviaInferenceService, GryviaInferenceServiceStatus,
    ServingRuntime, labels,
};
use serde_json::{Value, json};

use crate::{Child, EventType, ObjectRef, Plan, Reconcile, Timestamp};

/// Label of an inference service's pods and children: the service's name.
pub const SERVICE_LABEL: &str = "gryvia.io/inference-service";
/// Label of an inference service's pods: `stable` or `canary`.
pub const TRACK_LABEL: &str = "gryvia.io/serving-track";
/// Label of an inference service's pods: the model version they serve.
pub const VERSION_LABEL: &str = "gryvia.io/model-version";
/// The serving container's name.
pub const SERVER: &str = "server";
/// How often a canary is checked unless the operator says.
pub const DEFAULT_CHECK_INTERVAL: Duration = Duration::from_secs(30);
/// Error rate limit of a check when the canary sets none, percent.
pub const DEFAULT_MAX_ERROR_RATE_PERCENT: f64 = 1.0;
/// CPU utilisation target of the autoscaler when the spec sets none, percent.
pub const DEFAULT_CPU_TARGET: i32 = 80;
/// Checks kept in the status.
pub const CHECKS_KEPT: usize = 50;

/// Canary phases.
pub mod phase {
    /// The analysis runs.
    pub const PROGRESSING: &str = "Progressing";
    /// The analysis passed; promotion waits for `autoPromote` or a person.
    pub const PASSED: &str = "Passed";
    /// The stable Deployment serves the canary's version.
    pub const PROMOTED: &str = "Promoted";
    /// A check failed; rollback waits for `autoRollback` or a person.
    pub const FAILED: &str = "Failed";
    /// The canary's pods were removed.
    pub const ROLLED_BACK: &str = "RolledBack";
}

/// A Deployment of the service as observed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Track {
    /// Desired replicas (`spec.replicas`).
    pub replicas: i32,
    /// Ready replicas.
    pub ready: i32,
    /// Why it is stuck: its `Progressing` condition is False (for example
    /// `ProgressDeadlineExceeded`).
    pub stalled: Option<String>,
}

/// What the metrics source said about the canary at this reconcile.
#[derive(Clone, Debug, PartialEq)]
pub enum Reading {
    /// The operator has no metrics source (`--metrics-url`): readiness alone.
    Unconfigured,
    /// Not read at this reconcile (no check is due).
    NotRead,
    /// The source could not be queried.
    Unavailable(String),
    /// The values (`None`: the query returned no series or not a number).
    Read {
        /// Error ratio, 0 to 1.
        error_ratio: Option<f64>,
        /// p99 latency, seconds.
        latency_seconds: Option<f64>,
    },
}

/// What an inference service's reconcile needs to know.
#[derive(Clone, Debug, PartialEq)]
pub struct ServingWorld {
    /// Weights location of each version of the model in the namespace's registries.
    pub registry_uris: BTreeMap<String, String>,
    /// The stable Deployment.
    pub stable: Option<Track>,
    /// The canary Deployment.
    pub canary: Option<Track>,
    /// Whether the autoscaler exists.
    pub autoscaler: bool,
    /// The canary's metrics.
    pub reading: Reading,
}

impl Default for ServingWorld {
    fn default() -> Self {
        ServingWorld {
            registry_uris: BTreeMap::new(),
            stable: None,
            canary: None,
            autoscaler: false,
            reading: Reading::NotRead,
        }
    }
}

/// The PromQL queries of a canary's checks: error ratio and p99 latency in seconds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Queries {
    /// Error ratio (0 to 1).
    pub error_ratio: String,
    /// p99 latency, seconds.
    pub latency: String,
}

/// The default queries of a runtime, before the placeholders are replaced. They read the
/// servers' own metrics, selected by namespace and pod name (the labels a Kubernetes pod
/// scrape gives): vLLM and custom servers the HTTP metrics of `prometheus-fastapi-
/// instrumentator` (`http_requests_total` by `status`, `http_request_duration_seconds`), TGI
/// `tgi_request_count`, `tgi_request_failure` and `tgi_request_duration`, Triton
/// `nv_inference_request_success` and `_failure`, and as latency the mean of
/// `nv_inference_request_duration_us` (Triton has no latency histogram by default).
pub fn default_queries(runtime: ServingRuntime) -> Queries {
    let sel = r#"namespace="$namespace",pod=~"$pods""#;
    match runtime {
        ServingRuntime::Vllm | ServingRuntime::Custom => Queries {
            error_ratio: format!(
                r#"sum(rate(http_requests_total{{{sel},status=~"5.."}}[$window])) / sum(rate(http_requests_total{{{sel}}}[$window]))"#
            ),
            latency: format!(
                "histogram_quantile(0.99, sum by (le) (rate(http_request_duration_seconds_bucket{{{sel}}}[$window])))"
            ),
        },
        ServingRuntime::Tgi => Queries {
            error_ratio: format!(
                "sum(rate(tgi_request_failure{{{sel}}}[$window])) / sum(rate(tgi_request_count{{{sel}}}[$window]))"
            ),
            latency: format!(
                "histogram_quantile(0.99, sum by (le) (rate(tgi_request_duration_bucket{{{sel}}}[$window])))"
            ),
        },
        ServingRuntime::Triton => Queries {
            error_ratio: format!(
                "sum(rate(nv_inference_request_failure{{{sel}}}[$window])) / (sum(rate(nv_inference_request_success{{{sel}}}[$window])) + sum(rate(nv_inference_request_failure{{{sel}}}[$window])))"
            ),
            latency: format!(
                "sum(rate(nv_inference_request_duration_us{{{sel}}}[$window])) / sum(rate(nv_inference_count{{{sel}}}[$window])) / 1e6"
            ),
        },
    }
}

/// The queries of `isvc`'s canary with the placeholders replaced (`None` without a canary).
pub fn queries(isvc: &GryviaInferenceService, check_interval: Duration) -> Option<Queries> {
    let canary = isvc.spec.canary.as_ref()?;
    let defaults = default_queries(isvc.spec.runtime);
    let namespace = isvc.metadata.namespace.clone().unwrap_or_default();
    let deployment = canary_name(&name_of(isvc));
    let fill = |q: &str| {
        q.replace("$namespace", &namespace)
            .replace("$pods", &format!("{deployment}-[a-z0-9]+-[a-z0-9]+"))
            .replace("$version", &canary.version)
            .replace("$window", &format!("{}s", check_interval.as_secs().max(1)))
    };
    Some(Queries {
        error_ratio: fill(
            canary
                .error_rate_query
                .as_deref()
                .unwrap_or(&defaults.error_ratio),
        ),
        latency: fill(canary.latency_query.as_deref().unwrap_or(&defaults.latency)),
    })
}

fn name_of(isvc: &GryviaInferenceService) -> String {
    isvc.metadata.name.clone().unwrap_or_default()
}

/// The canary Deployment's name.
pub fn canary_name(service: &str) -> String {
    format!("{service}-canary")
}

/// Whether `isvc`'s canary is being analysed (its checks need metrics).
pub fn analysing(isvc: &GryviaInferenceService) -> bool {
    let Some(canary) = &isvc.spec.canary else {
        return false;
    };
    let status = isvc.status.as_ref();
    let same = status.and_then(|s| s.canary_version.as_deref()) == Some(canary.version.as_str());
    !same || status.and_then(|s| s.canary_phase.as_deref()) == Some(phase::PROGRESSING)
}

/// Which version the stable Deployment serves and where its weights are, given the status
/// this reconcile writes (a promotion decided now serves the canary's version at once).
fn stable_model(
    isvc: &GryviaInferenceService,
    status: &GryviaInferenceServiceStatus,
    world: &ServingWorld,
) -> (String, Option<String>) {
    if let Some(canary) = &isvc.spec.canary {
        let promoted = status.canary_phase.as_deref() == Some(phase::PROMOTED)
            && status.canary_version.as_deref() == Some(canary.version.as_str());
        if promoted {
            let uri = canary
                .uri
                .clone()
                .or_else(|| world.registry_uris.get(&canary.version).cloned());
            return (canary.version.clone(), uri);
        }
    }
    let model = &isvc.spec.model;
    let uri = model
        .uri
        .clone()
        .or_else(|| world.registry_uris.get(&model.version).cloned());
    (model.version.clone(), uri)
}

/// The probes of a runtime: readiness, liveness and startup (model loading can take minutes).
fn probes(runtime: ServingRuntime, port: i32) -> (Value, Value, Value) {
    let http = |path: &str| json!({"httpGet": {"path": path, "port": port}});
    let (ready, live) = match runtime {
        ServingRuntime::Vllm | ServingRuntime::Tgi => (http("/health"), http("/health")),
        ServingRuntime::Triton => (http("/v2/health/ready"), http("/v2/health/live")),
        ServingRuntime::Custom => (
            json!({"tcpSocket": {"port": port}}),
            json!({"tcpSocket": {"port": port}}),
        ),
    };
    let with = |mut p: Value, period: i32, failures: i32| {
        p["periodSeconds"] = period.into();
        p["failureThreshold"] = failures.into();
        p
    };
    (
        with(ready.clone(), 10, 3),
        with(live, 15, 3),
        // Up to 20 minutes to load the weights before liveness applies.
        with(ready, 10, 120),
    )
}

/// The serving container of `version` (weights at `uri`) for `isvc`'s runtime.
pub fn container(isvc: &GryviaInferenceService, version: &str, uri: &str) -> Value {
    let spec = &isvc.spec;
    let port = spec.port;
    let gpus = spec.gpus;
    let mut ports = vec![json!({"name": "http", "containerPort": port})];
    let (mut command, mut args): (Vec<String>, Vec<String>) = (Vec::new(), Vec::new());
    match spec.runtime {
        ServingRuntime::Vllm => {
            args = vec![
                "--model".into(),
                uri.into(),
                "--served-model-name".into(),
                spec.model.name.clone(),
                "--port".into(),
                port.to_string(),
            ];
            if gpus > 1 {
                args.extend(["--tensor-parallel-size".into(), gpus.to_string()]);
            }
        }
        ServingRuntime::Tgi => {
            args = vec![
                "--model-id".into(),
                uri.into(),
                "--port".into(),
                port.to_string(),
            ];
            if gpus > 1 {
                args.extend(["--num-shard".into(), gpus.to_string()]);
            }
        }
        ServingRuntime::Triton => {
            command = vec!["tritonserver".into()];
            args = vec![
                format!("--model-repository={uri}"),
                format!("--http-port={port}"),
                "--grpc-port=8001".into(),
                "--metrics-port=8002".into(),
            ];
            ports.push(json!({"name": "grpc", "containerPort": 8001}));
            ports.push(json!({"name": "metrics", "containerPort": 8002}));
        }
        ServingRuntime::Custom => {}
    }
    let (readiness, liveness, startup) = probes(spec.runtime, port);
    let mut c = json!({
        "name": SERVER,
        "image": spec.image,
        "ports": ports,
        "env": [
            {"name": "MODEL_NAME", "value": spec.model.name},
            {"name": "MODEL_VERSION", "value": version},
            {"name": "MODEL_URI", "value": uri},
        ],
        "readinessProbe": readiness,
        "livenessProbe": liveness,
        "startupProbe": startup,
    });
    if !command.is_empty() {
        c["command"] = json!(command);
    }
    if !args.is_empty() {
        c["args"] = json!(args);
    }
    if gpus > 0 {
        c["resources"] = json!({"limits": {labels::NVIDIA_GPU_RESOURCE: gpus.to_string()}});
    }
    c
}

/// The Deployment of one track.
fn deployment(
    isvc: &GryviaInferenceService,
    track: &str,
    version: &str,
    uri: &str,
    replicas: Option<i32>,
) -> Value {
    let name = name_of(isvc);
    let deploy_name = if track == "canary" {
        canary_name(&name)
    } else {
        name.clone()
    };
    let selector = json!({SERVICE_LABEL: name, TRACK_LABEL: track});
    let mut pod_labels = selector.clone();
    pod_labels[VERSION_LABEL] = version.into();
    pod_labels[labels::MANAGED_BY] = labels::MANAGED_BY_VALUE.into();
    let mut pod_spec =
        json!({"containers": [container(isvc, version, uri)], "enableServiceLinks": false});
    if let Some(product) = &isvc.spec.gpu_type {
        pod_spec["nodeSelector"] = json!({labels::NVIDIA_GPU_PRODUCT: product});
    }
    if isvc.spec.gpus > 0 {
        pod_spec["tolerations"] = json!([{"key": labels::NVIDIA_GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}]);
    }
    let mut d = json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": deploy_name, "namespace": isvc.metadata.namespace, "labels": pod_labels},
        "spec": {
            "selector": {"matchLabels": selector},
            "template": {"metadata": {"labels": pod_labels}, "spec": pod_spec},
        },
    });
    if let Some(r) = replicas {
        d["spec"]["replicas"] = r.into();
    }
    d
}

fn service(isvc: &GryviaInferenceService) -> Value {
    let name = name_of(isvc);
    let mut ports = vec![json!({"name": "http", "port": isvc.spec.port, "targetPort": "http"})];
    if isvc.spec.runtime == ServingRuntime::Triton {
        ports.push(json!({"name": "grpc", "port": 8001, "targetPort": "grpc"}));
        ports.push(json!({"name": "metrics", "port": 8002, "targetPort": "metrics"}));
    }
    json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": isvc.metadata.namespace,
                     "labels": {SERVICE_LABEL: name, labels::MANAGED_BY: labels::MANAGED_BY_VALUE}},
        "spec": {"selector": {SERVICE_LABEL: name}, "ports": ports},
    })
}

/// Whether the service is autoscaled.
pub fn autoscaled(isvc: &GryviaInferenceService) -> bool {
    isvc.spec.replicas.max > isvc.spec.replicas.min
}

/// The HorizontalPodAutoscaler (autoscaling/v2) of the stable Deployment.
pub fn autoscaler(isvc: &GryviaInferenceService) -> Value {
    let name = name_of(isvc);
    let auto = isvc.spec.autoscaling.as_ref();
    let mut metrics = Vec::new();
    let cpu = auto.and_then(|a| a.target_cpu_utilization);
    if cpu.is_some() || auto.and_then(|a| a.metric.as_ref()).is_none() {
        metrics.push(json!({"type": "Resource", "resource": {"name": "cpu",
            "target": {"type": "Utilization", "averageUtilization": cpu.unwrap_or(DEFAULT_CPU_TARGET)}}}));
    }
    if let Some(m) = auto.and_then(|a| a.metric.as_ref()) {
        metrics.push(json!({"type": "Pods", "pods": {"metric": {"name": m.name},
            "target": {"type": "AverageValue", "averageValue": m.target_average_value}}}));
    }
    json!({
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": name, "namespace": isvc.metadata.namespace,
                     "labels": {SERVICE_LABEL: name, labels::MANAGED_BY: labels::MANAGED_BY_VALUE}},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
            "minReplicas": isvc.spec.replicas.min.max(1),
            "maxReplicas": isvc.spec.replicas.max,
            "metrics": metrics,
        },
    })
}

/// Replicas of a canary taking `percent` of the pods next to `stable` stable replicas: the
/// fewest that give at least that share, at least one.
pub fn canary_replicas(stable: i32, percent: i32) -> i32 {
    let (s, p) = (i64::from(stable.max(1)), i64::from(percent.clamp(1, 99)));
    let n = (s * p + (100 - p) - 1) / (100 - p);
    i32::try_from(n.max(1)).unwrap_or(i32::MAX)
}

/// The result of one check.
fn check(world: &ServingWorld, limits: &Limits, now: Timestamp) -> Option<CanaryCheck> {
    let canary = world.canary.clone().unwrap_or_default();
    let mk = |result: &str, message: String, error: Option<f64>, latency: Option<f64>| {
        Some(CanaryCheck {
            time: Time(now),
            error_rate_percent: error,
            latency_ms: latency,
            ready_replicas: canary.ready,
            result: result.to_owned(),
            message,
        })
    };
    if let Some(why) = &canary.stalled {
        return mk(
            "Failed",
            format!("the canary Deployment is stuck: {why}"),
            None,
            None,
        );
    }
    if canary.ready == 0 {
        return mk("Failed", "no canary pod is ready".to_owned(), None, None);
    }
    match &world.reading {
        Reading::NotRead => None,
        Reading::Unconfigured => mk(
            "Passed",
            format!(
                "{} canary pod(s) ready (no metrics source: readiness alone)",
                canary.ready
            ),
            None,
            None,
        ),
        Reading::Unavailable(why) => mk("NoData", format!("metrics source: {why}"), None, None),
        Reading::Read {
            error_ratio,
            latency_seconds,
        } => {
            let error = error_ratio.map(|e| e * 100.0);
            let latency = latency_seconds.map(|l| l * 1000.0);
            if error.is_none() && latency.is_none() {
                return mk(
                    "NoData",
                    "no series for the canary's pods".to_owned(),
                    None,
                    None,
                );
            }
            let mut over = Vec::new();
            if let Some(e) = error.filter(|e| *e > limits.error_rate_percent) {
                over.push(format!(
                    "error rate {e:.2}% over {}%",
                    limits.error_rate_percent
                ));
            }
            if let (Some(l), Some(max)) = (latency, limits.latency_ms)
                && l > max as f64
            {
                over.push(format!("p99 latency {l:.0} ms over {max} ms"));
            }
            let seen = describe(error, latency);
            if over.is_empty() {
                mk("Passed", seen, error, latency)
            } else {
                mk("Failed", over.join(", "), error, latency)
            }
        }
    }
}

fn describe(error: Option<f64>, latency: Option<f64>) -> String {
    let e = error.map_or("error rate: no data".to_owned(), |e| {
        format!("error rate {e:.2}%")
    });
    let l = latency.map_or("p99 latency: no data".to_owned(), |l| {
        format!("p99 latency {l:.0} ms")
    });
    format!("{e}, {l}")
}

/// The limits of a canary's checks.
#[derive(Clone, Debug, PartialEq)]
pub struct Limits {
    /// Highest error rate that passes, percent.
    pub error_rate_percent: f64,
    /// Highest p99 latency that passes, milliseconds.
    pub latency_ms: Option<i64>,
}

/// The canary's state after this reconcile's analysis.
#[derive(Clone, Debug, PartialEq)]
pub struct Analysis {
    /// The phase.
    pub phase: String,
    /// When the analysis started (the first ready canary pod).
    pub start: Option<Timestamp>,
    /// Checks, oldest first.
    pub checks: Vec<CanaryCheck>,
    /// The decision, when one was made now or before.
    pub decision: Option<CanaryDecision>,
    /// Whether this reconcile recorded a check.
    pub checked: bool,
}

/// One analysis step of a canary in `phase` (see the module docs): records a check when one
/// is due and decides once a check failed or the analysis time is over.
#[expect(
    clippy::too_many_arguments,
    reason = "the analysis' inputs, each named"
)]
pub fn analyse(
    canary: &gryvia_types::Canary,
    mut state: Analysis,
    world: &ServingWorld,
    limits: &Limits,
    interval: Duration,
    now: Timestamp,
    auto_promote: bool,
    auto_rollback: bool,
) -> Analysis {
    state.checked = false;
    let decide = |state: &mut Analysis, outcome: &str, message: String| {
        state.phase = outcome.to_owned();
        state.decision = Some(CanaryDecision {
            time: Time(now),
            outcome: outcome.to_owned(),
            message,
        });
    };
    match state.phase.as_str() {
        phase::PASSED if auto_promote => {
            let why = "analysis had passed; autoPromote is now on".to_owned();
            decide(&mut state, phase::PROMOTED, why);
            return state;
        }
        phase::FAILED if auto_rollback => {
            let why = "analysis had failed; autoRollback is now on".to_owned();
            decide(&mut state, phase::ROLLED_BACK, why);
            return state;
        }
        phase::PROGRESSING => {}
        _ => return state,
    }
    let ready = world.canary.as_ref().is_some_and(|c| c.ready > 0);
    let stalled = world.canary.as_ref().and_then(|c| c.stalled.clone());
    if state.start.is_none() && ready {
        state.start = Some(now);
    }
    let Some(start) = state.start else {
        if let Some(why) = stalled {
            let message = format!("the canary never became ready: {why}");
            let outcome = if auto_rollback {
                phase::ROLLED_BACK
            } else {
                phase::FAILED
            };
            decide(&mut state, outcome, message);
        }
        return state;
    };
    let due = state
        .checks
        .last()
        .is_none_or(|c| now.duration_since(c.time.0).as_secs_f64() >= interval.as_secs_f64());
    if due && let Some(c) = check(world, limits, now) {
        state.checks.push(c);
        state.checked = true;
        if state.checks.len() > CHECKS_KEPT {
            let drop = state.checks.len() - CHECKS_KEPT;
            state.checks.drain(..drop);
        }
    }
    let since_start: Vec<&CanaryCheck> =
        state.checks.iter().filter(|c| c.time.0 >= start).collect();
    if let Some(failed) = since_start.iter().find(|c| c.result == "Failed") {
        let outcome = if auto_rollback {
            phase::ROLLED_BACK
        } else {
            phase::FAILED
        };
        let message = format!("check failed: {}", failed.message);
        decide(&mut state, outcome, message);
        return state;
    }
    let elapsed = now.duration_since(start).as_secs_f64();
    if elapsed >= f64::from(canary.analysis_seconds) {
        let (passed, message) = verdict(&since_start, canary.analysis_seconds);
        let outcome = match (passed, auto_promote, auto_rollback) {
            (true, true, _) => phase::PROMOTED,
            (true, false, _) => phase::PASSED,
            (false, _, true) => phase::ROLLED_BACK,
            (false, _, false) => phase::FAILED,
        };
        decide(&mut state, outcome, message);
    }
    state
}

/// Whether an analysis whose time is over passed (no check failed before this is asked), and
/// why.
fn verdict(checks: &[&CanaryCheck], seconds: i32) -> (bool, String) {
    let passed = checks.iter().filter(|c| c.result == "Passed").count();
    if passed == 0 {
        return (
            false,
            format!(
                "no data in {} check(s) over {seconds}s: nothing to promote on",
                checks.len()
            ),
        );
    }
    let last = checks
        .iter()
        .rev()
        .find(|c| c.result == "Passed")
        .map(|c| c.message.clone())
        .unwrap_or_default();
    (
        true,
        format!(
            "{passed} of {} check(s) passed over {seconds}s, none failed; last: {last}",
            checks.len()
        ),
    )
}

/// The inference service reconciler.
#[derive(Clone, Debug)]
pub struct ServingReconciler {
    /// How often a canary is checked.
    pub check_interval: Duration,
}

impl Default for ServingReconciler {
    fn default() -> Self {
        ServingReconciler {
            check_interval: DEFAULT_CHECK_INTERVAL,
        }
    }
}

fn child(plan: &mut Plan<GryviaInferenceServiceStatus>, object: Value) {
    plan.apply_built(Child::from_json(object));
}

/// The canary's analysis state at the start of this reconcile: the status's, or a fresh one
/// for a new canary version.
fn analysis_of(status: &GryviaInferenceServiceStatus, version: &str) -> Analysis {
    if status.canary_version.as_deref() == Some(version) {
        Analysis {
            phase: status
                .canary_phase
                .clone()
                .unwrap_or_else(|| phase::PROGRESSING.to_owned()),
            start: status.canary_start_time.as_ref().map(|t| t.0),
            checks: status.checks.clone(),
            decision: status.decision.clone(),
            checked: false,
        }
    } else {
        Analysis {
            phase: phase::PROGRESSING.to_owned(),
            start: None,
            checks: Vec::new(),
            decision: None,
            checked: false,
        }
    }
}

impl ServingReconciler {
    /// The canary part of a reconcile: analysis, its Deployment, status and events. Returns
    /// whether the canary's Deployment is wanted.
    fn canary(
        &self,
        isvc: &GryviaInferenceService,
        world: &ServingWorld,
        now: Timestamp,
        status: &mut GryviaInferenceServiceStatus,
        plan: &mut Plan<GryviaInferenceServiceStatus>,
    ) -> bool {
        let Some(canary) = &isvc.spec.canary else {
            status.canary_replicas = 0;
            status.canary_ready_replicas = 0;
            return false;
        };
        let before = analysis_of(status, &canary.version);
        let fresh = status.canary_version.as_deref() != Some(canary.version.as_str());
        if fresh {
            plan.event(
                EventType::Normal,
                "CanaryStarted",
                format!(
                    "canary of version {} on {}% of the pods",
                    canary.version, canary.traffic_percent
                ),
            );
        }
        let limits = Limits {
            error_rate_percent: canary
                .max_error_rate_percent
                .unwrap_or(DEFAULT_MAX_ERROR_RATE_PERCENT),
            latency_ms: canary.max_latency_ms,
        };
        let after = analyse(
            canary,
            before.clone(),
            world,
            &limits,
            self.check_interval,
            now,
            canary.auto_promote,
            canary.auto_rollback,
        );
        if after.phase != before.phase
            && let Some(d) = &after.decision
        {
            let kind = match d.outcome.as_str() {
                phase::ROLLED_BACK | phase::FAILED => EventType::Warning,
                _ => EventType::Normal,
            };
            plan.event(
                kind,
                &format!("Canary{}", d.outcome),
                format!("version {}: {}", canary.version, d.message),
            );
        }
        if after.checked
            && let Some(c) = after.checks.last().filter(|c| c.result == "Failed")
        {
            plan.event(
                EventType::Warning,
                "CanaryCheckFailed",
                format!("version {}: {}", canary.version, c.message),
            );
        }
        let wanted = matches!(
            after.phase.as_str(),
            phase::PROGRESSING | phase::PASSED | phase::FAILED
        );
        status.canary_version = Some(canary.version.clone());
        status.canary_phase = Some(after.phase.clone());
        status.canary_start_time = after.start.map(Time);
        status.checks = after.checks;
        status.decision = after.decision;
        status.canary_ready_replicas = if wanted {
            world.canary.as_ref().map_or(0, |c| c.ready)
        } else {
            0
        };
        if after.phase == phase::PROGRESSING {
            plan.requeue(self.check_interval);
        }
        wanted
    }

    /// The children of a service whose weights are known: the stable Deployment, the
    /// Service, the autoscaler and the canary Deployment (or their deletion).
    fn children(
        isvc: &GryviaInferenceService,
        world: &ServingWorld,
        version: &str,
        uri: &str,
        canary_wanted: bool,
        status: &mut GryviaInferenceServiceStatus,
        plan: &mut Plan<GryviaInferenceServiceStatus>,
    ) {
        let name = name_of(isvc);
        let ns = isvc.metadata.namespace.clone().unwrap_or_default();
        let scaled = autoscaled(isvc);
        let replicas = (!scaled).then_some(isvc.spec.replicas.min);
        let canary_uri = isvc.spec.canary.as_ref().and_then(|c| {
            c.uri
                .clone()
                .or_else(|| world.registry_uris.get(&c.version).cloned())
        });
        child(plan, deployment(isvc, "stable", version, uri, replicas));
        child(plan, service(isvc));
        if scaled {
            child(plan, autoscaler(isvc));
        } else if world.autoscaler {
            plan.delete.push(ObjectRef::namespaced(
                "autoscaling/v2",
                "HorizontalPodAutoscaler",
                &ns,
                &name,
            ));
        }
        let stable_replicas = world
            .stable
            .as_ref()
            .map_or(isvc.spec.replicas.min, |s| s.replicas);
        match (&isvc.spec.canary, canary_uri) {
            (Some(c), Some(curi)) if canary_wanted => {
                let n = canary_replicas(stable_replicas, c.traffic_percent);
                status.canary_replicas = n;
                child(plan, deployment(isvc, "canary", &c.version, &curi, Some(n)));
            }
            _ => {
                status.canary_replicas = 0;
                if world.canary.is_some() {
                    plan.delete.push(ObjectRef::namespaced(
                        "apps/v1",
                        "Deployment",
                        &ns,
                        &canary_name(&name),
                    ));
                }
            }
        }
    }
}

impl Reconcile for ServingReconciler {
    type Object = GryviaInferenceService;
    type World = ServingWorld;
    type Status = GryviaInferenceServiceStatus;

    fn name(&self) -> &'static str {
        "inference-service"
    }

    fn reconcile(
        &self,
        isvc: &GryviaInferenceService,
        world: &ServingWorld,
        now: Timestamp,
    ) -> Plan<GryviaInferenceServiceStatus> {
        let mut plan = Plan::new();
        let current = isvc.status.clone();
        let mut status = current.clone().unwrap_or_default();
        let name = name_of(isvc);
        let ns = isvc.metadata.namespace.clone().unwrap_or_default();
        let generation = isvc.metadata.generation;
        let canary_wanted = self.canary(isvc, world, now, &mut status, &mut plan);
        let (version, uri) = stable_model(isvc, &status, world);
        let canary_uri = isvc.spec.canary.as_ref().map(|c| {
            c.uri
                .clone()
                .or_else(|| world.registry_uris.get(&c.version).cloned())
        });
        let missing = match (&uri, &canary_uri) {
            (None, _) => Some(("spec.model.uri", version.clone())),
            (_, Some(None)) if canary_wanted => isvc
                .spec
                .canary
                .as_ref()
                .map(|c| ("spec.canary.uri", c.version.clone())),
            _ => None,
        };
        if let Some((field, v)) = missing {
            let message = format!(
                "{field}: absent, and no GryviaModelRegistry in {ns} has model {} version {v}",
                isvc.spec.model.name
            );
            conditions::set(
                &mut status.conditions,
                conditions::new(
                    conditions::READY,
                    Status::False,
                    "ModelNotFound",
                    message,
                    generation,
                    now,
                ),
            );
            plan.set_status_if_changed(current.as_ref(), status);
            return plan;
        }
        let uri = uri.unwrap_or_default();
        Self::children(
            isvc,
            world,
            &version,
            &uri,
            canary_wanted,
            &mut status,
            &mut plan,
        );
        let ready = world.stable.as_ref().map_or(0, |s| s.ready);
        status.ready_replicas = ready;
        status.stable_version = Some(version.clone());
        status.stable_uri = Some(uri);
        status.url = Some(format!("http://{name}.{ns}.svc:{}", isvc.spec.port));
        let serving = ready > 0 || isvc.spec.replicas.min == 0;
        let (reason, message) = if serving {
            (
                "Serving",
                format!("version {version} on {ready} ready replica(s)"),
            )
        } else {
            (
                "Waiting",
                format!("no ready replica of version {version} yet"),
            )
        };
        conditions::set(
            &mut status.conditions,
            conditions::new(
                conditions::READY,
                serving.into(),
                reason,
                message,
                generation,
                now,
            ),
        );
        plan.set_status_if_changed(current.as_ref(), status);
        plan
    }
}

#[cfg(test)]
mod tests;
