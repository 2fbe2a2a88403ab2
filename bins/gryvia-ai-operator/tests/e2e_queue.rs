//! End-to-end: the native queue scheduler (`--native-queue-scheduler`) of the ai-operator
//! binary against a real control plane (testenv/), with KWOK GPU nodes of a GPU product of
//! each test's own, the real Job controller and kube-scheduler.
//!
//! Tests in this file run one at a time (a static lock): each starts its own operator(s).

#![expect(clippy::unwrap_used, reason = "test helpers panic on failure")]

#[allow(dead_code, reason = "each test file uses part of the shared harness")]
mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use gryvia_testsupport::{
    KwokNodes, Process, ServiceAccountAccess, TestNamespace, unique, wait_for, wait_object,
};
use gryvia_types::labels;
use gryvia_types::scheduling::GryviaQueue;
use gryvia_types::{GryviaAIJob, JobPhase};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::{Value, json};

static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

struct Setup {
    client: kube::Client,
    ns: TestNamespace,
    product: String,
    // Fields drop in declaration order: the operators are killed before the lock is released.
    operators: Vec<Process>,
    _queues: QueueCleanup,
    _access: ServiceAccountAccess,
    lease_ns: TestNamespace,
    _serial: tokio::sync::MutexGuard<'static, ()>,
}

/// Deletes the test's GryviaQueues (cluster-scoped) when dropped.
struct QueueCleanup(std::sync::Arc<std::sync::Mutex<Vec<String>>>);

impl Drop for QueueCleanup {
    fn drop(&mut self) {
        let names = self.0.lock().unwrap().clone();
        gryvia_testsupport::on_drop(move |c| async move {
            let api: Api<GryviaQueue> = Api::all(c);
            for n in names {
                let _ = api.delete(&n, &DeleteParams::background()).await;
            }
        });
    }
}

impl Setup {
    /// The operator (`replicas` of it, sharing one Lease) with the native queue scheduler,
    /// under the RBAC of deploy/ai-operator.
    async fn new(name: &str, replicas: usize) -> Option<Setup> {
        let client = gryvia_testsupport::client().await?;
        let serial = SERIAL.lock().await;
        gryvia_client::crds::install(&client, Duration::from_secs(60))
            .await
            .unwrap();
        let lease_ns = TestNamespace::create(&client, "qop").await.unwrap();
        let ns = TestNamespace::create(&client, name).await.unwrap();
        let access = common::operator_access(&client, &lease_ns.name).await;
        let mut operators = Vec::new();
        for i in 0..replicas {
            let identity = format!("replica-{i}");
            let (p, _) = Process::operator(
                env!("CARGO_BIN_EXE_gryvia-ai-operator"),
                &lease_ns.name,
                &["--native-queue-scheduler", "--identity", &identity],
                Some(&access.kubeconfig),
                &format!("ai-operator-{name}-{i}"),
            )
            .unwrap();
            operators.push(p);
        }
        Some(Setup {
            product: unique("GPU-E2E"),
            client,
            ns,
            operators,
            _queues: QueueCleanup(std::sync::Arc::default()),
            _access: access,
            lease_ns,
            _serial: serial,
        })
    }

    /// Creates queue `name` covering the test namespace (`namespaces` to cover more).
    async fn queue(&self, name: &str, spec: Value) -> String {
        let name = unique(name);
        let mut spec = spec;
        if spec.get("namespaces").is_none() {
            spec["namespaces"] = json!([self.ns.name]);
        }
        let q: GryviaQueue =
            serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap();
        Api::<GryviaQueue>::all(self.client.clone())
            .create(&PostParams::default(), &q)
            .await
            .unwrap();
        self._queues.0.lock().unwrap().push(name.clone());
        name
    }

    fn jobs_in(&self, ns: &str) -> Api<GryviaAIJob> {
        Api::namespaced(self.client.clone(), ns)
    }

    fn jobs(&self) -> Api<GryviaAIJob> {
        self.jobs_in(&self.ns.name)
    }

    fn job_body(&self, name: &str, gpus: i32, workers: i32, extra: &Value) -> Value {
        common::gpu_job(name, gpus, workers, &self.product, extra)
    }

    async fn submit_in(&self, ns: &str, body: Value) -> GryviaAIJob {
        let mut job: GryviaAIJob = serde_json::from_value(body).unwrap();
        job.metadata.namespace = Some(ns.to_owned());
        self.jobs_in(ns)
            .create(&PostParams::default(), &job)
            .await
            .unwrap()
    }

    async fn submit(&self, name: &str, gpus: i32, workers: i32, extra: Value) -> GryviaAIJob {
        let body = self.job_body(name, gpus, workers, &extra);
        self.submit_in(&self.ns.name, body).await
    }

