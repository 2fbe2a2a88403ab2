//! Support for Gryvia's end-to-end tests against a real control plane.
//!
//! [`cluster`] finds the control plane of `testenv/` (etcd, kube-apiserver,
//! kube-controller-manager, kube-scheduler and KWOK GPU nodes built from upstream sources):
//!
//! 1. a running one: `GRYVIA_TESTENV_KUBECONFIG`, else `<GRYVIA_TESTENV_DIR or
//!    /tmp/gryvia-testenv>/kubeconfig` when it answers;
//! 2. otherwise, when `GRYVIA_E2E=1` (CI sets it), it starts one with `testenv/up`;
//! 3. otherwise the test is skipped with a printed reason (a laptop without Go builds).
//!
//! With `GRYVIA_E2E=1` a missing or broken control plane fails the test: e2e tests never pass
//! silently in CI. Every test gets its own client (clients are bound to the test's runtime)
//! and, through [`TestNamespace`], a fresh namespace that is deleted when the test ends, also
//! when it panics.
//!
//! This crate is a dev-dependency only; it is not part of the product.

pub mod dex;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use k8s_openapi::api::core::v1::Namespace;
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};

/// What [`cluster`] found.
#[derive(Clone, Debug)]
pub enum Cluster {
    /// A control plane to test against.
    Ready {
        /// Its admin kubeconfig.
        kubeconfig: PathBuf,
    },
    /// No control plane, and the environment does not ask for one: skip, with this reason.
    Skip(String),
}

static CLUSTER: OnceLock<std::result::Result<PathBuf, String>> = OnceLock::new();

/// True when the environment demands e2e tests (`GRYVIA_E2E=1`).
pub fn required() -> bool {
    std::env::var("GRYVIA_E2E").is_ok_and(|v| v == "1" || v == "true")
}

/// Runs `binary` (from `env!("CARGO_BIN_EXE_...")`) with `args` against the test control plane
/// (its admin `KUBECONFIG`): whether it succeeded, its standard output and its standard error.
///
/// # Panics
/// When there is no control plane or the binary cannot be run.
pub async fn run_binary(binary: &str, args: &[&str]) -> (bool, String, String) {
    let kubeconfig = match cluster() {
        Cluster::Ready { kubeconfig } => kubeconfig,
        Cluster::Skip(r) => panic!("{r}"),
    };
    let out = tokio::process::Command::new(binary)
        .args(args)
        .env("KUBECONFIG", kubeconfig)
        .output()
        .await
        .unwrap_or_else(|e| panic!("run {binary}: {e}"));
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A name for a test's object: `prefix`, a dash and six hex digits from the clock (distinct
/// between calls of one run, short enough for names derived from it).
pub fn unique(prefix: &str) -> String {
    let micros = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros());
    format!("{prefix}-{:x}", micros % 0xff_ffff)
}

/// A loopback port nobody listens on now (for a binary's `--metrics-addr` or webhook).
///
/// # Panics
/// When no port can be bound.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or_else(|e| panic!("no free loopback port: {e}"))
}

/// `GET path` on `127.0.0.1:port` over plain HTTP/1.1: the status code and the body, or
/// `None` while nothing answers.
pub async fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    use std::io::{Read, Write};
    let path = path.to_owned();
    tokio::task::spawn_blocking(move || {
        let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
        stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
        write!(
            stream,
            "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
        )
        .ok()?;
        let mut response = String::new();
        stream.read_to_string(&mut response).ok()?;
        let (head, body) = response.split_once("\r\n\r\n")?;
        let code = head.split_whitespace().nth(1)?.parse().ok()?;
        Some((code, body.to_owned()))
    })
    .await
    .ok()
    .flatten()
}

/// The value of the sample `name{controller="<controller>"}` in Prometheus text.
pub fn metric_sample(text: &str, name: &str, controller: &str) -> Option<f64> {
    let key = format!("{name}{{controller=\"{controller}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&key))
        .and_then(|v| v.trim().parse().ok())
}

/// The repository root (where `testenv/` lives).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn state_kubeconfig() -> PathBuf {
    if let Ok(p) = std::env::var("GRYVIA_TESTENV_KUBECONFIG") {
        return PathBuf::from(p);
    }
    let dir = std::env::var("GRYVIA_TESTENV_DIR").unwrap_or_else(|_| "/tmp/gryvia-testenv".into());
    Path::new(&dir).join("kubeconfig")
}

