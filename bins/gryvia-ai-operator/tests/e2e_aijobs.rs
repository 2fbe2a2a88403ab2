//! End-to-end: the ai-operator binary against a real control plane (testenv/): AI jobs run on
//! KWOK GPU nodes through the real Job controller and scheduler, retries are counted, an
//! infrastructure failure costs no retry, templates render into jobs that run, and priority
//! tiers become PriorityClasses.
//!
//! Tests in this file run one at a time (a static lock): each starts its own operator.

#![expect(clippy::unwrap_used, reason = "test helpers panic on failure")]

#[allow(dead_code, reason = "each test file uses part of the shared harness")]
mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::receivers::{StandardGot, StandardReceiver};
use gryvia_testsupport::{
    KwokNodes, NODE_GROUP_LABEL, NODE_GROUP_TAINT, Process, ServiceAccountAccess, TestNamespace,
    free_port, unique, wait_for,
};
use gryvia_types::{FailureClass, GryviaAIJob, GryviaPriority, GryviaTemplate, JobPhase};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Node, Pod, Service};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, EvictParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

struct Setup {
    client: kube::Client,
    ns: TestNamespace,
    // Fields drop in declaration order: the operator is killed before the lock is released.
    operator: Process,
    _access: ServiceAccountAccess,
    _lease_ns: TestNamespace,
    _serial: tokio::sync::MutexGuard<'static, ()>,
}

impl Setup {
    async fn new(name: &str) -> Option<Setup> {
        Self::start(name, &[], None).await
    }

    /// Also serves and registers the admission webhooks (for the test namespace only);
    /// `label` goes on the test namespace before the operator starts.
    async fn with_webhooks(
        name: &str,
        label: Option<(&str, &str)>,
        more: &[&str],
    ) -> Option<(Setup, common::WebhookCleanup)> {
        let port = free_port();
        let addr = format!("127.0.0.1:{port}");
        let hook_name = unique("gryvia-e2e");
        let mut args = vec![
            "--webhook-addr".to_owned(),
            addr.clone(),
            "--webhook-url".to_owned(),
            format!("https://{addr}"),
            "--webhook-name".to_owned(),
            hook_name.clone(),
        ];
        args.extend(more.iter().map(|m| (*m).to_owned()));
        let s = Self::start(name, &args, label).await?;
        let cleanup = common::WebhookCleanup(hook_name.clone());
        use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
        let vwc: Api<ValidatingWebhookConfiguration> = Api::all(s.client.clone());
        wait_for("webhooks registered", Duration::from_secs(60), || {
            let vwc = vwc.clone();
            let hook_name = hook_name.clone();
            async move { vwc.get(&hook_name).await.ok() }
        })
        .await
        .unwrap();
        Some((s, cleanup))
    }

    async fn start(name: &str, extra: &[String], label: Option<(&str, &str)>) -> Option<Setup> {
        let client = gryvia_testsupport::client().await?;
        let serial = SERIAL.lock().await;
        gryvia_client::crds::install(&client, Duration::from_secs(60))
            .await
            .unwrap();
        let lease_ns = TestNamespace::create(&client, "aiop").await.unwrap();
        let ns = TestNamespace::create(&client, name).await.unwrap();
        if let Some((k, v)) = label {
            Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone())
                .patch(
                    &ns.name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"metadata": {"labels": {k: v}}})),
                )
                .await
                .unwrap();
        }
        let port = free_port();
        let selector = format!("kubernetes.io/metadata.name={}", ns.name);
        let mut args: Vec<String> = vec![
            "--metrics-addr".into(),
            format!("127.0.0.1:{port}"),
            "--lease-namespace".into(),
            lease_ns.name.clone(),
            "--lease-duration".into(),
            "4".into(),
            "--lease-grace".into(),
            "1".into(),
        ];
        args.extend(extra.iter().cloned());
        if extra.iter().any(|a| a == "--webhook-addr") {
            args.push("--webhook-namespace-selector".into());
            args.push(selector);
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        // The operator runs under exactly the RBAC of deploy/ai-operator.
        let access = common::operator_access(&client, &lease_ns.name).await;
        let operator = Process::start(
            env!("CARGO_BIN_EXE_gryvia-ai-operator"),
            &args,
            Some(&access.kubeconfig),
            &format!("ai-operator-{name}"),
        )
        .unwrap();
        Some(Setup {
            client,
            ns,
            operator,
            _access: access,
            _lease_ns: lease_ns,
            _serial: serial,
        })
    }

    fn jobs(&self) -> Api<GryviaAIJob> {
        Api::namespaced(self.client.clone(), &self.ns.name)
    }

    /// Creates Secret `name` of the test namespace with `value` under the key `secret` (a job
    /// hook's signing key).
    async fn hook_secret(&self, name: &str, value: &str) {
        gryvia_testsupport::record_secret(&format!("job hook signing key {name}"), value);
        let secret: k8s_openapi::api::core::v1::Secret = serde_json::from_value(json!({
            "metadata": {"name": name}, "stringData": {"secret": value}
        }))
        .unwrap();
        Api::namespaced(self.client.clone(), &self.ns.name)
            .create(&PostParams::default(), &secret)
            .await
            .unwrap();
    }

    /// Creates GryviaJobHook `name` of the test namespace with `spec`.
    async fn create_hook(&self, name: &str, spec: Value) -> gryvia_types::GryviaJobHook {
        let mut hook: gryvia_types::GryviaJobHook =
            serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap();
        hook.metadata.namespace = Some(self.ns.name.clone());
        Api::namespaced(self.client.clone(), &self.ns.name)
            .create(&PostParams::default(), &hook)
            .await
            .unwrap()
    }

    async fn submit(&self, body: Value) -> GryviaAIJob {
        let mut job: GryviaAIJob = serde_json::from_value(body).unwrap();
        job.metadata.namespace = Some(self.ns.name.clone());
        self.jobs()
            .create(&PostParams::default(), &job)
            .await
            .unwrap()
    }

    /// Waits until the job reaches `phase` and returns it.
    async fn wait_phase(&self, name: &str, phase: JobPhase, timeout: Duration) -> GryviaAIJob {
        let api = self.jobs();
        let result = wait_for(&format!("job {name} {phase:?}"), timeout, || {
            let api = api.clone();
            async move {
                let j = api.get(name).await.ok()?;
                (j.status.as_ref()?.phase == Some(phase)).then_some(j)
            }
        })
        .await;
        match result {
            Ok(j) => j,
            Err(e) => {
                let now = api.get(name).await.map(|j| j.status);
                panic!("{e:#}; status now: {now:?}")
            }
        }
    }

    async fn pods(&self, job: &str) -> Vec<Pod> {
        Api::<Pod>::namespaced(self.client.clone(), &self.ns.name)
            .list(&ListParams::default().labels(&format!("gryvia.io/job-name={job}")))
            .await
            .unwrap()
            .items
    }
}

fn phase(p: &Pod) -> String {
    p.status
        .as_ref()
        .and_then(|s| s.phase.clone())
        .unwrap_or_default()
}

#[tokio::test]
async fn a_two_worker_job_runs_to_succeeded_on_kwok_gpu_nodes() {
    let Some(s) = Setup::new("aijob-ok").await else {
        return;
    };
    s.submit(json!({
        "metadata": {"name": "train"},
        "spec": {"image": "registry.local/train:1", "gpus": 2, "replicas": 2, "framework": "pytorch",
                 "gpuType": "NVIDIA-H100-80GB-HBM3", "command": ["python", "train.py"]}
    }))
    .await;
    let job = s
        .wait_phase("train", JobPhase::Succeeded, Duration::from_secs(90))
        .await;
    let st = job.status.unwrap();
    assert_eq!(st.succeeded, 2);
    assert_eq!(st.retries, 0);
    assert_eq!(st.job_name.as_deref(), Some("train"));
    assert!(st.start_time.is_some() && st.completion_time.is_some());
    assert!(
        st.conditions
            .iter()
            .any(|c| c.type_ == "Succeeded" && c.status == "True")
    );

    let batch = Api::<Job>::namespaced(s.client.clone(), &s.ns.name)
        .get("train")
        .await
        .unwrap();
    let spec = batch.spec.unwrap();
    assert_eq!(spec.completion_mode.as_deref(), Some("Indexed"));
    assert_eq!(spec.backoff_limit, Some(3));
    let svc = Api::<Service>::namespaced(s.client.clone(), &s.ns.name)
        .get("train")
        .await
        .unwrap();
    assert_eq!(svc.spec.unwrap().cluster_ip.as_deref(), Some("None"));
    let pods = s.pods("train").await;
    assert_eq!(pods.len(), 2);
    for p in &pods {
        let spec = p.spec.as_ref().unwrap();
        assert!(spec.node_name.as_deref().unwrap().starts_with("gpu-node-"));
        assert_eq!(
            spec.hostname.as_deref().map(|h| h.starts_with("train-")),
            Some(true)
        );
        let c = &spec.containers[0];
        let limits = c.resources.as_ref().unwrap().limits.as_ref().unwrap();
        assert_eq!(limits["nvidia.com/gpu"].0, "2");
        let env: BTreeMap<_, _> = c
            .env
            .as_ref()
            .unwrap()
            .iter()
            .map(|e| (e.name.clone(), e.value.clone()))
            .collect();
        assert_eq!(env["WORLD_SIZE"].as_deref(), Some("2"));
        assert_eq!(env["MASTER_ADDR"].as_deref(), Some("train-0.train"));
    }
}

#[tokio::test]
async fn a_failing_job_is_retried_exactly_retry_limit_times_then_fails() {
    let Some(s) = Setup::new("aijob-fail").await else {
        return;
    };
    s.submit(json!({
        "metadata": {"name": "crash"},
        "spec": {"image": "registry.local/crash:1", "gpus": 1, "retryLimit": 2,
                 "podAnnotations": {"gryvia.io/testenv-fail": "true", "gryvia.io/testenv-exit-code": "3"}}
    }))
    .await;
    // The Job controller backs off 10 s, then 20 s between attempts.
    let job = s
        .wait_phase("crash", JobPhase::Failed, Duration::from_secs(150))
        .await;
    let st = job.status.unwrap();
    assert_eq!(st.retries, 2);
    assert_eq!(st.infrastructure_failures, 0);
    assert_eq!(st.failures.len(), 3);
    assert!(
        st.failures
            .iter()
            .all(|f| f.class == FailureClass::Application && f.exit_code == Some(3))
    );
    let failed = st.conditions.iter().find(|c| c.type_ == "Failed").unwrap();
    assert_eq!(failed.reason, "BackoffLimitExceeded");
    assert!(
        failed.message.contains("used up retryLimit 2"),
        "{}",
        failed.message
    );
    let pods = s.pods("crash").await;
    assert_eq!(
        pods.iter().filter(|p| phase(p) == "Failed").count(),
        3,
        "exactly retryLimit + 1 attempts"
    );
}

