//! AI jobs for the CLI, the gateway and the Python SDK: submit, read, wait, the pods of a
//! job, free capacity, the pending jobs, template rendering.

use std::collections::BTreeMap;

use gryvia_types::{GryviaAIJob, GryviaTemplate, labels};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams};
use kube::{Resource, ResourceExt};

use crate::{Result, api_err};

/// Field manager of the objects the CLI creates.
pub const CLI_MANAGER: &str = super::CLI_MANAGER;

/// Creates an AI job (the API server validates it and answers with the field at fault).
///
/// # Errors
/// [`crate::Error::Api`] with the API server's (or an admission webhook's) message.
pub async fn submit(client: &kube::Client, job: &GryviaAIJob) -> Result<GryviaAIJob> {
    let ns = job.namespace().unwrap_or_else(|| "default".to_owned());
    let name = job.name_any();
    Api::<GryviaAIJob>::namespaced(client.clone(), &ns)
        .create(
            &kube::api::PostParams {
                field_manager: Some(CLI_MANAGER.to_owned()),
                ..Default::default()
            },
            job,
        )
        .await
        .map_err(api_err(format!("create GryviaAIJob {ns}/{name}")))
}

/// Reads an AI job; `None` when it does not exist.
///
/// # Errors
/// [`crate::Error::Api`] when the read fails.
pub async fn get(
    client: &kube::Client,
    namespace: &str,
    name: &str,
) -> Result<Option<GryviaAIJob>> {
    Api::<GryviaAIJob>::namespaced(client.clone(), namespace)
        .get_opt(name)
        .await
        .map_err(api_err(format!("read GryviaAIJob {namespace}/{name}")))
}

/// The pods of an AI job, sorted by name.
///
/// # Errors
/// [`crate::Error::Api`] when listing fails.
pub async fn pods_of(client: &kube::Client, namespace: &str, name: &str) -> Result<Vec<Pod>> {
    let mut pods = Api::<Pod>::namespaced(client.clone(), namespace)
        .list(&ListParams::default().labels(&format!("{}={name}", labels::JOB_NAME)))
        .await
        .map_err(api_err(format!("list pods of {namespace}/{name}")))?
        .items;
    pods.sort_by_key(|p| p.meta().name.clone());
    Ok(pods)
}

/// Every object of kind `K` (all namespaces) that `params` select; `what` names them in the
/// error.
async fn list_all<K>(client: &kube::Client, params: &ListParams, what: &str) -> Result<Vec<K>>
where
    K: Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    Ok(Api::<K>::all(client.clone())
        .list(params)
        .await
        .map_err(api_err(format!("list {what}")))?
        .items)
}

/// Pods that have not finished (they hold what they request).
fn running_pods() -> ListParams {
    ListParams::default().fields("status.phase!=Succeeded,status.phase!=Failed")
}

/// Free GPUs per node (see `gryvia_reconcile::aijob::capacity`).
///
/// # Errors
/// [`crate::Error::Api`] when listing nodes or pods fails.
pub async fn capacity(client: &kube::Client) -> Result<Vec<gryvia_reconcile::aijob::NodeCapacity>> {
    let nodes: Vec<Node> = list_all(client, &ListParams::default(), "nodes").await?;
    let pods: Vec<Pod> = list_all(client, &running_pods(), "running pods").await?;
    Ok(gryvia_reconcile::aijob::capacity(&nodes, &pods))
}

/// What the native queue would do with `job` if it were submitted now (`gryvia queue
/// --what-if`): reads the queues, jobs, priority tiers, nodes and pods, creates nothing.
///
/// # Errors
/// [`crate::Error::Api`] when a list fails.
pub async fn what_if(
    client: &kube::Client,
    job: &GryviaAIJob,
) -> Result<gryvia_reconcile::queue::WhatIf> {
    use gryvia_types::scheduling::{GryviaPriority, GryviaQueue};
    let all = ListParams::default();
    let queues: Vec<GryviaQueue> = list_all(client, &all, "GryviaQueues").await?;
    let jobs: Vec<GryviaAIJob> = list_all(client, &all, "GryviaAIJobs").await?;
    let priorities: Vec<GryviaPriority> = list_all(client, &all, "GryviaPriorities").await?;
    let nodes: Vec<Node> = list_all(client, &all, "nodes").await?;
    let pods: Vec<Pod> = list_all(client, &running_pods(), "running pods").await?;
    let world = gryvia_reconcile::queue::world_of(&queues, &jobs, &priorities, &nodes, &pods);
    let now = jiff::Timestamp::now();
    Ok(gryvia_reconcile::queue::what_if(
        &world,
        job,
        &priorities,
        now,
    ))
}

/// Jobs that wait (phase Pending, or not yet seen by the operator), in `namespace` or all
/// namespaces: those in a native queue by queue and position, then the others by priority
/// and age.
///
/// # Errors
/// [`crate::Error::Api`] when listing fails.
pub async fn pending(client: &kube::Client, namespace: Option<&str>) -> Result<Vec<GryviaAIJob>> {
    let api: Api<GryviaAIJob> = match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let jobs = api
        .list(&ListParams::default())
        .await
        .map_err(api_err("list GryviaAIJobs"))?
        .items;
    Ok(gryvia_reconcile::aijob::pending_queue(jobs))
}

/// Reads a template and renders it into the job `name` (or a generated name) in `namespace`.
///
/// # Errors
/// [`crate::Error::Api`] when the template cannot be read, [`crate::Error::Invalid`] when it
/// does not exist or does not render (naming the parameter or field).
pub async fn render_template(
    client: &kube::Client,
    template: &str,
    name: Option<&str>,
    namespace: &str,
    params: &BTreeMap<String, String>,
) -> Result<GryviaAIJob> {
    let tpl = Api::<GryviaTemplate>::all(client.clone())
        .get_opt(template)
        .await
        .map_err(api_err(format!("read GryviaTemplate {template}")))?
        .ok_or_else(|| crate::Error::Invalid(format!("template {template} does not exist")))?;
    gryvia_reconcile::template::instantiate(&tpl, name, namespace, params)
        .map_err(|e| crate::Error::Invalid(format!("template {template}: {e}")))
}

/// Waits until the job finishes (Succeeded or Failed), calling `progress` with each new
/// phase and message; returns the finished job.
///
/// # Errors
/// [`crate::Error::Api`] when reading fails, [`crate::Error::Timeout`] when `timeout`
/// passes first, [`crate::Error::Invalid`] when the job is deleted meanwhile.
pub async fn wait_finished(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    timeout: std::time::Duration,
    mut progress: impl FnMut(&GryviaAIJob),
) -> Result<GryviaAIJob> {
    let deadline = tokio::time::Instant::now() + timeout;
    let mut last: Option<(Option<gryvia_types::JobPhase>, Option<String>)> = None;
    loop {
        let job = get(client, namespace, name)
            .await?
            .ok_or_else(|| crate::Error::Invalid(format!("job {namespace}/{name} was deleted")))?;
        let now = job
            .status
            .as_ref()
            .map(|s| (s.phase, s.message.clone()))
            .unwrap_or((None, None));
        if last.as_ref() != Some(&now) {
            progress(&job);
            last = Some(now.clone());
        }
        if matches!(
            now.0,
            Some(gryvia_types::JobPhase::Succeeded | gryvia_types::JobPhase::Failed)
        ) {
            return Ok(job);
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(crate::Error::Timeout {
                what: format!("job {namespace}/{name} to finish"),
                after: timeout,
            });
        }
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
}