fn start_testenv() -> std::result::Result<PathBuf, String> {
    let up = repo_root().join("testenv/up");
    let out = Command::new("bash")
        .arg(&up)
        .output()
        .map_err(|e| format!("run {}: {e}", up.display()))?;
    if !out.status.success() {
        return Err(format!(
            "testenv/up failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
                .lines()
                .rev()
                .take(15)
                .collect::<Vec<_>>()
                .join(" | ")
        ));
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    stdout
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("export KUBECONFIG="))
        .map(|p| PathBuf::from(p.trim()))
        .ok_or_else(|| format!("testenv/up printed no export line: {stdout}"))
}

/// Finds (or, in CI, starts) the control plane. Blocking; call it once at the start of a test.
///
/// # Panics
/// When `GRYVIA_E2E=1` and no control plane can be had.
pub fn cluster() -> Cluster {
    let found = CLUSTER.get_or_init(|| {
        let path = state_kubeconfig();
        if path.exists() && answers(&path) {
            return Ok(path);
        }
        if required() {
            return start_testenv();
        }
        Err(format!(
            "no control plane at {} and GRYVIA_E2E is not 1 (run `testenv/up` or `./scripts/test`)",
            path.display()
        ))
    });
    match found {
        Ok(path) => Cluster::Ready {
            kubeconfig: path.clone(),
        },
        Err(reason) if required() => panic!("e2e tests are required (GRYVIA_E2E=1) but: {reason}"),
        Err(reason) => Cluster::Skip(reason.clone()),
    }
}

/// Whether the API server behind `kubeconfig` answers `/readyz`, checked with a short-lived
/// runtime of its own.
fn answers(kubeconfig: &Path) -> bool {
    let Ok(rt) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        return false;
    };
    rt.block_on(async {
        let Ok(client) = client_for(kubeconfig).await else {
            return false;
        };
        let req = api_get("/readyz");
        matches!(
            tokio::time::timeout(Duration::from_secs(5), client.request_text(req)).await,
            Ok(Ok(body)) if body.trim() == "ok"
        )
    })
}

fn api_get(path: &str) -> http::Request<Vec<u8>> {
    let mut req = http::Request::new(Vec::new());
    *req.uri_mut() = http::Uri::from_maybe_shared(path.to_owned().into_bytes()).unwrap_or_default();
    req
}

/// A client for the cluster behind `kubeconfig`.
///
/// # Errors
/// When the file cannot be read or names no usable cluster.
pub async fn client_for(kubeconfig: &Path) -> Result<kube::Client> {
    let kc = Kubeconfig::read_from(kubeconfig)
        .with_context(|| format!("read kubeconfig {}", kubeconfig.display()))?;
    let config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .context("load kubeconfig")?;
    kube::Client::try_from(config).context("build client")
}

/// A client of the test's control plane that acts as `user` (impersonated by the admin), for
/// what depends on who makes a request. The user has only the rights the test grants it.
///
/// # Errors
/// When there is no control plane or its kubeconfig cannot be used.
pub async fn client_as(user: &str) -> Result<kube::Client> {
    let Cluster::Ready { kubeconfig } = cluster() else {
        bail!("no control plane");
    };
    let kc = Kubeconfig::read_from(&kubeconfig)
        .with_context(|| format!("read kubeconfig {}", kubeconfig.display()))?;
    let mut config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .context("load kubeconfig")?;
    config.auth_info.impersonate = Some(user.to_owned());
    kube::Client::try_from(config).context("build client")
}

/// Returns a client for the test's control plane, or `None` after printing why the test is
/// skipped. Use as `let Some(client) = gryvia_testsupport::client().await else { return };`.
///
/// # Panics
/// When `GRYVIA_E2E=1` and no control plane can be had.
pub async fn client() -> Option<kube::Client> {
    let cluster = tokio::task::spawn_blocking(cluster)
        .await
        .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()));
    match cluster {
        Cluster::Ready { kubeconfig } => match client_for(&kubeconfig).await {
            Ok(c) => Some(c),
            Err(e) => panic!(
                "control plane at {} is unusable: {e:#}",
                kubeconfig.display()
            ),
        },
        Cluster::Skip(reason) => {
            eprintln!("skipping e2e test: {reason}");
            None
        }
    }
}

/// A namespace that lives as long as the test: created fresh, deleted on drop (also when the
/// test panics).
#[derive(Debug)]
pub struct TestNamespace {
    /// The namespace's name.
    pub name: String,
    kubeconfig: PathBuf,
}

impl TestNamespace {
    /// Creates `e2e-<prefix>-<random>`.
    ///
    /// # Errors
    /// When the namespace cannot be created.
    pub async fn create(client: &kube::Client, prefix: &str) -> Result<Self> {
        let Cluster::Ready { kubeconfig } = cluster() else {
            bail!("no control plane")
        };
        let suffix: u32 = rand_suffix();
        let name = format!("e2e-{prefix}-{suffix:08x}");
        let ns: Namespace = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "labels": {"gryvia.io/e2e": "true"}}
        }))?;
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &ns)
            .await
            .with_context(|| format!("create namespace {name}"))?;
        Ok(TestNamespace { name, kubeconfig })
    }
}