#[tokio::test]
async fn an_evicted_pod_on_a_quarantined_node_costs_no_retry_and_its_retry_runs_elsewhere() {
    let Some(s) = Setup::new("aijob-infra").await else {
        return;
    };
    let nodes = KwokNodes::create(&s.client, "aijob", 2, 8).await.unwrap();
    s.submit(json!({
        "metadata": {"name": "resilient"},
        "spec": {"image": "registry.local/train:1", "gpus": 4, "retryLimit": 0,
                 "nodeSelector": {NODE_GROUP_LABEL: nodes.group},
                 "tolerations": [{"key": NODE_GROUP_TAINT, "operator": "Exists", "effect": "NoSchedule"}],
                 "podAnnotations": {"gryvia.io/testenv-duration": "20s"}}
    }))
    .await;
    let first = s
        .wait_phase("resilient", JobPhase::Running, Duration::from_secs(60))
        .await;
    assert_eq!(first.status.unwrap().retries, 0);
    let pods = s.pods("resilient").await;
    let victim = pods.iter().find(|p| phase(p) == "Running").unwrap();
    let bad_node = victim.spec.as_ref().unwrap().node_name.clone().unwrap();

    // What the gpu-operator does to a node whose GPU failed: quarantine, then drain through
    // the Eviction API.
    let node_api: Api<Node> = Api::all(s.client.clone());
    node_api
        .patch(
            &bad_node,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"unschedulable": true, "taints": [
                {"key": NODE_GROUP_TAINT, "value": nodes.group, "effect": "NoSchedule"},
                {"key": "gryvia.io/gpu-unhealthy", "value": "e2e", "effect": "NoSchedule"}
            ]}})),
        )
        .await
        .unwrap();
    Api::<Pod>::namespaced(s.client.clone(), &s.ns.name)
        .evict(&victim.name_any(), &EvictParams::default())
        .await
        .unwrap();

    let job = s
        .wait_phase("resilient", JobPhase::Succeeded, Duration::from_secs(120))
        .await;
    let st = job.status.unwrap();
    assert_eq!(st.retries, 0, "the eviction used no retry");
    assert_eq!(st.infrastructure_failures, 1);
    assert_eq!(st.avoided_nodes, vec![bad_node.clone()]);
    let f = &st.failures[0];
    assert_eq!(f.class, FailureClass::Infrastructure);
    assert_eq!(f.node.as_deref(), Some(bad_node.as_str()));
    assert!(f.reason.contains("EvictionByEvictionAPI"), "{}", f.reason);
    let pods = s.pods("resilient").await;
    let winner = pods.iter().find(|p| phase(p) == "Succeeded").unwrap();
    assert_ne!(
        winner.spec.as_ref().unwrap().node_name.as_deref(),
        Some(bad_node.as_str())
    );
    // With retryLimit 0, the Job controller would have failed the job had it counted the pod.
    let batch = Api::<Job>::namespaced(s.client.clone(), &s.ns.name)
        .get("resilient")
        .await
        .unwrap();
    assert_eq!(batch.status.unwrap().failed.unwrap_or(0), 0);
}

#[tokio::test]
async fn a_job_that_cannot_be_placed_says_why_in_its_scheduled_condition() {
    let Some(s) = Setup::new("aijob-big").await else {
        return;
    };
    s.submit(json!({
        "metadata": {"name": "too-big"},
        "spec": {"image": "registry.local/train:1", "gpus": 64}
    }))
    .await;
    let api = s.jobs();
    let msg = wait_for(
        "Scheduled=False Unschedulable",
        Duration::from_secs(60),
        || {
            let api = api.clone();
            async move {
                let j = api.get("too-big").await.ok()?;
                let c = j
                    .status?
                    .conditions
                    .into_iter()
                    .find(|c| c.type_ == "Scheduled")?;
                (c.reason == "Unschedulable").then_some(c.message)
            }
        },
    )
    .await
    .unwrap();
    assert!(msg.contains("Insufficient nvidia.com/gpu"), "{msg}");
    let j = api.get("too-big").await.unwrap();
    assert_eq!(j.status.unwrap().phase, Some(JobPhase::Pending));
}

#[tokio::test]
async fn a_template_renders_into_a_job_that_runs_and_counts_it() {
    let Some(s) = Setup::new("aijob-tpl").await else {
        return;
    };
    let name = unique("e2e-tpl");
    let tpl: GryviaTemplate = serde_json::from_value(json!({
        "apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaTemplate",
        "metadata": {"name": name},
        "spec": {"category": "training",
                 "defaults": {"image": "registry.local/train:{{ .version }}", "resources": {"gpuCount": 2},
                              "args": ["--batch-size={{ .batchSize }}"]},
                 "parameters": [{"name": "batchSize", "type": "integer", "default": "32", "validation": {"min": 1, "max": 512}},
                                {"name": "version", "type": "string", "required": true}]}
    }))
    .unwrap();
    let tpls: Api<GryviaTemplate> = Api::all(s.client.clone());
    tpls.create(&PostParams::default(), &tpl).await.unwrap();
    let valid = wait_for("template Valid", Duration::from_secs(90), || {
        let tpls = tpls.clone();
        let name = name.clone();
        async move {
            let t = tpls.get(&name).await.ok()?;
            t.status?
                .conditions
                .into_iter()
                .find(|c| c.type_ == "Valid")
        }
    })
    .await
    .unwrap();
    assert_eq!(valid.status, "True", "{}", valid.message);

    let tpl = tpls.get(&name).await.unwrap();
    let params = BTreeMap::from([
        ("version".to_owned(), "v7".to_owned()),
        ("batchSize".to_owned(), "64".to_owned()),
    ]);
    let job = gryvia_reconcile::template::render(&tpl, "from-tpl", &s.ns.name, &params).unwrap();
    gryvia_client::ops::jobs::submit(&s.client, &job)
        .await
        .unwrap();
    let done = s
        .wait_phase("from-tpl", JobPhase::Succeeded, Duration::from_secs(90))
        .await;
    assert_eq!(done.spec.image, "registry.local/train:v7");
    assert_eq!(done.spec.args, vec!["--batch-size=64"]);
    assert_eq!(done.spec.gpus, 2);
    let count = wait_for("instantiatedJobs 1", Duration::from_secs(90), || {
        let tpls = tpls.clone();
        let name = name.clone();
        async move {
            let n = tpls.get(&name).await.ok()?.status?.instantiated_jobs;
            (n == 1).then_some(n)
        }
    })
    .await
    .unwrap();
    assert_eq!(count, 1);
    let out_of_range = BTreeMap::from([
        ("version".to_owned(), "v7".to_owned()),
        ("batchSize".to_owned(), "0".to_owned()),
    ]);
    let e = gryvia_reconcile::template::render(&tpl, "bad", &s.ns.name, &out_of_range).unwrap_err();
    assert_eq!(
        e.to_string(),
        "parameters.batchSize: 0 is below the minimum 1"
    );
    let _ = tpls.delete(&name, &DeleteParams::default()).await;
}

#[tokio::test]
async fn a_priority_becomes_a_priority_class_that_annotated_jobs_run_with() {
    let Some(s) = Setup::new("aijob-prio").await else {
        return;
    };
    let name = unique("e2e-high");
    let prios: Api<GryviaPriority> = Api::all(s.client.clone());
    let prio: GryviaPriority = serde_json::from_value(json!({
        "apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaPriority",
        "metadata": {"name": name},
        "spec": {"value": 1000, "preemptionPolicy": "Never", "description": "e2e"}
    }))
    .unwrap();
    // The job comes first: it waits for the class.
    s.submit(json!({
        "metadata": {"name": "urgent", "annotations": {"gryvia.io/priority-class": name}},
        "spec": {"image": "registry.local/train:1", "gpus": 1}
    }))
    .await;
    let api = s.jobs();
    wait_for("PriorityClassNotFound", Duration::from_secs(90), || {
        let api = api.clone();
        async move {
            let c = api
                .get("urgent")
                .await
                .ok()?
                .status?
                .conditions
                .into_iter()
                .find(|c| c.type_ == "Scheduled")?;
            (c.reason == "PriorityClassNotFound").then_some(())
        }
    })
    .await
    .unwrap();
    prios.create(&PostParams::default(), &prio).await.unwrap();
    let pcs: Api<PriorityClass> = Api::all(s.client.clone());
    let pc = wait_for("PriorityClass", Duration::from_secs(90), || {
        let pcs = pcs.clone();
        let name = name.clone();
        async move { pcs.get(&name).await.ok() }
    })
    .await
    .unwrap();
    assert_eq!(pc.value, 1000);
    assert_eq!(pc.preemption_policy.as_deref(), Some("Never"));

    s.wait_phase("urgent", JobPhase::Succeeded, Duration::from_secs(90))
        .await;
    let pods = s.pods("urgent").await;
    let spec = pods[0].spec.as_ref().unwrap();
    assert_eq!(spec.priority_class_name.as_deref(), Some(name.as_str()));
    assert_eq!(spec.priority, Some(1000));

    // A new value replaces the (immutable) PriorityClass.
    prios
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"value": 2000}})),
        )
        .await
        .unwrap();
    wait_for("PriorityClass value 2000", Duration::from_secs(90), || {
        let pcs = pcs.clone();
        let name = name.clone();
        async move { (pcs.get(&name).await.ok()?.value == 2000).then_some(()) }
    })
    .await
    .unwrap();
    let _ = prios.delete(&name, &DeleteParams::default()).await;
}

/// A fault of issue #25: the admission webhook server goes down (the operator SIGKILLed,
/// its webhook configurations left registered). Fail-open (the default, `failurePolicy:
/// Ignore`) the API server admits jobs without it; `--webhook-fail-closed` (`Fail`) refuses
/// them, naming the webhook. Both modes admit the same job while the server is up.
#[tokio::test]
async fn with_the_webhook_server_down_jobs_are_admitted_fail_open_and_refused_fail_closed() {
    for fail_closed in [false, true] {
        let (name, extra): (&str, &[&str]) = if fail_closed {
            ("wh-closed", &["--webhook-fail-closed"])
        } else {
            ("wh-open", &[])
        };
        let Some((mut s, _hooks)) = Setup::with_webhooks(name, None, extra).await else {
            return;
        };
        let job = |n: &str| -> GryviaAIJob {
            serde_json::from_value(json!({
                "metadata": {"name": n, "namespace": s.ns.name},
                "spec": {"image": "img", "framework": "pytorch"}
            }))
            .unwrap()
        };
        // Up: admitted (the webhook answers as soon as its caches are synced).
        wait_for(
            "a job admitted while the webhook is up",
            Duration::from_secs(30),
            || {
                let (jobs, j) = (s.jobs(), job("while-up"));
                async move { jobs.create(&PostParams::default(), &j).await.ok() }
            },
        )
        .await
        .unwrap();
        s.operator.kill();
        let answer = s
            .jobs()
            .create(&PostParams::default(), &job("while-down"))
            .await;
        if fail_closed {
            let e = answer.expect_err("fail-closed refuses while the webhook is down");
            assert!(e.to_string().contains("failed calling webhook"), "{e}");
            assert!(s.jobs().get_opt("while-down").await.unwrap().is_none());
        } else {
            answer.expect("fail-open admits while the webhook is down");
        }
    }
}

#[tokio::test]
async fn the_api_server_rejects_long_names_and_spec_changes() {
    let Some(s) = Setup::new("aijob-schema").await else {
        return;
    };
    let long = "a".repeat(53);
    let mut job: GryviaAIJob = serde_json::from_value(json!({
        "metadata": {"name": long, "namespace": s.ns.name},
        "spec": {"image": "img"}
    }))
    .unwrap();
    let e = s
        .jobs()
        .create(&PostParams::default(), &job)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("at most 52 characters"), "{e}");
    job.metadata.name = Some("short".into());
    s.jobs().create(&PostParams::default(), &job).await.unwrap();
    let e = s
        .jobs()
        .patch(
            "short",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"gpus": 2}})),
        )
        .await
        .unwrap_err();
    assert!(e.to_string().contains("spec is immutable"), "{e}");
}

async fn create_cluster_object<K>(client: &kube::Client, body: Value) -> K
where
    K: kube::Resource<DynamicType = (), Scope = k8s_openapi::ClusterResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug,
{
    let obj: K = serde_json::from_value(body).unwrap();
    Api::<K>::all(client.clone())
        .create(&PostParams::default(), &obj)
        .await
        .unwrap()
}

/// A tenant that may only use H100s: an H100 SKU of its own and the tenant allowing just it.
/// Returns the SKU's name.
async fn h100_only_tenant(client: &kube::Client, tenant: &str) -> String {
    let h100 = unique("e2e-h100");
    let _: gryvia_types::GryviaGpuSku = create_cluster_object(
        client,
        json!({
        "apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaGpuSku", "metadata": {"name": h100},
        "spec": {"gpuProduct": "NVIDIA-H100-80GB-HBM3", "pricePerGpuHour": "4.10"}}),
    )
    .await;
    let _: gryvia_types::GryviaTenant = create_cluster_object(
        client,
        json!({
        "apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaTenant", "metadata": {"name": tenant},
        "spec": {"displayName": "H100 only", "allowedSkus": [h100]}}),
    )
    .await;
    h100
}

