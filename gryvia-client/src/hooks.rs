//! The observe half and the wiring of the job hooks controller (GryviaJobHook): the jobs and
//! workflows of the hook's namespace and whether its signing key can be read. The policy is in
//! `gryvia_reconcile::hooks`; the executor delivers the signed POSTs (`crate::webhook`).

use gryvia_reconcile::hooks::{HookReconciler, HookWorld, SecretState, Subject};
use gryvia_types::{GryviaAIJob, GryviaJobHook, GryviaWorkflow};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ListParams};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};

use crate::metrics::Metrics;
use crate::runtime::{Context, Observe, run, spec_controller};
use crate::{Result, api_err};

/// Observes a hook's namespace: its jobs, its workflows (when the hook includes them) and the
/// signing key.
pub struct HookObserver {
    client: kube::Client,
}

impl HookObserver {
    /// An observer reading through `client`.
    pub fn new(client: kube::Client) -> Self {
        HookObserver { client }
    }
}

#[async_trait::async_trait]
impl Observe for HookObserver {
    type Object = GryviaJobHook;
    type World = HookWorld;

    async fn observe(&self, hook: &GryviaJobHook) -> Result<HookWorld> {
        let ns = hook.namespace().unwrap_or_default();
        let mut subjects: Vec<Subject> = Api::<GryviaAIJob>::namespaced(self.client.clone(), &ns)
            .list(&ListParams::default())
            .await
            .map_err(api_err(format!("list GryviaAIJobs in {ns}")))?
            .items
            .iter()
            .map(Subject::of_job)
            .collect();
        if hook.spec.selector.include_workflows {
            subjects.extend(
                Api::<GryviaWorkflow>::namespaced(self.client.clone(), &ns)
                    .list(&ListParams::default())
                    .await
                    .map_err(api_err(format!("list GryviaWorkflows in {ns}")))?
                    .items
                    .iter()
                    .map(Subject::of_workflow),
            );
        }
        let key = &hook.spec.secret_ref;
        let secret = match Api::<Secret>::namespaced(self.client.clone(), &ns)
            .get_opt(&key.name)
            .await
            .map_err(api_err(format!("read secret {ns}/{}", key.name)))?
        {
            None => SecretState::Missing,
            Some(s) if s.data.as_ref().is_some_and(|d| d.contains_key(&key.key)) => {
                SecretState::Present
            }
            Some(_) => SecretState::NoKey,
        };
        Ok(HookWorld { subjects, secret })
    }
}

/// Every hook of the namespace of `object` (a job or workflow changed: each hook decides
/// whether it watches it).
fn hooks_of_namespace<K: Resource>(
    hooks: &Store<GryviaJobHook>,
    object: &K,
) -> Vec<ObjectRef<GryviaJobHook>> {
    let ns = object.meta().namespace.clone();
    hooks
        .state()
        .iter()
        .filter(|h| h.metadata.namespace == ns)
        .map(|h| ObjectRef::from_obj(h.as_ref()))
        .collect()
}

/// Runs the job hooks controller until its streams end: hooks are reconciled when they change
/// and whenever a job or workflow of their namespace does (status changes included: a phase
/// change is what a hook reports).
pub async fn run_controller(client: kube::Client, metrics: Metrics) {
    let (ctrl, hooks) = spec_controller(Api::<GryviaJobHook>::all(client.clone()));
    let for_jobs = hooks.clone();
    let ctrl = ctrl
        .watches(
            Api::<GryviaAIJob>::all(client.clone()),
            watcher::Config::default(),
            move |job: GryviaAIJob| hooks_of_namespace(&for_jobs, &job),
        )
        .watches(
            Api::<GryviaWorkflow>::all(client.clone()),
            watcher::Config::default(),
            move |wf: GryviaWorkflow| hooks_of_namespace(&hooks, &wf),
        );
    let ctx = Context::for_client(
        HookReconciler,
        HookObserver::new(client.clone()),
        &client,
        metrics,
    );
    run(ctrl, ctx).await;
}