fn rand_suffix() -> u32 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default(),
    );
    h.finish() as u32
}

/// Runs `cleanup` with a client for the test control plane, on a thread with a runtime of its
/// own: for a guard's `Drop`, which cannot await, and whose test's runtime may be gone (also
/// after a panic). Does nothing without a control plane.
pub fn on_drop<F, Fut>(cleanup: F)
where
    F: FnOnce(kube::Client) -> Fut + Send + 'static,
    Fut: Future<Output = ()>,
{
    if let Cluster::Ready { kubeconfig } = cluster() {
        clean_up(kubeconfig, cleanup);
    }
}

/// A cluster-scoped object a test made: deleted when dropped, also when the test panics.
pub struct ClusterObject {
    delete: Option<Box<dyn FnOnce() + Send>>,
}

impl ClusterObject {
    /// Creates the object of kind `K` described by `body`.
    ///
    /// # Errors
    /// When `body` is not a `K` or the API server refuses it.
    pub async fn create<K>(client: &kube::Client, body: serde_json::Value) -> Result<Self>
    where
        K: kube::Resource<DynamicType = (), Scope = k8s_openapi::ClusterResourceScope>
            + Clone
            + serde::de::DeserializeOwned
            + serde::Serialize
            + std::fmt::Debug
            + Send
            + 'static,
    {
        let obj: K = serde_json::from_value(body).context("decode the object")?;
        let made = Api::<K>::all(client.clone())
            .create(&PostParams::default(), &obj)
            .await
            .context("create the object")?;
        let name = made.meta().name.clone().unwrap_or_default();
        Ok(ClusterObject {
            delete: Some(Box::new(move || {
                on_drop(move |c| async move {
                    let _ = Api::<K>::all(c)
                        .delete(&name, &DeleteParams::default())
                        .await;
                });
            })),
        })
    }
}

impl Drop for ClusterObject {
    fn drop(&mut self) {
        if let Some(delete) = self.delete.take() {
            delete();
        }
    }
}

/// Runs `cleanup` with a client of its own, on a thread with a runtime of its own: `Drop`
/// cannot await, and the test's runtime may be gone (also after a panic).
fn clean_up<F, Fut>(kubeconfig: PathBuf, cleanup: F)
where
    F: FnOnce(kube::Client) -> Fut + Send + 'static,
    Fut: Future<Output = ()>,
{
    let _ = std::thread::spawn(move || {
        let Ok(rt) = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        else {
            return;
        };
        rt.block_on(async {
            if let Ok(client) = client_for(&kubeconfig).await {
                cleanup(client).await;
            }
        });
    })
    .join();
}

impl Drop for TestNamespace {
    fn drop(&mut self) {
        let name = self.name.clone();
        clean_up(self.kubeconfig.clone(), |client| async move {
            let _ = Api::<Namespace>::all(client)
                .delete(&name, &DeleteParams::background())
                .await;
        });
    }
}