#[tokio::test]
#[expect(
    clippy::too_many_lines,
    reason = "one end-to-end scenario, read top to bottom"
)]
async fn the_webhooks_reject_a_disallowed_sku_and_inject_the_training_environment() {
    let tenant = unique("e2e-ml");
    let Some(client) = gryvia_testsupport::client().await else {
        return;
    };
    gryvia_client::crds::install(&client, Duration::from_secs(60))
        .await
        .unwrap();
    let h100 = h100_only_tenant(&client, &tenant).await;
    let a100 = unique("e2e-a100");
    let _: gryvia_types::GryviaGpuSku = create_cluster_object(
        &client,
        json!({
        "apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaGpuSku", "metadata": {"name": a100},
        "spec": {"gpuProduct": "NVIDIA-A100-SXM4-80GB", "pricePerGpuHour": "2.50"}}),
    )
    .await;
    let Some((s, _hooks)) =
        Setup::with_webhooks("aijob-hook", Some(("gryvia.io/tenant", &tenant)), &[]).await
    else {
        return;
    };

    // The API server may take a moment to start calling a new webhook: retry until the
    // disallowed job is rejected.
    let jobs = s.jobs();
    let ns = s.ns.name.clone();
    let message = wait_for(
        "the validating webhook to reject an A100 job",
        Duration::from_secs(90),
        || {
            let jobs = jobs.clone();
            let ns = ns.clone();
            async move {
                let job: GryviaAIJob = serde_json::from_value(json!({
                    "metadata": {"name": "on-a100", "namespace": ns},
                    "spec": {"image": "img", "gpus": 1, "gpuType": "NVIDIA-A100-SXM4-80GB"}
                }))
                .unwrap();
                match jobs.create(&PostParams::default(), &job).await {
                    Err(kube::Error::Api(e)) => Some(e.message),
                    Err(_) => None,
                    Ok(_) => {
                        let _ = jobs.delete("on-a100", &DeleteParams::default()).await;
                        None
                    }
                }
            }
        },
    )
    .await
    .unwrap();
    assert!(
        message.contains("admission webhook \"validate.aijobs.gryvia.io\" denied the request: spec.gpuType: NVIDIA-A100-SXM4-80GB is not allowed for tenant"),
        "{message}"
    );
    assert!(
        message.contains(&format!("allowed SKUs: {h100}")),
        "{message}"
    );

    // An H100 job passes, with the distributed-training environment injected.
    let admitted = s.submit(json!({
        "metadata": {"name": "on-h100"},
        "spec": {"image": "img", "gpus": 2, "replicas": 2, "framework": "pytorch", "gpuType": "NVIDIA-H100-80GB-HBM3",
                 "env": [{"name": "NCCL_DEBUG", "value": "INFO"}]}
    }))
    .await;
    let env: BTreeMap<String, Option<String>> = admitted
        .spec
        .env
        .iter()
        .map(|e| (e.name.clone(), e.value.clone()))
        .collect();
    assert_eq!(
        env["NCCL_DEBUG"].as_deref(),
        Some("INFO"),
        "the job's own value stays"
    );
    assert_eq!(env["PET_NNODES"].as_deref(), Some("2"));
    assert_eq!(env["PET_NODE_RANK"].as_deref(), Some("$(RANK)"));
    assert_eq!(env["NCCL_SOCKET_IFNAME"].as_deref(), Some("^lo,docker0"));
    s.wait_phase("on-h100", JobPhase::Succeeded, Duration::from_secs(90))
        .await;

    // A template label that names no template is rejected.
    let mut job: GryviaAIJob = serde_json::from_value(json!({
        "metadata": {"name": "from-nothing", "namespace": s.ns.name, "labels": {"gryvia.io/template": "no-such-template"}},
        "spec": {"image": "img", "gpus": 0}
    }))
    .unwrap();
    let e = s
        .jobs()
        .create(&PostParams::default(), &job)
        .await
        .unwrap_err();
    assert!(
        e.to_string().contains(
            "metadata.labels[gryvia.io/template]: template no-such-template does not exist"
        ),
        "{e}"
    );

    // Over the namespace's GPU quota: rejected with what is left.
    let rq: k8s_openapi::api::core::v1::ResourceQuota = serde_json::from_value(json!({
        "metadata": {"name": "gpus"}, "spec": {"hard": {"requests.nvidia.com/gpu": "4"}}
    }))
    .unwrap();
    Api::<k8s_openapi::api::core::v1::ResourceQuota>::namespaced(s.client.clone(), &s.ns.name)
        .create(&PostParams::default(), &rq)
        .await
        .unwrap();
    job.metadata.labels = None;
    job.metadata.name = Some("too-many".into());
    job.spec.gpus = 8;
    job.spec.gpu_type = Some("NVIDIA-H100-80GB-HBM3".into());
    let jobs = s.jobs();
    let e = wait_for("the quota to be enforced", Duration::from_secs(90), || {
        let jobs = jobs.clone();
        let job = job.clone();
        async move {
            match jobs.create(&PostParams::default(), &job).await {
                Err(e) => Some(e.to_string()),
                Ok(_) => {
                    let _ = jobs.delete("too-many", &DeleteParams::default()).await;
                    None
                }
            }
        }
    })
    .await
    .unwrap();
    assert!(e.contains("spec.gpus: the job needs 8 GPUs (gpus x replicas) and the namespace has 4 of its 4-GPU quota left (ResourceQuota gpus)"), "{e}");

    let _ = Api::<gryvia_types::GryviaTenant>::all(s.client.clone())
        .delete(&tenant, &DeleteParams::default())
        .await;
    for sku in [h100, a100] {
        let _ = Api::<gryvia_types::GryviaGpuSku>::all(s.client.clone())
            .delete(&sku, &DeleteParams::default())
            .await;
    }
}

fn has_reserved_taint(n: &Node, name: &str) -> bool {
    n.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|ts| {
            ts.iter()
                .any(|t| t.key == "gryvia.io/reserved" && t.value.as_deref() == Some(name))
        })
}

#[tokio::test]
#[expect(
    clippy::too_many_lines,
    reason = "one end-to-end scenario, read top to bottom"
)]
async fn a_reservation_taints_its_nodes_only_the_reserving_job_lands_there_and_the_taints_go_at_the_end()
 {
    let Some(client) = gryvia_testsupport::client().await else {
        return;
    };
    gryvia_client::crds::install(&client, Duration::from_secs(60))
        .await
        .unwrap();
    let tenant = unique("e2e-rsv-team");
    let product = unique("E2E-RSV");
    let rsv = unique("e2e-rsv");
    // Deleted also when the test fails: a tenant without its namespace would stay behind.
    let _tenant = cluster_object::<gryvia_types::GryviaTenant>(
        &client,
        json!({
        "apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaTenant", "metadata": {"name": tenant},
        "spec": {"displayName": "Reserving team"}}),
    )
    .await;
    let nodes = KwokNodes::create_with_product(&client, "rsv", 2, 8, &product)
        .await
        .unwrap();
    let Some((s, _hooks)) = Setup::with_webhooks(
        "aijob-rsv",
        Some(("gryvia.io/tenant", &tenant)),
        &["--enable-reservations"],
    )
    .await
    else {
        return;
    };
    // The window starts once this test holds the lock (the tests before may take minutes).
    let end = jiff::Timestamp::now() + jiff::SignedDuration::from_secs(50);
    let _: gryvia_types::GryviaReservation = create_cluster_object(
        &client,
        json!({
        "apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaReservation", "metadata": {"name": rsv},
        "spec": {"owner": {"type": "team", "name": tenant},
                 "resources": {"gpuType": product, "gpuCount": 16},
                 "schedule": {"type": "immediate", "endTime": end.to_string()}}}),
    )
    .await;
    let rsvs: Api<gryvia_types::GryviaReservation> = Api::all(s.client.clone());
    let status = wait_for("reservation Active", Duration::from_secs(90), || {
        let rsvs = rsvs.clone();
        let rsv = rsv.clone();
        async move {
            let st = rsvs.get(&rsv).await.ok()?.status?;
            (st.phase == Some(gryvia_types::ReservationPhase::Active)).then_some(st)
        }
    })
    .await
    .unwrap();
    let mut held = nodes.names.clone();
    held.sort();
    assert_eq!(status.reserved_nodes, held);
    assert_eq!(status.reserved_gpus, 16);
    let node_api: Api<Node> = Api::all(s.client.clone());
    for n in &held {
        let node = node_api.get(n).await.unwrap();
        assert!(has_reserved_taint(&node, &rsv), "{n} is not tainted");
        assert_eq!(node.labels().get("gryvia.io/reserved"), Some(&rsv));
    }

    let toleration =
        json!([{"key": NODE_GROUP_TAINT, "operator": "Exists", "effect": "NoSchedule"}]);
    // A job without the annotation cannot use the reserved nodes.
    s.submit(json!({
        "metadata": {"name": "outsider"},
        "spec": {"image": "img", "gpus": 8, "gpuType": product, "tolerations": toleration}
    }))
    .await;
    // The reserving job gets the toleration and node selector from the mutating webhook.
    let reserved = s
        .submit(json!({
            "metadata": {"name": "insider", "annotations": {"gryvia.io/reservation": rsv}},
            "spec": {"image": "img", "gpus": 8, "gpuType": product, "tolerations": toleration}
        }))
        .await;
    assert_eq!(
        reserved.spec.node_selector.get("gryvia.io/reserved"),
        Some(&rsv)
    );
    assert!(
        reserved
            .spec
            .tolerations
            .iter()
            .any(|t| t.key.as_deref() == Some("gryvia.io/reserved"))
    );
    s.wait_phase("insider", JobPhase::Succeeded, Duration::from_secs(60))
        .await;
    let pod = &s.pods("insider").await[0];
    assert!(held.contains(pod.spec.as_ref().unwrap().node_name.as_ref().unwrap()));

    let api = s.jobs();
    let why = wait_for("outsider Unschedulable", Duration::from_secs(90), || {
        let api = api.clone();
        async move {
            let c = api
                .get("outsider")
                .await
                .ok()?
                .status?
                .conditions
                .into_iter()
                .find(|c| c.type_ == "Scheduled")?;
            (c.reason == "Unschedulable").then_some(c.message)
        }
    })
    .await
    .unwrap();
    assert!(why.contains("gryvia.io/reserved"), "{why}");

    // The window ends: taints and labels go, and the outsider runs.
    s.wait_phase("outsider", JobPhase::Succeeded, Duration::from_secs(120))
        .await;
    let st = rsvs.get(&rsv).await.unwrap().status.unwrap();
    assert_eq!(st.phase, Some(gryvia_types::ReservationPhase::Expired));
    assert!(st.reserved_nodes.is_empty());
    assert!(
        st.idle_gpu_seconds > 0,
        "reserved GPUs sat idle before the insider ran"
    );
    for n in &held {
        let node = node_api.get(n).await.unwrap();
        assert!(!has_reserved_taint(&node, &rsv));
        assert!(node.labels().get("gryvia.io/reserved").is_none());
    }
    let _ = rsvs.delete(&rsv, &DeleteParams::default()).await;
    let _ = Api::<gryvia_types::GryviaTenant>::all(s.client.clone())
        .delete(&tenant, &DeleteParams::default())
        .await;
}