    /// Waits until job `name` of `ns` satisfies `check`, and returns it.
    async fn wait_job_in(
        &self,
        ns: &str,
        name: &str,
        what: &str,
        check: impl Fn(&GryviaAIJob) -> bool,
    ) -> GryviaAIJob {
        wait_object(
            &self.jobs_in(ns),
            name,
            what,
            Duration::from_secs(120),
            check,
        )
        .await
    }

    async fn wait_job(
        &self,
        name: &str,
        what: &str,
        check: impl Fn(&GryviaAIJob) -> bool,
    ) -> GryviaAIJob {
        self.wait_job_in(&self.ns.name, name, what, check).await
    }

    async fn wait_running(&self, name: &str) -> GryviaAIJob {
        self.wait_job(name, "Running", |j| phase(j) == Some(JobPhase::Running))
            .await
    }

    async fn wait_queued(&self, name: &str) -> GryviaAIJob {
        self.wait_job(name, "waiting in its queue", |j| {
            j.status.as_ref().is_some_and(|s| s.queue.is_some())
        })
        .await
    }

    async fn wait_queue(&self, name: &str, what: &str, check: impl Fn(&GryviaQueue) -> bool) {
        let api: Api<GryviaQueue> = Api::all(self.client.clone());
        wait_object(&api, name, what, Duration::from_secs(60), check).await;
    }

    async fn pods_in(&self, ns: &str, job: &str) -> Vec<Pod> {
        Api::<Pod>::namespaced(self.client.clone(), ns)
            .list(&ListParams::default().labels(&format!("{}={job}", labels::JOB_NAME)))
            .await
            .unwrap()
            .items
    }

    async fn pods(&self, job: &str) -> Vec<Pod> {
        self.pods_in(&self.ns.name, job).await
    }

    async fn batch_job(&self, name: &str) -> Option<Job> {
        Api::<Job>::namespaced(self.client.clone(), &self.ns.name)
            .get_opt(name)
            .await
            .unwrap()
    }

    async fn delete_job(&self, name: &str) {
        self.jobs()
            .delete(name, &DeleteParams::foreground())
            .await
            .unwrap();
    }
}

fn phase(j: &GryviaAIJob) -> Option<JobPhase> {
    j.status.as_ref().and_then(|s| s.phase)
}

fn admitted(j: &GryviaAIJob) -> bool {
    j.status.as_ref().is_some_and(|s| s.admission.is_some())
}

fn standing(j: &GryviaAIJob) -> gryvia_types::QueueStanding {
    j.status.as_ref().unwrap().queue.clone().unwrap()
}

fn node_of(p: &Pod) -> Option<String> {
    p.spec.as_ref().and_then(|s| s.node_name.clone())
}

fn live(pods: &[Pod]) -> Vec<&Pod> {
    pods.iter()
        .filter(|p| {
            p.metadata.deletion_timestamp.is_none()
                && matches!(
                    p.status.as_ref().and_then(|s| s.phase.as_deref()),
                    Some("Pending" | "Running")
                )
        })
        .collect()
}

