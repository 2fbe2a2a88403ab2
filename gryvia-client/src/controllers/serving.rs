//! The GryviaInferenceService controller of the ai-operator: Deployments, Service and
//! autoscaler of a model server and its canary (policy: `gryvia_reconcile::serving`). Reads
//! the service's Deployments, its autoscaler and the model's registries from the operator's
//! caches, and, while a canary is analysed, its error rate and latency from the metrics
//! source (`--metrics-url`).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use gryvia_reconcile::serving::{
    self, Reading, SERVICE_LABEL, ServingReconciler, ServingWorld, Track,
};
use gryvia_types::{GryviaInferenceService, GryviaModelRegistry};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use kube::ResourceExt;
use kube::runtime::controller::Controller;
use kube::runtime::reflector::{ObjectRef, Store};

use super::{Running, Shared, cached, changed};
use crate::Result;
use crate::cache::wait_ready;
use crate::runtime::{Observe, run, spec_or_lifecycle};

/// Observes an inference service.
pub struct ServingObserver {
    deployments: Store<Deployment>,
    autoscalers: Store<HorizontalPodAutoscaler>,
    registries: Store<GryviaModelRegistry>,
    metrics_url: Option<String>,
    check_interval: Duration,
}

/// A Deployment as the policy sees it.
fn track(d: &Deployment) -> Track {
    let status = d.status.clone().unwrap_or_default();
    let stalled = status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "Progressing" && c.status == "False")
        .map(|c| {
            c.reason
                .clone()
                .unwrap_or_else(|| "Progressing=False".to_owned())
        });
    Track {
        replicas: d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1),
        ready: status.ready_replicas.unwrap_or(0),
        stalled,
    }
}

/// The weights location of each version of `model` in the registries of `namespace`.
pub fn registry_uris(
    registries: &Store<GryviaModelRegistry>,
    namespace: &str,
    model: &str,
) -> BTreeMap<String, String> {
    let mut regs: Vec<_> = registries
        .state()
        .into_iter()
        .filter(|r| r.namespace().as_deref() == Some(namespace) && r.spec.model_name == model)
        .collect();
    regs.sort_by_key(|r| r.name_any());
    regs.iter()
        .flat_map(|r| r.spec.versions.iter())
        .map(|v| (v.version.clone(), v.uri.clone()))
        .collect()
}

impl ServingObserver {
    async fn reading(&self, isvc: &GryviaInferenceService) -> Reading {
        if !serving::analysing(isvc) {
            return Reading::NotRead;
        }
        let Some(url) = &self.metrics_url else {
            return Reading::Unconfigured;
        };
        let Some(q) = serving::queries(isvc, self.check_interval) else {
            return Reading::NotRead;
        };
        let error = crate::promql::query(url, &q.error_ratio).await;
        let latency = crate::promql::query(url, &q.latency).await;
        match (error, latency) {
            (Err(e), _) | (_, Err(e)) => Reading::Unavailable(e),
            (Ok(error_ratio), Ok(latency_seconds)) => Reading::Read {
                error_ratio,
                latency_seconds,
            },
        }
    }
}

#[async_trait::async_trait]
impl Observe for ServingObserver {
    type Object = GryviaInferenceService;
    type World = ServingWorld;

    async fn observe(&self, isvc: &GryviaInferenceService) -> Result<ServingWorld> {
        wait_ready(&self.deployments, "Deployment").await?;
        wait_ready(&self.autoscalers, "HorizontalPodAutoscaler").await?;
        wait_ready(&self.registries, "GryviaModelRegistry").await?;
        let ns = isvc.namespace().unwrap_or_default();
        let name = isvc.name_any();
        let uid = isvc.uid().unwrap_or_default();
        let owned = |d: &Arc<Deployment>| d.owner_references().iter().any(|o| o.uid == uid);
        let stable = cached(&self.deployments, Some(&ns), &name).filter(owned);
        let canary =
            cached(&self.deployments, Some(&ns), &serving::canary_name(&name)).filter(owned);
        let autoscaler = cached(&self.autoscalers, Some(&ns), &name)
            .is_some_and(|h| h.owner_references().iter().any(|o| o.uid == uid));
        Ok(ServingWorld {
            registry_uris: registry_uris(&self.registries, &ns, &isvc.spec.model.name),
            stable: stable.map(|d| track(&d)),
            canary: canary.map(|d| track(&d)),
            autoscaler,
            reading: self.reading(isvc).await,
        })
    }
}

/// The inference service controller: a service is reconciled when its spec changes, when one
/// of its Deployments or its autoscaler does, when a registry of its model does, and every
/// `check_interval` while its canary is analysed (metrics read from `metrics_url`, a
/// Prometheus-compatible query API; readiness alone without one).
pub fn controller(
    shared: &Shared,
    metrics_url: Option<String>,
    check_interval: Duration,
) -> Running {
    let caches = &shared.caches;
    let services: Store<GryviaInferenceService> = caches.store();
    let for_registries = services.clone();
    let ctrl = Controller::for_shared_stream(
        changed(
            caches.subscribe::<GryviaInferenceService>(),
            spec_or_lifecycle,
        ),
        services,
    )
    .owns_shared_stream(caches.subscribe_labelled::<Deployment>(SERVICE_LABEL))
    .owns_shared_stream(caches.subscribe_labelled::<HorizontalPodAutoscaler>(SERVICE_LABEL))
    .watches_shared_stream(
        changed(caches.subscribe::<GryviaModelRegistry>(), spec_or_lifecycle),
        move |r: Arc<GryviaModelRegistry>| {
            let ns = r.namespace();
            for_registries
                .state()
                .into_iter()
                .filter(|s| s.namespace() == ns && s.spec.model.name == r.spec.model_name)
                .map(|s| ObjectRef::from_obj(&*s))
                .collect::<Vec<_>>()
        },
    );
    let observer = ServingObserver {
        deployments: caches.store_labelled(SERVICE_LABEL),
        autoscalers: caches.store_labelled(SERVICE_LABEL),
        registries: caches.store(),
        metrics_url,
        check_interval,
    };
    Box::pin(run(
        ctrl,
        shared.context(ServingReconciler { check_interval }, observer),
    ))
}