/// A reservation's status, once `ready` says it is what the test waits for.
async fn wait_reservation(
    client: &kube::Client,
    name: &str,
    what: &str,
    timeout: Duration,
    ready: impl Fn(&gryvia_types::GryviaReservationStatus) -> bool,
) -> gryvia_types::GryviaReservationStatus {
    let rsvs: Api<gryvia_types::GryviaReservation> = Api::all(client.clone());
    let result = wait_for(&format!("reservation {name}: {what}"), timeout, || async {
        let st = rsvs.get(name).await.ok()?.status?;
        ready(&st).then_some(st)
    })
    .await;
    match result {
        Ok(st) => st,
        Err(e) => panic!("{e:#}; now: {:?}", rsvs.get(name).await.map(|r| r.status)),
    }
}

#[tokio::test]
#[expect(
    clippy::too_many_lines,
    reason = "one end-to-end scenario, read top to bottom"
)]
async fn a_non_exclusive_reservation_lends_its_idle_gpus_and_evicts_the_borrower_when_its_owner_comes()
 {
    use gryvia_types::ReservationPhase;
    let Some(client) = gryvia_testsupport::client().await else {
        return;
    };
    gryvia_client::crds::install(&client, Duration::from_secs(60))
        .await
        .unwrap();
    let tenant = unique("e2e-lend");
    let product = unique("E2E-LEND");
    let rsv = unique("e2e-lend");
    let _tenant = cluster_object::<gryvia_types::GryviaTenant>(
        &client,
        json!({"apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaTenant", "metadata": {"name": tenant},
               "spec": {"displayName": "Lending team"}}),
    )
    .await;
    let nodes = KwokNodes::create_with_product(&client, "lend", 1, 8, &product)
        .await
        .unwrap();
    let end = jiff::Timestamp::now() + jiff::SignedDuration::from_mins(15);
    let _rsv = cluster_object::<gryvia_types::GryviaReservation>(
        &client,
        json!({"apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaReservation", "metadata": {"name": rsv},
               "spec": {"owner": {"type": "team", "name": tenant},
                        "resources": {"gpuType": product, "gpuCount": 8},
                        "schedule": {"type": "immediate", "endTime": end.to_string()},
                        "guarantees": {"exclusive": false, "sla": {"availability": 99.5}}}}),
    )
    .await;
    let Some((s, _hooks)) = Setup::with_webhooks(
        "aijob-lend",
        Some(("gryvia.io/tenant", &tenant)),
        &["--enable-reservations"],
    )
    .await
    else {
        return;
    };
    wait_reservation(&s.client, &rsv, "Active", Duration::from_secs(90), |st| {
        st.phase == Some(ReservationPhase::Active)
    })
    .await;
    let node_api: Api<Node> = Api::all(s.client.clone());
    let node = node_api.get(&nodes.names[0]).await.unwrap();
    assert_eq!(node.labels().get("gryvia.io/reserved"), Some(&rsv));
    assert!(
        !has_reserved_taint(&node, &rsv),
        "a non-exclusive reservation only labels"
    );

    // Someone else borrows the idle reserved GPUs.
    let toleration =
        json!([{"key": NODE_GROUP_TAINT, "operator": "Exists", "effect": "NoSchedule"}]);
    s.submit(json!({
        "metadata": {"name": "borrower"},
        "spec": {"image": "img", "gpus": 8, "gpuType": product, "tolerations": toleration,
                 "podAnnotations": {"gryvia.io/testenv-duration": "600s"}}
    }))
    .await;
    s.wait_phase("borrower", JobPhase::Running, Duration::from_secs(90))
        .await;
    let borrowed_pod = s.pods("borrower").await[0].name_any();

    // The owner comes: the borrower's pod is evicted and the owner's job runs there.
    s.submit(json!({
        "metadata": {"name": "owner", "annotations": {"gryvia.io/reservation": rsv}},
        "spec": {"image": "img", "gpus": 8, "gpuType": product, "tolerations": toleration}
    }))
    .await;
    s.wait_phase("owner", JobPhase::Succeeded, Duration::from_secs(120))
        .await;
    let owner_pod = &s.pods("owner").await[0];
    assert_eq!(
        owner_pod.spec.as_ref().unwrap().node_name.as_deref(),
        Some(nodes.names[0].as_str())
    );
    assert_eq!(
        owner_pod.labels().get("gryvia.io/reservation"),
        Some(&rsv),
        "the owner's pods carry the reservation"
    );
    let borrower_pods = s.pods("borrower").await;
    assert!(
        borrower_pods.iter().all(|p| p.name_any() != borrowed_pod),
        "the borrower's first pod was evicted"
    );
    let borrower = s.jobs().get("borrower").await.unwrap();
    let st = borrower.status.unwrap();
    assert_ne!(
        st.phase,
        Some(JobPhase::Failed),
        "an eviction uses no retry"
    );
    let st = wait_reservation(
        &s.client,
        &rsv,
        "availability counted",
        Duration::from_secs(90),
        |st| {
            st.availability
                .as_ref()
                .is_some_and(|a| a.promised_gpu_seconds > 0)
        },
    )
    .await;
    assert!(st.evictions >= 1, "{st:?}");
    let a = st.availability.unwrap();
    assert_eq!(a.available_gpu_seconds, a.promised_gpu_seconds);
    assert!((a.percent - 100.0).abs() < f64::EPSILON);
    let sla = st.conditions.iter().find(|c| c.type_ == "SLAMet").unwrap();
    assert_eq!(sla.status, "True", "{sla:?}");
    assert!(
        sla.message.contains("against the promised 99.5%"),
        "{sla:?}"
    );
}

#[tokio::test]
#[expect(
    clippy::too_many_lines,
    reason = "one end-to-end scenario, read top to bottom"
)]
async fn a_higher_tier_takes_the_gpus_of_a_preemptible_reservation_and_not_of_another() {
    use gryvia_types::ReservationPhase;
    let Some(client) = gryvia_testsupport::client().await else {
        return;
    };
    gryvia_client::crds::install(&client, Duration::from_secs(60))
        .await
        .unwrap();
    let u = unique("e2e-soft");
    let (tenant, product, soft, hard, urgent) = (
        u.clone(),
        unique("E2E-SOFT"),
        format!("{u}-soft"),
        format!("{u}-hard"),
        format!("{u}-urgent"),
    );
    let nodes = KwokNodes::create_with_product(&client, "soft", 2, 8, &product)
        .await
        .unwrap();
    let end = (jiff::Timestamp::now() + jiff::SignedDuration::from_mins(15)).to_string();
    let reservation = |name: &str, preemptible: bool| {
        json!({"apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaReservation", "metadata": {"name": name},
               "spec": {"owner": {"type": "tenant", "name": tenant},
                        "resources": {"gpuType": product, "gpuCount": 8},
                        "schedule": {"type": "immediate", "endTime": end},
                        "guarantees": {"preemptible": preemptible}}})
    };
    let _guards = [
        cluster_object::<gryvia_types::GryviaTenant>(
            &client,
            json!({"apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaTenant", "metadata": {"name": tenant},
                   "spec": {"displayName": "Soft"}}),
        )
        .await,
        cluster_object::<GryviaPriority>(
            &client,
            json!({"apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaPriority", "metadata": {"name": urgent},
                   "spec": {"value": 1000}}),
        )
        .await,
        cluster_object::<gryvia_types::GryviaReservation>(&client, reservation(&soft, true)).await,
        cluster_object::<gryvia_types::GryviaReservation>(&client, reservation(&hard, false)).await,
    ];
    let Some((s, _hooks)) = Setup::with_webhooks(
        "aijob-soft",
        Some(("gryvia.io/tenant", &tenant)),
        &["--enable-reservations"],
    )
    .await
    else {
        return;
    };
    for r in [&soft, &hard] {
        wait_reservation(&s.client, r, "Active", Duration::from_secs(90), |st| {
            st.phase == Some(ReservationPhase::Active)
        })
        .await;
    }
    let toleration =
        json!([{"key": NODE_GROUP_TAINT, "operator": "Exists", "effect": "NoSchedule"}]);
    // The owner fills both reservations with long jobs of no tier.
    for (job, r) in [("owner-soft", &soft), ("owner-hard", &hard)] {
        let body = json!({
            "metadata": {"name": job, "annotations": {"gryvia.io/reservation": r}},
            "spec": {"image": "img", "gpus": 8, "gpuType": product, "tolerations": toleration,
                     "podAnnotations": {"gryvia.io/testenv-duration": "600s"}}
        });
        // Retried until the webhook gives the reservation's toleration.
        let jobs = s.jobs();
        let ns = s.ns.name.clone();
        wait_for(
            "the webhook to tolerate the reservation",
            Duration::from_secs(90),
            || {
                let jobs = jobs.clone();
                let mut body = body.clone();
                body["metadata"]["namespace"] = ns.clone().into();
                async move {
                    let j: GryviaAIJob = serde_json::from_value(body).unwrap();
                    let made = jobs.create(&PostParams::default(), &j).await.ok()?;
                    if made.spec.tolerations.len() == 2 {
                        return Some(());
                    }
                    let _ = jobs.delete(job, &DeleteParams::default()).await;
                    None
                }
            },
        )
        .await
        .unwrap();
        s.wait_phase(job, JobPhase::Running, Duration::from_secs(90))
            .await;
    }
    let soft_pod = s.pods("owner-soft").await[0].clone();
    let soft_node = soft_pod.spec.as_ref().unwrap().node_name.clone().unwrap();

    // An urgent job of the same tenant, naming no reservation: tolerated by the soft one only.
    let made = s
        .submit(json!({
            "metadata": {"name": "urgent", "annotations": {"gryvia.io/priority-class": urgent}},
            "spec": {"image": "img", "gpus": 8, "gpuType": product, "tolerations": toleration}
        }))
        .await;
    let tolerated: Vec<Option<String>> = made
        .spec
        .tolerations
        .iter()
        .filter(|t| t.key.as_deref() == Some("gryvia.io/reserved"))
        .map(|t| t.value.clone())
        .collect();
    assert_eq!(tolerated, vec![Some(soft.clone())]);
    // The scheduler preempts the owner's pod on the soft reservation's node for it.
    s.wait_phase("urgent", JobPhase::Succeeded, Duration::from_secs(120))
        .await;
    let urgent_pod = &s.pods("urgent").await[0];
    assert_eq!(
        urgent_pod.spec.as_ref().unwrap().node_name.as_deref(),
        Some(soft_node.as_str())
    );
    assert!(nodes.names.contains(&soft_node));
    assert!(
        s.pods("owner-soft")
            .await
            .iter()
            .all(|p| p.metadata.uid != soft_pod.metadata.uid),
        "the owner's pod was preempted"
    );
    let hard_pods = s.pods("owner-hard").await;
    assert_eq!(hard_pods.len(), 1, "the other reservation kept its pod");
    assert_eq!(phase(&hard_pods[0]), "Running");
}