#[tokio::test]
#[expect(
    clippy::too_many_lines,
    reason = "one end-to-end scenario, read top to bottom"
)]
async fn a_queue_admits_up_to_its_quota_and_the_rest_wait_with_position_reason_and_eta() {
    let Some(s) = Setup::new("q-quota", 1).await else {
        return;
    };
    let _nodes = KwokNodes::create_with_product(&s.client, "qq", 2, 8, &s.product)
        .await
        .unwrap();
    let q = s
        .queue(
            "ml",
            json!({"resources": [{"gpuType": s.product, "nominal": 8}],
                   "queueingStrategy": "BestEffortFIFO"}),
        )
        .await;
    // Two finish within 10 minutes (activeDeadlineSeconds), so the third has an expected start.
    let deadline = json!({"activeDeadlineSeconds": 600});
    s.submit("a", 4, 1, deadline.clone()).await;
    s.wait_running("a").await;
    s.submit("b", 4, 1, deadline.clone()).await;
    s.wait_running("b").await;
    s.submit("c", 4, 1, json!({})).await;
    s.submit("d", 2, 1, json!({})).await;

    let c = s.wait_queued("c").await;
    let st = standing(&c);
    assert_eq!(st.queue, q);
    assert_eq!(st.position, 1);
    assert!(
        st.reason.contains("needs 4") && st.reason.contains('8'),
        "the reason is in numbers: {}",
        st.reason
    );
    let eta = st.expected_start.expect("an expected start").0;
    let a_admitted = s.jobs().get("a").await.unwrap().status.unwrap();
    let a_admitted = a_admitted.admission.unwrap().admitted_at.0;
    assert!(
        (eta.as_second() - (a_admitted.as_second() + 600)).abs() <= 2,
        "c starts when a is expected to end: {eta} vs {a_admitted} + 600 s"
    );
    assert_eq!(standing(&s.wait_queued("d").await).position, 2);
    assert!(!admitted(&c));
    assert!(
        s.batch_job("c").await.is_none(),
        "a waiting job holds no batch Job"
    );
    assert!(s.pods("c").await.is_empty(), "nor pods");
    // The AI job controller's side (it may write after the queue's standing).
    s.wait_job("c", "Scheduled=False/Queued", |j| {
        j.status.as_ref().is_some_and(|st| {
            gryvia_types::conditions::find(&st.conditions, "Scheduled")
                .is_some_and(|c| c.status == "False" && c.reason == "Queued")
        })
    })
    .await;
    s.wait_queue(&q, "2 admitted, 2 pending, 8 GPUs in use", |q| {
        q.status.as_ref().is_some_and(|st| {
            st.admitted_jobs == 2
                && st.pending_jobs == 2
                && st.gpus_in_use.get(&s.product) == Some(&8.0)
        })
    })
    .await;

    // Quota, not room: the nodes have 8 GPUs free.
    let a = s.jobs().get("a").await.unwrap();
    let admission = a.status.unwrap().admission.unwrap();
    assert_eq!(admission.queue, q);
    assert_eq!(admission.milli_gpus, 4000);
    let pod = &s.pods("a").await[0];
    assert_eq!(Some(admission.nodes[0].clone()), node_of(pod));
    let batch = s.batch_job("a").await.unwrap();
    assert!(
        batch
            .annotations()
            .get(labels::ADMITTED_AT)
            .is_some_and(|t| !t.is_empty())
    );

    // a ends: c (the head) takes its quota; d still waits, now first.
    s.delete_job("a").await;
    s.wait_running("c").await;
    let d = s.wait_job("d", "first in line", |j| {
        j.status
            .as_ref()
            .and_then(|st| st.queue.as_ref())
            .is_some_and(|q| q.position == 1)
    });
    assert!(!admitted(&d.await));

    // The queue is Ready; a second queue listing the same namespace is not, says why, and
    // records a Warning Event (the first by name keeps the namespace).
    let ready = |q: &GryviaQueue, want: &str| {
        q.status.as_ref().is_some_and(|st| {
            gryvia_types::conditions::find(&st.conditions, "Ready")
                .is_some_and(|c| c.status == want)
        })
    };
    s.wait_queue(&q, "Ready", |x| ready(x, "True")).await;
    let dup = s
        .queue(
            "zz-dup",
            json!({"resources": [{"gpuType": s.product, "nominal": 1}]}),
        )
        .await;
    s.wait_queue(&dup, "Ready=False", |x| ready(x, "False"))
        .await;
    let dup_q = Api::<GryviaQueue>::all(s.client.clone())
        .get(&dup)
        .await
        .unwrap();
    let cond = dup_q.status.unwrap().conditions[0].clone();
    assert_eq!(cond.reason, "ConfigurationProblem");
    assert_eq!(
        cond.message,
        format!(
            "namespace {} is also listed by queue {q}, which holds its jobs",
            s.ns.name
        )
    );
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::all(s.client.clone());
    wait_for(
        "the ConfigurationProblem Event",
        Duration::from_secs(30),
        || {
            let events = events.clone();
            let dup = dup.clone();
            async move {
                let list = events
                    .list(&ListParams::default().fields(&format!("involvedObject.name={dup}")))
                    .await
                    .ok()?;
                list.items
                    .iter()
                    .any(|e| e.reason.as_deref() == Some("ConfigurationProblem"))
                    .then_some(())
            }
        },
    )
    .await
    .unwrap();
    assert!(
        !admitted(&s.jobs().get("d").await.unwrap()),
        "its jobs stay with the first queue"
    );
}