/// Polls `check` every 200 ms until it returns `Some`, or fails after `timeout` with `what`.
///
/// # Errors
/// When the timeout passes first.
pub async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(v) = check().await {
            return Ok(v);
        }
        if tokio::time::Instant::now() >= deadline {
            bail!("timed out after {timeout:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Waits until object `name` of `api` exists and satisfies `check` (polled as
/// [`wait_for`] does), and returns it.
///
/// # Panics
/// After `timeout`, naming `what` and showing the object as it is then.
pub async fn wait_object<K>(
    api: &Api<K>,
    name: &str,
    what: &str,
    timeout: Duration,
    check: impl Fn(&K) -> bool,
) -> K
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let check = &check;
    let found = wait_for(&format!("{name}: {what}"), timeout, || {
        let api = api.clone();
        async move { api.get(name).await.ok().filter(|o| check(o)) }
    })
    .await;
    match found {
        Ok(o) => o,
        Err(e) => panic!("{e:#}; now: {:?}", api.get(name).await),
    }
}

/// Label every node of a [`KwokNodes`] group carries, with the group's id as value.
pub const NODE_GROUP_LABEL: &str = "gryvia.io/e2e-group";
/// Taint on every node of a [`KwokNodes`] group, so the scheduler keeps other tests' pods
/// off them (tests bind their pods with `spec.nodeName`).
pub const NODE_GROUP_TAINT: &str = "gryvia.io/e2e-only";

/// Simulated GPU nodes of a test's own (KWOK manages every node of testenv), labelled
/// `gryvia.io/e2e-group=<id>` and deleted on drop, also when the test panics.
#[derive(Debug)]
pub struct KwokNodes {
    /// The group id (the value of [`NODE_GROUP_LABEL`]).
    pub group: String,
    /// Node names, `<group>-0` ..
    pub names: Vec<String>,
    kubeconfig: PathBuf,
}

impl KwokNodes {
    /// Creates `count` nodes with `gpus` NVIDIA GPUs each and waits until they are Ready.
    ///
    /// # Errors
    /// When a node cannot be created or does not become Ready within 60 s.
    pub async fn create(
        client: &kube::Client,
        prefix: &str,
        count: usize,
        gpus: u32,
    ) -> Result<Self> {
        Self::create_with_product(client, prefix, count, gpus, "NVIDIA-H100-80GB-HBM3").await
    }

    /// Like [`KwokNodes::create`], with GPU product label `product` (a product of the test's
    /// own keeps reservations and GPU-type selectors off every other node).
    ///
    /// # Errors
    /// When a node cannot be created or does not become Ready within 60 s.
    pub async fn create_with_product(
        client: &kube::Client,
        prefix: &str,
        count: usize,
        gpus: u32,
        product: &str,
    ) -> Result<Self> {
        Self::create_with_resources(
            client,
            prefix,
            count,
            product,
            gpus,
            &[("nvidia.com/gpu", gpus)],
            &[],
        )
        .await
    }

    /// Nodes whose `gpus` GPUs are shared by time-slicing with `replicas` replicas each, as
    /// the NVIDIA device plugin advertises them with `renameByDefault`: `gpus x replicas` of
    /// `nvidia.com/gpu.shared`, label `nvidia.com/gpu.replicas`, no `nvidia.com/gpu`.
    ///
    /// # Errors
    /// As [`KwokNodes::create`].
    pub async fn create_time_sliced(
        client: &kube::Client,
        prefix: &str,
        count: usize,
        gpus: u32,
        replicas: u32,
        product: &str,
    ) -> Result<Self> {
        let replicas_label = replicas.to_string();
        Self::create_with_resources(
            client,
            prefix,
            count,
            product,
            gpus,
            &[("nvidia.com/gpu.shared", gpus * replicas)],
            &[("nvidia.com/gpu.replicas", replicas_label.as_str())],
        )
        .await
    }

    /// Nodes of GPU product `product` with `gpus` GPUs (label `nvidia.com/gpu.count`)
    /// advertising `resources` (besides cpu, memory and pods), with `labels` added.
    ///
    /// # Errors
    /// As [`KwokNodes::create`].
    pub async fn create_with_resources(
        client: &kube::Client,
        prefix: &str,
        count: usize,
        product: &str,
        gpus: u32,
        resources: &[(&str, u32)],
        labels: &[(&str, &str)],
    ) -> Result<Self> {
        use k8s_openapi::api::core::v1::Node;
        let Cluster::Ready { kubeconfig } = cluster() else {
            bail!("no control plane")
        };
        let group = format!("{prefix}-{:06x}", rand_suffix() & 0xff_ffff);
        let api: Api<Node> = Api::all(client.clone());
        let mut nodes = KwokNodes {
            group: group.clone(),
            names: Vec::new(),
            kubeconfig,
        };
        let mut alloc = serde_json::json!({"cpu": "64", "memory": "512Gi", "pods": "110"});
        for (r, n) in resources {
            alloc[*r] = n.to_string().into();
        }
        for i in 0..count {
            let name = format!("{group}-{i}");
            let mut node_labels = serde_json::json!({
                "type": "kwok",
                NODE_GROUP_LABEL: group,
                "kubernetes.io/hostname": name,
                "nvidia.com/gpu.present": "true",
                "nvidia.com/gpu.product": product,
                "nvidia.com/gpu.count": gpus.to_string(),
            });
            for (k, v) in labels {
                node_labels[*k] = (*v).into();
            }
            let node: Node = serde_json::from_value(serde_json::json!({
                "metadata": {
                    "name": name,
                    "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
                    "labels": node_labels,
                },
                "spec": {"taints": [{"key": NODE_GROUP_TAINT, "value": group, "effect": "NoSchedule"}]},
                "status": {"capacity": alloc, "allocatable": alloc},
            }))?;
            api.create(&PostParams::default(), &node)
                .await
                .with_context(|| format!("create node {name}"))?;
            nodes.names.push(name);
        }
        for name in &nodes.names {
            wait_for(
                &format!("node {name} Ready"),
                Duration::from_secs(60),
                || {
                    let api = api.clone();
                    async move {
                        let n = api.get(name).await.ok()?;
                        n.status?
                            .conditions?
                            .iter()
                            .any(|c| c.type_ == "Ready" && c.status == "True")
                            .then_some(())
                    }
                },
            )
            .await?;
        }
        Ok(nodes)
    }

    /// The label selector of the group, `gryvia.io/e2e-group=<id>`.
    pub fn selector(&self) -> String {
        format!("{NODE_GROUP_LABEL}={}", self.group)
    }
}

impl Drop for KwokNodes {
    fn drop(&mut self) {
        let names = self.names.clone();
        clean_up(self.kubeconfig.clone(), |client| async move {
            let api: Api<k8s_openapi::api::core::v1::Node> = Api::all(client);
            for n in names {
                let _ = api.delete(&n, &DeleteParams::background()).await;
            }
        });
    }
}

/// Creates a plain pod `name` labelled `app=<app>` bound to `node` with `spec.nodeName`
/// (tolerating every taint). KWOK runs it until it is deleted.
///
/// # Errors
/// When the pod cannot be created.
pub async fn bind_pod(
    client: &kube::Client,
    ns: &str,
    name: &str,
    node: &str,
    app: &str,
) -> Result<()> {
    let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "labels": {"app": app}},
        "spec": {
            "nodeName": node,
            "tolerations": [{"operator": "Exists"}],
            "containers": [{"name": "c", "image": "registry.invalid/idle:1"}]
        }
    }))?;
    Api::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &pod)
        .await
        .with_context(|| format!("create pod {ns}/{name}"))?;
    Ok(())
}

