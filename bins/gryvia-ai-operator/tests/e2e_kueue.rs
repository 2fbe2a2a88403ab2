//! End-to-end: the Kueue integration (`--kueue-integration`) of the ai-operator binary against
//! real Kueue v0.17.1 (`testenv/up --with-kueue`) on a real control plane, with KWOK GPU nodes
//! of a GPU product of each test's own, the real Job controller and kube-scheduler.
//!
//! Tests in this file run one at a time (a static lock): each starts its own operator.

#![expect(clippy::unwrap_used, reason = "test helpers panic on failure")]

#[allow(dead_code, reason = "each test file uses part of the shared harness")]
mod common;

use std::time::Duration;

use gryvia_testsupport::{
    KwokNodes, Process, ServiceAccountAccess, TestNamespace, unique, wait_for, wait_object,
};
use gryvia_types::kueue::{ClusterQueue, LocalQueue, ResourceFlavor, WorkloadPriorityClass};
use gryvia_types::scheduling::GryviaQueue;
use gryvia_types::{GryviaAIJob, GryviaTenant, JobPhase, KueueStanding, labels};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::{Value, json};

static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

struct Setup {
    client: kube::Client,
    ns: TestNamespace,
    product: String,
    // Fields drop in declaration order: the operator is killed before the objects go.
    _operator: Process,
    _cleanup: Cleanup,
    _access: ServiceAccountAccess,
    _lease_ns: TestNamespace,
    _serial: tokio::sync::MutexGuard<'static, ()>,
}

