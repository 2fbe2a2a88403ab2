//! What both network-operator E2E tests do: run the operator's and the collector's service
//! accounts in a test namespace, and write a node's GryviaFlowAggregate window as the collector
//! writes it.

#![expect(clippy::unwrap_used, reason = "test helpers panic on failure")]

use gryvia_testsupport::ServiceAccountAccess;
use gryvia_types::GryviaFlowAggregate;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};

/// The network-operator's and the collector's access in `ns` (under their ClusterRoles in
/// `deploy/`), the collector's named `collector-<suffix>`.
pub async fn accesses(
    client: &kube::Client,
    ns: &str,
    suffix: &str,
) -> (ServiceAccountAccess, ServiceAccountAccess) {
    let operator = ServiceAccountAccess::create(
        client,
        "deploy/network-operator/rbac.yaml",
        "gryvia-network-operator",
        ns,
        "network-operator",
    )
    .await
    .unwrap();
    let collector = ServiceAccountAccess::create(
        client,
        "deploy/collector/rbac.yaml",
        "gryvia-collector",
        ns,
        &format!("collector-{suffix}"),
    )
    .await
    .unwrap();
    (operator, collector)
}

/// Writes `node`'s aggregate as the collector does (the object, then its status by server-side
/// apply): the 10 s window ending `end` with `flows`.
pub async fn write_window(client: &kube::Client, node: &str, end: jiff::Timestamp, flows: Value) {
    let api: Api<GryviaFlowAggregate> = Api::all(client.clone());
    let params = PatchParams::apply("gryvia-collector").force();
    api.patch(
        node,
        &params,
        &Patch::Apply(
            json!({"apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaFlowAggregate",
                   "metadata": {"name": node}, "spec": {"nodeName": node}}),
        ),
    )
    .await
    .unwrap();
    let start = end - jiff::SignedDuration::from_secs(10);
    let count = flows.as_array().map_or(0, Vec::len);
    api.patch_status(
        node,
        &params,
        &Patch::Apply(
            json!({"apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaFlowAggregate",
            "metadata": {"name": node},
            "status": {"windowStart": start.to_string(), "windowEnd": end.to_string(),
                       "flowCount": count, "flows": flows}}),
        ),
    )
    .await
    .unwrap();
}
