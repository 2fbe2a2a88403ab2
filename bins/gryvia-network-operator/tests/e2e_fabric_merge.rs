//! End-to-end against a real control plane: with `--merge-fabric-signals` the network-operator
//! (the binary, under its RBAC in `deploy/network-operator/rbac.yaml`) makes the
//! GryviaFabricSignal `cluster` (`spec.nodeName: "*"`) and keeps in its status an entry per
//! node's signal, written here as each node's collector writes its own
//! (`--fabric-status-per-node`): fresh ones summed, a stale one listed but not counted.

#![expect(clippy::unwrap_used, reason = "test helpers panic on failure")]

mod common;

use std::time::Duration;

use gryvia_testsupport::{KwokNodes, TestNamespace, wait_for};
use gryvia_types::{FabricNodeEntry, GryviaFabricSignal};
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

/// Writes `node`'s signal as its collector does: the object, then its status.
async fn write_signal(
    api: &Api<GryviaFabricSignal>,
    node: &str,
    retransmits: i64,
    rtt: i64,
    updated: jiff::Timestamp,
    oper_state: &str,
) {
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
    api.patch_status(
        node,
        &params,
        &Patch::Apply(
            json!({"apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaFabricSignal",
            "metadata": {"name": node},
            "status": {"windowSeconds": 10, "tcpRetransmits": retransmits,
                       "medianSrttMicros": rtt, "updatedAt": updated.to_string(),
                       "interfaces": [{"name": "ib0", "rxPackets": 1000, "rxBytes": 64000,
                                       "drops": 3, "rxErrors": 1, "operState": oper_state}]}}),
        ),
    )
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_merged_signal_lists_every_nodes_signal_and_sums_the_fresh_ones() {
    let Some(client) = gryvia_testsupport::client().await else {
        return;
    };
    gryvia_client::crds::install(&client, Duration::from_secs(60))
        .await
        .unwrap();
    let ns = TestNamespace::create(&client, "fabmerge").await.unwrap();
    let n = ns.name.as_str();
    let (operator_access, _) = common::accesses(&client, n, "fabmerge").await;
    let nodes = KwokNodes::create(&client, "fabmerge", 3, 1).await.unwrap();
    let signals: Api<GryviaFabricSignal> = Api::all(client.clone());
    let now = jiff::Timestamp::now();
    write_signal(&signals, &nodes.names[0], 4, 120, now, "up").await;
    write_signal(&signals, &nodes.names[1], 6, 80, now, "down").await;
    // Ten minutes old with 10 s windows: stale.
    let old = now - jiff::SignedDuration::from_mins(10);
    write_signal(&signals, &nodes.names[2], 500, 9000, old, "up").await;

    let _operator = common::operator_with(
        &operator_access,
        n,
        "network-operator-fabric-merge",
        &["--merge-fabric-signals"],
    );
    let mine = |entries: &[FabricNodeEntry]| -> Vec<FabricNodeEntry> {
        entries
            .iter()
            .filter(|e| nodes.names.contains(&e.node))
            .cloned()
            .collect()
    };
    let merged = wait_for("the merged signal", Duration::from_secs(60), || async {
        let s = signals.get("cluster").await.ok()?;
        let st = s.status.clone()?;
        (mine(&st.nodes).len() == 3).then_some(s)
    })
    .await
    .unwrap();
    assert_eq!(merged.spec.node_name, "*");
    let st = merged.status.unwrap();
    let entries = mine(&st.nodes);
    let fresh: Vec<bool> = entries.iter().map(|e| e.fresh).collect();
    assert_eq!(fresh, [true, true, false]);
    assert_eq!(entries[0].tcp_retransmits, 4);
    assert_eq!(entries[1].interfaces_down, ["ib0"]);
    assert_eq!(
        (entries[1].rx_packets, entries[1].drops_and_errors),
        (1000, 4)
    );
    // The sums count this test's fresh nodes (other tests' fresh nodes may add to them), never
    // the stale one's 500.
    assert!(st.nodes_reporting.unwrap() >= 2);
    let others: i64 = st
        .nodes
        .iter()
        .filter(|e| e.fresh && !nodes.names.contains(&e.node))
        .map(|e| e.tcp_retransmits)
        .sum();
    assert_eq!(st.tcp_retransmits, 10 + others);

    // A node's next window moves the merged status.
    write_signal(
        &signals,
        &nodes.names[0],
        40,
        120,
        jiff::Timestamp::now(),
        "up",
    )
    .await;
    wait_for(
        "the merged signal updated",
        Duration::from_secs(60),
        || async {
            let st = signals.get("cluster").await.ok()?.status?;
            mine(&st.nodes)
                .first()
                .is_some_and(|e| e.tcp_retransmits == 40)
                .then_some(())
        },
    )
    .await
    .unwrap();
}
