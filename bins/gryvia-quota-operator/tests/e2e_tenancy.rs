//! End-to-end: the quota-operator binary against a real control plane (testenv/).
//!
//! Tests in this file run one at a time (a static lock) because each starts its own operator
//! processes; every operator uses a Lease in the test's own namespace.

#![expect(clippy::unwrap_used, reason = "test helpers panic on failure")]

use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::Duration;

use gryvia_testsupport::{TestNamespace, unique, wait_for};
use gryvia_types::GryviaTenant;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Pod, ResourceQuota};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
static PORT: AtomicU16 = AtomicU16::new(18180);

/// A running operator process, killed (SIGKILL) when dropped.
struct Operator {
    child: Child,
    identity: String,
}

impl Operator {
    fn start(lease_namespace: &str, identity: &str) -> Self {
        Self::start_with(lease_namespace, identity, &[])
    }

    fn start_with(lease_namespace: &str, identity: &str, extra: &[&str]) -> Self {
        let kubeconfig = match gryvia_testsupport::cluster() {
            gryvia_testsupport::Cluster::Ready { kubeconfig } => kubeconfig,
            gryvia_testsupport::Cluster::Skip(r) => panic!("{r}"),
        };
        let port = PORT.fetch_add(1, Ordering::SeqCst);
        // The operator's log, for post-mortems: target/e2e-logs/quota-operator-<identity>-<port>.log
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/e2e-logs");
        std::fs::create_dir_all(&dir).unwrap();
        let log = std::fs::File::create(dir.join(format!("quota-operator-{identity}-{port}.log")))
            .unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_gryvia-quota-operator"))
            .args([
                "--metrics-addr",
                &format!("127.0.0.1:{port}"),
                "--lease-namespace",
                lease_namespace,
            ])
            .args([
                "--lease-duration",
                "4",
                "--lease-grace",
                "1",
                "--identity",
                identity,
            ])
            .args(extra)
            .env("KUBECONFIG", kubeconfig)
            .env("RUST_LOG", "info,kube=warn")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        Operator {
            child,
            identity: identity.to_owned(),
        }
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        self.kill();
    }
}

/// What every test here needs: a client, the CRDs, the test lock, and one operator whose Lease
/// lives in the test's own namespace.
struct Setup {
    client: kube::Client,
    // Fields drop in declaration order: the operator is killed before the lock is released.
    _operator: Operator,
    _lease_ns: TestNamespace,
    _serial: tokio::sync::MutexGuard<'static, ()>,
}

impl Setup {
    async fn with_operator() -> Option<Setup> {
        let client = gryvia_testsupport::client().await?;
        let serial = SERIAL.lock().await;
        gryvia_client::crds::install(&client, Duration::from_secs(60))
            .await
            .unwrap();
        let lease_ns = TestNamespace::create(&client, "qop").await.unwrap();
        let operator = Operator::start(&lease_ns.name, "solo");
        Some(Setup {
            client,
            _operator: operator,
            _lease_ns: lease_ns,
            _serial: serial,
        })
    }
}

async fn create_tenant(client: &kube::Client, body: serde_json::Value) -> GryviaTenant {
    let api: Api<GryviaTenant> = Api::all(client.clone());
    api.create(
        &PostParams::default(),
        &serde_json::from_value(body).unwrap(),
    )
    .await
    .unwrap()
}

async fn wait_ready(client: &kube::Client, name: &str) -> GryviaTenant {
    let api: Api<GryviaTenant> = Api::all(client.clone());
    wait_for(
        &format!("tenant {name} Ready"),
        Duration::from_secs(60),
        || async {
            let t = api.get(name).await.ok()?;
            let ready = t
                .status
                .as_ref()
                .map(|s| gryvia_types::conditions::is_true(&s.conditions, "Ready"))
                .unwrap_or(false);
            ready.then_some(t)
        },
    )
    .await
    .unwrap()
}