#[tokio::test]
async fn a_cohort_lends_unused_quota_and_the_lender_reclaims_it_without_costing_a_retry() {
    let Some(s) = Setup::new("q-cohort", 1).await else {
        return;
    };
    let _nodes = KwokNodes::create_with_product(&s.client, "qc", 2, 8, &s.product)
        .await
        .unwrap();
    let borrower_ns = TestNamespace::create(&s.client, "q-borrower")
        .await
        .unwrap();
    let cohort = unique("cohort");
    let lender = s
        .queue(
            "lender",
            json!({"cohort": cohort, "resources": [{"gpuType": s.product, "nominal": 8}],
                   "preemption": {"reclaimWithinCohort": true}}),
        )
        .await;
    let borrower = s
        .queue(
            "borrower",
            json!({"namespaces": [borrower_ns.name], "cohort": cohort,
                   "resources": [{"gpuType": s.product, "nominal": 0, "borrowingLimit": 8}]}),
        )
        .await;
    let body = s.job_body(
        "borrowed",
        8,
        1,
        &json!({"retryLimit": 0, "preemptionGracePeriodSeconds": 5}),
    );
    s.submit_in(&borrower_ns.name, body).await;
    let job = s
        .wait_job_in(&borrower_ns.name, "borrowed", "Running", |j| {
            phase(j) == Some(JobPhase::Running)
        })
        .await;
    let admission = job.status.unwrap().admission.unwrap();
    assert_eq!(admission.borrowed_milli_gpus, 8000);
    s.wait_queue(&borrower, "8 borrowed", |q| {
        q.status
            .as_ref()
            .is_some_and(|st| st.gpus_borrowed.get(&s.product) == Some(&8.0))
    })
    .await;
    s.wait_queue(&lender, "8 lent", |q| {
        q.status
            .as_ref()
            .is_some_and(|st| st.gpus_lent.get(&s.product) == Some(&8.0))
    })
    .await;

    // The lender needs its quota back: the borrower's job is preempted (reclaim), requeued,
    // and the lender's job runs.
    s.submit("own", 8, 1, json!({})).await;
    // The preemption itself can be over within a cycle or two (the victim's pod goes at once
    // on KWOK and its room is released): its Event is the lasting record.
    let events: Api<k8s_openapi::api::core::v1::Event> =
        Api::namespaced(s.client.clone(), &borrower_ns.name);
    let message = wait_for("the Preempted Event", Duration::from_secs(120), || {
        let events = events.clone();
        async move {
            let list = events
                .list(&ListParams::default().fields("involvedObject.name=borrowed"))
                .await
                .ok()?;
            list.items
                .into_iter()
                .find(|e| e.reason.as_deref() == Some("Preempted"))?
                .message
        }
    })
    .await
    .unwrap();
    assert!(
        message.contains(&format!("preempted (Reclaim) for {}/own", s.ns.name))
            && message.contains("5 s to write a checkpoint"),
        "{message}"
    );
    s.wait_running("own").await;
    let requeued = s
        .wait_job_in(&borrower_ns.name, "borrowed", "requeued", |j| {
            !admitted(j) && j.status.as_ref().is_some_and(|st| st.queue.is_some())
        })
        .await;
    let st = requeued.status.unwrap();
    assert_eq!(st.retries, 0, "a preemption costs no retry");
    assert_eq!(st.phase, Some(JobPhase::Pending));
    assert!(
        live(&s.pods_in(&borrower_ns.name, "borrowed").await).is_empty(),
        "its workers are gone"
    );

    // The lender's job ends: the borrower runs again, still without a used retry.
    s.delete_job("own").await;
    let again = s
        .wait_job_in(&borrower_ns.name, "borrowed", "Running again", |j| {
            phase(j) == Some(JobPhase::Running)
        })
        .await;
    assert_eq!(again.status.unwrap().retries, 0);
}

#[tokio::test]
async fn a_16_worker_gang_on_partial_capacity_waits_without_holding_gpus_then_starts_whole() {
    let Some(s) = Setup::new("q-gang", 1).await else {
        return;
    };
    let nodes = KwokNodes::create_with_product(&s.client, "qg", 2, 8, &s.product)
        .await
        .unwrap();
    let q = s
        .queue(
            "gang",
            json!({"resources": [{"gpuType": s.product, "nominal": 16}]}),
        )
        .await;
    // Not the queue's: a pod holding 2 GPUs of the first node.
    let blocker = unique("blocker");
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": blocker},
        "spec": {"nodeName": nodes.names[0],
                 "tolerations": [{"operator": "Exists"}],
                 "containers": [{"name": "c", "image": "registry.local/x:1",
                                 "resources": {"limits": {"nvidia.com/gpu": "2"}}}]}
    }))
    .unwrap();
    let pod_api: Api<Pod> = Api::namespaced(s.client.clone(), &s.ns.name);
    pod_api.create(&PostParams::default(), &pod).await.unwrap();

    s.submit("gang", 1, 16, json!({})).await;
    let waiting = s.wait_queued("gang").await;
    let st = standing(&waiting);
    assert_eq!(st.queue, q);
    assert!(
        st.reason.contains("16") && st.reason.contains("14"),
        "the reason says what is missing: {}",
        st.reason
    );
    assert!(s.batch_job("gang").await.is_none());
    assert!(s.pods("gang").await.is_empty(), "no worker holds a GPU");

    pod_api
        .delete(&blocker, &DeleteParams::default())
        .await
        .unwrap();
    s.wait_running("gang").await;
    wait_for("16 workers running", Duration::from_secs(90), || async {
        let pods = s.pods("gang").await;
        let running = pods
            .iter()
            .filter(|p| p.status.as_ref().and_then(|st| st.phase.as_deref()) == Some("Running"))
            .count();
        (running == 16).then_some(())
    })
    .await
    .unwrap();
    let per_node: BTreeMap<String, usize> =
        s.pods("gang")
            .await
            .iter()
            .fold(BTreeMap::new(), |mut m, p| {
                *m.entry(node_of(p).unwrap()).or_insert(0) += 1;
                m
            });
    assert_eq!(per_node.values().copied().collect::<Vec<_>>(), vec![8, 8]);
}

