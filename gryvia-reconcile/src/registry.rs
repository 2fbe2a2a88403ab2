//! The model registry, as pure functions: stage changes recorded with who made them, and the
//! production version served through a GryviaInferenceService.
//!
//! - **Who.** The ai-operator's mutating webhook sees every create and update of a registry
//!   with the request's user; [`audit`] writes the stage changes it makes into the
//!   annotation [`AUDIT_ANNOTATION`] (the previous value plus the new entries: a client cannot
//!   rewrite it). The controller moves those entries into `status.history`; a change it finds
//!   without one (the webhook was not running, or failed open) is recorded with no user.
//! - **At most one production version** is the CRD's rule; `gryvia model promote` archives
//!   the previous production version in the same update.
//! - **Serving** (`autoServe.enabled`): the registry owns the GryviaInferenceService named
//!   after it. With nothing served yet it serves the production version; when another
//!   version is served, the production one comes as its canary (`autoServe.canary`: 10 % for
//!   the default analysis, promoted and rolled back automatically); once the canary is
//!   promoted the service's spec names the production version alone. A rolled-back canary
//!   stays rolled back (the condition `Serving` says so) until another version is promoted.

use std::collections::BTreeMap;

use gryvia_types::conditions::{self, Status};
use gryvia_types::k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use gryvia_types::{
    Canary, GryviaInferenceService, GryviaInferenceServiceSpec, GryviaModelRegistry,
    GryviaModelRegistryStatus, ModelRef, ModelStage, StageChange,
};
use serde_json::{Value, json};

use crate::serving::phase;
use crate::{Child, EventType, Plan, Reconcile, Timestamp};

/// Annotation of a registry with the stage changes the admission webhook saw (JSON list).
pub const AUDIT_ANNOTATION: &str = "gryvia.io/stage-audit";
/// Entries kept in the annotation.
pub const AUDIT_KEPT: usize = 100;
/// Entries kept in `status.history`.
pub const HISTORY_KEPT: usize = 500;
/// Condition: the production version is what the inference service serves.
pub const SERVING: &str = "Serving";

fn stages(registry: &GryviaModelRegistry) -> BTreeMap<String, ModelStage> {
    registry
        .spec
        .versions
        .iter()
        .map(|v| (v.version.clone(), v.stage))
        .collect()
}

/// The stage changes from `before` to `after` (version by version; a new version counts from
/// no stage when registered at a stage other than `none`, a removed one to no stage).
pub fn changes(
    before: &BTreeMap<String, ModelStage>,
    after: &BTreeMap<String, ModelStage>,
    user: Option<&str>,
    now: Timestamp,
) -> Vec<StageChange> {
    let mut out = Vec::new();
    let entry = |version: &str, from, to| StageChange {
        version: version.to_owned(),
        from,
        to,
        user: user.map(str::to_owned),
        time: Time(now),
    };
    for (v, to) in after {
        match before.get(v) {
            Some(from) if from == to => {}
            Some(from) => out.push(entry(v, Some(*from), Some(*to))),
            None if *to == ModelStage::None => {}
            None => out.push(entry(v, None, Some(*to))),
        }
    }
    for (v, from) in before {
        if !after.contains_key(v) {
            out.push(entry(v, Some(*from), None));
        }
    }
    out
}

/// The audit entries in a registry's annotation (none when absent or unreadable).
pub fn annotated(registry: &GryviaModelRegistry) -> Vec<StageChange> {
    registry
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(AUDIT_ANNOTATION))
        .and_then(|s| serde_json::from_str(s).ok())
        .unwrap_or_default()
}

/// The JSON patch of the mutating webhook for a create (`old` is `None`) or update of a
/// registry by `user`: the annotation becomes the old object's entries plus this request's
/// stage changes (empty when it already is that).
pub fn audit(
    old: Option<&GryviaModelRegistry>,
    new: &GryviaModelRegistry,
    user: Option<&str>,
    now: Timestamp,
) -> Vec<Value> {
    let mut entries = old.map(annotated).unwrap_or_default();
    let before = old.map(stages).unwrap_or_default();
    entries.extend(changes(&before, &stages(new), user, now));
    if entries.len() > AUDIT_KEPT {
        let drop = entries.len() - AUDIT_KEPT;
        entries.drain(..drop);
    }
    let current = new
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(AUDIT_ANNOTATION));
    let desired = serde_json::to_string(&entries).unwrap_or_default();
    if entries.is_empty() && current.is_none() || current == Some(&desired) {
        return Vec::new();
    }
    let mut ops = Vec::new();
    if new.metadata.annotations.is_none() {
        ops.push(json!({"op": "add", "path": "/metadata/annotations", "value": {}}));
    }
    ops.push(json!({"op": "add", "path": "/metadata/annotations/gryvia.io~1stage-audit", "value": desired}));
    ops
}