async fn delete_tenant_and_namespace(client: &kube::Client, name: &str) {
    let _ = Api::<GryviaTenant>::all(client.clone())
        .delete(name, &DeleteParams::default())
        .await;
    let _ = Api::<Namespace>::all(client.clone())
        .delete(&format!("tenant-{name}"), &DeleteParams::background())
        .await;
}

#[tokio::test]
async fn a_tenant_gets_namespace_quota_limits_and_isolation_and_the_quota_is_enforced() {
    let Some(setup) = Setup::with_operator().await else {
        return;
    };
    let client = setup.client.clone();
    let name = unique("acme");
    let ns = format!("tenant-{name}");
    create_tenant(&client, json!({
        "apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaTenant", "metadata": {"name": name},
        "spec": {"displayName": "Acme", "quotas": {"concurrentGPUs": 2}, "networkPolicy": {"isolated": true}}
    }))
    .await;
    let t = wait_ready(&client, &name).await;
    assert_eq!(
        t.status.as_ref().unwrap().namespace.as_deref(),
        Some(ns.as_str())
    );
    let quotas: Api<ResourceQuota> = Api::namespaced(client.clone(), &ns);
    let rq = quotas.get("gryvia-tenant").await.unwrap();
    assert_eq!(
        rq.spec.unwrap().hard.unwrap()["requests.nvidia.com/gpu"].0,
        "2"
    );
    Api::<NetworkPolicy>::namespaced(client.clone(), &ns)
        .get("gryvia-tenant-isolation")
        .await
        .unwrap();
    let limits: Api<k8s_openapi::api::core::v1::LimitRange> = Api::namespaced(client.clone(), &ns);
    limits.get("gryvia-defaults").await.unwrap();

    // Change concurrentGPUs: the quota follows.
    let tenants: Api<GryviaTenant> = Api::all(client.clone());
    tenants
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"quotas": {"concurrentGPUs": 3}}})),
        )
        .await
        .unwrap();
    wait_for("quota to follow", Duration::from_secs(30), || async {
        let rq = quotas.get("gryvia-tenant").await.ok()?;
        (rq.spec?.hard?.get("requests.nvidia.com/gpu")?.0 == "3").then_some(())
    })
    .await
    .unwrap();

    // Pods within the quota are admitted; the one that would exceed it is rejected by the
    // API server's ResourceQuota admission.
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let gpu_pod = |name: &str| -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"containers": [{"name": "c", "image": "busybox", "resources": {"limits": {"nvidia.com/gpu": "2"}}}]}
        }))
        .unwrap()
    };
    wait_for(
        "the first GPU pod to be admitted",
        Duration::from_secs(30),
        || async {
            pods.create(&PostParams::default(), &gpu_pod("fits"))
                .await
                .ok()
                .map(|_| ())
        },
    )
    .await
    .unwrap();
    match pods
        .create(&PostParams::default(), &gpu_pod("too-many"))
        .await
    {
        Err(kube::Error::Api(s)) => {
            assert_eq!(s.code, 403, "{s:?}");
            assert!(s.message.contains("exceeded quota"), "{}", s.message);
        }
        other => panic!("a pod over the GPU quota was not rejected: {other:?}"),
    }
    // A pod that asks for no GPU gets none (the LimitRange's GPU cap is not its default), so
    // it is admitted while the GPU quota is in use.
    let cpu_only: Pod = serde_json::from_value(json!({
        "metadata": {"name": "cpu-only"},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]}
    }))
    .unwrap();
    let made = pods
        .create(&PostParams::default(), &cpu_only)
        .await
        .unwrap_or_else(|e| panic!("a pod without GPUs was not admitted: {e}"));
    let resources = made.spec.unwrap().containers[0].resources.clone().unwrap();
    for (what, list) in [
        ("limits", resources.limits),
        ("requests", resources.requests),
    ] {
        let gpus = list.and_then(|l| l.get("nvidia.com/gpu").cloned());
        assert!(
            gpus.as_ref().is_none_or(|q| q.0 == "0"),
            "a pod without GPUs got {what} of {gpus:?}"
        );
    }
    delete_tenant_and_namespace(&client, &name).await;
}

