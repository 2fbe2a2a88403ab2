//! What the gateway's e2e tests share: the RBAC of deploy/ applied, tenants with their
//! namespaces and member RoleBindings, the gateway binary started, and HTTP calls to it.

#![allow(dead_code, reason = "each test file uses part of it")]
#![expect(
    clippy::unwrap_used,
    reason = "test helpers: a failure is the test failing"
)]

use std::path::Path;
use std::time::Duration;

use gryvia_reconcile::tenancy::{MEMBER_ROLES, namespace_of, tenant_role_binding};
use gryvia_testsupport::{Process, ServiceAccountAccess, free_port, repo_root, wait_for};
use gryvia_types::GryviaTenant;
use http_body_util::{BodyExt as _, Full};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

/// Server-side applies every RBAC object of a rendered manifest, namespaced ones into
/// `namespace`.
pub async fn apply_rbac(client: &kube::Client, manifest: &str, namespace: &str) {
    let text = std::fs::read_to_string(repo_root().join(manifest)).unwrap();
    let docs: Vec<Value> = serde_saphyr::from_multiple(&text).unwrap();
    let pp = PatchParams::apply("gryvia-e2e").force();
    for mut d in docs.into_iter().filter(|d| d.is_object()) {
        let name = d["metadata"]["name"].as_str().unwrap().to_owned();
        match d["kind"].as_str().unwrap() {
            "ClusterRole" => {
                let r: ClusterRole = serde_json::from_value(d).unwrap();
                Api::<ClusterRole>::all(client.clone())
                    .patch(&name, &pp, &Patch::Apply(&r))
                    .await
                    .unwrap();
            }
            "ClusterRoleBinding" => {
                let r: ClusterRoleBinding = serde_json::from_value(d).unwrap();
                Api::<ClusterRoleBinding>::all(client.clone())
                    .patch(&name, &pp, &Patch::Apply(&r))
                    .await
                    .unwrap();
            }
            "Role" => {
                d["metadata"]["namespace"] = json!(namespace);
                let r: Role = serde_json::from_value(d).unwrap();
                Api::<Role>::namespaced(client.clone(), namespace)
                    .patch(&name, &pp, &Patch::Apply(&r))
                    .await
                    .unwrap();
            }
            "RoleBinding" => {
                d["metadata"]["namespace"] = json!(namespace);
                for s in d["subjects"].as_array_mut().unwrap() {
                    if s["kind"] == "ServiceAccount" {
                        s["namespace"] = json!(namespace);
                    }
                }
                let r: RoleBinding = serde_json::from_value(d).unwrap();
                Api::<RoleBinding>::namespaced(client.clone(), namespace)
                    .patch(&name, &pp, &Patch::Apply(&r))
                    .await
                    .unwrap();
            }
            _ => {}
        }
    }
}

/// A tenant of the test: the GryviaTenant, its namespace and its members' RoleBindings as the
/// quota-operator's `--tenant-rbac` makes them (the same pure function); deleted on drop.
pub struct Tenant {
    pub name: String,
    pub namespace: String,
}

impl Tenant {
    pub async fn create(client: &kube::Client, name: &str, members: Value) -> Self {
        let t: GryviaTenant = serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"displayName": format!("Tenant {name}"), "members": members,
                     "quotas": {"concurrentGPUs": 16}}
        }))
        .unwrap();
        let created = Api::<GryviaTenant>::all(client.clone())
            .create(&PostParams::default(), &t)
            .await
            .unwrap();
        let namespace = namespace_of(name);
        let ns: Namespace =
            serde_json::from_value(json!({"metadata": {"name": namespace}})).unwrap();
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &ns)
            .await
            .unwrap();
        for (role, cluster_role) in MEMBER_ROLES {
            if let Some(rb) = tenant_role_binding(&created, role, cluster_role) {
                Api::<RoleBinding>::namespaced(client.clone(), &namespace)
                    .create(&PostParams::default(), &rb)
                    .await
                    .unwrap();
            }
        }
        Self {
            name: name.to_owned(),
            namespace,
        }
    }
}

impl Drop for Tenant {
    fn drop(&mut self) {
        let (name, ns) = (self.name.clone(), self.namespace.clone());
        gryvia_testsupport::on_drop(move |client| async move {
            let _ = Api::<GryviaTenant>::all(client.clone())
                .delete(&name, &DeleteParams::background())
                .await;
            let _ = Api::<Namespace>::all(client)
                .delete(&ns, &DeleteParams::background())
                .await;
        });
    }
}

/// The gateway's service account `gryvia-gateway` in `keys_namespace`: the chart's ClusterRole,
/// and every RBAC object of deploy/gateway/rbac.yaml (its Role for API keys, bound to it, in
/// `keys_namespace`).
pub async fn gateway_access(client: &kube::Client, keys_namespace: &str) -> ServiceAccountAccess {
    let access = ServiceAccountAccess::create(
        client,
        "deploy/gateway/rbac.yaml",
        "gryvia-gateway",
        keys_namespace,
        "gryvia-gateway",
    )
    .await
    .unwrap();
    apply_rbac(client, "deploy/gateway/rbac.yaml", keys_namespace).await;
    access
}

/// Starts the gateway binary on a free loopback port with `args`, as the service account of
/// `kubeconfig`, and waits until it is ready.
pub async fn start_gateway(args: &[&str], kubeconfig: &Path, log: &str) -> (Process, u16) {
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let mut all = vec!["--listen", listen.as_str()];
    all.extend_from_slice(args);
    let p = Process::start(
        env!("CARGO_BIN_EXE_gryvia-gateway"),
        &all,
        Some(kubeconfig),
        log,
    )
    .unwrap();
    wait_for(
        "the gateway to be ready",
        Duration::from_secs(60),
        || async move {
            gryvia_testsupport::http_get(port, "/readyz")
                .await
                .filter(|(code, _)| *code == 200)
        },
    )
    .await
    .unwrap();
    (p, port)
}

/// One HTTP request to the gateway: its status and JSON body (`Null` when there is none).
pub async fn call(
    port: u16,
    method: &str,
    path: &str,
    bearer: Option<&str>,
    body: Option<&Value>,
) -> (u16, Value) {
    let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let mut req = http::Request::builder()
        .method(method)
        .uri(format!("http://127.0.0.1:{port}{path}"))
        .header("accept", "application/json");
    if let Some(b) = bearer {
        req = req.header("authorization", format!("Bearer {b}"));
    }
    let bytes = match body {
        Some(b) => {
            req = req.header("content-type", "application/json");
            serde_json::to_vec(b).unwrap()
        }
        None => Vec::new(),
    };
    let resp = client
        .request(req.body(Full::new(Bytes::from(bytes))).unwrap())
        .await
        .unwrap();
    let status = resp.status().as_u16();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    (status, serde_json::from_slice(&body).unwrap_or(Value::Null))
}

/// A counter of the gateway's /metrics (0 when absent).
pub async fn counter(port: u16, name: &str, label: &str) -> f64 {
    let (_, text) = gryvia_testsupport::http_get(port, "/metrics")
        .await
        .unwrap();
    text.lines()
        .find(|l| l.starts_with(name) && l.contains(label))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

/// A GryviaAIJob body.
pub fn job(name: &str, gpus: i64) -> Value {
    json!({
        "metadata": {"name": name},
        "spec": {"image": "registry.example/train:1", "gpus": gpus, "replicas": 1,
                 "command": ["python", "train.py"]}
    })
}