/// Deletes the test's cluster-scoped objects (queues, tenants and their namespaces) on drop.
#[derive(Default)]
struct Cleanup(std::sync::Arc<std::sync::Mutex<Vec<(&'static str, String)>>>);

impl Drop for Cleanup {
    fn drop(&mut self) {
        let objects = self.0.lock().unwrap().clone();
        gryvia_testsupport::on_drop(move |c| async move {
            let bg = DeleteParams::background();
            for (kind, name) in objects {
                let _ = match kind {
                    "queue" => Api::<GryviaQueue>::all(c.clone())
                        .delete(&name, &bg)
                        .await
                        .map(|_| ()),
                    "tenant" => Api::<GryviaTenant>::all(c.clone())
                        .delete(&name, &bg)
                        .await
                        .map(|_| ()),
                    _ => Api::<Namespace>::all(c.clone())
                        .delete(&name, &bg)
                        .await
                        .map(|_| ()),
                };
            }
        });
    }
}

/// Whether Kueue runs against the test control plane (its CRDs are there and its webhook
/// answers); with `GRYVIA_E2E=1` its absence fails the test.
async fn kueue_running(client: &kube::Client) -> bool {
    let probe: ResourceFlavor = serde_json::from_value(json!({
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
        "metadata": {"name": "e2e-probe"}, "spec": {}
    }))
    .unwrap();
    let ok = Api::<ResourceFlavor>::all(client.clone())
        .create(
            &PostParams {
                dry_run: true,
                ..PostParams::default()
            },
            &probe,
        )
        .await
        .is_ok();
    if !ok {
        assert!(
            !gryvia_testsupport::required(),
            "Kueue is not running: start the control plane with testenv/up --with-kueue"
        );
        eprintln!("skipping: Kueue is not running (testenv/up --with-kueue)");
    }
    ok
}

impl Setup {
    /// The operator with the Kueue integration, under the RBAC of deploy/ai-operator.
    async fn new(name: &str) -> Option<Setup> {
        let client = gryvia_testsupport::client().await?;
        let serial = SERIAL.lock().await;
        if !kueue_running(&client).await {
            return None;
        }
        gryvia_client::crds::install(&client, Duration::from_secs(60))
            .await
            .unwrap();
        let lease_ns = TestNamespace::create(&client, "kop").await.unwrap();
        let ns = TestNamespace::create(&client, name).await.unwrap();
        let access = common::operator_access(&client, &lease_ns.name).await;
        let (operator, _) = Process::operator(
            env!("CARGO_BIN_EXE_gryvia-ai-operator"),
            &lease_ns.name,
            &["--kueue-integration"],
            Some(&access.kubeconfig),
            &format!("ai-operator-kueue-{name}"),
        )
        .unwrap();
        Some(Setup {
            product: unique("GPU-KUEUE"),
            client,
            ns,
            _operator: operator,
            _cleanup: Cleanup::default(),
            _access: access,
            _lease_ns: lease_ns,
            _serial: serial,
        })
    }

    fn remember(&self, kind: &'static str, name: &str) {
        self._cleanup
            .0
            .lock()
            .unwrap()
            .push((kind, name.to_owned()));
    }

    /// Creates GryviaQueue `name` covering the test namespace.
    async fn queue(&self, name: &str, spec: Value) -> String {
        let name = unique(name);
        let mut spec = spec;
        spec["namespaces"] = json!([self.ns.name]);
        let q: GryviaQueue =
            serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap();
        Api::<GryviaQueue>::all(self.client.clone())
            .create(&PostParams::default(), &q)
            .await
            .unwrap();
        self.remember("queue", &name);
        name
    }

    /// Creates tenant `name` (and its namespace `tenant-<name>`, as the quota-operator would).
    async fn tenant(&self, name: &str, spec: Value) -> String {
        let ns: Namespace = serde_json::from_value(json!({
            "metadata": {"name": format!("tenant-{name}"), "labels": {"gryvia.io/e2e": "true"}}
        }))
        .unwrap();
        Api::<Namespace>::all(self.client.clone())
            .create(&PostParams::default(), &ns)
            .await
            .unwrap();
        self.remember("namespace", &format!("tenant-{name}"));
        let mut spec = spec;
        spec["displayName"] = json!(name);
        let t: GryviaTenant =
            serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap();
        Api::<GryviaTenant>::all(self.client.clone())
            .create(&PostParams::default(), &t)
            .await
            .unwrap();
        self.remember("tenant", name);
        name.to_owned()
    }

    async fn submit_in(&self, ns: &str, name: &str, gpus: i32, workers: i32, extra: Value) {
        let mut job: GryviaAIJob =
            serde_json::from_value(common::gpu_job(name, gpus, workers, &self.product, &extra))
                .unwrap();
        job.metadata.namespace = Some(ns.to_owned());
        Api::<GryviaAIJob>::namespaced(self.client.clone(), ns)
            .create(&PostParams::default(), &job)
            .await
            .unwrap();
    }

    async fn submit(&self, name: &str, gpus: i32, workers: i32, extra: Value) {
        self.submit_in(&self.ns.name, name, gpus, workers, extra)
            .await;
    }

    /// Waits until job `name` of `ns` satisfies `check`, and returns it.
    async fn wait_job_in(
        &self,
        ns: &str,
        name: &str,
        what: &str,
        check: impl Fn(&GryviaAIJob) -> bool,
    ) -> GryviaAIJob {
        let api: Api<GryviaAIJob> = Api::namespaced(self.client.clone(), ns);
        wait_object(&api, name, what, Duration::from_secs(120), check).await
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

    async fn wait_kueue_state(&self, name: &str, state: &str) -> GryviaAIJob {
        self.wait_job(name, &format!("Kueue state {state}"), |j| {
            kueue_of(j).is_some_and(|k| k.state == state)
        })
        .await
    }

    async fn pods(&self, job: &str) -> Vec<Pod> {
        Api::<Pod>::namespaced(self.client.clone(), &self.ns.name)
            .list(&ListParams::default().labels(&format!("{}={job}", labels::JOB_NAME)))
            .await
            .unwrap()
            .items
    }

    async fn delete_job(&self, name: &str) {
        Api::<GryviaAIJob>::namespaced(self.client.clone(), &self.ns.name)
            .delete(name, &DeleteParams::foreground())
            .await
            .unwrap();
    }

    /// Waits until the Kueue object `name` of `api` exists and satisfies `check`.
    async fn wait_kueue<K>(&self, api: Api<K>, name: &str, check: impl Fn(&K) -> bool) -> K
    where
        K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    {
        wait_object(
            &api,
            name,
            "as the integration makes it",
            Duration::from_secs(60),
            check,
        )
        .await
    }
}

fn phase(j: &GryviaAIJob) -> Option<JobPhase> {
    j.status.as_ref().and_then(|s| s.phase)
}

fn kueue_of(j: &GryviaAIJob) -> Option<&KueueStanding> {
    j.status.as_ref().and_then(|s| s.kueue.as_ref())
}

fn condition<'a>(j: &'a GryviaAIJob, type_: &str) -> Option<&'a Condition> {
    j.status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == type_))
}