#[tokio::test]
async fn a_restricted_tenant_is_isolated_from_every_other_tenant_and_its_namespace_names_its_regimes()
 {
    let Some(setup) = Setup::with_operator().await else {
        return;
    };
    let client = setup.client.clone();
    let name = unique("vault");
    let ns = format!("tenant-{name}");
    // No networkPolicy.isolated: the classification alone isolates.
    create_tenant(&client, json!({
        "apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaTenant", "metadata": {"name": name},
        "spec": {"displayName": "Vault", "networkPolicy": {"allowedTenants": ["friends"]},
                 "governance": {"dataClassification": "confidential", "complianceRequirements": ["SOC2", "HIPAA"]}}
    }))
    .await;
    wait_ready(&client, &name).await;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let labels = namespaces.get(&ns).await.unwrap().metadata.labels.unwrap();
    assert_eq!(labels["gryvia.io/data-classification"], "confidential");
    assert_eq!(labels["compliance.gryvia.io/SOC2"], "true");
    assert_eq!(labels["compliance.gryvia.io/HIPAA"], "true");
    let policies: Api<NetworkPolicy> = Api::namespaced(client.clone(), &ns);
    let allowed = |np: NetworkPolicy| -> Vec<String> {
        np.spec.unwrap().ingress.unwrap()[0].from.clone().unwrap()[0]
            .namespace_selector
            .clone()
            .unwrap()
            .match_expressions
            .unwrap()[0]
            .values
            .clone()
            .unwrap()
    };
    let np = policies.get("gryvia-tenant-isolation").await.unwrap();
    assert_eq!(allowed(np), vec!["friends".to_owned(), name.clone()]);

    // Restricted: nobody else, whatever allowedTenants says; HIPAA is no longer a regime.
    Api::<GryviaTenant>::all(client.clone())
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"governance": {"dataClassification": "restricted", "complianceRequirements": ["SOC2"]}}})),
        )
        .await
        .unwrap();
    wait_for(
        "only the tenant itself let in",
        Duration::from_secs(60),
        || async {
            let np = policies.get("gryvia-tenant-isolation").await.ok()?;
            (allowed(np) == vec![name.clone()]).then_some(())
        },
    )
    .await
    .unwrap();
    let labels = namespaces.get(&ns).await.unwrap().metadata.labels.unwrap();
    assert_eq!(labels["gryvia.io/data-classification"], "restricted");
    assert!(
        !labels.contains_key("compliance.gryvia.io/HIPAA"),
        "{labels:?}"
    );

    // Public data, not isolated: the policy goes.
    Api::<GryviaTenant>::all(client.clone())
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"governance": {"dataClassification": "public"}}})),
        )
        .await
        .unwrap();
    wait_for("the isolation to go", Duration::from_secs(60), || async {
        policies
            .get_opt("gryvia-tenant-isolation")
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await
    .unwrap();
    delete_tenant_and_namespace(&client, &name).await;
}

#[tokio::test]
async fn deleting_a_tenant_that_holds_workloads_keeps_its_namespace() {
    let Some(setup) = Setup::with_operator().await else {
        return;
    };
    let client = setup.client.clone();
    let name = unique("keep");
    let ns = format!("tenant-{name}");
    create_tenant(
        &client,
        json!({
            "apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaTenant", "metadata": {"name": name},
            "spec": {"displayName": "Keep", "quotas": {"concurrentGPUs": 1}}
        }),
    )
    .await;
    wait_ready(&client, &name).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "worker"},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]}
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    let tenants: Api<GryviaTenant> = Api::all(client.clone());
    tenants
        .delete(&name, &DeleteParams::default())
        .await
        .unwrap();
    wait_for("the tenant to be gone", Duration::from_secs(60), || async {
        tenants.get_opt(&name).await.ok()?.is_none().then_some(())
    })
    .await
    .unwrap();
    let kept = Api::<Namespace>::all(client.clone())
        .get(&ns)
        .await
        .unwrap();
    assert!(
        kept.metadata.deletion_timestamp.is_none(),
        "the namespace holding a pod was deleted"
    );
    assert_eq!(
        kept.metadata.annotations.unwrap()["gryvia.io/retained-from-tenant"],
        name
    );
    let events: Api<Event> = Api::all(client.clone());
    let list = events.list(&ListParams::default()).await.unwrap();
    assert!(
        list.items
            .iter()
            .any(|e| e.reason.as_deref() == Some("NamespaceRetained")
                && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name.as_str())),
        "no NamespaceRetained event"
    );
    let _ = Api::<Namespace>::all(client.clone())
        .delete(&ns, &DeleteParams::background())
        .await;
}