/// Watches job `name`: the first queue notice (`status.preemption`) any version of it shows,
/// and whether any version has the AI job controller's `Preempted` condition. They need not show
/// in the same version: the controller suspends the batch Job before it writes the condition,
/// and once the workers are gone the queue releases the job (`status.preemption` goes), which on
/// KWOK (pods go at once) may come before that status write lands. Gives up after 120 s.
fn watch_preemption(
    jobs: Api<GryviaAIJob>,
    name: &str,
) -> tokio::task::JoinHandle<(Option<gryvia_types::PreemptionNotice>, bool)> {
    let job_watch = watcher(
        jobs,
        watcher::Config::default().fields(&format!("metadata.name={name}")),
    )
    .applied_objects();
    tokio::spawn(async move {
        use futures::StreamExt;
        let mut notice = None;
        let mut condition = false;
        let mut watch = std::pin::pin!(job_watch);
        let until = tokio::time::Instant::now() + Duration::from_secs(120);
        while let Ok(Some(Ok(j))) = tokio::time::timeout_at(until, watch.next()).await {
            if let Some(st) = &j.status {
                if let Some(p) = &st.preemption {
                    notice.get_or_insert_with(|| p.clone());
                }
                condition |= gryvia_types::conditions::is_true(&st.conditions, "Preempted");
            }
            if notice.is_some() && condition {
                break;
            }
        }
        (notice, condition)
    })
}

#[tokio::test]
async fn a_higher_priority_job_preempts_with_a_notice_its_pods_see_first_and_no_retry_used() {
    let Some(s) = Setup::new("q-preempt", 1).await else {
        return;
    };
    let _nodes = KwokNodes::create_with_product(&s.client, "qp", 1, 8, &s.product)
        .await
        .unwrap();
    s.queue(
        "prio",
        json!({"resources": [{"gpuType": s.product, "nominal": 8}],
               "preemption": {"withinQueue": "LowerPriority"}}),
    )
    .await;
    s.submit(
        "low",
        4,
        2,
        json!({"priority": 10, "retryLimit": 0, "preemptionGracePeriodSeconds": 7}),
    )
    .await;
    s.wait_running("low").await;
    wait_for(
        "2 workers of low running",
        Duration::from_secs(60),
        || async { (live(&s.pods("low").await).len() == 2).then_some(()) },
    )
    .await
    .unwrap();
    let batch = s.batch_job("low").await.unwrap();
    let template = batch.spec.unwrap().template.spec.unwrap();
    assert_eq!(template.termination_grace_period_seconds, Some(7));
    assert!(
        template
            .volumes
            .unwrap_or_default()
            .iter()
            .any(|v| v.name == "gryvia-notice" && v.downward_api.is_some()),
        "the pods can read the notice through the downward API"
    );

    // Watch low's pods: each must carry the notice before it is deleted.
    let pod_api: Api<Pod> = Api::namespaced(s.client.clone(), &s.ns.name);
    let watch = watcher(
        pod_api.clone(),
        watcher::Config::default().labels(&format!("{}=low", labels::JOB_NAME)),
    )
    .applied_objects();
    let seen = tokio::spawn(async move {
        use futures::StreamExt;
        let mut out: Vec<(String, bool, bool)> = Vec::new();
        let mut watch = std::pin::pin!(watch);
        let until = tokio::time::Instant::now() + Duration::from_secs(90);
        while let Ok(Some(Ok(p))) = tokio::time::timeout_at(until, watch.next()).await {
            let noticed = p.annotations().contains_key(labels::PREEMPTION_NOTICE);
            let going = p.metadata.deletion_timestamp.is_some();
            out.push((p.name_any(), noticed, going));
            if going && out.iter().filter(|(_, _, g)| *g).count() >= 2 {
                break;
            }
        }
        out
    });

    let job_seen = watch_preemption(s.jobs_in(&s.ns.name), "low");
    s.submit("high", 8, 1, json!({"priority": 90})).await;
    let (notice, condition) = job_seen.await.unwrap();
    let notice =
        notice.unwrap_or_else(|| panic!("the queue wrote no notice on low (status.preemption)"));
    assert!(condition, "low had the Preempted condition");
    assert_eq!(notice.reason, "WithinQueue");
    assert_eq!(notice.by, format!("{}/high", s.ns.name));
    assert_eq!(notice.grace_seconds, 7);
    s.wait_running("high").await;
    let events = seen.await.unwrap();
    let going: Vec<&(String, bool, bool)> = events.iter().filter(|e| e.2).collect();
    assert!(!going.is_empty(), "the workers were stopped: {events:?}");
    for (pod, _, _) in &going {
        let first_going = events.iter().position(|e| &e.0 == pod && e.2).unwrap();
        let first_notice = events.iter().position(|e| &e.0 == pod && e.1);
        assert!(
            first_notice.is_some_and(|n| n <= first_going),
            "pod {pod} had the notice before it was deleted: {events:?}"
        );
    }
    let requeued = s
        .wait_job("low", "requeued", |j| {
            !admitted(j) && j.status.as_ref().is_some_and(|st| st.queue.is_some())
        })
        .await;
    let st = requeued.status.unwrap();
    assert_eq!(
        st.retries, 0,
        "the preemption used no retry: {:?}",
        st.failures
    );
    assert_ne!(st.phase, Some(JobPhase::Failed));
    assert_eq!(st.queue.unwrap().position, 1);

    // high ends: low runs again.
    s.delete_job("high").await;
    let again = s.wait_running("low").await;
    assert_eq!(again.status.unwrap().retries, 0);
}