#[tokio::test]
async fn a_recurring_window_is_held_ahead_by_its_lead_time_then_opens_and_closes() {
    use gryvia_types::ReservationPhase;
    let Some(client) = gryvia_testsupport::client().await else {
        return;
    };
    gryvia_client::crds::install(&client, Duration::from_secs(60))
        .await
        .unwrap();
    let tenant = unique("e2e-weekly");
    let product = unique("E2E-WEEKLY");
    let rsv = unique("e2e-weekly");
    let nodes = KwokNodes::create_with_product(&client, "weekly", 1, 8, &product)
        .await
        .unwrap();
    let Some(s) = Setup::start("aijob-weekly", &["--enable-reservations".to_owned()], None).await
    else {
        return;
    };
    // A one-minute window every day at a minute at least 150 s away, held a minute ahead
    // (computed once this test holds the lock): the hold begins at least 90 s from now, so
    // an operator slow to its first reconcile under load still reports Pending, unheld,
    // first (CI once saw its first reconcile 30 s late, after a 61 s margin's hold began).
    let now = jiff::Timestamp::now();
    let secs = (now + jiff::SignedDuration::from_secs(150)).as_second();
    let opens = jiff::Timestamp::from_second((secs / 60 + 1) * 60).unwrap();
    let at = opens.to_zoned(jiff::tz::TimeZone::UTC);
    let _rsv = cluster_object::<gryvia_types::GryviaReservation>(
        &client,
        json!({"apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaReservation", "metadata": {"name": rsv},
               "spec": {"owner": {"type": "team", "name": tenant},
                        "resources": {"gpuType": product, "gpuCount": 8},
                        "schedule": {"type": "recurring", "leadMinutes": 1,
                                     "recurrence": {"startTime": format!("{:02}:{:02}", at.hour(), at.minute()),
                                                    "durationMinutes": 1, "timeZone": "UTC"}}}}),
    )
    .await;
    let node_api: Api<Node> = Api::all(s.client.clone());
    let st = wait_reservation(&s.client, &rsv, "Pending", Duration::from_secs(60), |st| {
        st.phase == Some(ReservationPhase::Pending)
    })
    .await;
    assert!(
        st.reserved_nodes.is_empty(),
        "not held before the lead time"
    );
    assert_eq!(st.window_start.as_ref().map(|t| t.0), Some(opens));
    // The lead time: held (tainted: exclusive) before the window opens.
    let st = wait_reservation(
        &s.client,
        &rsv,
        "held ahead of the window",
        Duration::from_secs(180),
        |st| !st.reserved_nodes.is_empty(),
    )
    .await;
    assert!(jiff::Timestamp::now() < opens, "held before the opening");
    assert_eq!(st.phase, Some(ReservationPhase::Pending));
    assert!(
        st.message
            .as_deref()
            .unwrap_or_default()
            .contains("ahead of the window")
    );
    assert!(has_reserved_taint(
        &node_api.get(&nodes.names[0]).await.unwrap(),
        &rsv
    ));
    // Open, then closed again: released until the next day's window.
    wait_reservation(&s.client, &rsv, "Active", Duration::from_secs(90), |st| {
        st.phase == Some(ReservationPhase::Active)
    })
    .await;
    assert!(jiff::Timestamp::now() >= opens);
    let st = wait_reservation(
        &s.client,
        &rsv,
        "closed and released",
        Duration::from_secs(120),
        |st| st.phase == Some(ReservationPhase::Pending) && st.reserved_nodes.is_empty(),
    )
    .await;
    assert!(jiff::Timestamp::now() >= opens + jiff::SignedDuration::from_mins(1));
    assert_eq!(
        st.window_start.as_ref().map(|t| t.0),
        Some(opens + jiff::SignedDuration::from_hours(24)),
        "the next window is tomorrow's"
    );
    let node = node_api.get(&nodes.names[0]).await.unwrap();
    assert!(!has_reserved_taint(&node, &rsv));
    assert!(node.labels().get("gryvia.io/reserved").is_none());
}

#[tokio::test]
async fn the_deploy_manifests_are_accepted_by_the_api_server() {
    let Some(client) = gryvia_testsupport::client().await else {
        return;
    };
    let kinds = gryvia_testsupport::dry_run_manifests(
        &client,
        &[
            "deploy/ai-operator/rbac.yaml",
            "deploy/ai-operator/ai-operator.yaml",
        ],
    )
    .await
    .unwrap();
    assert_eq!(
        kinds,
        vec![
            "ServiceAccount",
            "ClusterRole",
            "ClusterRoleBinding",
            "Service",
            "Deployment"
        ]
    );
}

/// One POST the receiver got.
#[derive(Clone, Debug)]
struct Received {
    path: String,
    id: String,
    signature: String,
    body: Vec<u8>,
}

/// A real HTTP receiver for job hooks on 127.0.0.1: `/ok` answers 200, `/flaky` answers 500
/// to the first attempt of every delivery and 200 to the next, `/down` always 500. It records
/// every request. It can be stopped (its port refuses connections, open ones are closed) and
/// started again on the same port.
struct Receiver {
    url: String,
    addr: std::net::SocketAddr,
    app: axum::Router,
    got: std::sync::Arc<std::sync::Mutex<Vec<Received>>>,
    serving: Option<(
        tokio::sync::oneshot::Sender<()>,
        tokio::task::JoinHandle<()>,
    )>,
}

impl Receiver {
    async fn start() -> Receiver {
        use axum::http::{HeaderMap, StatusCode, Uri};
        let got: std::sync::Arc<std::sync::Mutex<Vec<Received>>> = Default::default();
        let record = got.clone();
        let app = axum::Router::new().fallback(axum::routing::post(
            move |uri: Uri, headers: HeaderMap, body: axum::body::Bytes| {
                let record = record.clone();
                async move {
                    let header = |name: &str| {
                        headers
                            .get(name)
                            .and_then(|v| v.to_str().ok())
                            .unwrap_or_default()
                            .to_owned()
                    };
                    let r = Received {
                        path: uri.path().to_owned(),
                        id: header("x-gryvia-delivery"),
                        signature: header("x-gryvia-signature"),
                        body: body.to_vec(),
                    };
                    let mut got = record.lock().unwrap();
                    let before = got.iter().filter(|g| g.id == r.id).count();
                    let code = match r.path.as_str() {
                        "/ok" => StatusCode::OK,
                        "/flaky" if before > 0 => StatusCode::OK,
                        _ => StatusCode::INTERNAL_SERVER_ERROR,
                    };
                    got.push(r);
                    code
                }
            },
        ));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mut rx = Receiver {
            url: format!("http://{addr}"),
            addr,
            app,
            got,
            serving: None,
        };
        rx.serve(listener);
        rx
    }

    fn serve(&mut self, listener: tokio::net::TcpListener) {
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let app = self.app.clone();
        let task = tokio::spawn(async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(async move {
                    let _ = stopped.await;
                })
                .await
                .unwrap();
        });
        self.serving = Some((stop, task));
    }

    /// Down: the listener is closed and every open connection with it (idle keep-alive ones
    /// at once), so a sender gets "connection refused".
    async fn stop(&mut self) {
        if let Some((stop, task)) = self.serving.take() {
            let _ = stop.send(());
            task.await.unwrap();
        }
    }

    /// Up again, on the same port.
    async fn restart(&mut self) {
        let listener = tokio::net::TcpListener::bind(self.addr).await.unwrap();
        self.serve(listener);
    }

    fn on(&self, path: &str) -> Vec<Received> {
        self.got
            .lock()
            .unwrap()
            .iter()
            .filter(|r| r.path == path)
            .cloned()
            .collect()
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        if let Some((_, task)) = self.serving.take() {
            task.abort();
        }
    }
}