#[tokio::test]
async fn a_child_asking_more_than_its_parent_has_is_capped() {
    let Some(setup) = Setup::with_operator().await else {
        return;
    };
    let client = setup.client.clone();
    let parent = unique("org");
    let child = unique("team");
    create_tenant(&client, json!({"apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaTenant", "metadata": {"name": parent}, "spec": {"displayName": "Org", "quotas": {"concurrentGPUs": 8}}})).await;
    create_tenant(&client, json!({"apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaTenant", "metadata": {"name": child}, "spec": {"displayName": "Team", "parentTenant": parent, "quotas": {"concurrentGPUs": 20}}})).await;
    let t = wait_ready(&client, &child).await;
    let api: Api<GryviaTenant> = Api::all(client.clone());
    let t = wait_for(
        "the child to be capped",
        Duration::from_secs(30),
        || async {
            let t = api.get(&child).await.ok()?;
            (t.status.as_ref()?.gpu_limit == Some(8)).then_some(t)
        },
    )
    .await
    .unwrap_or(t);
    let status = t.status.unwrap();
    assert_eq!(status.gpu_limit, Some(8));
    let capped = gryvia_types::conditions::find(&status.conditions, "QuotaCapped").unwrap();
    assert_eq!(capped.status, "True");
    assert!(
        capped.message.contains("asked for 20 GPUs"),
        "{}",
        capped.message
    );
    let parent_status = wait_ready(&client, &parent).await.status.unwrap();
    assert_eq!(
        parent_status.gpu_limit,
        Some(0),
        "the parent's own namespace keeps what its children did not take"
    );
    delete_tenant_and_namespace(&client, &child).await;
    delete_tenant_and_namespace(&client, &parent).await;
}

async fn lease_holder(client: &kube::Client, ns: &str) -> Option<String> {
    let leases: Api<Lease> = Api::namespaced(client.clone(), ns);
    leases
        .get("gryvia-quota-operator")
        .await
        .ok()?
        .spec?
        .holder_identity
}

#[tokio::test]
async fn when_the_leader_is_killed_the_standby_takes_over() {
    let Some(client) = gryvia_testsupport::client().await else {
        return;
    };
    let _serial = SERIAL.lock().await;
    gryvia_client::crds::install(&client, Duration::from_secs(60))
        .await
        .unwrap();
    let lease_ns = TestNamespace::create(&client, "qop-ha").await.unwrap();
    let mut a = Operator::start(&lease_ns.name, "replica-a");
    wait_for("replica-a to lead", Duration::from_secs(30), || async {
        (lease_holder(&client, &lease_ns.name).await.as_deref() == Some("replica-a")).then_some(())
    })
    .await
    .unwrap();
    let b = Operator::start(&lease_ns.name, "replica-b");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        lease_holder(&client, &lease_ns.name).await.as_deref(),
        Some("replica-a"),
        "only one replica leads"
    );
    a.kill(); // SIGKILL: no release of the lease
    // Created while nobody leads: the standby must pick it up once the lease expires.
    let name = unique("after-failover");
    create_tenant(&client, json!({"apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaTenant", "metadata": {"name": name}, "spec": {"displayName": "F", "quotas": {"concurrentGPUs": 1}}})).await;
    wait_for(
        "replica-b to take over",
        Duration::from_secs(30),
        || async {
            (lease_holder(&client, &lease_ns.name).await.as_deref() == Some(b.identity.as_str()))
                .then_some(())
        },
    )
    .await
    .unwrap();
    let t = wait_ready(&client, &name).await;
    assert_eq!(t.status.unwrap().namespace, Some(format!("tenant-{name}")));
    delete_tenant_and_namespace(&client, &name).await;
}