/// True when pod `ns/name` is gone or on its way out (deletion timestamp set).
///
/// # Errors
/// When the read fails.
pub async fn pod_gone(client: &kube::Client, ns: &str, name: &str) -> Result<bool> {
    Ok(
        Api::<k8s_openapi::api::core::v1::Pod>::namespaced(client.clone(), ns)
            .get_opt(name)
            .await?
            .is_none_or(|p| p.metadata.deletion_timestamp.is_some()),
    )
}

/// Creates a PodDisruptionBudget `name` with `minAvailable: 1` over the pods `app=<app>`: with
/// one such pod, it allows no disruption.
///
/// # Errors
/// When the budget cannot be created.
pub async fn create_pdb(client: &kube::Client, ns: &str, name: &str, app: &str) -> Result<()> {
    let pdb: k8s_openapi::api::policy::v1::PodDisruptionBudget =
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": app}}}
        }))?;
    Api::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &pdb)
        .await
        .with_context(|| format!("create pod disruption budget {ns}/{name}"))?;
    Ok(())
}

/// A ServiceAccount in a test namespace bound to a ClusterRole of `deploy/`, with a kubeconfig
/// that authenticates as it (a TokenRequest token): run a component under exactly the RBAC its
/// manifests grant. The binding is deleted on drop.
#[derive(Debug)]
pub struct ServiceAccountAccess {
    /// A kubeconfig for the service account.
    pub kubeconfig: PathBuf,
    binding: String,
    admin_kubeconfig: PathBuf,
}

impl ServiceAccountAccess {
    /// Applies the ClusterRole `role` found in the YAML file `manifest` (relative to the
    /// repository root), creates ServiceAccount `name` in `namespace` and binds it to the role.
    ///
    /// # Errors
    /// When the manifest has no such ClusterRole or an API call fails.
    pub async fn create(
        client: &kube::Client,
        manifest: &str,
        role: &str,
        namespace: &str,
        name: &str,
    ) -> Result<Self> {
        use k8s_openapi::api::authentication::v1::TokenRequest;
        use k8s_openapi::api::core::v1::ServiceAccount;
        use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
        use kube::api::{Patch, PatchParams};
        let Cluster::Ready { kubeconfig } = cluster() else {
            bail!("no control plane")
        };
        let text = std::fs::read_to_string(repo_root().join(manifest))
            .with_context(|| format!("read {manifest}"))?;
        let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(&text)
            .map_err(|e| anyhow::anyhow!("parse {manifest}: {e}"))?;
        let doc = docs
            .into_iter()
            .find(|d| d["kind"] == "ClusterRole" && d["metadata"]["name"] == role)
            .with_context(|| format!("{manifest} has no ClusterRole {role}"))?;
        let cr: ClusterRole = serde_json::from_value(doc)?;
        let pp = PatchParams::apply("gryvia-e2e").force();
        Api::<ClusterRole>::all(client.clone())
            .patch(role, &pp, &Patch::Apply(&cr))
            .await
            .with_context(|| format!("apply ClusterRole {role}"))?;
        let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), namespace);
        let sa: ServiceAccount =
            serde_json::from_value(serde_json::json!({"metadata": {"name": name}}))?;
        sas.create(&PostParams::default(), &sa)
            .await
            .with_context(|| format!("create ServiceAccount {namespace}/{name}"))?;
        let binding = format!("e2e-{namespace}-{name}");
        let crb: ClusterRoleBinding = serde_json::from_value(serde_json::json!({
            "metadata": {"name": binding, "labels": {"gryvia.io/e2e": "true"}},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}]
        }))?;
        Api::<ClusterRoleBinding>::all(client.clone())
            .create(&PostParams::default(), &crb)
            .await
            .with_context(|| format!("create ClusterRoleBinding {binding}"))?;
        authorized(client, &cr, namespace, name).await?;
        let tr: TokenRequest = serde_json::from_value(serde_json::json!({
            "spec": {"audiences": [], "expirationSeconds": 3600}
        }))?;
        let token = sas
            .create_token_request(name, &PostParams::default(), &tr)
            .await
            .with_context(|| format!("request a token for {namespace}/{name}"))?
            .status
            .context("TokenRequest without status")?
            .token;
        let mut kc = Kubeconfig::read_from(&kubeconfig)?;
        for auth in &mut kc.auth_infos {
            if let Some(info) = auth.auth_info.as_mut() {
                *info = serde_json::from_value(serde_json::json!({ "token": token }))?;
            }
        }
        let path = std::env::temp_dir().join(format!("gryvia-e2e-{namespace}-{name}.kubeconfig"));
        std::fs::write(
            &path,
            serde_saphyr::to_string(&kc).map_err(|e| anyhow::anyhow!("{e}"))?,
        )?;
        Ok(ServiceAccountAccess {
            kubeconfig: path,
            binding,
            admin_kubeconfig: kubeconfig,
        })
    }

    /// A client authenticated as the service account.
    ///
    /// # Errors
    /// When the kubeconfig cannot be loaded.
    pub async fn client(&self) -> Result<kube::Client> {
        client_for(&self.kubeconfig).await
    }
}