fn hmac_hex(key: &[u8], body: &[u8]) -> String {
    use hmac::Mac;
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(key).unwrap();
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

fn event_of(r: &Received) -> (String, String) {
    let body: Value = serde_json::from_slice(&r.body).unwrap();
    let name = body["object"]["name"].as_str().unwrap().to_owned();
    let event = match body["retry"].as_i64() {
        Some(n) => format!("Retried-{n}"),
        None => body["event"].as_str().unwrap().to_owned(),
    };
    (name, event)
}

#[tokio::test]
async fn job_hook_deliveries_verify_with_the_standard_webhooks_reference_library() {
    use base64::Engine as _;
    use gryvia_client::webhook::{Signatures, post};
    let Some(s) = Setup::start("stdhooks", &["--enable-job-hooks".to_owned()], None).await else {
        return;
    };
    // A secret in the Standard Webhooks form, as a receiver's library is configured with it.
    let key = b"a key of twenty-four byte";
    let secret = format!(
        "whsec_{}",
        base64::engine::general_purpose::STANDARD.encode(key)
    );
    let rx = StandardReceiver::start(&secret);
    s.hook_secret("std-key", &secret).await;
    s.create_hook(
        "std",
        json!({"events": ["Started", "Succeeded"], "selector": {"names": ["verified"]},
               "url": format!("{}/hook", rx.url), "allowInsecure": true,
               "secretRef": {"name": "std-key"}, "timeoutSeconds": 5}),
    )
    .await;
    s.submit(json!({
        "metadata": {"name": "verified"},
        "spec": {"image": "registry.local/train:1", "gpus": 1}
    }))
    .await;
    s.wait_phase("verified", JobPhase::Succeeded, Duration::from_secs(90))
        .await;

    // Both events arrive, each verified by the reference library on its first attempt.
    let waited = wait_for(
        "two deliveries accepted by the Standard Webhooks receiver",
        Duration::from_secs(60),
        || async { (rx.got().iter().filter(|g| g.answer == 200).count() == 2).then_some(()) },
    )
    .await;
    assert!(waited.is_ok(), "got {:?}", rx.got());
    let got = rx.got();
    assert!(
        got.iter().all(|g| g.answer == 200),
        "every delivery verified: {got:?}"
    );
    let StandardGot {
        id, headers, body, ..
    } = got[0].clone();
    assert_eq!(headers["webhook-id"], headers["x-gryvia-delivery"]);
    assert_eq!(
        headers["x-gryvia-signature"],
        hmac_hex(secret.as_bytes(), &body),
        "the guide's signature stays the HMAC under the secret as stored"
    );
    let sent = Signatures {
        gryvia: headers["x-gryvia-signature"].clone(),
        timestamp: headers["webhook-timestamp"].parse().unwrap(),
        standard: headers["webhook-signature"].clone(),
    };
    let url = format!("{}/hook", rx.url);
    let timeout = Duration::from_secs(5);
    // The same delivery again: verified, and refused as a replay.
    assert_eq!(
        post(&url, &id, Some(&sent), &body, timeout).await.unwrap(),
        409
    );
    // A tampered body: the signature does not verify.
    let mut tampered = body.clone();
    tampered.extend_from_slice(b" ");
    assert_eq!(
        post(&url, &id, Some(&sent), &tampered, timeout)
            .await
            .unwrap(),
        400
    );
    // A well-signed message ten minutes old: outside the library's tolerance.
    let old = jiff::Timestamp::now().as_second() - 600;
    let stale = Signatures::of(secret.as_bytes(), "stale", old, &body);
    assert_eq!(
        post(&url, "stale", Some(&stale), &body, timeout)
            .await
            .unwrap(),
        400
    );
    // Signed now with the same key: accepted, so the two refusals were for what they test.
    let fresh = Signatures::of(
        secret.as_bytes(),
        "fresh",
        jiff::Timestamp::now().as_second(),
        &body,
    );
    assert_eq!(
        post(&url, "fresh", Some(&fresh), &body, timeout)
            .await
            .unwrap(),
        200
    );
}

#[tokio::test]
#[expect(
    clippy::too_many_lines,
    reason = "one end-to-end scenario, read top to bottom"
)]
async fn job_hooks_post_signed_events_retry_failed_deliveries_and_wait_for_their_key() {
    use gryvia_types::{DeliveryState, GryviaJobHook};
    let Some(s) = Setup::start("hooks", &["--enable-job-hooks".to_owned()], None).await else {
        return;
    };
    let rx = Receiver::start().await;
    s.hook_secret("hook-key", "s3cret").await;
    let hooks: Api<GryviaJobHook> = Api::namespaced(s.client.clone(), &s.ns.name);
    // Every event of team a's jobs.
    s.create_hook(
        "all",
        json!({"events": ["Started", "Retried", "Succeeded", "Failed"],
               "selector": {"matchLabels": {"team": "a"}},
               "url": format!("{}/ok", rx.url), "allowInsecure": true,
               "secretRef": {"name": "hook-key"}, "timeoutSeconds": 5}),
    )
    .await;
    // A receiver that is down: given up after two attempts.
    s.create_hook(
        "down",
        json!({"events": ["Failed"], "selector": {"names": ["crash"]},
               "url": format!("{}/down", rx.url), "allowInsecure": true,
               "secretRef": {"name": "hook-key"}, "maxAttempts": 2}),
    )
    .await;
    // A key that does not exist yet, and a receiver that fails each delivery once.
    s.create_hook(
        "late",
        json!({"events": ["Succeeded"], "selector": {"names": ["train"]},
               "url": format!("{}/flaky", rx.url), "allowInsecure": true,
               "secretRef": {"name": "late-key"}}),
    )
    .await;

    s.submit(json!({
        "metadata": {"name": "train", "labels": {"team": "a"}},
        "spec": {"image": "registry.local/train:1", "gpus": 1}
    }))
    .await;
    s.submit(json!({
        "metadata": {"name": "crash", "labels": {"team": "a"}},
        "spec": {"image": "registry.local/crash:1", "gpus": 1, "retryLimit": 1,
                 "podAnnotations": {"gryvia.io/testenv-fail": "true"}}
    }))
    .await;
    s.submit(json!({
        "metadata": {"name": "other"},
        "spec": {"image": "registry.local/train:1", "gpus": 1}
    }))
    .await;
    s.wait_phase("train", JobPhase::Succeeded, Duration::from_secs(90))
        .await;
    s.wait_phase("other", JobPhase::Succeeded, Duration::from_secs(90))
        .await;
    s.wait_phase("crash", JobPhase::Failed, Duration::from_secs(120))
        .await;

    // Hook "all": exactly the events of team a's jobs, each once, signed.
    let status = |name: &'static str| {
        let hooks = hooks.clone();
        async move {
            hooks
                .get(name)
                .await
                .ok()
                .and_then(|h| h.status)
                .unwrap_or_default()
        }
    };
    let expected: Vec<(String, String)> = [
        ("crash", "Failed"),
        ("crash", "Retried-1"),
        ("train", "Started"),
        ("train", "Succeeded"),
    ]
    .iter()
    .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
    .collect();
    // The failing job's pods may or may not have run long enough to count as started.
    let events_on_ok = || {
        let mut events: Vec<(String, String)> = rx.on("/ok").iter().map(event_of).collect();
        events.sort();
        events.retain(|e| e != &("crash".to_owned(), "Started".to_owned()));
        events
    };
    let waited = wait_for(
        "hook all to deliver 4 events",
        Duration::from_secs(60),
        || async { (events_on_ok() == expected).then_some(()) },
    )
    .await;
    assert!(waited.is_ok(), "got {:?}", events_on_ok());
    let got = rx.on("/ok");
    let ids: std::collections::BTreeSet<&str> = got.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(ids.len(), got.len(), "each delivery once");
    for r in &got {
        assert_eq!(
            r.signature,
            hmac_hex(b"s3cret", &r.body),
            "signature of {}",
            r.id
        );
        let body: Value = serde_json::from_slice(&r.body).unwrap();
        assert_eq!(body["id"], r.id.as_str());
        assert_eq!(body["hook"]["name"], "all");
        assert_eq!(body["object"]["namespace"], s.ns.name.as_str());
        assert_eq!(body["object"]["kind"], "GryviaAIJob");
    }
    let succeeded = got
        .iter()
        .find(|r| event_of(r) == ("train".to_owned(), "Succeeded".to_owned()))
        .unwrap();
    let train = s.jobs().get("train").await.unwrap();
    let body: Value = serde_json::from_slice(&succeeded.body).unwrap();
    assert_eq!(body["object"]["uid"], train.uid().unwrap().as_str());
    assert_eq!(
        body["time"],
        serde_json::to_value(train.status.unwrap().completion_time.unwrap()).unwrap()
    );
    // The status follows the receiver's answers.
    let n = i64::try_from(got.len()).unwrap();
    let all = wait_for(
        "hook all to count its deliveries",
        Duration::from_secs(90),
        || async {
            let st = status("all").await;
            (st.delivered == n).then_some(st)
        },
    )
    .await
    .unwrap();
    assert_eq!(all.failed, 0);
    assert!(
        all.deliveries
            .iter()
            .all(|d| d.state == DeliveryState::Delivered && d.attempts == 1)
    );

    // Hook "down": two attempts, then given up, with a Warning Event.
    let down = wait_for("hook down to give up", Duration::from_secs(60), || async {
        let st = status("down").await;
        (st.failed == 1).then_some(st)
    })
    .await
    .unwrap();
    assert_eq!(down.delivered, 0);
    let d = &down.deliveries[0];
    assert_eq!(
        (d.state, d.attempts, d.response_code),
        (DeliveryState::GaveUp, 2, Some(500))
    );
    assert_eq!(d.error.as_deref(), Some("answered HTTP 500"));
    assert_eq!(rx.on("/down").len(), 2);
    let events: Api<k8s_openapi::api::events::v1::Event> =
        Api::namespaced(s.client.clone(), &s.ns.name);
    let warning = wait_for(
        "a DeliveryFailed event",
        Duration::from_secs(90),
        || async {
            events
                .list(&ListParams::default())
                .await
                .ok()?
                .items
                .into_iter()
                .find(|e| e.reason.as_deref() == Some("DeliveryFailed"))
        },
    )
    .await
    .unwrap();
    assert!(
        warning
            .note
            .as_deref()
            .unwrap_or_default()
            .contains("failed of GryviaAIJob crash: gave up after 2 attempts"),
        "{warning:?}"
    );

    // Hook "late": waits for its key, says so, then delivers on the second attempt.
    let late = wait_for(
        "hook late to hold its delivery",
        Duration::from_secs(90),
        || async {
            let st = status("late").await;
            (st.deliveries.len() == 1).then_some(st)
        },
    )
    .await
    .unwrap();
    let ready = gryvia_types::conditions::find(&late.conditions, "Ready").unwrap();
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("False", "SecretMissing")
    );
    assert_eq!(late.deliveries.len(), 1);
    assert_eq!(late.deliveries[0].attempts, 0);
    assert!(rx.on("/flaky").is_empty());
    s.hook_secret("late-key", "later").await;
    let late = wait_for("hook late to deliver", Duration::from_secs(90), || async {
        let st = status("late").await;
        (st.delivered == 1).then_some(st)
    })
    .await
    .unwrap();
    assert_eq!(late.deliveries[0].attempts, 2);
    assert_eq!(late.deliveries[0].response_code, Some(200));
    assert!(gryvia_types::conditions::is_true(&late.conditions, "Ready"));
    let flaky = rx.on("/flaky");
    assert_eq!(flaky.len(), 2);
    assert_eq!(flaky[0].id, flaky[1].id, "the same delivery, sent again");
    assert_eq!(flaky[0].body, flaky[1].body);
    assert_eq!(flaky[1].signature, hmac_hex(b"later", &flaky[1].body));
}

#[tokio::test]
#[expect(
    clippy::too_many_lines,
    reason = "one end-to-end scenario, read top to bottom"
)]
async fn a_workflow_runs_its_steps_in_dependency_order_and_a_hook_announces_it() {
    use gryvia_types::GryviaWorkflow;
    let Some(s) = Setup::start("workflow", &["--enable-job-hooks".to_owned()], None).await else {
        return;
    };
    let rx = Receiver::start().await;
    s.hook_secret("hook-key", "wf").await;
    s.create_hook(
        "pipeline",
        json!({"events": ["Started", "Succeeded", "Failed"],
               "selector": {"names": ["pipe"], "includeWorkflows": true},
               "url": format!("{}/ok", rx.url), "allowInsecure": true,
               "secretRef": {"name": "hook-key"}}),
    )
    .await;

    let workflows: Api<GryviaWorkflow> = Api::namespaced(s.client.clone(), &s.ns.name);
    let create = |body: Value| {
        let workflows = workflows.clone();
        async move {
            let wf: GryviaWorkflow = serde_json::from_value(body).unwrap();
            workflows.create(&PostParams::default(), &wf).await.unwrap()
        }
    };
    let step = |name: &str, deps: &[&str]| {
        json!({"name": name, "dependsOn": deps,
               "job": {"image": format!("registry.local/{name}:1"), "gpus": 1}})
    };
    // A diamond: prepare, then two trainings at once, then evaluate.
    create(json!({
        "metadata": {"name": "pipe"},
        "spec": {"steps": [step("prepare", &[]), step("train-a", &["prepare"]),
                           step("train-b", &["prepare"]), step("evaluate", &["train-a", "train-b"])]}
    }))
    .await;
    // A failing first step: its dependent never runs.
    create(json!({
        "metadata": {"name": "stop"},
        "spec": {"steps": [
            {"name": "bad", "job": {"image": "registry.local/bad:1", "gpus": 1, "retryLimit": 0,
                                    "podAnnotations": {"gryvia.io/testenv-fail": "true"}}},
            step("after", &["bad"])]}
    }))
    .await;
    // A cycle the API server cannot see (every dependency names a step).
    create(json!({
        "metadata": {"name": "cyc"},
        "spec": {"steps": [step("a", &["b"]), step("b", &["a"])]}
    }))
    .await;

    let wait_phase = |name: &'static str, phase: JobPhase| {
        let workflows = workflows.clone();
        async move {
            let result = wait_for(
                &format!("workflow {name} {phase:?}"),
                Duration::from_secs(150),
                || {
                    let workflows = workflows.clone();
                    async move {
                        let wf = workflows.get(name).await.ok()?;
                        (wf.status.as_ref()?.phase == Some(phase)).then_some(wf)
                    }
                },
            )
            .await;
            match result {
                Ok(wf) => wf,
                Err(e) => panic!(
                    "{e:#}; now: {:?}",
                    workflows.get(name).await.map(|w| w.status)
                ),
            }
        }
    };
    let pipe = wait_phase("pipe", JobPhase::Succeeded).await;
    let st = pipe.status.unwrap();
    assert_eq!(st.succeeded_steps, 4);
    let names: Vec<_> = st
        .steps
        .iter()
        .map(|s| s.job_name.clone().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "pipe-prepare",
            "pipe-train-a",
            "pipe-train-b",
            "pipe-evaluate"
        ]
    );
    // Each step's job was created only after its dependencies had finished.
    let jobs = s.jobs();
    let job = |name: &str| {
        let jobs = jobs.clone();
        let name = name.to_owned();
        async move { jobs.get(&name).await.unwrap() }
    };
    let created = |j: &GryviaAIJob| j.metadata.creation_timestamp.clone().unwrap().0;
    let ended = |j: &GryviaAIJob| j.status.clone().unwrap().completion_time.unwrap().0;
    let prepare = job("pipe-prepare").await;
    let (a, b) = (job("pipe-train-a").await, job("pipe-train-b").await);
    let evaluate = job("pipe-evaluate").await;
    assert!(created(&a) >= ended(&prepare) && created(&b) >= ended(&prepare));
    assert!(created(&evaluate) >= ended(&a).max(ended(&b)));
    assert_eq!(
        evaluate
            .labels()
            .get("gryvia.io/workflow-step")
            .map(String::as_str),
        Some("evaluate")
    );
    assert_eq!(
        evaluate.owner_references()[0].uid,
        pipe.metadata.uid.clone().unwrap()
    );

    let stop = wait_phase("stop", JobPhase::Failed).await;
    let st = stop.status.unwrap();
    let ready = gryvia_types::conditions::find(&st.conditions, "Ready").unwrap();
    assert_eq!(
        (ready.reason.as_str(), ready.message.as_str()),
        ("StepFailed", "step bad failed")
    );
    assert!(jobs.get_opt("stop-after").await.unwrap().is_none());
    assert_eq!(st.steps[1].phase, JobPhase::Pending);

    let cyc = wait_phase("cyc", JobPhase::Failed).await;
    let ready = gryvia_types::conditions::find(&cyc.status.unwrap().conditions, "Ready")
        .unwrap()
        .clone();
    assert_eq!(ready.reason, "InvalidSpec");
    assert_eq!(ready.message, "spec.steps: dependency cycle a -> b -> a");
    assert!(jobs.get_opt("cyc-a").await.unwrap().is_none());

    // The hook saw the workflow start and succeed (and nothing of its jobs).
    let events = || {
        let mut e: Vec<(String, String)> = rx.on("/ok").iter().map(event_of).collect();
        e.sort();
        e
    };
    let want = vec![
        ("pipe".to_owned(), "Started".to_owned()),
        ("pipe".to_owned(), "Succeeded".to_owned()),
    ];
    let waited = wait_for(
        "the hook to announce the workflow",
        Duration::from_secs(90),
        || async { (events() == want).then_some(()) },
    )
    .await;
    assert!(waited.is_ok(), "got {:?}", events());
    let body: Value = serde_json::from_slice(&rx.on("/ok")[0].body).unwrap();
    assert_eq!(body["object"]["kind"], "GryviaWorkflow");

    // Deleting the workflow deletes its steps' jobs (owner references).
    workflows
        .delete("pipe", &DeleteParams::default())
        .await
        .unwrap();
    wait_for("the steps' jobs to go", Duration::from_secs(60), || async {
        let left = jobs
            .list(&ListParams::default().labels("gryvia.io/workflow=pipe"))
            .await
            .ok()?
            .items;
        left.is_empty().then_some(())
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn the_admission_gate_rejects_new_jobs_in_the_scope_of_a_blocked_budget() {
    use gryvia_types::GryviaBudget;
    let tenant = unique("e2e-gate");
    let Some(client) = gryvia_testsupport::client().await else {
        return;
    };
    gryvia_client::crds::install(&client, Duration::from_secs(60))
        .await
        .unwrap();
    let _: gryvia_types::GryviaTenant = create_cluster_object(
        &client,
        json!({
        "apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaTenant", "metadata": {"name": tenant},
        "spec": {"displayName": "gated"}}),
    )
    .await;
    // The quota-operator does not run here: the test writes the budget's state.
    let budget = unique("e2e-gate-budget");
    let _: GryviaBudget = create_cluster_object(
        &client,
        json!({
        "apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaBudget", "metadata": {"name": budget},
        "spec": {"scope": {"type": "tenant", "name": tenant}, "period": {"type": "monthly"},
                 "limits": {"costUSD": 10}, "enforcement": {"enabled": true}}}),
    )
    .await;
    let budgets: Api<GryviaBudget> = Api::all(client.clone());
    let set_state = |state: &'static str| {
        let budgets = budgets.clone();
        let budget = budget.clone();
        async move {
            budgets
                .patch_status(
                    &budget,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"status": {"state": state, "spendUSD": "12"}})),
                )
                .await
                .unwrap();
        }
    };
    set_state("blocked").await;
    let Some((s, _hooks)) = Setup::with_webhooks(
        "aijob-gate",
        Some(("gryvia.io/tenant", &tenant)),
        &["--admission-gate"],
    )
    .await
    else {
        return;
    };
    let jobs = s.jobs();
    let ns = s.ns.name.clone();
    let attempt = || {
        let jobs = jobs.clone();
        let ns = ns.clone();
        async move {
            let job: GryviaAIJob = serde_json::from_value(json!({
                "metadata": {"name": "gated", "namespace": ns},
                "spec": {"image": "img", "gpus": 1}
            }))
            .unwrap();
            jobs.create(&PostParams::default(), &job).await
        }
    };
    let message = wait_for(
        "the gate to reject a job",
        Duration::from_secs(90),
        || async {
            match attempt().await {
                Err(kube::Error::Api(e)) => Some(e.message),
                Err(_) => None,
                Ok(_) => {
                    let _ = jobs.delete("gated", &DeleteParams::default()).await;
                    None
                }
            }
        },
    )
    .await
    .unwrap();
    assert!(
        message.contains(&format!(
            "GryviaBudget {budget} is blocked (spend 12 USD of its limit)"
        )),
        "{message}"
    );
    // Once the budget is no longer blocked, jobs are admitted again.
    set_state("warning").await;
    wait_for(
        "the gate to admit again",
        Duration::from_secs(90),
        || async { attempt().await.ok() },
    )
    .await
    .unwrap();
    let _ = budgets.delete(&budget, &DeleteParams::default()).await;
    let _ = Api::<gryvia_types::GryviaTenant>::all(s.client.clone())
        .delete(&tenant, &DeleteParams::default())
        .await;
}

