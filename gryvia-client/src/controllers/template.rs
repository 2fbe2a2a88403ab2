//! The GryviaTemplate controller of the ai-operator: validity and the number of jobs made from
//! each template (policy: `gryvia_reconcile::template`).

use std::sync::Arc;

use gryvia_reconcile::template::{TemplateReconciler, TemplateWorld};
use gryvia_types::{GryviaAIJob, GryviaTemplate, labels};
use kube::ResourceExt;
use kube::runtime::controller::Controller;
use kube::runtime::reflector::{ObjectRef, Store};

use super::{Running, Shared};
use crate::Result;
use crate::cache::wait_ready;
use crate::runtime::{Observe, run};

/// Observes a template: how many jobs carry its label.
pub struct TemplateObserver {
    jobs: Store<GryviaAIJob>,
}

#[async_trait::async_trait]
impl Observe for TemplateObserver {
    type Object = GryviaTemplate;
    type World = TemplateWorld;

    async fn observe(&self, template: &GryviaTemplate) -> Result<TemplateWorld> {
        wait_ready(&self.jobs, "GryviaAIJob").await?;
        let name = template.name_any();
        let n = self
            .jobs
            .state()
            .iter()
            .filter(|j| j.labels().get(labels::TEMPLATE) == Some(&name))
            .count();
        Ok(TemplateWorld {
            instantiated_jobs: i32::try_from(n).unwrap_or(i32::MAX),
        })
    }
}

/// The template controller: a template is re-counted when a job labelled with it comes or
/// goes.
pub fn controller(shared: &Shared) -> Running {
    let caches = &shared.caches;
    let ctrl = Controller::for_shared_stream(caches.subscribe::<GryviaTemplate>(), caches.store())
        .watches_shared_stream(
            caches.subscribe::<GryviaAIJob>(),
            |job: Arc<GryviaAIJob>| {
                job.labels()
                    .get(labels::TEMPLATE)
                    .map(|t| ObjectRef::<GryviaTemplate>::new(t))
            },
        );
    let observer = TemplateObserver {
        jobs: caches.store(),
    };
    Box::pin(run(ctrl, shared.context(TemplateReconciler, observer)))
}
