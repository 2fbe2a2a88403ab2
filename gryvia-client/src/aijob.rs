//! The observe half and the wiring of the ai-operator's controllers: GryviaAIJob (batch Jobs,
//! retries, failure classification), GryviaTemplate (validity, job count) and GryviaPriority
//! (PriorityClasses), GryviaWorkflow (`crate::workflow`); GryviaReservation and GryviaJobHook
//! (`crate::hooks`) when enabled. The policy is in `gryvia_reconcile::{aijob, template, priority}`.

use std::collections::BTreeMap;

use futures::future::BoxFuture;
use gryvia_reconcile::aijob::{
    AIJobReconciler, AIJobWorld, ObservedJob, ObservedNode, ObservedPod,
};
use gryvia_reconcile::priority::{ObservedClass, PriorityReconciler, PriorityWorld};
use gryvia_reconcile::reservation::{ReservationReconciler, ReservationWorld};
use gryvia_reconcile::template::{TemplateReconciler, TemplateWorld};
use gryvia_types::labels;
use gryvia_types::{GryviaAIJob, GryviaPriority, GryviaReservation, GryviaTemplate};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::api::{Api, ListParams};
use kube::runtime::controller::Controller;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};

use crate::metrics::Metrics;
use crate::runtime::{Context, Observe, cluster_owner, run, spec_controller};
use crate::{Result, api_err};

/// Observes an AI job: its batch Job, its pods, their nodes and its PriorityClass.
pub struct AIJobObserver {
    client: kube::Client,
}

impl AIJobObserver {
    /// An observer reading through `client`.
    pub fn new(client: kube::Client) -> Self {
        AIJobObserver { client }
    }
}

#[async_trait::async_trait]
impl Observe for AIJobObserver {
    type Object = GryviaAIJob;
    type World = AIJobWorld;

    async fn observe(&self, job: &GryviaAIJob) -> Result<AIJobWorld> {
        let name = job.name_any();
        let ns = job.namespace().unwrap_or_default();
        let uid = job.uid().unwrap_or_default();
        let batch = Api::<Job>::namespaced(self.client.clone(), &ns)
            .get_opt(&name)
            .await
            .map_err(api_err(format!("read Job {ns}/{name}")))?
            .map(|j| ObservedJob::of(&j, &uid));
        let pods: Vec<ObservedPod> = pods_of(&self.client, &ns, &name)
            .await?
            .iter()
            .map(ObservedPod::of)
            .collect();
        let nodes_api: Api<Node> = Api::all(self.client.clone());
        let mut nodes = BTreeMap::new();
        for node in pods.iter().filter_map(|p| p.node.as_deref()) {
            if nodes.contains_key(node) {
                continue;
            }
            if let Some(n) = nodes_api
                .get_opt(node)
                .await
                .map_err(api_err(format!("read node {node}")))?
            {
                nodes.insert(node.to_owned(), ObservedNode::of(&n));
            }
        }
        let priority_class_exists = match job.annotations().get(labels::PRIORITY_CLASS) {
            Some(pc) => Api::<PriorityClass>::all(self.client.clone())
                .get_opt(pc)
                .await
                .map_err(api_err(format!("read PriorityClass {pc}")))?
                .is_some(),
            None => false,
        };
        Ok(AIJobWorld {
            job: batch,
            pods,
            nodes,
            priority_class_exists,
        })
    }
}

/// Observes a template: how many jobs carry its label.
pub struct TemplateObserver {
    client: kube::Client,
}

#[async_trait::async_trait]
impl Observe for TemplateObserver {
    type Object = GryviaTemplate;
    type World = TemplateWorld;

    async fn observe(&self, template: &GryviaTemplate) -> Result<TemplateWorld> {
        let name = template.name_any();
        let n = Api::<GryviaAIJob>::all(self.client.clone())
            .list_metadata(&ListParams::default().labels(&format!("{}={name}", labels::TEMPLATE)))
            .await
            .map_err(api_err(format!("list jobs of template {name}")))?
            .items
            .len();
        Ok(TemplateWorld {
            instantiated_jobs: i32::try_from(n).unwrap_or(i32::MAX),
        })
    }
}

/// Observes a priority tier: the PriorityClass of the same name.
pub struct PriorityObserver {
    client: kube::Client,
}

