//! The GryviaWorkflow controller of the ai-operator: DAG steps as GryviaAIJobs (policy:
//! `gryvia_reconcile::workflow`). Reads its steps' jobs and the templates its steps name from
//! the operator's caches.

use std::collections::BTreeMap;

use gryvia_reconcile::workflow::{StepJob, WorkflowReconciler, WorkflowWorld};
use gryvia_types::{GryviaAIJob, GryviaTemplate, GryviaWorkflow, labels};
use kube::ResourceExt;
use kube::runtime::controller::Controller;
use kube::runtime::reflector::Store;

use super::{Running, Shared, cached, changed};
use crate::Result;
use crate::cache::wait_ready;
use crate::runtime::{Observe, run, spec_or_lifecycle};

/// Observes a workflow: the GryviaAIJobs of its steps and the templates its steps name.
pub struct WorkflowObserver {
    jobs: Store<GryviaAIJob>,
    templates: Store<GryviaTemplate>,
}

#[async_trait::async_trait]
impl Observe for WorkflowObserver {
    type Object = GryviaWorkflow;
    type World = WorkflowWorld;

    async fn observe(&self, workflow: &GryviaWorkflow) -> Result<WorkflowWorld> {
        wait_ready(&self.jobs, "GryviaAIJob").await?;
        wait_ready(&self.templates, "GryviaTemplate").await?;
        let ns = workflow.namespace();
        let name = workflow.name_any();
        let uid = workflow.uid().unwrap_or_default();
        let mut jobs: Vec<_> = self
            .jobs
            .state()
            .into_iter()
            .filter(|j| {
                j.namespace() == ns
                    && j.labels().get(labels::WORKFLOW) == Some(&name)
                    // Only jobs this workflow owns (not a namesake's left-overs).
                    && j.owner_references().iter().any(|o| o.uid == uid)
            })
            .collect();
        jobs.sort_by_key(|j| j.name_any());
        let jobs = jobs.iter().filter_map(|j| StepJob::of(j)).collect();
        let templates = workflow
            .spec
            .steps
            .iter()
            .filter_map(|s| s.template_ref.as_ref())
            .filter_map(|r| {
                cached(&self.templates, None, &r.name).map(|t| (r.name.clone(), (*t).clone()))
            })
            .collect::<BTreeMap<_, _>>();
        Ok(WorkflowWorld { jobs, templates })
    }
}

/// The workflow controller: a workflow is reconciled when its spec changes and whenever one
/// of its steps' jobs does.
pub fn controller(shared: &Shared) -> Running {
    let caches = &shared.caches;
    let trigger = changed(caches.subscribe::<GryviaWorkflow>(), spec_or_lifecycle);
    let ctrl = Controller::for_shared_stream(trigger, caches.store())
        .owns_shared_stream(caches.subscribe::<GryviaAIJob>());
    let observer = WorkflowObserver {
        jobs: caches.store(),
        templates: caches.store(),
    };
    Box::pin(run(ctrl, shared.context(WorkflowReconciler, observer)))
}
