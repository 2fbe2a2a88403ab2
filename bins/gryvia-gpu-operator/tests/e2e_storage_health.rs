//! End-to-end: node agents (the binary, one per KWOK node, under the RBAC of
//! `deploy/gpu-health/rbac.yaml`) probe the mounts GryviaStorages name on this machine: a real
//! mount point (`/dev/shm`, tmpfs) and a directory that is not one. The gpu-operator (the binary,
//! under its rendered RBAC) writes each storage's health from those probes; `gryvia health
//! storage` shows it; the agents serve `/metrics`, `/healthz` and `/readyz`. Against a real
//! control plane.

#![expect(clippy::unwrap_used, reason = "test helpers panic on failure")]

use std::path::PathBuf;

use std::time::Duration;

use gryvia_testsupport::{
    KwokNodes, NODE_GROUP_LABEL, Process, ServiceAccountAccess, TestNamespace, free_port, http_get,
    wait_for,
};
use gryvia_types::{ComponentPhase, GryviaStorage, GryviaStorageStatus};
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::{Value, json};

/// The node agent cargo built beside the gpu-operator (`cargo test --workspace` builds it).
fn node_agent() -> PathBuf {
    let path = PathBuf::from(env!("CARGO_BIN_EXE_gryvia-gpu-operator"))
        .with_file_name("gryvia-node-agent");
    assert!(
        path.exists(),
        "{} is missing: run `cargo build -p gryvia-node-agent` first",
        path.display()
    );
    path
}

/// `gryvia health storage ARGS`'s standard output, as the test's admin (it must succeed).
async fn health_storage(args: &[&str]) -> String {
    let cli = PathBuf::from(env!("CARGO_BIN_EXE_gryvia-gpu-operator")).with_file_name("gryvia");
    let args: Vec<&str> = ["health", "storage"].iter().chain(args).copied().collect();
    let (ok, out, err) = gryvia_testsupport::run_binary(cli.to_str().unwrap(), &args).await;
    assert!(ok, "{err}");
    out
}

/// The storage's status once it has `phase` and its message contains `says` (both agents'
/// probes in).
async fn phase_is(
    api: &Api<GryviaStorage>,
    name: &str,
    phase: ComponentPhase,
    says: &str,
) -> GryviaStorageStatus {
    wait_for("the storage's phase", Duration::from_secs(60), || async {
        let s = api.get(name).await.ok()?.status?;
        (s.phase == Some(phase) && s.message.as_deref().unwrap_or_default().contains(says))
            .then_some(s)
    })
    .await
    .unwrap()
}

fn storage(name: &str, path: &str, group: &str) -> GryviaStorage {
    serde_json::from_value(json!({
        "apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaStorage", "metadata": {"name": name},
        "spec": {"type": "nfs", "endpoint": "fs.example:/export", "mountPath": path,
                 "maxLatencyMillis": 5000, "nodeSelector": {NODE_GROUP_LABEL: group}},
    }))
    .unwrap()
}

/// Starts a node agent (the binary) per node, reporting every second from a healthy trace under
/// `kubeconfig`: the processes (stopped when dropped) and their metrics ports.
fn start_agents(nodes: &KwokNodes, kubeconfig: &std::path::Path) -> (Vec<Process>, Vec<u16>) {
    let trace = std::env::temp_dir().join(format!("gryvia-e2e-storage-{}.yaml", nodes.group));
    std::fs::write(&trace, "gpuCount: 4\nframes:\n  - gpus: []\n").unwrap();
    let source = format!("file:{}", trace.display());
    let mut agents = Vec::new();
    let mut ports = Vec::new();
    for node in &nodes.names {
        let port = free_port();
        let addr = format!("127.0.0.1:{port}");
        let args = [
            "--node",
            node,
            "--source",
            &source,
            "--interval",
            "1",
            "--executor",
            "dry-run",
            "--metrics-addr",
            &addr,
        ];
        agents.push(
            Process::start(
                node_agent().to_str().unwrap(),
                &args,
                Some(kubeconfig),
                &format!("node-agent-storage-{node}"),
            )
            .unwrap(),
        );
        ports.push(port);
    }
    (agents, ports)
}

/// Each agent's own endpoints: reports counted, the failing probe flagged, healthy and ready.
async fn check_agent_endpoints(ports: &[u16], shm: &str, unmounted: &str) {
    for &port in ports {
        let (code, text) = http_get(port, "/metrics").await.unwrap();
        assert_eq!(code, 200);
        let reports = text
            .lines()
            .find_map(|l| l.strip_prefix("gryvia_agent_reports_total "))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .unwrap_or_default();
        assert!(reports >= 1.0, "{text}");
        assert!(
            text.contains(&format!(
                "gryvia_agent_storage_probe_failed{{storage=\"{unmounted}\"}} 1"
            )),
            "{text}"
        );
        assert!(
            text.contains(&format!(
                "gryvia_agent_storage_probe_failed{{storage=\"{shm}\"}} 0"
            )),
            "{text}"
        );
        assert_eq!(http_get(port, "/healthz").await.unwrap().0, 200);
        assert_eq!(http_get(port, "/readyz").await.unwrap().0, 200);
    }
}