#[tokio::test]
async fn a_gryvia_quota_puts_a_resource_quota_in_each_listed_namespace() {
    let Some(setup) = Setup::with_operator().await else {
        return;
    };
    let client = setup.client.clone();
    let a = TestNamespace::create(&client, "quota-a").await.unwrap();
    let b = TestNamespace::create(&client, "quota-b").await.unwrap();
    let name = unique("shared");
    let quotas: Api<gryvia_types::GryviaQuota> = Api::all(client.clone());
    let q: gryvia_types::GryviaQuota = serde_json::from_value(json!({
        "apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaQuota", "metadata": {"name": name},
        "spec": {"namespaces": [a.name, b.name, "does-not-exist"], "hard": {"gpus": 5}}
    }))
    .unwrap();
    quotas.create(&PostParams::default(), &q).await.unwrap();
    let object = format!("gryvia-quota-{name}");
    for ns in [&a.name, &b.name] {
        let rqs: Api<ResourceQuota> = Api::namespaced(client.clone(), ns);
        wait_for(
            &format!("the quota in {ns}"),
            Duration::from_secs(30),
            || async {
                let rq = rqs.get(&object).await.ok()?;
                (rq.spec?.hard?.get("requests.nvidia.com/gpu")?.0 == "5").then_some(())
            },
        )
        .await
        .unwrap();
    }
    let status = wait_for(
        "the missing namespace to be reported",
        Duration::from_secs(30),
        || async {
            let s = quotas.get(&name).await.ok()?.status?;
            let c = gryvia_types::conditions::find(&s.conditions, "Ready")?.clone();
            (c.reason == "NamespaceNotFound").then_some(c)
        },
    )
    .await
    .unwrap();
    assert!(
        status.message.contains("does-not-exist"),
        "{}",
        status.message
    );
    // Dropping a namespace from the list removes its ResourceQuota.
    quotas
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"namespaces": [a.name]}})),
        )
        .await
        .unwrap();
    let rqs_b: Api<ResourceQuota> = Api::namespaced(client.clone(), &b.name);
    wait_for(
        "the quota in the dropped namespace to go",
        Duration::from_secs(30),
        || async { rqs_b.get_opt(&object).await.ok()?.is_none().then_some(()) },
    )
    .await
    .unwrap();
    quotas
        .delete(&name, &DeleteParams::default())
        .await
        .unwrap();
}

#[tokio::test]
async fn gpu_use_per_product_is_reported_against_gpus_per_type() {
    let Some(setup) = Setup::with_operator().await else {
        return;
    };
    let client = setup.client.clone();
    let name = unique("typed");
    let ns = format!("tenant-{name}");
    create_tenant(&client, json!({
        "apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaTenant", "metadata": {"name": name},
        "spec": {"displayName": "Typed", "quotas": {"concurrentGPUs": 8, "gpusPerType": {"NVIDIA-H100-80GB-HBM3": 1}}}
    }))
    .await;
    wait_ready(&client, &name).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "h100-user"},
        "spec": {
            "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
            "containers": [{"name": "c", "image": "busybox", "resources": {"limits": {"nvidia.com/gpu": "2"}}}]
        }
    }))
    .unwrap();
    wait_for(
        "the pod to be admitted",
        Duration::from_secs(30),
        || async {
            pods.create(&PostParams::default(), &pod)
                .await
                .ok()
                .map(|_| ())
        },
    )
    .await
    .unwrap();
    let tenants: Api<GryviaTenant> = Api::all(client.clone());
    let status = wait_for(
        "the per-type overuse to be reported",
        Duration::from_secs(60),
        || async {
            let s = tenants.get(&name).await.ok()?.status?;
            gryvia_types::conditions::is_true(&s.conditions, "GpuTypeLimitExceeded").then_some(s)
        },
    )
    .await
    .unwrap();
    assert_eq!(
        status.gpus_in_use_by_type.get("NVIDIA-H100-80GB-HBM3"),
        Some(&2)
    );
    let c = gryvia_types::conditions::find(&status.conditions, "GpuTypeLimitExceeded").unwrap();
    assert!(c.message.contains("2 in use, limit 1"), "{}", c.message);
    delete_tenant_and_namespace(&client, &name).await;
}