/// Creates `body` (a cluster-scoped object) and returns a guard deleting it at the end.
async fn cluster_object<K>(client: &kube::Client, body: Value) -> gryvia_testsupport::ClusterObject
where
    K: kube::Resource<DynamicType = (), Scope = k8s_openapi::ClusterResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug
        + Send
        + 'static,
{
    gryvia_testsupport::ClusterObject::create::<K>(client, body)
        .await
        .unwrap()
}

#[tokio::test]
#[expect(
    clippy::too_many_lines,
    reason = "one end-to-end scenario, read top to bottom"
)]
async fn a_tenants_default_tier_classification_and_prepaid_balance_act_at_admission() {
    use gryvia_types::{GryviaGpuSku, GryviaTenant, GryviaUsageRecord};
    let Some(client) = gryvia_testsupport::client().await else {
        return;
    };
    gryvia_client::crds::install(&client, Duration::from_secs(60))
        .await
        .unwrap();
    let u = unique("e2e-tier");
    let (normal, high, sku, tenant) = (
        format!("{u}-normal"),
        format!("{u}-high"),
        format!("{u}-h100"),
        u.clone(),
    );
    let mut guards = Vec::new();
    for (tier, value) in [(&normal, 1000), (&high, 100_000)] {
        guards.push(
            cluster_object::<GryviaPriority>(&client, json!({
                "apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaPriority", "metadata": {"name": tier},
                "spec": {"value": value}}))
            .await,
        );
    }
    guards.push(
        cluster_object::<GryviaGpuSku>(
            &client,
            json!({
            "apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaGpuSku", "metadata": {"name": sku},
            "spec": {"gpuProduct": "NVIDIA-H100-80GB-HBM3", "pricePerGpuHour": "4"}}),
        )
        .await,
    );
    guards.push(
        cluster_object::<GryviaTenant>(&client, json!({
            "apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaTenant", "metadata": {"name": tenant},
            "spec": {"displayName": "tiers", "priorities": {"default": normal, "allowHighPriority": false},
                     "governance": {"dataClassification": "confidential"},
                     "billing": {"paymentMethod": "prepaid", "prepaidBalance": "10"}}}))
        .await,
    );
    // Spent before: 1 GPU for an hour, two hours ago, at 4 USD (4 of the 10 USD).
    let record = |name: &str, gpus: i32| {
        let end = jiff::Timestamp::now() - jiff::SignedDuration::from_hours(1);
        json!({"apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaUsageRecord", "metadata": {"name": name},
               "spec": {"tenant": tenant, "namespace": "elsewhere", "workload": {"kind": "GryviaAIJob", "name": "old"},
                        "sku": sku, "gpuCount": gpus,
                        "startTime": (end - jiff::SignedDuration::from_hours(1)).to_string(),
                        "endTime": end.to_string()}})
    };
    guards.push(cluster_object::<GryviaUsageRecord>(&client, record(&format!("{u}-a"), 1)).await);
    let Some((s, _hooks)) = Setup::with_webhooks(
        "aijob-tiers",
        Some(("gryvia.io/tenant", &tenant)),
        &["--admission-gate"],
    )
    .await
    else {
        return;
    };
    let jobs = s.jobs();
    let ns = s.ns.name.clone();
    let attempt = |name: &'static str, spec: Value, annotations: Value| {
        let jobs = jobs.clone();
        let ns = ns.clone();
        async move {
            let job: GryviaAIJob = serde_json::from_value(json!({
                "metadata": {"name": name, "namespace": ns, "annotations": annotations}, "spec": spec
            }))
            .unwrap();
            jobs.create(&PostParams::default(), &job).await
        }
    };
    let refused = |r: Result<GryviaAIJob, kube::Error>| match r {
        Err(kube::Error::Api(e)) => e.message,
        other => panic!("admitted, or not by the webhook: {other:?}"),
    };
    let h100 = json!({"image": "img", "gpus": 1, "gpuType": "NVIDIA-H100-80GB-HBM3",
                      "activeDeadlineSeconds": 1800, "type": "fine-tuning"});

    // A tier above the default is refused (retried until the API server calls the webhook).
    let message = wait_for(
        "the webhook to refuse a high tier",
        Duration::from_secs(90),
        || async {
            match attempt(
                "urgent",
                h100.clone(),
                json!({"gryvia.io/priority-class": high}),
            )
            .await
            {
                Err(kube::Error::Api(e)) => Some(e.message),
                Err(_) => None,
                Ok(_) => {
                    let _ = jobs.delete("urgent", &DeleteParams::default()).await;
                    None
                }
            }
        },
    )
    .await
    .unwrap();
    assert!(
        message.contains(&format!(
            "metadata.annotations[gryvia.io/priority-class]: tier {high} (value 100000) is above its default tier {normal} (value 1000), and tenant {tenant} may not use high-priority tiers"
        )),
        "{message}"
    );

    // A job naming no tier gets the default and the classification, and runs with both.
    let made = attempt("plain", h100.clone(), json!({})).await.unwrap();
    assert_eq!(
        made.annotations().get("gryvia.io/priority-class"),
        Some(&normal)
    );
    assert_eq!(
        made.labels()
            .get("gryvia.io/data-classification")
            .map(String::as_str),
        Some("confidential")
    );
    s.wait_phase("plain", JobPhase::Succeeded, Duration::from_secs(120))
        .await;
    let pods = s.pods("plain").await;
    let pod_labels = pods[0].labels();
    assert_eq!(pod_labels["gryvia.io/data-classification"], "confidential");
    assert_eq!(pod_labels["gryvia.io/job-type"], "fine-tuning");
    let spec = pods[0].spec.as_ref().unwrap();
    assert_eq!(spec.priority_class_name.as_deref(), Some(normal.as_str()));
    assert_eq!(spec.priority, Some(1000));

    // Confidential data never shares a GPU.
    let message = refused(
        attempt(
            "half",
            json!({"image": "img", "gpus": 1, "gpuFraction": 0.5}),
            json!({}),
        )
        .await,
    );
    assert!(
        message.contains(&format!("spec.gpuFraction: tenant {tenant}'s data is confidential (spec.governance.dataClassification), and its jobs never share a GPU")),
        "{message}"
    );

    // The prepaid balance: 6 USD left, a job estimated at 8 USD (2 h) would overspend it.
    let mut long = h100.clone();
    long["activeDeadlineSeconds"] = 7200.into();
    let message = refused(attempt("long", long, json!({})).await);
    assert!(
        message.contains(&format!("tenant {tenant}'s prepaid balance (spec.billing.prepaidBalance) is 10 USD: 4 USD spent, 6 USD left, and this job's estimate of")),
        "{message}"
    );
    assert!(message.contains("would overspend it"), "{message}");
    // Spent: 8 USD more; no GPU job passes, whatever its estimate.
    guards.push(cluster_object::<GryviaUsageRecord>(&client, record(&format!("{u}-b"), 2)).await);
    let message = wait_for(
        "the gate to see the spend",
        Duration::from_secs(60),
        || async {
            match attempt("after", json!({"image": "img", "gpus": 1}), json!({})).await {
                Err(kube::Error::Api(e)) if e.message.contains("prepaid") => Some(e.message),
                Err(_) => None,
                Ok(_) => {
                    panic!("a GPU job of a tenant with 2 USD left and no estimate was admitted")
                }
            }
        },
    )
    .await
    .unwrap();
    assert!(
        message.contains("is 10 USD: 12 USD spent, 0 USD left, and new GPU jobs are refused until it is topped up"),
        "{message}"
    );
    // Topped up: admitted again.
    Api::<GryviaTenant>::all(client.clone())
        .patch(
            &tenant,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"billing": {"prepaidBalance": "100"}}})),
        )
        .await
        .unwrap();
    wait_for(
        "a topped-up tenant to be admitted",
        Duration::from_secs(60),
        || async {
            attempt("after", json!({"image": "img", "gpus": 1}), json!({}))
                .await
                .ok()
        },
    )
    .await
    .unwrap();
}