fn gpu_quota(cq: &ClusterQueue, flavor: &str) -> Option<String> {
    cq.spec
        .resource_groups
        .iter()
        .flat_map(|g| &g.flavors)
        .find(|f| f.name == flavor)?
        .resources
        .iter()
        .find(|r| r.name == labels::NVIDIA_GPU_RESOURCE)
        .map(|r| r.nominal_quota.0.clone())
}

#[tokio::test]
async fn kueue_admits_within_quota_and_says_why_a_job_over_it_waits() {
    let Some(s) = Setup::new("kq").await else {
        return;
    };
    let _nodes = KwokNodes::create_with_product(&s.client, "kq", 2, 8, &s.product)
        .await
        .unwrap();
    let q = s
        .queue(
            "kq",
            json!({"resources": [{"gpuType": s.product, "nominal": 8}]}),
        )
        .await;

    // The integration's objects: a flavor of the product, the queue's ClusterQueue, the
    // namespace's LocalQueue.
    let flavor = gryvia_reconcile::kueue::flavor_of(&s.product);
    let rf: ResourceFlavor = s
        .wait_kueue(Api::all(s.client.clone()), &flavor, |_| true)
        .await;
    assert_eq!(
        rf.spec.node_labels.get(labels::NVIDIA_GPU_PRODUCT),
        Some(&s.product)
    );
    let cq_name = gryvia_reconcile::kueue::queue_cluster_queue(&q);
    let cq: ClusterQueue = s
        .wait_kueue(Api::all(s.client.clone()), &cq_name, |cq: &ClusterQueue| {
            cq.status.as_ref().is_some_and(|st| {
                st.conditions
                    .iter()
                    .any(|c| c.type_ == "Active" && c.status == "True")
            })
        })
        .await;
    assert_eq!(gpu_quota(&cq, &flavor).as_deref(), Some("8"));
    let lq: LocalQueue = s
        .wait_kueue(
            Api::namespaced(s.client.clone(), &s.ns.name),
            gryvia_reconcile::kueue::LOCAL_QUEUE,
            |_| true,
        )
        .await;
    assert_eq!(lq.spec.cluster_queue, cq_name);

    // Within quota: Kueue admits it, its batch Job is labelled and unsuspended, it runs.
    s.submit("fits", 8, 1, json!({})).await;
    let fits = s.wait_running("fits").await;
    let k = kueue_of(&fits).unwrap();
    assert_eq!(k.state, "Admitted", "{k:?}");
    assert_eq!(k.cluster_queue.as_deref(), Some(cq_name.as_str()));
    assert_eq!(k.flavors, vec![flavor.clone()]);
    let batch = Api::<Job>::namespaced(s.client.clone(), &s.ns.name)
        .get("fits")
        .await
        .unwrap();
    let batch_labels = batch.metadata.labels.clone().unwrap_or_default();
    assert_eq!(
        batch_labels
            .get(gryvia_types::kueue::QUEUE_NAME)
            .map(String::as_str),
        Some(gryvia_reconcile::kueue::LOCAL_QUEUE)
    );
    assert_eq!(
        batch_labels
            .get(gryvia_types::kueue::PRIORITY_CLASS)
            .map(String::as_str),
        Some("gryvia-priority-50")
    );
    assert_eq!(batch.spec.and_then(|sp| sp.suspend), Some(false));

    // Over quota: it waits with Kueue's reason, no pod is made.
    s.submit("over", 4, 1, json!({})).await;
    let over = s
        .wait_job("over", "Kueue's reason for waiting", |j| {
            kueue_of(j).is_some_and(|k| {
                k.state == "Pending"
                    && k.message
                        .as_deref()
                        .is_some_and(|m| m.contains("insufficient"))
            })
        })
        .await;
    assert_eq!(phase(&over), Some(JobPhase::Pending));
    let scheduled = condition(&over, "Scheduled").unwrap();
    assert_eq!(scheduled.reason, "Queued");
    assert!(scheduled.message.contains("insufficient"), "{scheduled:?}");
    assert!(s.pods("over").await.is_empty(), "no pod before admission");

    // Room again: Kueue admits the waiting job.
    s.delete_job("fits").await;
    let over = s.wait_running("over").await;
    assert_eq!(kueue_of(&over).unwrap().state, "Admitted");
}