#[tokio::test]
#[expect(
    clippy::too_many_lines,
    reason = "one end-to-end scenario, read top to bottom"
)]
async fn gpu_jobs_are_metered_into_priced_usage_records_that_outlive_them() {
    use gryvia_types::{GryviaAIJob, GryviaUsageRecord};
    let Some(client) = gryvia_testsupport::client().await else {
        return;
    };
    let serial = SERIAL.lock().await;
    gryvia_client::crds::install(&client, Duration::from_secs(60))
        .await
        .unwrap();
    let lease_ns = TestNamespace::create(&client, "qop").await.unwrap();
    let _operator = Operator::start_with(&lease_ns.name, "meter", &["--metering"]);
    let ns = TestNamespace::create(&client, "meter").await.unwrap();
    Api::<Namespace>::all(client.clone())
        .patch(
            &ns.name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"gryvia.io/tenant": "metered"}}})),
        )
        .await
        .unwrap();
    // A catalogue entry of a product no other test uses.
    let product = unique("E2E-GPU");
    let sku_name = unique("e2e-sku");
    let skus: Api<gryvia_types::GryviaGpuSku> = Api::all(client.clone());
    skus.create(
        &PostParams::default(),
        &serde_json::from_value(json!({
            "metadata": {"name": sku_name},
            "spec": {"gpuProduct": product, "pricePerGpuHour": "3.60"}
        }))
        .unwrap(),
    )
    .await
    .unwrap();

    // Two GPU jobs; no ai-operator runs here, so the test writes their status.
    let jobs: Api<GryviaAIJob> = Api::namespaced(client.clone(), &ns.name);
    let now = jiff::Timestamp::now();
    let hour_ago = now - jiff::SignedDuration::from_hours(1);
    let mut uids = Vec::new();
    for name in ["done", "dropped"] {
        // The mutating webhook would set the classification from the tenant; none runs here.
        let job: GryviaAIJob = serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": ns.name, "labels": {"gryvia.io/data-classification": "internal"}},
            "spec": {"image": "registry.local/train:1", "gpus": 2, "replicas": 2, "gpuType": product, "type": "evaluation"}
        }))
        .unwrap();
        let job = jobs.create(&PostParams::default(), &job).await.unwrap();
        uids.push(job.metadata.uid.unwrap());
        jobs.patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(
                json!({"status": {"phase": "Running", "startTime": hour_ago.to_string()}}),
            ),
        )
        .await
        .unwrap();
    }
    let records: Api<GryviaUsageRecord> = Api::all(client.clone());
    let record_of = |i: usize, name: &str| gryvia_reconcile::metering::record_name(name, &uids[i]);
    let (done_rec, dropped_rec) = (record_of(0, "done"), record_of(1, "dropped"));
    // An open record, priced up to now: 4 GPUs for an hour and then some, at 3.60.
    let open = wait_for("an open, priced record", Duration::from_secs(60), || {
        let records = records.clone();
        let name = done_rec.clone();
        async move {
            let r = records.get(&name).await.ok()?;
            (r.status.as_ref()?.gpu_seconds >= 4 * 3600).then_some(r)
        }
    })
    .await
    .unwrap();
    assert_eq!(open.spec.tenant, "metered");
    assert_eq!(open.spec.namespace, ns.name);
    let record_labels = open.metadata.labels.clone().unwrap();
    assert_eq!(record_labels["gryvia.io/job-type"], "evaluation");
    assert_eq!(record_labels["gryvia.io/data-classification"], "internal");
    assert_eq!(open.spec.sku, sku_name);
    assert_eq!(open.spec.gpu_count, 4);
    assert_eq!(open.spec.workload.uid.as_deref(), Some(uids[0].as_str()));
    assert!(open.spec.end_time.is_none());
    let st = open.status.unwrap();
    let micros = st.cost.unwrap().micros().unwrap();
    assert_eq!(
        micros,
        i64::from(i32::try_from(st.gpu_seconds).unwrap()) * 1000,
        "3.60 a GPU-hour is 1,000 micro-units a GPU-second"
    );
    assert_eq!(st.currency.as_deref(), Some("USD"));
    // Every job carries the metering finalizer.
    let j = jobs.get("done").await.unwrap();
    assert!(
        j.metadata
            .finalizers
            .unwrap_or_default()
            .contains(&"gryvia.io/metering".to_owned())
    );

    // The job completes: the record closes at its completion, priced exactly.
    let end = hour_ago + jiff::SignedDuration::from_mins(30);
    jobs.patch_status(
        "done",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"phase": "Succeeded", "completionTime": end.to_string()}})),
    )
    .await
    .unwrap();
    let closed = wait_for("the record to close", Duration::from_secs(60), || {
        let records = records.clone();
        let name = done_rec.clone();
        async move {
            let r = records.get(&name).await.ok()?;
            (r.spec.end_time.is_some() && r.status.as_ref()?.gpu_seconds == 4 * 1800).then_some(r)
        }
    })
    .await
    .unwrap();
    assert_eq!(closed.status.unwrap().cost.unwrap().as_str(), "7.2");

    // A running job deleted: its record closes at the deletion and stays.
    jobs.delete("dropped", &DeleteParams::default())
        .await
        .unwrap();
    wait_for("the deleted job to go", Duration::from_secs(60), || {
        let jobs = jobs.clone();
        async move { jobs.get_opt("dropped").await.ok()?.is_none().then_some(()) }
    })
    .await
    .unwrap();
    let r = wait_for(
        "the dropped job's record to close",
        Duration::from_secs(30),
        || {
            let records = records.clone();
            let name = dropped_rec.clone();
            async move {
                let r = records.get(&name).await.ok()?;
                r.spec.end_time.is_some().then_some(r)
            }
        },
    )
    .await
    .unwrap();
    let ended = r.spec.end_time.unwrap().0;
    assert!(
        ended >= now - jiff::SignedDuration::from_secs(5),
        "closed at the deletion, not before"
    );
    // A closed record is immutable at the API server.
    let err = records
        .patch(
            &dropped_rec,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"gpuCount": 1}})),
        )
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("a closed usage record is immutable"),
        "{err}"
    );
    jobs.delete("done", &DeleteParams::default()).await.unwrap();
    for name in [&done_rec, &dropped_rec] {
        let _ = records.delete(name, &DeleteParams::default()).await;
    }
    let _ = skus.delete(&sku_name, &DeleteParams::default()).await;
    drop(ns);
    drop(lease_ns);
    drop(serial);
}