/// `gryvia health storage` shows both storages with their phase and reason, as a table and as
/// JSON.
async fn check_cli(shm: &str, unmounted: &str) {
    let table = health_storage(&[]).await;
    let row = |name: &str| {
        table
            .lines()
            .find(|l| l.starts_with(name))
            .map(str::to_owned)
            .unwrap_or_default()
    };
    assert!(row(shm).contains("Healthy"), "{table}");
    assert!(
        row(unmounted).contains("Unavailable") && row(unmounted).contains("not a mount point"),
        "{table}"
    );
    let v: Value = serde_json::from_str(&health_storage(&["-o", "json"]).await).unwrap();
    assert!(
        v["storage"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["metadata"]["name"] == shm && s["status"]["phase"] == "Healthy")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_agents_probe_storage_mounts_and_the_operator_reports_each_storages_health() {
    let Some(client) = gryvia_testsupport::client().await else {
        return;
    };
    assert!(
        std::fs::read_to_string("/proc/self/mountinfo")
            .unwrap()
            .contains(" /dev/shm "),
        "this test needs /dev/shm to be a mount point (tmpfs)"
    );
    gryvia_client::crds::install(&client, Duration::from_secs(60))
        .await
        .unwrap();
    let ns = TestNamespace::create(&client, "storhealth").await.unwrap();
    let rbac = "deploy/gpu-health/rbac.yaml";
    let operator_access =
        ServiceAccountAccess::create(&client, rbac, "gryvia-gpu-operator", &ns.name, "op-storage")
            .await
            .unwrap();
    let agent_access = ServiceAccountAccess::create(
        &client,
        rbac,
        "gryvia-node-agent",
        &ns.name,
        "agent-storage",
    )
    .await
    .unwrap();
    let nodes = KwokNodes::create(&client, "storhealth", 2, 4)
        .await
        .unwrap();

    // Two storages on the test's nodes: one mounted (tmpfs), one a plain directory.
    let plain = std::env::temp_dir().join(format!("gryvia-e2e-unmounted-{}", nodes.group));
    std::fs::create_dir_all(&plain).unwrap();
    let api: Api<GryviaStorage> = Api::all(client.clone());
    let shm = format!("shm-{}", nodes.group);
    let unmounted = format!("unmounted-{}", nodes.group);
    api.create(
        &PostParams::default(),
        &storage(&shm, "/dev/shm", &nodes.group),
    )
    .await
    .unwrap();
    api.create(
        &PostParams::default(),
        &storage(&unmounted, plain.to_str().unwrap(), &nodes.group),
    )
    .await
    .unwrap();

    let (agents, ports) = start_agents(&nodes, &agent_access.kubeconfig);
    let (_operator, _port) = Process::operator(
        env!("CARGO_BIN_EXE_gryvia-gpu-operator"),
        &ns.name,
        &[],
        Some(&operator_access.kubeconfig),
        "gpu-operator-storage",
    )
    .unwrap();

    let s = phase_is(&api, &shm, ComponentPhase::Healthy, "2 of 2 nodes probed").await;
    assert_eq!(
        s.message.as_deref(),
        Some("/dev/shm: 2 of 2 nodes probed, 0 failing, 0 slow")
    );
    assert!(s.latency_millis.is_some());
    assert!(s.capacity_bytes.unwrap() > 0);
    assert!(s.used_bytes.unwrap() <= s.capacity_bytes.unwrap());
    let s = phase_is(
        &api,
        &unmounted,
        ComponentPhase::Unavailable,
        "2 of 2 nodes probed",
    )
    .await;
    let m = s.message.unwrap();
    assert!(m.contains("2 of 2 nodes probed, 2 failing"), "{m}");
    assert!(
        m.contains(&format!(
            "{}: {} is not a mount point",
            nodes.names[0],
            plain.display()
        )),
        "{m}"
    );
    let ready = s.conditions.iter().find(|c| c.type_ == "Ready").unwrap();
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("False", "MountsFailing")
    );

    check_cli(&shm, &unmounted).await;
    check_agent_endpoints(&ports, &shm, &unmounted).await;

    drop(agents);
    for name in [&shm, &unmounted] {
        let _ = api.delete(name, &DeleteParams::default()).await;
    }
    let _ = std::fs::remove_dir_all(&plain);
}