#[tokio::test]
async fn a_multi_worker_job_is_admitted_whole_or_not_at_all() {
    let Some(s) = Setup::new("kg").await else {
        return;
    };
    let _nodes = KwokNodes::create_with_product(&s.client, "kg", 3, 8, &s.product)
        .await
        .unwrap();
    // BestEffortFIFO: a job that cannot fit does not hold back the jobs behind it.
    s.queue(
        "kg",
        json!({"resources": [{"gpuType": s.product, "nominal": 8}],
               "queueingStrategy": "BestEffortFIFO"}),
    )
    .await;
    // 3 x 4 GPUs > 8: not one worker starts.
    s.submit("big", 4, 3, json!({})).await;
    s.wait_kueue_state("big", "Pending").await;
    // 2 x 4 GPUs: admitted whole, both workers run.
    s.submit("pair", 4, 2, json!({})).await;
    let pair = s.wait_running("pair").await;
    assert_eq!(kueue_of(&pair).unwrap().state, "Admitted");
    wait_for(
        "both workers of pair running",
        Duration::from_secs(60),
        || async {
            let pods = s.pods("pair").await;
            (pods.len() == 2
                && pods.iter().all(|p| {
                    p.status.as_ref().and_then(|st| st.phase.as_deref()) == Some("Running")
                }))
            .then_some(())
        },
    )
    .await
    .unwrap();
    assert!(
        s.pods("big").await.is_empty(),
        "a gang is admitted whole or not at all"
    );
    let big = s.wait_kueue_state("big", "Pending").await;
    assert!(
        kueue_of(&big)
            .unwrap()
            .message
            .as_deref()
            .is_some_and(|m| m.contains("insufficient")),
        "{:?}",
        kueue_of(&big)
    );
}

#[tokio::test]
async fn priority_preemption_requeues_the_victim_without_using_a_retry() {
    let Some(s) = Setup::new("kp").await else {
        return;
    };
    let _nodes = KwokNodes::create_with_product(&s.client, "kp", 1, 8, &s.product)
        .await
        .unwrap();
    s.queue(
        "kp",
        json!({"resources": [{"gpuType": s.product, "nominal": 8}],
               "preemption": {"withinQueue": "LowerPriority"}}),
    )
    .await;
    s.submit("low", 8, 1, json!({"priority": 10, "retryLimit": 0}))
        .await;
    s.wait_running("low").await;
    // Each spec.priority is a WorkloadPriorityClass.
    let wpc: WorkloadPriorityClass = s
        .wait_kueue(Api::all(s.client.clone()), "gryvia-priority-10", |_| true)
        .await;
    assert_eq!(wpc.value, 10);

    s.submit("high", 8, 1, json!({"priority": 90})).await;
    let low = s
        .wait_job("low", "evicted by Kueue", |j| {
            kueue_of(j).is_some_and(|k| k.evictions >= 1)
                && condition(j, "Preempted").is_some_and(|c| c.status == "True")
        })
        .await;
    let preempted = condition(&low, "Preempted").unwrap();
    assert!(!preempted.message.is_empty(), "{preempted:?}");
    assert_eq!(
        preempted.reason, "InClusterQueue",
        "Kueue's reason: {preempted:?}"
    );
    s.wait_running("high").await;
    let low = s
        .wait_job("low", "requeued, Pending", |j| {
            phase(j) == Some(JobPhase::Pending)
                && kueue_of(j).is_some_and(|k| k.state != "Admitted")
        })
        .await;
    let status = low.status.clone().unwrap();
    assert_eq!(status.retries, 0, "a preemption uses no retry: {status:?}");

    // The high-priority job leaves: the victim is admitted again and runs.
    s.delete_job("high").await;
    let low = s.wait_running("low").await;
    let k = kueue_of(&low).unwrap();
    assert_eq!(k.state, "Admitted");
    assert_eq!(k.evictions, 1);
    assert_eq!(low.status.unwrap().retries, 0);
}