/// Waits until the API server's authorizer grants `namespace/name` the first resource rule of `role`: a
/// new binding reaches the authorizer's cache a moment after it is stored, and a component
/// started before that sees 403s.
async fn authorized(
    client: &kube::Client,
    role: &k8s_openapi::api::rbac::v1::ClusterRole,
    namespace: &str,
    name: &str,
) -> Result<()> {
    use k8s_openapi::api::authorization::v1::SubjectAccessReview;
    let first = |v: &Option<Vec<String>>| v.as_ref().and_then(|v| v.first()).cloned();
    // A rule on resources (not on non-resource URLs) of the role.
    let Some(rule) = role
        .rules
        .iter()
        .flatten()
        .find(|r| first(&r.resources).is_some())
    else {
        return Ok(());
    };
    let review: SubjectAccessReview = serde_json::from_value(serde_json::json!({
        "spec": {
            "user": format!("system:serviceaccount:{namespace}:{name}"),
            "groups": ["system:serviceaccounts", format!("system:serviceaccounts:{namespace}")],
            "resourceAttributes": {
                "group": first(&rule.api_groups).unwrap_or_default(),
                "resource": first(&rule.resources).unwrap_or_default(),
                "verb": rule.verbs.first().cloned().unwrap_or_default(),
                "namespace": namespace,
                "name": first(&rule.resource_names).unwrap_or_default(),
            }
        }
    }))?;
    let reviews = Api::<SubjectAccessReview>::all(client.clone());
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let answer = reviews
            .create(&PostParams::default(), &review)
            .await
            .context("create SubjectAccessReview")?;
        if answer.status.is_some_and(|s| s.allowed) {
            return Ok(());
        }
        if std::time::Instant::now() > deadline {
            bail!(
                "{namespace}/{name} is still not granted {role:?}'s first resource rule after 30s",
                role = role.metadata.name
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

impl Drop for ServiceAccountAccess {
    fn drop(&mut self) {
        let binding = self.binding.clone();
        let _ = std::fs::remove_file(&self.kubeconfig);
        clean_up(self.admin_kubeconfig.clone(), |client| async move {
            let _ = Api::<k8s_openapi::api::rbac::v1::ClusterRoleBinding>::all(client)
                .delete(&binding, &DeleteParams::background())
                .await;
        });
    }
}

/// The state directory of the test's control plane (testenv's, where its kubeconfig is:
/// `logs/`, `pids/`, the recorded command lines).
///
/// # Errors
/// When there is no control plane.
pub fn testenv_dir() -> Result<PathBuf> {
    let Cluster::Ready { kubeconfig } = cluster() else {
        bail!("no control plane")
    };
    Ok(kubeconfig
        .parent()
        .context("the kubeconfig has no directory")?
        .to_path_buf())
}

/// Kills `component` of the test's control plane (SIGKILL) and starts it again after `down`
/// seconds with `testenv/restart` (`etcd`, `kube-apiserver` or `kwok`), returning once it is
/// ready; what the script said goes to stderr.
///
/// # Errors
/// When there is no control plane or the restart fails (its output in the error).
pub async fn testenv_restart(component: &str, down: u64) -> Result<()> {
    let out = tokio::process::Command::new(repo_root().join("testenv/restart"))
        .args([component, "--down", &down.to_string()])
        .env("GRYVIA_TESTENV_DIR", testenv_dir()?)
        .output()
        .await
        .with_context(|| format!("run testenv/restart {component}"))?;
    let said = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        bail!("testenv/restart {component}: {said}");
    }
    eprint!("{said}");
    Ok(())
}

/// How many requests of `verb` on `resource` (`pods/eviction` for a subresource) the API
/// server answered with `code`, per object name, in namespace `namespace` (`None`: any, or
/// cluster-scoped), as testenv's audit log records them: `<state>/logs/audit*.log`, which
/// `testenv/up` writes (every resource request at Metadata level), rotated files first. A
/// side effect counted where it happens, whoever made it: evictions granted per pod,
/// PriorityClasses created per name.
///
/// # Errors
/// When there is no control plane, or no audit log beside its kubeconfig.
pub fn audit_count(
    verb: &str,
    resource: &str,
    namespace: Option<&str>,
    code: u16,
) -> Result<std::collections::BTreeMap<String, usize>> {
    use std::io::BufRead;
    let dir = testenv_dir()?.join("logs");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .with_context(|| format!("read {}", dir.display()))?
        .filter_map(|e| Some(e.ok()?.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("audit") && n.ends_with(".log"))
        })
        .collect();
    // Rotated files (audit-<time>.log) sort before the current one (audit.log).
    files.sort();
    if files.is_empty() {
        bail!(
            "no audit log in {}: testenv/up of this tree writes one",
            dir.display()
        );
    }
    let (base, sub) = resource.split_once('/').unwrap_or((resource, ""));
    let verb_field = format!("\"verb\":\"{verb}\"");
    let mut counts = std::collections::BTreeMap::new();
    for file in files {
        let reader = std::io::BufReader::new(
            std::fs::File::open(&file).with_context(|| format!("open {}", file.display()))?,
        );
        for line in reader.lines() {
            let line = line.with_context(|| format!("read {}", file.display()))?;
            // Most lines are other requests: parse only those that can match.
            if !line.contains(&verb_field) || !line.contains(base) {
                continue;
            }
            let Ok(e) = serde_json::from_str::<serde_json::Value>(&line) else {
                continue; // a line cut by a crash of the API server (the restart tests)
            };
            let r = &e["objectRef"];
            let matches = e["stage"] == "ResponseComplete"
                && r["resource"] == base
                && r["subresource"].as_str().unwrap_or_default() == sub
                && namespace.is_none_or(|ns| r["namespace"] == ns)
                && e["responseStatus"]["code"] == code;
            if matches {
                let name = r["name"].as_str().unwrap_or_default().to_owned();
                *counts.entry(name).or_insert(0) += 1;
            }
        }
    }
    Ok(counts)
}

/// Where E2E tests record the secret values they hand to the system under test, one
/// `what<TAB>value` line each, for `scripts/check-logs-for-secrets` to grep every E2E log for
/// (the value and its base64, as a Secret's `data` holds it).
pub const SECRETS_RECORD: &str = "target/e2e-secrets.tsv";

/// Records `value` (a signing key, a token, an API key's secret) as one that must never
/// appear in a log; `what` names it in the check's report. Best effort: a record that cannot
/// be written fails the later check (too few secrets), never this test.
pub fn record_secret(what: &str, value: &str) {
    use std::io::Write as _;
    let path = repo_root().join(SECRETS_RECORD);
    let line = format!("{}\t{}\n", what.replace(['\t', '\n'], " "), value);
    // One write of one short line under O_APPEND: tests running at once do not interleave.
    let _ = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .and_then(|mut f| f.write_all(line.as_bytes()));
}

/// A binary under test started against the test control plane (`KUBECONFIG` set), its
/// standard error in `target/e2e-logs/<log_name>.log`; killed (SIGKILL) on drop, and when
/// dropped by a failing test, the end of its log and whether it had exited are printed with
/// the failure.
#[derive(Debug)]
pub struct Process {
    child: std::process::Child,
    log: PathBuf,
}

impl Process {
    /// Starts `binary` (from `env!("CARGO_BIN_EXE_...")`) with `args`, authenticated with
    /// `kubeconfig` (the admin one of testenv when `None`).
    ///
    /// # Errors
    /// When there is no control plane or the binary cannot be started.
    pub fn start(
        binary: &str,
        args: &[&str],
        kubeconfig: Option<&Path>,
        log_name: &str,
    ) -> Result<Self> {
        let admin = match cluster() {
            Cluster::Ready { kubeconfig } => kubeconfig,
            Cluster::Skip(r) => bail!("no control plane: {r}"),
        };
        let dir = repo_root().join("target/e2e-logs");
        std::fs::create_dir_all(&dir).with_context(|| format!("create {}", dir.display()))?;
        let log_path = dir.join(format!("{log_name}.log"));
        let log = std::fs::File::create(&log_path)
            .with_context(|| format!("create the log of {log_name}"))?;
        let child = Command::new(binary)
            .args(args)
            .env("KUBECONFIG", kubeconfig.unwrap_or(&admin))
            .env(
                "RUST_LOG",
                std::env::var("RUST_LOG").unwrap_or_else(|_| "info,kube=warn".to_owned()),
            )
            .stdout(std::process::Stdio::null())
            .stderr(log)
            .spawn()
            .with_context(|| format!("start {binary}"))?;
        Ok(Process {
            child,
            log: log_path,
        })
    }

    /// Starts a Gryvia operator `binary` the way the e2e tests run it: its `/metrics` on a free
    /// loopback port (returned), its Lease in `lease_namespace` with a short lease (4 s, renewed
    /// 1 s before expiry, so a standby takes over quickly), then `extra` arguments.
    ///
    /// # Errors
    /// As [`Process::start`].
    pub fn operator(
        binary: &str,
        lease_namespace: &str,
        extra: &[&str],
        kubeconfig: Option<&Path>,
        log_name: &str,
    ) -> Result<(Self, u16)> {
        let port = free_port();
        let addr = format!("127.0.0.1:{port}");
        let mut args = vec![
            "--metrics-addr",
            addr.as_str(),
            "--lease-namespace",
            lease_namespace,
            "--lease-duration",
            "4",
            "--lease-grace",
            "1",
        ];
        args.extend_from_slice(extra);
        Ok((Self::start(binary, &args, kubeconfig, log_name)?, port))
    }

    /// Stops the process now (SIGKILL).
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// How many lines of a process's log a failing test prints.
const LOG_TAIL_LINES: usize = 40;

impl Drop for Process {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let state = match self.child.try_wait() {
                Ok(Some(status)) => format!("exited: {status}"),
                Ok(None) => "still running".to_owned(),
                Err(e) => format!("state unknown: {e}"),
            };
            let text = std::fs::read_to_string(&self.log).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            eprintln!(
                "--- {} ({state}), its last {} lines ---",
                self.log.display(),
                LOG_TAIL_LINES.min(lines.len())
            );
            for line in &lines[lines.len().saturating_sub(LOG_TAIL_LINES)..] {
                eprintln!("{line}");
            }
        }
        self.kill();
    }
}