#[tokio::test]
async fn two_half_gpu_jobs_share_one_time_sliced_gpu() {
    let Some(s) = Setup::new("q-frac", 1).await else {
        return;
    };
    let nodes = KwokNodes::create_time_sliced(&s.client, "qf", 1, 1, 2, &s.product)
        .await
        .unwrap();
    let q = s
        .queue(
            "frac",
            json!({"resources": [{"gpuType": s.product, "nominal": 1}]}),
        )
        .await;
    let half = json!({"gpuFraction": 0.5});
    s.submit("h1", 1, 1, half.clone()).await;
    s.submit("h2", 1, 1, half.clone()).await;
    s.wait_running("h1").await;
    s.wait_running("h2").await;
    for name in ["h1", "h2"] {
        let pods = s.pods(name).await;
        assert_eq!(node_of(&pods[0]).as_deref(), Some(nodes.names[0].as_str()));
        let limits = pods[0].spec.as_ref().unwrap().containers[0]
            .resources
            .as_ref()
            .unwrap()
            .limits
            .clone()
            .unwrap();
        assert_eq!(limits["nvidia.com/gpu.shared"].0, "1");
        assert!(!limits.contains_key("nvidia.com/gpu"));
    }
    s.wait_queue(&q, "1 GPU in use", |q| {
        q.status
            .as_ref()
            .is_some_and(|st| st.gpus_in_use.get(&s.product) == Some(&1.0))
    })
    .await;
    s.submit("h3", 1, 1, half).await;
    let st = standing(&s.wait_queued("h3").await);
    assert!(st.reason.contains("needs 0.5 GPUs"), "{}", st.reason);
}

#[tokio::test]
async fn backfill_admits_a_small_job_that_ends_before_the_head_could_start_and_no_other() {
    let Some(s) = Setup::new("q-backfill", 1).await else {
        return;
    };
    let _nodes = KwokNodes::create_with_product(&s.client, "qb", 1, 8, &s.product)
        .await
        .unwrap();
    s.queue(
        "bf",
        json!({"resources": [{"gpuType": s.product, "nominal": 8}],
               "queueingStrategy": "BestEffortFIFO"}),
    )
    .await;
    s.submit("running", 4, 1, json!({"activeDeadlineSeconds": 900}))
        .await;
    s.wait_running("running").await;
    // Ahead of the jobs below whatever the second they are created in (same-second ties go by
    // name).
    s.submit("head", 8, 1, json!({"priority": 90})).await;
    let head = standing(&s.wait_queued("head").await);
    assert_eq!(head.position, 1);
    let head_eta = head.expected_start.expect("the head's expected start").0;
    // Ends well before the head could start: backfilled.
    s.submit("short", 2, 1, json!({"activeDeadlineSeconds": 120}))
        .await;
    s.wait_running("short").await;
    // No known end: it would hold GPUs past the head's start.
    s.submit("endless", 2, 1, json!({})).await;
    let endless = s
        .wait_job("endless", "waiting in its queue", |j| {
            j.status.as_ref().is_some_and(|st| st.queue.is_some()) || admitted(j)
        })
        .await;
    if admitted(&endless) {
        let head = s.jobs().get("head").await.unwrap();
        let jobs = s.jobs().list(&ListParams::default()).await.unwrap();
        let world: Vec<_> = jobs
            .items
            .iter()
            .map(|j| {
                (
                    j.name_any(),
                    j.spec.priority,
                    j.status.as_ref().map(|st| (&st.admission, &st.queue)),
                )
            })
            .collect();
        panic!(
            "endless was admitted; head: {:?}; jobs: {world:?}",
            head.status
        );
    }
    let endless = standing(&endless);
    assert!(
        endless.reason.contains("head"),
        "it would delay the head: {}",
        endless.reason
    );
    let head_now = standing(&s.jobs().get("head").await.unwrap());
    let moved = head_now.expected_start.unwrap().0.as_second() - head_eta.as_second();
    assert!(
        moved.abs() <= 60,
        "backfill did not delay the head ({moved} s)"
    );
}