/// Moves `version` to `stage` in `versions` (what `gryvia model promote` does); to
/// `production`, the version in production before is archived in the same change (the CRD
/// allows one). Returns that archived version.
///
/// # Errors
/// No version `version` (the message names the field and the versions there are).
pub fn promote(
    versions: &mut [gryvia_types::ModelVersion],
    version: &str,
    stage: ModelStage,
) -> Result<Option<String>, String> {
    if !versions.iter().any(|v| v.version == version) {
        let known: Vec<&str> = versions.iter().map(|v| v.version.as_str()).collect();
        return Err(format!(
            "spec.versions: no version {version:?} (there are: {})",
            if known.is_empty() {
                "none".to_owned()
            } else {
                known.join(", ")
            }
        ));
    }
    let mut archived = None;
    for v in versions.iter_mut() {
        if v.version == version {
            v.stage = stage;
        } else if stage == ModelStage::Production && v.stage == ModelStage::Production {
            v.stage = ModelStage::Archived;
            archived = Some(v.version.clone());
        }
    }
    Ok(archived)
}

/// What the registry's reconcile knows about its inference service.
#[derive(Clone, Debug, Default)]
pub struct RegistryWorld {
    /// The inference service named after the registry, when it exists and the registry owns
    /// it.
    pub service: Option<GryviaInferenceService>,
    /// An inference service of that name exists that the registry does not own (it is left
    /// alone).
    pub name_taken: bool,
}

/// The registry reconciler.
#[derive(Clone, Copy, Debug, Default)]
pub struct RegistryReconciler;

/// The history with the webhook's entries and the changes seen without one.
fn history(
    registry: &GryviaModelRegistry,
    status: &GryviaModelRegistryStatus,
    now: Timestamp,
) -> Vec<StageChange> {
    let mut history = status.history.clone();
    for e in annotated(registry) {
        if !history.contains(&e) {
            history.push(e);
        }
    }
    let current = stages(registry);
    let seen = changes(&status.stages, &current, None, now);
    for change in seen {
        let recorded = history
            .iter()
            .rev()
            .find(|e| e.version == change.version)
            .is_some_and(|e| e.to == change.to);
        if !recorded {
            history.push(change);
        }
    }
    if history.len() > HISTORY_KEPT {
        let drop = history.len() - HISTORY_KEPT;
        history.drain(..drop);
    }
    history
}

/// The inference service spec serving `production` (with its weights at `uri`) given the
/// service as it is.
fn service_spec(
    registry: &GryviaModelRegistry,
    production: &str,
    uri: &str,
    service: Option<&GryviaInferenceService>,
) -> Option<GryviaInferenceServiceSpec> {
    let auto = registry.spec.auto_serve.as_ref().filter(|a| a.enabled)?;
    let model = |version: &str, uri: Option<String>| ModelRef {
        name: registry.spec.model_name.clone(),
        version: version.to_owned(),
        uri,
    };
    let served = service.map(|s| {
        let st = s.status.as_ref();
        let version = st
            .and_then(|st| st.stable_version.clone())
            .unwrap_or_else(|| s.spec.model.version.clone());
        let uri = st
            .and_then(|st| st.stable_uri.clone())
            .or_else(|| s.spec.model.uri.clone());
        (version, uri)
    });
    let (model, canary) = match served {
        Some((version, served_uri)) if version != production => {
            let known = registry
                .spec
                .versions
                .iter()
                .find(|v| v.version == version)
                .map(|v| v.uri.clone());
            let c = auto.canary.clone().unwrap_or_default();
            let canary = Canary {
                version: production.to_owned(),
                uri: Some(uri.to_owned()),
                traffic_percent: c.traffic_percent,
                auto_promote: true,
                auto_rollback: true,
                analysis_seconds: c.analysis_seconds,
                max_error_rate_percent: c.max_error_rate_percent,
                max_latency_ms: c.max_latency_ms,
                error_rate_query: None,
                latency_query: None,
            };
            (model(&version, known.or(served_uri)), Some(canary))
        }
        _ => (model(production, Some(uri.to_owned())), None),
    };
    Some(GryviaInferenceServiceSpec {
        model,
        runtime: auto.runtime,
        image: auto.image.clone(),
        port: auto.port,
        gpus: auto.gpus,
        gpu_type: auto.gpu_type.clone(),
        replicas: auto.replicas.clone(),
        autoscaling: auto.autoscaling.clone(),
        canary,
    })
}

