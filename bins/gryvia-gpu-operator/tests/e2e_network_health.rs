//! End-to-end: the gpu-operator (the binary, under the RBAC of `deploy/gpu-health/rbac.yaml`)
//! writes a GryviaNetwork's health from the GryviaFabricSignals of the KWOK nodes it selects,
//! written here under the collector's RBAC (`deploy/collector/rbac.yaml`) exactly as the
//! collector writes them; `gryvia health network` shows it. Against a real control plane.

#![expect(clippy::unwrap_used, reason = "test helpers panic on failure")]

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use gryvia_testsupport::{KwokNodes, ServiceAccountAccess, TestNamespace, wait_for};
use gryvia_types::{ComponentPhase, GryviaFabricSignal, GryviaNetwork};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

struct Operator(Child);

impl Drop for Operator {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn cli() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_BIN_EXE_gryvia-gpu-operator")).with_file_name("gryvia")
}

/// Writes `node`'s fabric signal as the collector does (create, then its status by server-side
/// apply), updated now.
async fn write_signal(client: &kube::Client, node: &str, interfaces: Value) {
    let api: Api<GryviaFabricSignal> = Api::all(client.clone());
    let params = PatchParams::apply("gryvia-collector").force();
    api.patch(
        node,
        &params,
        &Patch::Apply(
            json!({"apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaFabricSignal",
            "metadata": {"name": node}, "spec": {"nodeName": node}}),
        ),
    )
    .await
    .unwrap();
    let now = jiff::Timestamp::now().to_string();
    api.patch_status(
        node,
        &params,
        &Patch::Apply(
            json!({"apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaFabricSignal",
            "metadata": {"name": node},
            "status": {"interfaces": interfaces, "windowSeconds": 10, "updatedAt": now}}),
        ),
    )
    .await
    .unwrap();
}

/// `gryvia health network ARGS`'s standard output, as the test's admin (it must succeed).
async fn health_network(args: &[&str]) -> String {
    let args: Vec<&str> = ["health", "network"].iter().chain(args).copied().collect();
    let (ok, out, err) = gryvia_testsupport::run_binary(cli().to_str().unwrap(), &args).await;
    assert!(ok, "{err}");
    out
}

fn ib0(state: &str, gbps: i64) -> Value {
    json!([{"name": "ib0", "rxPackets": 10, "rxBytes": 1000, "operState": state,
            "speedMbps": gbps * 1000}])
}

/// The network's status once it has `phase` and its message starts with `says` (every
/// signal written so far counted).
async fn phase_is(
    api: &Api<GryviaNetwork>,
    name: &str,
    phase: ComponentPhase,
    says: &str,
) -> gryvia_types::GryviaNetworkStatus {
    wait_for("the network's phase", Duration::from_secs(60), || async {
        let s = api.get(name).await.ok()?.status?;
        (s.phase == Some(phase) && s.message.as_deref().unwrap_or_default().starts_with(says))
            .then_some(s)
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_networks_health_follows_its_nodes_fabric_signals_and_shows_in_the_cli() {
    let Some(client) = gryvia_testsupport::client().await else {
        return;
    };
    gryvia_client::crds::install(&client, Duration::from_secs(60))
        .await
        .unwrap();
    let ns = TestNamespace::create(&client, "nethealth").await.unwrap();
    let access = ServiceAccountAccess::create(
        &client,
        "deploy/gpu-health/rbac.yaml",
        "gryvia-gpu-operator",
        &ns.name,
        "gpu-operator-net",
    )
    .await
    .unwrap();
    let collector_access = ServiceAccountAccess::create(
        &client,
        "deploy/collector/rbac.yaml",
        "gryvia-collector",
        &ns.name,
        "collector-net",
    )
    .await
    .unwrap();
    let collector = collector_access.client().await.unwrap();
    let nodes = KwokNodes::create(&client, "nethealth", 3, 8).await.unwrap();
    let log = std::fs::File::create(std::env::temp_dir().join("gpu-operator-net.log")).unwrap();
    let _operator = Operator(
        Command::new(env!("CARGO_BIN_EXE_gryvia-gpu-operator"))
            .args(["--metrics-addr", "127.0.0.1:0"])
            .args(["--lease-namespace", &ns.name, "--identity", "net"])
            .env("KUBECONFIG", &access.kubeconfig)
            .env("RUST_LOG", "info,kube=warn")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap(),
    );

    let name = format!("fabric-{}", nodes.group);
    let api: Api<GryviaNetwork> = Api::all(client.clone());
    let net: GryviaNetwork = serde_json::from_value(json!({
        "apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaNetwork", "metadata": {"name": name},
        "spec": {"type": "infiniband", "interfaces": ["ib0"], "expectedBandwidthGbps": 400,
                 "nodeSelector": {gryvia_testsupport::NODE_GROUP_LABEL: nodes.group}},
    }))
    .unwrap();
    api.create(&PostParams::default(), &net).await.unwrap();

    // No collector has written yet: unknown, never degraded.
    let s = phase_is(&api, &name, ComponentPhase::Unknown, "0 of 3").await;
    assert_eq!((s.nodes_total, s.nodes_degraded), (3, 0));

    // One node up at speed, one with its link down, one silent.
    let (n0, n1, n2) = (&nodes.names[0], &nodes.names[1], &nodes.names[2]);
    write_signal(&collector, n0, ib0("up", 400)).await;
    write_signal(&collector, n1, ib0("down", 400)).await;
    let s = phase_is(&api, &name, ComponentPhase::Degraded, "2 of 3").await;
    assert_eq!((s.nodes_total, s.nodes_degraded), (3, 1));
    let m = s.message.unwrap();
    assert!(m.starts_with("2 of 3 nodes reporting, 1 degraded"), "{m}");
    assert!(m.contains(&format!("{n1}: ib0 down")), "{m}");
    assert!(
        m.contains(&format!("no fresh fabric signal from {n2}")),
        "{m}"
    );
    let cond = s.conditions.iter().find(|c| c.type_ == "Ready").unwrap();
    assert_eq!(
        (cond.status.as_str(), cond.reason.as_str()),
        ("False", "LinksDegraded")
    );

    let table = health_network(&[]).await;
    let row = table.lines().find(|l| l.starts_with(&name)).unwrap();
    assert!(row.contains("Degraded"), "{table}");
    assert!(row.contains(&format!("{n1}: ib0 down")), "{table}");

    // Every link up (one slower, one faster): healthy, the median speed measured.
    write_signal(&collector, n1, ib0("up", 400)).await;
    write_signal(&collector, n2, ib0("up", 800)).await;
    let s = phase_is(&api, &name, ComponentPhase::Healthy, "3 of 3").await;
    assert_eq!((s.nodes_total, s.nodes_degraded), (3, 0));
    assert_eq!(s.measured_bandwidth_gbps, Some(400.0));
    let v: Value = serde_json::from_str(&health_network(&["-o", "json"]).await).unwrap();
    let shown = v["networks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["metadata"]["name"] == name.as_str())
        .unwrap();
    assert_eq!(shown["status"]["phase"], "Healthy");

    let _ = api.delete(&name, &DeleteParams::default()).await;
    let signals: Api<GryviaFabricSignal> = Api::all(client.clone());
    for n in &nodes.names {
        let _ = signals.delete(n, &DeleteParams::default()).await;
    }
}