#[tokio::test]
async fn the_leader_killed_during_a_burst_of_300_jobs_admits_each_exactly_once() {
    let Some(mut s) = Setup::new("q-burst", 2).await else {
        return;
    };
    let _nodes = KwokNodes::create_with_product(&s.client, "qx", 40, 8, &s.product)
        .await
        .unwrap();
    s.queue(
        "burst",
        json!({"resources": [{"gpuType": s.product, "nominal": 320}]}),
    )
    .await;
    // Every admission each job ever had, as seen by a watch from the start.
    let api = s.jobs();
    let watch = watcher(api.clone(), watcher::Config::default()).applied_objects();
    let admissions = tokio::spawn(async move {
        use futures::StreamExt;
        let mut seen: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        let mut watch = std::pin::pin!(watch);
        let until = tokio::time::Instant::now() + Duration::from_secs(240);
        while let Ok(Some(Ok(j))) = tokio::time::timeout_at(until, watch.next()).await {
            if let Some(a) = j.status.as_ref().and_then(|st| st.admission.as_ref()) {
                seen.entry(j.name_any())
                    .or_default()
                    .insert(serde_json::to_string(a).unwrap());
                if seen.len() == 300 {
                    break;
                }
            }
        }
        seen
    });
    let lease_api: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(s.client.clone(), &s.lease_ns.name);
    let holder = wait_for("a leader", Duration::from_secs(60), || async {
        lease_api
            .get_opt("gryvia-ai-operator")
            .await
            .ok()
            .flatten()?
            .spec?
            .holder_identity
    })
    .await
    .unwrap();
    let body = s.job_body("burst", 1, 1, &json!({}));
    let submit = {
        let ns = s.ns.name.clone();
        let api = api.clone();
        async move {
            use futures::StreamExt;
            futures::stream::iter(0..300)
                .map(|i| {
                    let mut b = body.clone();
                    b["metadata"]["name"] = format!("burst-{i:03}").into();
                    b["metadata"]["namespace"] = ns.clone().into();
                    let job: GryviaAIJob = serde_json::from_value(b).unwrap();
                    let api = api.clone();
                    async move { api.create(&PostParams::default(), &job).await.unwrap() }
                })
                .buffer_unordered(8)
                .collect::<Vec<_>>()
                .await;
        }
    };
    let kill = async {
        // Kill the leader once the first admissions are written, mid-burst.
        wait_for("the first admissions", Duration::from_secs(120), || async {
            let jobs = api.list(&ListParams::default()).await.ok()?;
            (jobs.items.iter().filter(|j| admitted(j)).count() >= 20).then_some(())
        })
        .await
        .unwrap();
        let leader: usize = holder.trim_start_matches("replica-").parse().unwrap();
        s.operators[leader].kill();
    };
    tokio::join!(submit, kill);
    let seen = admissions.await.unwrap();
    assert_eq!(seen.len(), 300, "every job admitted");
    let twice: Vec<(&String, &BTreeSet<String>)> =
        seen.iter().filter(|(_, a)| a.len() > 1).collect();
    assert!(twice.is_empty(), "admitted more than once: {twice:?}");
    let jobs = api.list(&ListParams::default()).await.unwrap().items;
    let mut per_node: BTreeMap<String, usize> = BTreeMap::new();
    for j in &jobs {
        let a = j.status.as_ref().unwrap().admission.as_ref().unwrap();
        assert_eq!(a.nodes.len(), 1);
        *per_node.entry(a.nodes[0].clone()).or_insert(0) += 1;
    }
    assert!(
        per_node.values().all(|&n| n <= 8),
        "no node given more GPUs than it has: {per_node:?}"
    );
}