#[tokio::test]
#[expect(
    clippy::too_many_lines,
    reason = "one end-to-end scenario, read top to bottom"
)]
async fn a_budget_counts_its_scopes_usage_alerts_and_blocks_at_its_limit() {
    use gryvia_types::{BudgetState, GryviaBudget, GryviaUsageRecord};
    let Some(s) = Setup::with_operator().await else {
        return;
    };
    let client = s.client.clone();
    let tenant = unique("budget-t");
    let product = unique("E2E-BUDGET-GPU");
    let sku_name = unique("e2e-bsku");
    let skus: Api<gryvia_types::GryviaGpuSku> = Api::all(client.clone());
    skus.create(
        &PostParams::default(),
        &serde_json::from_value(json!({
            "metadata": {"name": sku_name},
            "spec": {"gpuProduct": product, "pricePerGpuHour": "2.50"}
        }))
        .unwrap(),
    )
    .await
    .unwrap();
    // Usage this month: 4 GPUs for 5 hours (50 USD), and another tenant's.
    let (start, _) =
        gryvia_reconcile::budget::period(gryvia_types::PeriodType::Monthly, jiff::Timestamp::now());
    let records: Api<GryviaUsageRecord> = Api::all(client.clone());
    let mut made = Vec::new();
    for (name, who, gpus, hours) in [("a", tenant.as_str(), 4, 5), ("b", "someone-else", 8, 5)] {
        let name = unique(&format!("e2e-usage-{name}"));
        let end = start + jiff::SignedDuration::from_hours(hours);
        records
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({
                    "metadata": {"name": name},
                    "spec": {"tenant": who, "namespace": format!("tenant-{who}"),
                             "workload": {"kind": "GryviaAIJob", "name": "j"}, "sku": sku_name,
                             "gpuCount": gpus, "startTime": start.to_string(), "endTime": end.to_string()}
                }))
                .unwrap(),
            )
            .await
            .unwrap();
        made.push(name);
    }
    let budgets: Api<GryviaBudget> = Api::all(client.clone());
    let budget_name = unique("e2e-budget");
    budgets
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": budget_name},
                "spec": {"scope": {"type": "tenant", "name": tenant}, "period": {"type": "monthly"},
                         "limits": {"costUSD": 80}, "alerts": [{"threshold": 50}],
                         "enforcement": {"enabled": true, "action": "block"}}
            }))
            .unwrap(),
        )
        .await
        .unwrap();
    let status = |want: BudgetState| {
        let budgets = budgets.clone();
        let name = budget_name.clone();
        async move {
            wait_for(&format!("budget {want:?}"), Duration::from_secs(60), || {
                let budgets = budgets.clone();
                let name = name.clone();
                async move {
                    let st = budgets.get(&name).await.ok()?.status?;
                    (st.state == Some(want)).then_some(st)
                }
            })
            .await
            .unwrap()
        }
    };
    let st = status(BudgetState::Warning).await;
    assert_eq!(st.spend_usd.unwrap().as_str(), "50");
    assert_eq!(st.gpu_hours.unwrap().as_str(), "20");
    assert_eq!(st.alerted_thresholds, [50]);
    let events: Api<Event> = Api::all(client.clone());
    let alert = wait_for("a BudgetThreshold event", Duration::from_secs(30), || {
        let events = events.clone();
        let name = budget_name.clone();
        async move {
            events
                .list(&ListParams::default())
                .await
                .ok()?
                .items
                .into_iter()
                .find(|e| {
                    e.reason.as_deref() == Some("BudgetThreshold")
                        && e.regarding.as_ref().and_then(|r| r.name.as_deref())
                            == Some(name.as_str())
                })
        }
    })
    .await
    .unwrap();
    assert!(
        alert
            .note
            .unwrap()
            .contains("is at 62 % of the limit (threshold 50 %)")
    );

    // More usage: 4 GPUs for 4 more hours, 90 USD of 80: blocked.
    let more = unique("e2e-usage-c");
    records
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": more},
                "spec": {"tenant": tenant, "namespace": format!("tenant-{tenant}"),
                         "workload": {"kind": "GryviaAIJob", "name": "k"}, "sku": sku_name,
                         "gpuCount": 4, "startTime": start.to_string(),
                         "endTime": (start + jiff::SignedDuration::from_hours(4)).to_string()}
            }))
            .unwrap(),
        )
        .await
        .unwrap();
    made.push(more);
    let st = status(BudgetState::Blocked).await;
    assert_eq!(st.spend_usd.unwrap().as_str(), "90");
    let ready = gryvia_types::conditions::find(&st.conditions, "Ready").unwrap();
    assert_eq!(ready.reason, "Blocked");

    let _ = budgets.delete(&budget_name, &DeleteParams::default()).await;
    for name in made {
        let _ = records.delete(&name, &DeleteParams::default()).await;
    }
    let _ = skus.delete(&sku_name, &DeleteParams::default()).await;
}