#[tokio::test]
async fn tenants_become_cluster_queues_and_a_child_borrows_its_parents_unused_quota() {
    let Some(s) = Setup::new("kt").await else {
        return;
    };
    let _nodes = KwokNodes::create_with_product(&s.client, "kt", 1, 8, &s.product)
        .await
        .unwrap();
    // A tenant whose namespace does not exist yet (no quota-operator runs here) holds up no
    // other tenant's Kueue objects.
    let ghost = unique("kghost").to_lowercase();
    let t: GryviaTenant = serde_json::from_value(
        json!({"metadata": {"name": ghost}, "spec": {"displayName": "no namespace yet"}}),
    )
    .unwrap();
    Api::<GryviaTenant>::all(s.client.clone())
        .create(&PostParams::default(), &t)
        .await
        .unwrap();
    s.remember("tenant", &ghost);
    let parent = s
        .tenant(
            &unique("kparent").to_lowercase(),
            json!({"quotas": {"gpusPerType": {s.product.clone(): 8}}}),
        )
        .await;
    let child = s
        .tenant(
            &unique("kchild").to_lowercase(),
            json!({"parentTenant": parent, "quotas": {"gpusPerType": {s.product.clone(): 0}}}),
        )
        .await;
    let flavor = gryvia_reconcile::kueue::flavor_of(&s.product);
    let cohort = gryvia_reconcile::kueue::tenant_cohort(&parent);
    for (tenant, nominal) in [(&parent, "8"), (&child, "0")] {
        let cq: ClusterQueue = s
            .wait_kueue(
                Api::all(s.client.clone()),
                &gryvia_reconcile::kueue::tenant_cluster_queue(tenant),
                // The parent's ClusterQueue may be made before its child is seen: no cohort yet.
                |cq: &ClusterQueue| cq.spec.cohort_name.as_deref() == Some(cohort.as_str()),
            )
            .await;
        assert_eq!(gpu_quota(&cq, &flavor).as_deref(), Some(nominal));
    }
    let child_ns = format!("tenant-{child}");
    s.wait_kueue::<LocalQueue>(
        Api::namespaced(s.client.clone(), &child_ns),
        gryvia_reconcile::kueue::LOCAL_QUEUE,
        |_| true,
    )
    .await;
    // The child has no GPUs of its own: it borrows the parent's 8.
    s.submit_in(&child_ns, "borrower", 8, 1, json!({})).await;
    let j = s
        .wait_job_in(&child_ns, "borrower", "Running on borrowed quota", |j| {
            phase(j) == Some(JobPhase::Running)
        })
        .await;
    let k = kueue_of(&j).unwrap();
    assert_eq!(k.state, "Admitted");
    assert_eq!(
        k.cluster_queue.as_deref(),
        Some(gryvia_reconcile::kueue::tenant_cluster_queue(&child).as_str())
    );
    Api::<GryviaAIJob>::namespaced(s.client.clone(), &child_ns)
        .delete("borrower", &DeleteParams::foreground())
        .await
        .unwrap();
}