/// Waits until each of `tiers` is in force: its PriorityClass made.
async fn tiers_in_force(client: &kube::Client, tiers: &[&str]) {
    let api: Api<gryvia_types::GryviaPriority> = Api::all(client.clone());
    for t in tiers {
        wait_object(
            &api,
            t,
            "its PriorityClass made",
            Duration::from_secs(90),
            |p| {
                p.status
                    .as_ref()
                    .is_some_and(|st| st.priority_class_name.is_some())
            },
        )
        .await;
    }
}

/// Creates GryviaPriority `name` with `spec`, deleted when the guard drops.
async fn tier(client: &kube::Client, name: &str, spec: Value) -> gryvia_testsupport::ClusterObject {
    gryvia_testsupport::ClusterObject::create::<gryvia_types::GryviaPriority>(
        client,
        json!({"metadata": {"name": name}, "spec": spec}),
    )
    .await
    .unwrap()
}

#[tokio::test]
async fn a_tier_exceeds_the_queue_quota_by_its_override_and_a_job_past_its_sla_goes_first() {
    use gryvia_types::GryviaPriority;
    let Some(s) = Setup::new("q-tiers", 1).await else {
        return;
    };
    let _nodes = KwokNodes::create_with_product(&s.client, "qt", 2, 8, &s.product)
        .await
        .unwrap();
    let (gold, silver) = (unique("gold"), unique("silver"));
    // Same value: only the SLA tells them apart. 15 s: long enough that the gold job admitted
    // at once ("over") never breaches it on a loaded machine (with 5 s it did once in CI), short
    // enough for the test.
    let _gold = tier(
        &s.client,
        &gold,
        json!({"value": 100, "sla": {"maxQueueSeconds": 15}, "quotaOverride": {"percent": 50}}),
    )
    .await;
    let _silver = tier(&s.client, &silver, json!({"value": 100})).await;
    // Both tiers in force before a job names one: the SLA clock of the gold job admitted at
    // once must not run while its tier is being set up (CI once saw an operator that had just
    // started take 30 s to its first reconcile of a new tier; that job breached the SLA too).
    tiers_in_force(&s.client, &[&gold, &silver]).await;
    let queue = s
        .queue(
            "tiers",
            json!({"resources": [{"gpuType": s.product, "nominal": 8}],
                   "queueingStrategy": "BestEffortFIFO"}),
        )
        .await;
    let submit_tier = |name: &'static str, gpus: i32, tier: &str, priority: i32| {
        let mut body = s.job_body(name, gpus, 1, &json!({"priority": priority}));
        body["metadata"]["annotations"] = json!({"gryvia.io/priority-class": tier});
        s.submit_in(&s.ns.name, body)
    };
    // The queue's quota is used up by a job of no tier.
    s.submit("fill", 8, 1, json!({})).await;
    s.wait_running("fill").await;
    // A gold job goes over the quota by up to half of it.
    submit_tier("over", 4, &gold, 50).await;
    let over = s.wait_running("over").await;
    let a = over.status.unwrap().admission.unwrap();
    assert_eq!((a.over_quota_milli_gpus, a.milli_gpus), (4000, 4000));
    s.wait_queue(&queue, "12 in use, 4 over", |q| {
        q.status.as_ref().is_some_and(|st| {
            st.gpus_in_use.get(&s.product) == Some(&12.0)
                && st.gpus_borrowed.get(&s.product) == Some(&4.0)
        })
    })
    .await;

    // Two wait: a gold one of low spec.priority, then a silver one of high.
    submit_tier("late", 8, &gold, 10).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    submit_tier("eager", 8, &silver, 90).await;
    let late = s
        .wait_job("late", "past its SLA", |j| {
            j.status.as_ref().is_some_and(|st| {
                st.conditions
                    .iter()
                    .any(|c| c.type_ == "SLABreached" && c.status == "True")
            })
        })
        .await;
    let c = late
        .status
        .unwrap()
        .conditions
        .into_iter()
        .find(|c| c.type_ == "SLABreached")
        .unwrap();
    assert_eq!(c.reason, "QueueTimeExceeded");
    assert!(
        c.message
            .contains(&format!("past tier {gold}'s SLA of 15 s")),
        "{}",
        c.message
    );
    let tiers: Api<GryviaPriority> = Api::all(s.client.clone());
    wait_object(
        &tiers,
        &gold,
        "one breach counted",
        Duration::from_secs(60),
        |p| {
            p.status
                .as_ref()
                .is_some_and(|st| st.sla_breaches == Some(1))
        },
    )
    .await;
    // The queue frees 8 GPUs: the job past its SLA goes before the higher spec.priority.
    s.wait_queued("eager").await;
    s.delete_job("fill").await;
    s.wait_running("late").await;
    let eager = s.jobs().get("eager").await.unwrap();
    assert!(
        !admitted(&eager),
        "the silver job waits behind the late gold one"
    );
}
