//! The observe half and the wiring of the workflow controller (GryviaWorkflow): the jobs of
//! its steps and the templates its steps name. The policy is in `gryvia_reconcile::workflow`.

use std::collections::BTreeMap;

use gryvia_reconcile::workflow::{StepJob, WorkflowReconciler, WorkflowWorld};
use gryvia_types::{GryviaAIJob, GryviaTemplate, GryviaWorkflow, labels};
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use kube::runtime::watcher;

use crate::metrics::Metrics;
use crate::runtime::{Context, Observe, run, spec_controller};
use crate::{Result, api_err};

/// Observes a workflow: the GryviaAIJobs of its steps and the templates its steps name.
pub struct WorkflowObserver {
    client: kube::Client,
}

impl WorkflowObserver {
    /// An observer reading through `client`.
    pub fn new(client: kube::Client) -> Self {
        WorkflowObserver { client }
    }
}

#[async_trait::async_trait]
impl Observe for WorkflowObserver {
    type Object = GryviaWorkflow;
    type World = WorkflowWorld;

    async fn observe(&self, workflow: &GryviaWorkflow) -> Result<WorkflowWorld> {
        let ns = workflow.namespace().unwrap_or_default();
        let name = workflow.name_any();
        let uid = workflow.uid().unwrap_or_default();
        let jobs = Api::<GryviaAIJob>::namespaced(self.client.clone(), &ns)
            .list(&ListParams::default().labels(&format!("{}={name}", labels::WORKFLOW)))
            .await
            .map_err(api_err(format!("list the jobs of workflow {ns}/{name}")))?
            .items
            .iter()
            // Only jobs this workflow owns (not a namesake's left-overs).
            .filter(|j| j.owner_references().iter().any(|o| o.uid == uid))
            .filter_map(StepJob::of)
            .collect();
        let mut templates = BTreeMap::new();
        let api: Api<GryviaTemplate> = Api::all(self.client.clone());
        for r in workflow
            .spec
            .steps
            .iter()
            .filter_map(|s| s.template_ref.as_ref())
        {
            if templates.contains_key(&r.name) {
                continue;
            }
            if let Some(t) = api
                .get_opt(&r.name)
                .await
                .map_err(api_err(format!("read GryviaTemplate {}", r.name)))?
            {
                templates.insert(r.name.clone(), t);
            }
        }
        Ok(WorkflowWorld { jobs, templates })
    }
}

/// Runs the workflow controller until its streams end: a workflow is reconciled when its spec
/// changes and whenever one of its steps' jobs does.
pub async fn run_controller(client: kube::Client, metrics: Metrics) {
    let ctrl = spec_controller(Api::<GryviaWorkflow>::all(client.clone()))
        .0
        .owns(
            Api::<GryviaAIJob>::all(client.clone()),
            watcher::Config::default().labels(labels::WORKFLOW),
        );
    let ctx = Context::for_client(
        WorkflowReconciler,
        WorkflowObserver::new(client.clone()),
        &client,
        metrics,
    );
    run(ctrl, ctx).await;
}
