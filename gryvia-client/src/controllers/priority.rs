//! The GryviaPriority controller of the ai-operator: a PriorityClass per priority tier
//! (policy: `gryvia_reconcile::priority`).

use std::sync::Arc;

use gryvia_reconcile::priority::{ObservedClass, PriorityReconciler, PriorityWorld};
use gryvia_types::GryviaPriority;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::ResourceExt;
use kube::runtime::controller::Controller;
use kube::runtime::reflector::Store;

use super::{Running, Shared, cached};
use crate::Result;
use crate::cache::wait_ready;
use crate::runtime::{Observe, cluster_owner, run};

/// Observes a priority tier: the PriorityClass of the same name.
pub struct PriorityObserver {
    classes: Store<PriorityClass>,
}

#[async_trait::async_trait]
impl Observe for PriorityObserver {
    type Object = GryviaPriority;
    type World = PriorityWorld;

    async fn observe(&self, prio: &GryviaPriority) -> Result<PriorityWorld> {
        wait_ready(&self.classes, "PriorityClass").await?;
        let class = cached(&self.classes, None, &prio.name_any()).map(|pc| ObservedClass::of(&pc));
        Ok(PriorityWorld { class })
    }
}

/// The priority controller: a tier is reconciled when it or its PriorityClass changes.
pub fn controller(shared: &Shared) -> Running {
    let caches = &shared.caches;
    let ctrl = Controller::for_shared_stream(caches.subscribe::<GryviaPriority>(), caches.store())
        .watches_shared_stream(
            caches.subscribe::<PriorityClass>(),
            |pc: Arc<PriorityClass>| cluster_owner::<GryviaPriority, _>(pc.as_ref()),
        );
    let observer = PriorityObserver {
        classes: caches.store(),
    };
    Box::pin(run(ctrl, shared.context(PriorityReconciler, observer)))
}
