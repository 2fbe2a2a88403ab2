//! What the ai-operator's end-to-end tests share: the operator's RBAC and the GPU jobs they
//! submit. Each test file uses part of it (`mod common;`).

pub mod receivers;

use gryvia_testsupport::{NODE_GROUP_TAINT, ServiceAccountAccess};
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
