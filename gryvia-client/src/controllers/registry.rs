//! The GryviaModelRegistry controller of the ai-operator: the audit trail of stage changes and
//! the inference service of the production version (policy: `gryvia_reconcile::registry`).
//! Reads the registry's inference service from the operator's caches.

use gryvia_reconcile::registry::{RegistryReconciler, RegistryWorld};
use gryvia_types::{GryviaInferenceService, GryviaModelRegistry};
use kube::ResourceExt;
use kube::runtime::controller::Controller;
use kube::runtime::reflector::Store;

use super::{Running, Shared, cached, changed};
use crate::Result;
use crate::cache::wait_ready;
use crate::runtime::{Observe, run, spec_or_lifecycle};

/// Observes a registry: the inference service named after it.
pub struct RegistryObserver {
    services: Store<GryviaInferenceService>,
}

#[async_trait::async_trait]
impl Observe for RegistryObserver {
    type Object = GryviaModelRegistry;
    type World = RegistryWorld;

    async fn observe(&self, registry: &GryviaModelRegistry) -> Result<RegistryWorld> {
        wait_ready(&self.services, "GryviaInferenceService").await?;
        let ns = registry.namespace();
        let uid = registry.uid().unwrap_or_default();
        let found = cached(&self.services, ns.as_deref(), &registry.name_any());
        let owned = found
            .as_ref()
            .is_some_and(|s| s.owner_references().iter().any(|o| o.uid == uid));
        Ok(RegistryWorld {
            name_taken: found.is_some() && !owned,
            service: found.filter(|_| owned).map(|s| (*s).clone()),
        })
    }
}

/// The registry controller: a registry is reconciled when its spec changes and whenever its
/// inference service does (its canary's progress).
pub fn controller(shared: &Shared) -> Running {
    let caches = &shared.caches;
    let trigger = changed(caches.subscribe::<GryviaModelRegistry>(), spec_or_lifecycle);
    let ctrl = Controller::for_shared_stream(trigger, caches.store())
        .owns_shared_stream(caches.subscribe::<GryviaInferenceService>());
    let observer = RegistryObserver {
        services: caches.store(),
    };
    Box::pin(run(ctrl, shared.context(RegistryReconciler, observer)))
}
