//! End-to-end, as root on the real kernel and against a real control plane: the collector
//! binary (under the RBAC of `deploy/collector/rbac.yaml`) follows the GryviaCollectorConfig
//! that selects its node without a restart (a new interval and program set, a config it
//! cannot apply and a fallback to its command line, the config's deletion), and the
//! network-operator (the binary, under its RBAC) writes the config's status from what the
//! collector reports in its node's GryviaFabricSignal.
//!
//! Skipped without root unless `GRYVIA_EBPF=1` demands it.

#![expect(clippy::unwrap_used, reason = "test helpers panic on failure")]

mod common;

use std::time::Duration;

use gryvia_testsupport::{Process, wait_for};
use gryvia_types::conditions;
use gryvia_types::{
    AppliedCollectorConfig, CollectorProgram, GryviaCollectorConfig, GryviaFabricSignal,
    GryviaFabricSignalStatus,
};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;

/// The node's signal, once `check` holds for its status.
async fn signal_once(
    api: &Api<GryviaFabricSignal>,
    node: &str,
    what: &str,
    check: impl Fn(&GryviaFabricSignalStatus) -> bool,
) -> GryviaFabricSignalStatus {
    wait_for(what, Duration::from_secs(60), || async {
        let s = api.get(node).await.ok()?.status?;
        check(&s).then_some(s)
    })
    .await
    .unwrap()
}

fn applied(name: &str, generation: i64) -> Option<AppliedCollectorConfig> {
    Some(AppliedCollectorConfig {
        name: name.to_owned(),
        generation,
        error: None,
    })
}

/// The config's Ready condition's reason and `nodesReporting`, once the reason is `reason`.
async fn config_ready(
    api: &Api<GryviaCollectorConfig>,
    name: &str,
    reason: &str,
) -> (i32, Vec<String>) {
    wait_for(
        &format!("the config {reason}"),
        Duration::from_secs(60),
        || async {
            let s = api.get(name).await.ok()?.status?;
            let c = conditions::find(&s.conditions, "Ready")?;
            (c.reason == reason).then_some((s.nodes_reporting, s.failing))
        },
    )
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[expect(
    clippy::too_many_lines,
    reason = "one end-to-end scenario, read top to bottom"
)]
async fn the_collector_follows_its_nodes_config_without_a_restart_and_the_config_says_who_runs_it()
{
    let Some(rig) = common::root_rig("the collector config e2e test", "collcfg", "config", 1).await
    else {
        return;
    };
    let (client, n, nodes) = (&rig.client, rig.ns.name.as_str(), &rig.nodes);
    let (operator_access, collector_access) = (&rig.operator, &rig.collector);
    let node = nodes.names[0].clone();
    // Only this node is selected (another test's collector, on a node without the label,
    // follows no config of this test).
    Api::<Node>::all(client.clone())
        .patch(
            &node,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"gryvia.io/collector-set": n}}})),
        )
        .await
        .unwrap();
    let configs: Api<GryviaCollectorConfig> = Api::all(client.clone());
    let name = format!("{n}-pool");
    let config = serde_json::from_value(json!({
        "apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaCollectorConfig",
        "metadata": {"name": name},
        "spec": {"nodeSelector": {"gryvia.io/collector-set": n}, "programs": ["cgroup-traffic"],
                 "intervalSeconds": 1}
    }))
    .unwrap();
    configs
        .create(&PostParams::default(), &config)
        .await
        .unwrap();
    let _operator = common::operator(operator_access, n, "network-operator-collector-config");
    let port = 19_900 + u16::try_from(std::process::id() % 90).unwrap();
    let addr = format!("127.0.0.1:{port}");
    let _collector = Process::start(
        common::sibling("gryvia-collector").to_str().unwrap(),
        &[
            "--node",
            &node,
            "--interval",
            "2",
            "--programs",
            "cgroup-traffic",
            "--metrics-addr",
            &addr,
        ],
        Some(&collector_access.kubeconfig),
        "gryvia-collector-config",
    )
    .unwrap();
    let signals: Api<GryviaFabricSignal> = Api::all(client.clone());

    // It starts with the config: 1 s windows.
    signal_once(&signals, &node, "generation 1", |s| {
        s.config == applied(&name, 1) && s.window_seconds == 1
    })
    .await;
    assert_eq!(config_ready(&configs, &name, "Applied").await, (1, vec![]));

    // A config it cannot apply (an interface the node lacks): it runs its command line (2 s)
    // and says why; the config says which node failed.
    let patch = |spec: serde_json::Value| Patch::Merge(json!({"spec": spec}));
    configs
        .patch(
            &name,
            &PatchParams::default(),
            &patch(json!({"programs": ["cgroup-traffic", "interface-counters"],
                          "interfaces": ["no-such-if0"], "intervalSeconds": 3})),
        )
        .await
        .unwrap();
    let failed = signal_once(&signals, &node, "generation 2 refused", |s| {
        s.config
            .as_ref()
            .is_some_and(|c| c.generation == 2 && c.error.is_some())
            && s.window_seconds == 2
    })
    .await;
    let why = failed.config.unwrap().error.unwrap();
    assert!(why.contains("no-such-if0"), "{why}");
    let (_, failing) = config_ready(&configs, &name, "NotApplied").await;
    assert_eq!(failing.len(), 1);
    assert!(
        failing[0].starts_with(&format!("{node}: interface no-such-if0")),
        "{failing:?}"
    );

    // A config it can apply: 3 s windows and the programs it names, same process.
    configs
        .patch(
            &name,
            &PatchParams::default(),
            &patch(json!({"programs": ["cgroup-traffic"], "interfaces": [], "intervalSeconds": 3})),
        )
        .await
        .unwrap();
    let s = signal_once(&signals, &node, "generation 3", |s| {
        s.config == applied(&name, 3) && s.window_seconds == 3
    })
    .await;
    assert_eq!(s.programs, [CollectorProgram::CgroupTraffic]);
    assert_eq!(config_ready(&configs, &name, "Applied").await, (1, vec![]));

    // Without a config: the command line again.
    configs
        .delete(&name, &DeleteParams::default())
        .await
        .unwrap();
    signal_once(&signals, &node, "the command line", |s| {
        s.config.is_none() && s.window_seconds == 2
    })
    .await;
    let _ = signals.delete(&node, &DeleteParams::background()).await;
    let _ = Api::<gryvia_types::GryviaFlowAggregate>::all(client.clone())
        .delete(&node, &DeleteParams::background())
        .await;
}
