//! The GryviaAutoTuner controller of the ai-operator: hyperparameter studies whose trials are
//! GryviaAIJobs (policy: `gryvia_reconcile::tuner`). Reads the trials' jobs and pods from the
//! operator's caches and the metrics of a running trial from its first worker's log, through
//! the API server (`pods/log`), and its termination message.

use std::time::Duration;

use gryvia_reconcile::tuner::{self, TrialJob, TunerReconciler, TunerWorld, metrics};
use gryvia_types::{GryviaAIJob, GryviaAutoTuner, labels};
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, LogParams};
use kube::runtime::controller::Controller;
use kube::runtime::reflector::Store;
use tracing::debug;

use super::{Running, Shared, changed};
use crate::Result;
use crate::cache::wait_ready;
use crate::runtime::{Observe, run, spec_or_lifecycle};

/// Most bytes of a trial's log read per look (the end of a longer log is not read).
pub const LOG_LIMIT: i64 = 4 << 20;

/// Observes a study: its trials' jobs and what their first workers reported.
pub struct TunerObserver {
    client: kube::Client,
    jobs: Store<GryviaAIJob>,
    pods: Store<Pod>,
}

/// The pod whose log holds a trial's metrics: the newest pod of worker 0 (the only worker of
/// a one-worker job), or `None` before one exists.
fn first_worker(pods: &Store<Pod>, namespace: &str, job: &str) -> Option<std::sync::Arc<Pod>> {
    super::aijob::pods_of_job(pods, namespace, job)
        .into_iter()
        .filter(|p| {
            p.annotations()
                .get(labels::JOB_COMPLETION_INDEX)
                .is_none_or(|i| i == "0")
        })
        .max_by_key(|p| p.metadata.creation_timestamp.clone().map(|t| t.0))
}

/// The worker container's termination message, when it ended with one.
fn termination_message(pod: &Pod) -> Option<String> {
    pod.status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .iter()
        .find(|c| c.name == gryvia_reconcile::aijob::WORKER)?
        .state
        .as_ref()?
        .terminated
        .as_ref()?
        .message
        .clone()
}

impl TunerObserver {
    /// The objective's reports of a trial: its first worker's log (once the pod has started)
    /// and termination message; `None` when there is no pod or its log cannot be read now.
    async fn reports(
        &self,
        namespace: &str,
        job: &str,
        metric: &str,
    ) -> Option<Vec<metrics::Report>> {
        let pod = first_worker(&self.pods, namespace, job)?;
        let phase = pod
            .status
            .as_ref()
            .and_then(|s| s.phase.clone())
            .unwrap_or_default();
        if phase == "Pending" || phase.is_empty() {
            return None;
        }
        let api: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        let params = LogParams {
            container: Some(gryvia_reconcile::aijob::WORKER.to_owned()),
            limit_bytes: Some(LOG_LIMIT),
            ..LogParams::default()
        };
        let mut text = match api.logs(&pod.name_any(), &params).await {
            Ok(t) => t,
            Err(e) => {
                debug!(pod = %pod.name_any(), error = %e, "trial log not readable now");
                return None;
            }
        };
        if let Some(m) = termination_message(&pod) {
            text.push('\n');
            text.push_str(&m);
        }
        Some(metrics::parse(&text, metric))
    }
}

#[async_trait::async_trait]
impl Observe for TunerObserver {
    type Object = GryviaAutoTuner;
    type World = TunerWorld;

    async fn observe(&self, study: &GryviaAutoTuner) -> Result<TunerWorld> {
        wait_ready(&self.jobs, "GryviaAIJob").await?;
        wait_ready(&self.pods, "Pod").await?;
        let ns = study.namespace().unwrap_or_default();
        let name = study.name_any();
        let uid = study.uid().unwrap_or_default();
        let done: Vec<&str> = study
            .status
            .iter()
            .flat_map(|s| &s.trials)
            .filter(|t| tuner::trial_done(t))
            .map(|t| t.name.as_str())
            .collect();
        let mut jobs: Vec<_> = self
            .jobs
            .state()
            .into_iter()
            .filter(|j| {
                j.namespace().as_deref() == Some(ns.as_str())
                    && j.labels().get(labels::AUTOTUNER) == Some(&name)
                    && j.owner_references().iter().any(|o| o.uid == uid)
            })
            .collect();
        jobs.sort_by_key(|j| j.name_any());
        let mut out = Vec::with_capacity(jobs.len());
        for j in jobs {
            let mut trial = TrialJob::of(&j);
            if !done.contains(&trial.name.as_str()) {
                trial.reports = self
                    .reports(&ns, &trial.name, &study.spec.objective.metric)
                    .await;
            }
            out.push(trial);
        }
        Ok(TunerWorld { jobs: out })
    }
}

/// The tuner controller: a study is reconciled when its spec changes, whenever one of its
/// trials' jobs does, and every `poll` while trials run (to read their metrics).
pub fn controller(shared: &Shared, poll: Duration) -> Running {
    let caches = &shared.caches;
    let trigger = changed(caches.subscribe::<GryviaAutoTuner>(), spec_or_lifecycle);
    let ctrl = Controller::for_shared_stream(trigger, caches.store())
        .owns_shared_stream(caches.subscribe::<GryviaAIJob>());
    let observer = TunerObserver {
        client: caches.client().clone(),
        jobs: caches.store(),
        pods: caches.store_labelled(labels::JOB_NAME),
    };
    Box::pin(run(
        ctrl,
        shared.context(TunerReconciler { poll }, observer),
    ))
}