/// The `Serving` condition: what the service does with the production version.
fn serving_condition(
    production: &str,
    service: Option<&GryviaInferenceService>,
) -> (Status, &'static str, String) {
    let st = service.and_then(|s| s.status.clone()).unwrap_or_default();
    let stable = st.stable_version.clone().unwrap_or_default();
    if stable == production && st.ready_replicas > 0 {
        return (
            Status::True,
            "Serving",
            format!(
                "version {production} on {} ready replica(s)",
                st.ready_replicas
            ),
        );
    }
    let canary_of_production = st.canary_version.as_deref() == Some(production);
    let why = st
        .decision
        .as_ref()
        .map(|d| d.message.clone())
        .unwrap_or_default();
    match st.canary_phase.as_deref() {
        Some(phase::ROLLED_BACK) if canary_of_production => (
            Status::False,
            "CanaryRolledBack",
            format!("the canary of version {production} was rolled back ({why}); {stable} serves"),
        ),
        Some(p) if canary_of_production => (
            Status::False,
            "Canary",
            format!("version {production} is a canary ({p}) next to {stable}"),
        ),
        _ => (
            Status::False,
            "Waiting",
            format!("version {production} has no ready replica yet"),
        ),
    }
}

impl Reconcile for RegistryReconciler {
    type Object = GryviaModelRegistry;
    type World = RegistryWorld;
    type Status = GryviaModelRegistryStatus;

    fn name(&self) -> &'static str {
        "model-registry"
    }

    fn reconcile(
        &self,
        registry: &GryviaModelRegistry,
        world: &RegistryWorld,
        now: Timestamp,
    ) -> Plan<GryviaModelRegistryStatus> {
        let mut plan = Plan::new();
        let current = registry.status.clone();
        let mut status = current.clone().unwrap_or_default();
        let before = status.history.len();
        status.history = history(registry, &status, now);
        for e in status.history.iter().skip(before) {
            let to =
                e.to.map_or("removed".to_owned(), |s| format!("{s:?}").to_lowercase());
            let by = e.user.as_deref().unwrap_or("an unrecorded user");
            plan.event(
                EventType::Normal,
                "StageChanged",
                format!("version {} to {to} by {by}", e.version),
            );
        }
        status.stages = stages(registry);
        let production = registry
            .spec
            .versions
            .iter()
            .find(|v| v.stage == ModelStage::Production);
        status.production_version = production.map(|v| v.version.clone());
        let generation = registry.metadata.generation;
        let name = registry.metadata.name.clone().unwrap_or_default();
        let service = world.service.as_ref();
        status.serving_version = service
            .and_then(|s| s.status.as_ref())
            .and_then(|s| s.stable_version.clone());
        let desired = production.and_then(|p| service_spec(registry, &p.version, &p.uri, service));
        match (production, desired) {
            (Some(p), Some(_)) if world.name_taken => {
                let message = format!(
                    "version {} is not served: the GryviaInferenceService {name} exists and is not this registry's",
                    p.version
                );
                conditions::set(
                    &mut status.conditions,
                    conditions::new(
                        SERVING,
                        Status::False,
                        "NameTaken",
                        message,
                        generation,
                        now,
                    ),
                );
            }
            (Some(p), Some(spec)) => {
                let isvc = GryviaInferenceService {
                    metadata: ObjectMeta {
                        name: Some(name.clone()),
                        namespace: registry.metadata.namespace.clone(),
                        labels: Some(BTreeMap::from([(
                            gryvia_types::labels::MANAGED_BY.to_owned(),
                            gryvia_types::labels::MANAGED_BY_VALUE.to_owned(),
                        )])),
                        ..Default::default()
                    },
                    spec,
                    status: None,
                };
                plan.apply_built(Child::from_resource(&isvc));
                status.inference_service = Some(name);
                let (s, reason, message) = serving_condition(&p.version, service);
                conditions::set(
                    &mut status.conditions,
                    conditions::new(SERVING, s, reason, message, generation, now),
                );
            }
            _ => {
                status.conditions.retain(|c| c.type_ != SERVING);
            }
        }
        let ready_msg = match &status.production_version {
            Some(v) => format!("production version {v}"),
            None => "no production version".to_owned(),
        };
        conditions::set(
            &mut status.conditions,
            conditions::new(
                conditions::READY,
                Status::True,
                conditions::REASON_RECONCILED,
                ready_msg,
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