#[async_trait::async_trait]
impl Observe for PriorityObserver {
    type Object = GryviaPriority;
    type World = PriorityWorld;

    async fn observe(&self, prio: &GryviaPriority) -> Result<PriorityWorld> {
        let name = prio.name_any();
        let class = Api::<PriorityClass>::all(self.client.clone())
            .get_opt(&name)
            .await
            .map_err(api_err(format!("read PriorityClass {name}")))?
            .map(|pc| ObservedClass {
                value: pc.value,
                preemption_policy: pc
                    .preemption_policy
                    .clone()
                    .unwrap_or_else(|| "PreemptLowerPriority".to_owned()),
                managed: pc.labels().get(labels::MANAGED_BY).map(String::as_str)
                    == Some(labels::MANAGED_BY_VALUE),
            });
        Ok(PriorityWorld { class })
    }
}

/// Observes the nodes a reservation may hold: every node, with the GPUs its running pods use.
pub struct ReservationObserver {
    client: kube::Client,
}

#[async_trait::async_trait]
impl Observe for ReservationObserver {
    type Object = GryviaReservation;
    type World = ReservationWorld;

    async fn observe(&self, _r: &GryviaReservation) -> Result<ReservationWorld> {
        let (nodes, pods) = nodes_and_active_pods(&self.client).await?;
        Ok(ReservationWorld::of(&nodes, &pods))
    }
}

/// Every node, and every pod that is not finished.
async fn nodes_and_active_pods(client: &kube::Client) -> Result<(Vec<Node>, Vec<Pod>)> {
    let nodes = Api::<Node>::all(client.clone())
        .list(&ListParams::default())
        .await
        .map_err(api_err("list nodes"))?
        .items;
    let pods = Api::<Pod>::all(client.clone())
        .list(&ListParams::default().fields("status.phase!=Succeeded,status.phase!=Failed"))
        .await
        .map_err(api_err("list running pods"))?
        .items;
    Ok((nodes, pods))
}

/// What the ai-operator runs besides AI jobs, templates and priorities.
#[derive(Clone, Copy, Debug, Default)]
pub struct AiOptions {
    /// Run the GryviaReservation controller (opt-in: it taints nodes).
    pub reservations: bool,
    /// Run the GryviaJobHook controller (opt-in: it POSTs to the hooks' URLs).
    pub job_hooks: bool,
}

/// Maps a pod of an AI job (label `gryvia.io/job-name`) to its GryviaAIJob.
fn job_of_pod(pod: Pod) -> Option<ObjectRef<GryviaAIJob>> {
    let name = pod.labels().get(labels::JOB_NAME)?;
    Some(ObjectRef::new(name).within(&pod.namespace()?))
}

