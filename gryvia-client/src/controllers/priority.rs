//! The GryviaPriority controller of the ai-operator: a PriorityClass per priority tier
//! (policy: `gryvia_reconcile::priority`).

use std::sync::Arc;

use gryvia_reconcile::aijob::SLA_BREACHED;
use gryvia_reconcile::priority::{ObservedClass, PriorityReconciler, PriorityWorld, sla_counts};
use gryvia_types::conditions;
use gryvia_types::{GryviaAIJob, GryviaPriority, labels};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::ResourceExt;
use kube::runtime::controller::Controller;
use kube::runtime::reflector::{ObjectRef, Store};

use super::{Running, Shared, cached, changed};
use crate::Result;
use crate::cache::wait_ready;
use crate::runtime::{Observe, cluster_owner, run};

/// Observes a priority tier: the PriorityClass of the same name, and its jobs' SLA outcomes.
pub struct PriorityObserver {
    classes: Store<PriorityClass>,
    jobs: Store<GryviaAIJob>,
}

#[async_trait::async_trait]
impl Observe for PriorityObserver {
    type Object = GryviaPriority;
    type World = PriorityWorld;

    async fn observe(&self, prio: &GryviaPriority) -> Result<PriorityWorld> {
        wait_ready(&self.classes, "PriorityClass").await?;
        wait_ready(&self.jobs, "GryviaAIJob").await?;
        let class = cached(&self.classes, None, &prio.name_any()).map(|pc| ObservedClass::of(&pc));
        let jobs = self.jobs.state();
        let sla = sla_counts(&prio.name_any(), jobs.iter().map(AsRef::as_ref));
        Ok(PriorityWorld { class, sla })
    }
}

/// A job's SLA outcome as a change key: none, started in time, breached.
fn sla_outcome(job: &GryviaAIJob) -> Option<u64> {
    let c = job
        .status
        .as_ref()
        .and_then(|s| conditions::find(&s.conditions, SLA_BREACHED));
    Some(c.map_or(0, |c| if c.status == "True" { 2 } else { 1 }))
}

/// The priority controller: a tier is reconciled when it or its PriorityClass changes, and
/// when a job naming it gets its SLA outcome.
pub fn controller(shared: &Shared) -> Running {
    let caches = &shared.caches;
    let ctrl = Controller::for_shared_stream(caches.subscribe::<GryviaPriority>(), caches.store())
        .watches_shared_stream(
            caches.subscribe::<PriorityClass>(),
            |pc: Arc<PriorityClass>| cluster_owner::<GryviaPriority, _>(pc.as_ref()),
        )
        .watches_shared_stream(
            changed(caches.subscribe::<GryviaAIJob>(), sla_outcome),
            |job: Arc<GryviaAIJob>| {
                job.annotations()
                    .get(labels::PRIORITY_CLASS)
                    .map(|t| ObjectRef::<GryviaPriority>::new(t))
            },
        );
    let observer = PriorityObserver {
        classes: caches.store(),
        jobs: caches.store(),
    };
    Box::pin(run(ctrl, shared.context(PriorityReconciler, observer)))
}
