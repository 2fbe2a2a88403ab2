//! The GryviaJobHook controller of the ai-operator (opt-in): signed POSTs when selected jobs
//! and workflows start, are retried, succeed or fail (policy: `gryvia_reconcile::hooks`; the
//! executor delivers, `crate::webhook`).

use std::sync::Arc;

use gryvia_reconcile::hooks::{HookReconciler, HookWorld, SecretState, Subject};
use gryvia_types::{GryviaAIJob, GryviaJobHook, GryviaWorkflow};
use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use kube::runtime::controller::Controller;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Resource, ResourceExt};

use super::{Running, Shared, changed, in_namespace};
use crate::cache::wait_ready;
use crate::runtime::{Observe, run, spec_or_lifecycle};
use crate::{Result, api_err};

/// Observes a hook's namespace: its jobs, its workflows (when the hook includes them) and the
/// signing key.
pub struct HookObserver {
    client: kube::Client,
    jobs: Store<GryviaAIJob>,
    workflows: Store<GryviaWorkflow>,
}

#[async_trait::async_trait]
impl Observe for HookObserver {
    type Object = GryviaJobHook;
    type World = HookWorld;

    async fn observe(&self, hook: &GryviaJobHook) -> Result<HookWorld> {
        wait_ready(&self.jobs, "GryviaAIJob").await?;
        wait_ready(&self.workflows, "GryviaWorkflow").await?;
        let ns = hook.namespace();
        let mut subjects: Vec<Subject> = in_namespace(&self.jobs, ns.as_deref())
            .iter()
            .map(|j| Subject::of_job(j))
            .collect();
        if hook.spec.selector.include_workflows {
            subjects.extend(
                in_namespace(&self.workflows, ns.as_deref())
                    .iter()
                    .map(|w| Subject::of_workflow(w)),
            );
        }
        let ns = ns.unwrap_or_default();
        let key = &hook.spec.secret_ref;
        // The key is read when needed, never cached: the operator keeps no Secrets of the
        // cluster in memory, and its RBAC grants `get` on Secrets, not list or watch.
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

/// The job hooks controller: hooks are reconciled when they change and whenever a job or
/// workflow of their namespace does (status changes included: a phase change is what a hook
/// reports).
pub fn controller(shared: &Shared) -> Running {
    let caches = &shared.caches;
    let hooks: Store<GryviaJobHook> = caches.store();
    let for_jobs = hooks.clone();
    let for_workflows = hooks.clone();
    let trigger = changed(caches.subscribe::<GryviaJobHook>(), spec_or_lifecycle);
    let ctrl = Controller::for_shared_stream(trigger, hooks)
        .watches_shared_stream(
            caches.subscribe::<GryviaAIJob>(),
            move |job: Arc<GryviaAIJob>| hooks_of_namespace(&for_jobs, job.as_ref()),
        )
        .watches_shared_stream(
            caches.subscribe::<GryviaWorkflow>(),
            move |wf: Arc<GryviaWorkflow>| hooks_of_namespace(&for_workflows, wf.as_ref()),
        );
    let observer = HookObserver {
        client: shared.client.clone(),
        jobs: caches.store(),
        workflows: caches.store(),
    };
    Box::pin(run(ctrl, shared.context(HookReconciler, observer)))
}
