//! What the network-operator E2E tests share: run the operator's and the collector's service
//! accounts in a test namespace, and write a node's GryviaFlowAggregate window as the collector
//! writes it, and pods with an address.

#![expect(clippy::unwrap_used, reason = "test helpers panic on failure")]
#![allow(dead_code, reason = "each test binary uses a part of it")]

use std::time::Duration;

use gryvia_testsupport::{KwokNodes, Process, ServiceAccountAccess, TestNamespace, wait_for};
use gryvia_types::{GryviaAutoPolicy, GryviaFabricSignal, GryviaFlowAggregate};
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
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

/// What a test of the collector binary starts with (fields in the order they are dropped).
pub struct RootRig {
    /// `count` KWOK nodes of the test.
    pub nodes: KwokNodes,
    /// The operator's access in the namespace.
    pub operator: ServiceAccountAccess,
    /// The collector's access in the namespace.
    pub collector: ServiceAccountAccess,
    /// The test namespace.
    pub ns: TestNamespace,
    /// The admin client.
    pub client: kube::Client,
}

/// As root, against a control plane with the CRDs installed: a test namespace `prefix-…`, the
/// operator's and the collector's access in it (see [`accesses`]; the collector's named
/// `collector-<suffix>`) and `count` KWOK nodes `prefix-…`. `None` (the test is skipped)
/// without root or a control plane, unless demanded (see [`root`]); `test` names it.
pub async fn root_rig(test: &str, prefix: &str, suffix: &str, count: usize) -> Option<RootRig> {
    if !root(test) {
        return None;
    }
    let client = gryvia_testsupport::client().await?;
    gryvia_client::crds::install(&client, Duration::from_secs(60))
        .await
        .unwrap();
    let ns = TestNamespace::create(&client, prefix).await.unwrap();
    let (operator, collector) = accesses(&client, &ns.name, suffix).await;
    let nodes = KwokNodes::create(&client, prefix, count, 1).await.unwrap();
    Some(RootRig {
        nodes,
        operator,
        collector,
        ns,
        client,
    })
}

/// Creates the GryviaAutoPolicy `learn` in `ns` (learning 5 minutes, the shortest, in `mode`)
/// with its learning begun at `since` (the operator keeps a start it finds), so a test need not
/// wait the period out.
pub async fn auto_policy(client: &kube::Client, ns: &str, mode: &str, since: jiff::Timestamp) {
    let autos: Api<GryviaAutoPolicy> = Api::namespaced(client.clone(), ns);
    let body = json!({"apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaAutoPolicy",
                      "metadata": {"name": "learn"},
                      "spec": {"learningPeriodMinutes": 5, "mode": mode}});
    autos
        .create(
            &PostParams::default(),
            &serde_json::from_value(body).unwrap(),
        )
        .await
        .unwrap();
    autos
        .patch_status(
            "learn",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"learningSince": since.to_string()}})),
        )
        .await
        .unwrap();
}

/// Deletes `node`'s GryviaFlowAggregate and GryviaFabricSignal, so no later test's cluster-wide
/// object (a network cost) folds this test's last window.
pub async fn delete_node_objects(client: &kube::Client, node: &str) {
    let _ = Api::<GryviaFlowAggregate>::all(client.clone())
        .delete(node, &DeleteParams::background())
        .await;
    let _ = Api::<GryviaFabricSignal>::all(client.clone())
        .delete(node, &DeleteParams::background())
        .await;
}

/// Runs `cmd` with `sh -c`, which must succeed: its standard output, trimmed.
pub fn sh(cmd: &str) -> String {
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(cmd)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{cmd}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}