#[tokio::test]
#[expect(
    clippy::too_many_lines,
    reason = "one end-to-end scenario, read top to bottom"
)]
async fn a_project_reservation_is_only_for_its_namespace_and_a_user_reservation_only_for_its_user()
{
    use gryvia_types::GryviaReservation;
    use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
    let Some(client) = gryvia_testsupport::client().await else {
        return;
    };
    gryvia_client::crds::install(&client, Duration::from_secs(60))
        .await
        .unwrap();
    let Some((s, _hooks)) = Setup::with_webhooks("aijob-owner", None, &[]).await else {
        return;
    };
    let u = unique("e2e-own");
    let alice = format!("{u}-alice");
    let reservation = |name: String, owner_type: &str, owner: &str| {
        json!({"apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaReservation", "metadata": {"name": name},
               "spec": {"owner": {"type": owner_type, "name": owner},
                        "resources": {"gpuType": "NVIDIA-H100-80GB-HBM3", "gpuCount": 8},
                        "schedule": {"type": "immediate", "endTime": "2099-01-01T00:00:00Z"}}})
    };
    let (elsewhere, here, alices) = (
        format!("{u}-elsewhere"),
        format!("{u}-here"),
        format!("{u}-alice"),
    );
    let _guards = [
        cluster_object::<GryviaReservation>(
            &client,
            reservation(elsewhere.clone(), "project", "some-other-namespace"),
        )
        .await,
        cluster_object::<GryviaReservation>(
            &client,
            reservation(here.clone(), "project", &s.ns.name),
        )
        .await,
        cluster_object::<GryviaReservation>(&client, reservation(alices.clone(), "user", &alice))
            .await,
    ];
    let submit_as = |client: kube::Client, name: &'static str, reservation: String| {
        let ns = s.ns.name.clone();
        async move {
            let job: GryviaAIJob = serde_json::from_value(json!({
                "metadata": {"name": name, "namespace": ns, "annotations": {"gryvia.io/reservation": reservation}},
                "spec": {"image": "img", "gpus": 0}
            }))
            .unwrap();
            Api::<GryviaAIJob>::namespaced(client, &ns)
                .create(&PostParams::default(), &job)
                .await
        }
    };
    // Another namespace's project reservation: refused (retried until the webhook is called).
    let message = wait_for(
        "the webhook to refuse another project's reservation",
        Duration::from_secs(90),
        || async {
            match submit_as(s.client.clone(), "theirs", elsewhere.clone()).await {
                Err(kube::Error::Api(e)) => Some(e.message),
                Err(_) => None,
                Ok(_) => {
                    let _ = s.jobs().delete("theirs", &DeleteParams::default()).await;
                    None
                }
            }
        },
    )
    .await
    .unwrap();
    assert!(
        message.contains(&format!("metadata.annotations[gryvia.io/reservation]: reservation {elsewhere} belongs to project some-other-namespace (jobs of namespace some-other-namespace), and this job is in namespace {}", s.ns.name)),
        "{message}"
    );
    // This namespace's project reservation: admitted.
    submit_as(s.client.clone(), "ours", here.clone())
        .await
        .unwrap();

    // Alice's reservation: refused to the admin, admitted to alice.
    let message = match submit_as(s.client.clone(), "not-alice", alices.clone()).await {
        Err(kube::Error::Api(e)) => e.message,
        other => panic!("the admin used alice's reservation: {other:?}"),
    };
    assert!(
        message.contains(&format!(
            "reservation {alices} belongs to user {alice}, and this job is created by "
        )),
        "{message}"
    );
    let role: Role = serde_json::from_value(json!({
        "metadata": {"name": "submit"},
        "rules": [{"apiGroups": ["gryvia.io"], "resources": ["gryviaaijobs"], "verbs": ["create", "get"]}]
    }))
    .unwrap();
    Api::<Role>::namespaced(s.client.clone(), &s.ns.name)
        .create(&PostParams::default(), &role)
        .await
        .unwrap();
    let binding: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "submit"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "submit"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": alice}]
    }))
    .unwrap();
    Api::<RoleBinding>::namespaced(s.client.clone(), &s.ns.name)
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();
    let as_alice = gryvia_testsupport::client_as(&alice).await.unwrap();
    wait_for(
        "alice to use her reservation",
        Duration::from_secs(30),
        || {
            let c = as_alice.clone();
            let r = alices.clone();
            let submit_as = &submit_as;
            async move { submit_as(c, "alices", r).await.ok() }
        },
    )
    .await
    .unwrap();
}

#[tokio::test]
async fn a_workflow_step_refused_by_the_admission_webhook_is_named_in_its_ready_condition() {
    use gryvia_types::GryviaWorkflow;
    let tenant = unique("e2e-wf-sku");
    let Some(client) = gryvia_testsupport::client().await else {
        return;
    };
    gryvia_client::crds::install(&client, Duration::from_secs(60))
        .await
        .unwrap();
    h100_only_tenant(&client, &tenant).await;
    let Some((s, _hooks)) =
        Setup::with_webhooks("wf-refused", Some(("gryvia.io/tenant", &tenant)), &[]).await
    else {
        return;
    };
    let workflows: Api<GryviaWorkflow> = Api::namespaced(s.client.clone(), &s.ns.name);
    let wf: GryviaWorkflow = serde_json::from_value(json!({
        "metadata": {"name": "wrong-gpu", "namespace": s.ns.name},
        "spec": {"steps": [{"name": "train", "job": {"image": "img", "gpus": 1,
                                                    "gpuType": "NVIDIA-A100-SXM4-80GB"}}]}
    }))
    .unwrap();
    workflows.create(&PostParams::default(), &wf).await.unwrap();
    let ready = wait_for(
        "the refusal in the workflow's status",
        Duration::from_secs(60),
        || {
            let workflows = workflows.clone();
            async move {
                let st = workflows.get("wrong-gpu").await.ok()?.status?;
                gryvia_types::conditions::find(&st.conditions, "Ready")
                    .filter(|c| c.reason == "StepNotCreated")
                    .cloned()
            }
        },
    )
    .await
    .unwrap();
    assert_eq!(ready.status, "False");
    assert!(
        ready
            .message
            .contains("NVIDIA-A100-SXM4-80GB is not allowed for tenant"),
        "{}",
        ready.message
    );
    assert!(s.jobs().get_opt("wrong-gpu-train").await.unwrap().is_none());
    let _ = Api::<gryvia_types::GryviaTenant>::all(s.client.clone())
        .delete(&tenant, &DeleteParams::default())
        .await;
}

/// How long the fault test keeps a hook receiver down: `GRYVIA_FAULT_RECEIVER_DOWN_SECS`, 30 s
/// unless set (`scripts/faults` sets 300: five minutes).
fn receiver_downtime() -> Duration {
    Duration::from_secs(
        std::env::var("GRYVIA_FAULT_RECEIVER_DOWN_SECS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(30),
    )
}

#[tokio::test]
#[expect(
    clippy::too_many_lines,
    reason = "one end-to-end scenario, read top to bottom"
)]
async fn a_hook_receiver_that_was_down_gets_every_event_once_per_id_when_it_is_back() {
    use gryvia_types::{DeliveryState, GryviaJobHook, HookEvent};
    let down_for = receiver_downtime();
    let Some(s) = Setup::start("hook-outage", &["--enable-job-hooks".to_owned()], None).await
    else {
        return;
    };
    let mut rx = Receiver::start().await;
    s.hook_secret("outage-key", "outage-signing-key-7f3a").await;
    s.create_hook(
        "outage",
        json!({"events": ["Started", "Succeeded", "Failed"],
               "url": format!("{}/ok", rx.url), "allowInsecure": true,
               "secretRef": {"name": "outage-key"}, "timeoutSeconds": 5, "maxAttempts": 20}),
    )
    .await;
    // Down before anything happens: every event of these jobs meets a refused connection.
    rx.stop().await;
    let down_since = std::time::Instant::now();
    let ok: Vec<String> = (0..4).map(|i| format!("ok-{i}")).collect();
    let failing: Vec<String> = (0..2).map(|i| format!("fail-{i}")).collect();
    for name in &ok {
        s.submit(json!({"metadata": {"name": name},
                        "spec": {"image": "registry.local/train:1", "gpus": 1}}))
            .await;
    }
    for name in &failing {
        s.submit(json!({"metadata": {"name": name},
                        "spec": {"image": "registry.local/crash:1", "gpus": 1, "retryLimit": 0,
                                 "podAnnotations": {"gryvia.io/testenv-fail": "true"}}}))
            .await;
    }
    for name in &ok {
        s.wait_phase(name, JobPhase::Succeeded, Duration::from_secs(120))
            .await;
    }
    for name in &failing {
        s.wait_phase(name, JobPhase::Failed, Duration::from_secs(120))
            .await;
    }
    let hooks: Api<GryviaJobHook> = Api::namespaced(s.client.clone(), &s.ns.name);
    let status = || {
        let hooks = hooks.clone();
        async move {
            hooks
                .get("outage")
                .await
                .ok()
                .and_then(|h| h.status)
                .unwrap_or_default()
        }
    };
    // While it is down: attempts fail and are retried, nothing is delivered or given up.
    let during = wait_for(
        "every job's end to be a delivery that failed an attempt",
        Duration::from_secs(90),
        || async {
            let st = status().await;
            let ends = st
                .deliveries
                .iter()
                .filter(|d| matches!(d.event, HookEvent::Succeeded | HookEvent::Failed))
                .filter(|d| d.attempts >= 1)
                .count();
            (ends == ok.len() + failing.len()).then_some(st)
        },
    )
    .await
    .unwrap();
    assert_eq!(during.delivered, 0);
    assert_eq!(during.failed, 0, "nothing given up while down");
    assert!(
        during
            .deliveries
            .iter()
            .all(|d| d.state == DeliveryState::Pending),
        "{:?}",
        during.deliveries
    );
    assert!(rx.on("/ok").is_empty());
    tokio::time::sleep(down_for.saturating_sub(down_since.elapsed())).await;
    let attempts_while_down: i32 = status().await.deliveries.iter().map(|d| d.attempts).sum();
    rx.restart().await;
    // Back: every event delivered, each id once, none given up. The backoff is capped at
    // 5 minutes, so the last attempt before the receiver came back is at most that far away.
    let after = wait_for(
        "every delivery Delivered after the outage",
        Duration::from_secs(330),
        || async {
            let st = status().await;
            (!st.deliveries.is_empty()
                && st
                    .deliveries
                    .iter()
                    .all(|d| d.state == DeliveryState::Delivered))
            .then_some(st)
        },
    )
    .await
    .unwrap();
    let got = rx.on("/ok");
    let mut ids: Vec<&str> = got.iter().map(|r| r.id.as_str()).collect();
    ids.sort_unstable();
    let distinct: std::collections::BTreeSet<&str> = ids.iter().copied().collect();
    assert_eq!(distinct.len(), ids.len(), "each id delivered once: {ids:?}");
    let recorded: std::collections::BTreeSet<&str> =
        after.deliveries.iter().map(|d| d.id.as_str()).collect();
    assert_eq!(distinct, recorded, "what arrived is what the hook recorded");
    assert_eq!(after.delivered, i64::try_from(got.len()).unwrap());
    assert_eq!(after.failed, 0);
    let mut events: Vec<(String, String)> = got.iter().map(event_of).collect();
    events.sort();
    for name in &ok {
        for event in ["Started", "Succeeded"] {
            assert!(
                events.contains(&(name.clone(), event.to_owned())),
                "{name} {event} in {events:?}"
            );
        }
    }
    for name in &failing {
        assert!(events.contains(&(name.clone(), "Failed".to_owned())));
    }
    for r in &got {
        assert_eq!(
            r.signature,
            hmac_hex(b"outage-signing-key-7f3a", &r.body),
            "signature of {}",
            r.id
        );
    }
    println!(
        "receiver down {:?}: {} deliveries, {attempts_while_down} attempts refused while down, \
         each delivered once after",
        down_since.elapsed().min(down_for),
        got.len()
    );
}
