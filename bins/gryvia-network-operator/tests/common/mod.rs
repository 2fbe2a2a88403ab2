//! What the network-operator E2E tests share: run the operator's and the collector's service
//! accounts in a test namespace, and write a node's GryviaFlowAggregate window as the collector
//! writes it, and pods with an address.

#![expect(clippy::unwrap_used, reason = "test helpers panic on failure")]
#![allow(dead_code, reason = "each test binary uses a part of it")]

use std::time::Duration;

use gryvia_testsupport::{Process, ServiceAccountAccess, wait_for};
use gryvia_types::GryviaFlowAggregate;
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::api::{Api, Patch, PatchParams, PostParams};
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

/// A flow record as the collector writes it (one retransmit).
pub fn flow(src: (&str, i32), dst: (&str, i32), tx: i64, rx: i64, pod: &str) -> Value {
    json!({"srcIp": src.0, "srcPort": src.1, "dstIp": dst.0, "dstPort": dst.1, "protocol": "TCP",
           "txBytes": tx, "rxBytes": rx, "retransmits": 1, "pod": pod})
}

/// A pod on `node` (KWOK gives it an address).
pub async fn pod_ip(
    client: &kube::Client,
    ns: &str,
    name: &str,
    node: &str,
    labels: Value,
) -> String {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let pod = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": labels},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "registry.local/x:1"}]}
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    wait_for("the pod's address", Duration::from_secs(60), || async {
        pods.get(name).await.ok()?.status?.pod_ip
    })
    .await
    .unwrap()
}

/// A Service `store` in `ns` in front of the pods labelled `app: store` (port 80 to 9000): its
/// cluster IP.
pub async fn store_service(client: &kube::Client, ns: &str) -> String {
    let svc: Service = serde_json::from_value(json!({
        "metadata": {"name": "store"},
        "spec": {"selector": {"app": "store"}, "ports": [{"port": 80, "targetPort": 9000}]}
    }))
    .unwrap();
    let svc = Api::<Service>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &svc)
        .await
        .unwrap();
    svc.spec.unwrap().cluster_ip.unwrap()
}

/// The network-operator binary, running under `access` (its ClusterRole) with its lease in
/// `ns`, logging to `target/e2e-logs/<log>.log`.
pub fn operator(access: &ServiceAccountAccess, ns: &str, log: &str) -> Process {
    operator_with(access, ns, log, &[])
}

/// [`operator`] with more flags.
pub fn operator_with(access: &ServiceAccountAccess, ns: &str, log: &str, args: &[&str]) -> Process {
    Process::operator(
        env!("CARGO_BIN_EXE_gryvia-network-operator"),
        ns,
        args,
        Some(&access.kubeconfig),
        log,
    )
    .unwrap()
    .0
}

/// Whether this process runs as root; without, the test named `test` is skipped (it prints
/// why), unless `GRYVIA_EBPF=1` demands it, which fails.
pub fn root(test: &str) -> bool {
    let uid = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|l| l.split_whitespace().nth(1).map(str::to_owned))
        })
        .unwrap_or_default();
    if uid == "0" {
        return true;
    }
    let demanded = std::env::var("GRYVIA_EBPF").is_ok_and(|v| v == "1" || v == "true");
    assert!(
        !demanded,
        "GRYVIA_EBPF=1 but not root: the collector needs root"
    );
    eprintln!("skipping {test}: not root");
    false
}

/// A binary built beside the network-operator (`gryvia-collector`, `gryvia-traffic`).
pub fn sibling(name: &str) -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_BIN_EXE_gryvia-network-operator")).with_file_name(name)
}