/// Builds the ai-operator's controllers; the returned closure starts them (each time this
/// replica becomes leader).
pub fn controllers(
    client: kube::Client,
    options: AiOptions,
    metrics: Metrics,
) -> crate::runtime::Controllers {
    Box::new(move || -> BoxFuture<'static, ()> {
        let client = client.clone();
        let metrics = metrics.clone();
        Box::pin(async move {
            let managed = watcher::Config::default().labels(&format!(
                "{}={}",
                labels::MANAGED_BY,
                labels::MANAGED_BY_VALUE
            ));

            // GryviaAIJob: status-only updates (the operator's own writes) trigger nothing;
            // Job and pod changes do.
            let jobs_api: Api<GryviaAIJob> = Api::all(client.clone());
            let job_ctrl = spec_controller(jobs_api)
                .0
                .owns(Api::<Job>::all(client.clone()), managed.clone())
                .watches(
                    Api::<Pod>::all(client.clone()),
                    watcher::Config::default().labels(labels::JOB_NAME),
                    job_of_pod,
                );
            let job_ctx = Context::for_client(
                AIJobReconciler,
                AIJobObserver::new(client.clone()),
                &client,
                metrics.clone(),
            );

            // GryviaTemplate: re-counted when a labelled job comes or goes.
            let tpl_ctrl = Controller::new(
                Api::<GryviaTemplate>::all(client.clone()),
                watcher::Config::default(),
            )
            .watches(
                Api::<GryviaAIJob>::all(client.clone()),
                watcher::Config::default().labels(labels::TEMPLATE),
                |job: GryviaAIJob| {
                    job.labels()
                        .get(labels::TEMPLATE)
                        .map(|t| ObjectRef::<GryviaTemplate>::new(t))
                },
            );
            let tpl_ctx = Context::for_client(
                TemplateReconciler,
                TemplateObserver {
                    client: client.clone(),
                },
                &client,
                metrics.clone(),
            );

            // GryviaPriority: its PriorityClass.
            let prio_ctrl = Controller::new(
                Api::<GryviaPriority>::all(client.clone()),
                watcher::Config::default(),
            )
            .watches(
                Api::<PriorityClass>::all(client.clone()),
                managed,
                cluster_owner::<GryviaPriority, _>,
            );
            let prio_ctx = Context::for_client(
                PriorityReconciler,
                PriorityObserver {
                    client: client.clone(),
                },
                &client,
                metrics.clone(),
            );

            // GryviaReservation (opt-in): nodes it labels carry its name.
            let reservations = async {
                if !options.reservations {
                    return;
                }
                let rsv_api: Api<GryviaReservation> = Api::all(client.clone());
                let ctrl = spec_controller(rsv_api).0.watches(
                    Api::<Node>::all(client.clone()),
                    watcher::Config::default().labels(labels::RESERVED_TAINT),
                    |node: Node| {
                        node.labels()
                            .get(labels::RESERVED_TAINT)
                            .map(|r| ObjectRef::<GryviaReservation>::new(r))
                    },
                );
                let ctx = Context::for_client(
                    ReservationReconciler,
                    ReservationObserver {
                        client: client.clone(),
                    },
                    &client,
                    metrics.clone(),
                );
                run(ctrl, ctx).await;
            };
            let job_hooks = async {
                if options.job_hooks {
                    crate::hooks::run_controller(client.clone(), metrics.clone()).await;
                }
            };
            futures::join!(
                run(job_ctrl, job_ctx),
                run(tpl_ctrl, tpl_ctx),
                run(prio_ctrl, prio_ctx),
                reservations,
                job_hooks,
                crate::workflow::run_controller(client.clone(), metrics.clone())
            );
        })
    })
}

/// Field manager of the objects the CLI creates.
pub const CLI_MANAGER: &str = crate::tenancy::CLI_MANAGER;

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

/// Free GPUs per node (see `gryvia_reconcile::aijob::capacity`).
///
/// # Errors
/// [`crate::Error::Api`] when listing nodes or pods fails.
pub async fn capacity(client: &kube::Client) -> Result<Vec<gryvia_reconcile::aijob::NodeCapacity>> {
    let (nodes, pods) = nodes_and_active_pods(client).await?;
    Ok(gryvia_reconcile::aijob::capacity(&nodes, &pods))
}

/// Jobs that wait (phase Pending, or not yet seen by the operator), in `namespace` or all
/// namespaces: highest priority first, then oldest.
///
/// # Errors
/// [`crate::Error::Api`] when listing fails.
pub async fn pending(client: &kube::Client, namespace: Option<&str>) -> Result<Vec<GryviaAIJob>> {
    let api: Api<GryviaAIJob> = match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let mut jobs: Vec<GryviaAIJob> = api
        .list(&ListParams::default())
        .await
        .map_err(api_err("list GryviaAIJobs"))?
        .items
        .into_iter()
        .filter(|j| {
            matches!(
                j.status.as_ref().and_then(|s| s.phase),
                None | Some(gryvia_types::JobPhase::Pending)
            )
        })
        .collect();
    jobs.sort_by_key(|j| {
        (
            std::cmp::Reverse(j.spec.priority),
            j.metadata.creation_timestamp.as_ref().map(|t| t.0),
            j.name_any(),
        )
    });
    Ok(jobs)
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
    let mut job = gryvia_reconcile::template::render(&tpl, name.unwrap_or(""), namespace, params)
        .map_err(|e| crate::Error::Invalid(format!("template {template}: {e}")))?;
    if name.is_none() {
        let prefix: String = template.chars().take(45).collect();
        job.metadata.name = None;
        job.metadata.generate_name = Some(format!("{}-", prefix.trim_end_matches('-')));
    }
    Ok(job)
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
