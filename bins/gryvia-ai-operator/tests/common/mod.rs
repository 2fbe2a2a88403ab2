//! What the ai-operator's end-to-end tests share: the operator's RBAC and the GPU jobs they
//! submit. Each test file uses part of it (`mod common;`).

pub mod receivers;

use gryvia_testsupport::{Cluster, NODE_GROUP_TAINT, ServiceAccountAccess};
use serde_json::{Value, json};

/// Access for the operator under exactly the RBAC of `deploy/ai-operator`, its ServiceAccount
/// in `lease_namespace` (panics when it cannot be made).
pub async fn operator_access(client: &kube::Client, lease_namespace: &str) -> ServiceAccountAccess {
    ServiceAccountAccess::create(
        client,
        "deploy/ai-operator/rbac.yaml",
        "gryvia-ai-operator",
        lease_namespace,
        "ai-operator",
    )
    .await
    .unwrap_or_else(|e| panic!("the ai-operator's ServiceAccount and RBAC: {e:#}"))
}

/// A GryviaAIJob `name` of `workers` workers of `gpus` GPUs each on GPU product `product`
/// (tolerating the taint of the tests' own nodes), whose pods run 10 minutes (until deleted),
/// with `extra` merged into its spec.
pub fn gpu_job(name: &str, gpus: i32, workers: i32, product: &str, extra: &Value) -> Value {
    let mut spec = json!({
        "image": "registry.local/train:1", "gpus": gpus, "replicas": workers,
        "gpuType": product,
        "tolerations": [{"key": NODE_GROUP_TAINT, "operator": "Exists", "effect": "NoSchedule"}],
        "podAnnotations": {"gryvia.io/testenv-duration": "600s"},
    });
    if let (Some(s), Some(e)) = (spec.as_object_mut(), extra.as_object()) {
        for (k, v) in e {
            s.insert(k.clone(), v.clone());
        }
    }
    json!({"metadata": {"name": name}, "spec": spec})
}

/// The binary `name` of package `package` that cargo built beside the ai-operator (`cargo test
/// --workspace` builds every binary; alone: `cargo build -p <package>`).
pub fn sibling_binary(name: &str, package: &str) -> std::path::PathBuf {
    let path =
        std::path::PathBuf::from(env!("CARGO_BIN_EXE_gryvia-ai-operator")).with_file_name(name);
    assert!(
        path.exists(),
        "{} is missing: run `cargo build -p {package}` first (`cargo test --workspace` builds it)",
        path.display()
    );
    path
}

/// The `gryvia` CLI cargo built beside the ai-operator.
pub fn cli() -> std::path::PathBuf {
    sibling_binary("gryvia", "gryvia-cli")
}

/// Runs the CLI with `args` against the test's control plane (its admin kubeconfig): whether
/// it succeeded, its standard output and its standard error.
pub fn gryvia(args: &[&str]) -> (bool, String, String) {
    let Cluster::Ready { kubeconfig } = gryvia_testsupport::cluster() else {
        panic!("the test runs against a control plane")
    };
    let out = std::process::Command::new(cli())
        .args(args)
        .env("KUBECONFIG", &kubeconfig)
        .output()
        .unwrap_or_else(|e| panic!("run {}: {e}", cli().display()));
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Removes a test's admission webhook configurations (named by `--webhook-name`) when dropped.
pub struct WebhookCleanup(pub String);

impl Drop for WebhookCleanup {
    fn drop(&mut self) {
        let name = self.0.clone();
        gryvia_testsupport::on_drop(move |c| async move {
            let _ = gryvia_client::admission::unregister(&c, &name).await;
        });
    }
}