/// Sends every object of the YAML files (paths relative to the repository root) to the API
/// server as a server-side dry-run create, in the namespace `gryvia-system` (created when
/// missing), and returns their kinds in order.
///
/// # Errors
/// The first object the API server rejects (an object that already exists counts as
/// accepted), naming the file and the kind.
pub async fn dry_run_manifests(client: &kube::Client, files: &[&str]) -> Result<Vec<String>> {
    use kube::api::{DynamicObject, GroupVersionKind};
    let ns: Namespace =
        serde_json::from_value(serde_json::json!({"metadata": {"name": "gryvia-system"}}))?;
    let _ = Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await;
    let dry = PostParams {
        dry_run: true,
        ..Default::default()
    };
    let mut kinds = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(repo_root().join(file))
            .with_context(|| format!("read {file}"))?;
        let docs: Vec<serde_json::Value> =
            serde_saphyr::from_multiple(&text).map_err(|e| anyhow::anyhow!("parse {file}: {e}"))?;
        for doc in docs.into_iter().filter(|d| !d.is_null()) {
            let kind = doc["kind"].as_str().unwrap_or_default().to_owned();
            let api_version = doc["apiVersion"].as_str().unwrap_or_default();
            let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
            let gvk = GroupVersionKind::gvk(group, version, &kind);
            let (ar, caps) = kube::discovery::pinned_kind(client, &gvk)
                .await
                .with_context(|| format!("{file}: discover {api_version} {kind}"))?;
            let api: Api<DynamicObject> = match doc["metadata"]["namespace"].as_str() {
                Some(ns) if caps.scope == kube::discovery::Scope::Namespaced => {
                    Api::namespaced_with(client.clone(), ns, &ar)
                }
                _ => Api::all_with(client.clone(), &ar),
            };
            let obj: DynamicObject = serde_json::from_value(doc)?;
            match api.create(&dry, &obj).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 409 => {}
                Err(e) => bail!("{file}: {kind} rejected: {e}"),
            }
            kinds.push(kind);
        }
    }
    Ok(kinds)
}
