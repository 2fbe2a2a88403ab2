//! End-to-end: the network-operator (the binary, under the RBAC of
//! `deploy/network-operator/rbac.yaml`) folds the GryviaFlowAggregate windows of a node,
//! written here under the collector's RBAC (`deploy/collector/rbac.yaml`) exactly as the
//! collector writes them, into the node's GryviaNetworkBaseline; a drop in bandwidth raises one
//! GryviaNetworkAnomaly while it lasts, which resolves itself when the traffic is back. Against
//! a real control plane.

#![expect(clippy::unwrap_used, reason = "test helpers panic on failure")]

mod common;

use std::time::Duration;

use gryvia_testsupport::{TestNamespace, wait_for};
use gryvia_types::{AnomalyType, GryviaNetworkAnomaly, GryviaNetworkBaseline, Severity};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::json;

/// One TCP flow that sent `bytes` in the window ending `end`, as `node`'s collector writes it.
async fn write_window(client: &kube::Client, node: &str, end: jiff::Timestamp, bytes: i64) {
    let flow = json!([{"srcIp": "10.0.0.1", "srcPort": 40000, "dstIp": "10.0.0.2", "dstPort": 5000,
                       "protocol": "TCP", "txBytes": bytes, "rxBytes": 0}]);
    common::write_window(client, node, end, flow).await;
}

/// Writes the window and waits until the baseline has folded it.
async fn fold(
    collector: &kube::Client,
    baselines: &Api<GryviaNetworkBaseline>,
    node: &str,
    end: jiff::Timestamp,
    bytes: i64,
) -> GryviaNetworkBaseline {
    write_window(collector, node, end, bytes).await;
    wait_for("the window folded in", Duration::from_secs(60), || async {
        let b = baselines.get(node).await.ok()?;
        let folded = b.status.as_ref()?.window_end.as_ref()?.0;
        (folded == end).then_some(b)
    })
    .await
    .unwrap()
}

async fn reasons_about(client: &kube::Client, name: &str) -> Vec<String> {
    Api::<Event>::all(client.clone())
        .list(&ListParams::default().fields(&format!("regarding.name={name}")))
        .await
        .unwrap()
        .items
        .iter()
        .filter_map(|e| e.reason.clone())
        .collect()
}

/// Waits for an Event of `reason` about the object named `regarding`.
async fn event_seen(client: &kube::Client, regarding: &str, reason: &str) {
    wait_for(
        &format!("a {reason} Event about {regarding}"),
        Duration::from_secs(30),
        || async {
            reasons_about(client, regarding)
                .await
                .iter()
                .any(|r| r == reason)
                .then_some(())
        },
    )
    .await
    .unwrap();
}

async fn anomalies_of(client: &kube::Client, node: &str) -> Vec<GryviaNetworkAnomaly> {
    let mut all: Vec<_> = Api::<GryviaNetworkAnomaly>::all(client.clone())
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|a| a.spec.node == node)
        .collect();
    all.sort_by_key(|a| a.spec.detected_at.0);
    all
}

fn at(first: jiff::Timestamp, i: i64) -> jiff::Timestamp {
    first + jiff::SignedDuration::from_secs(10 * i)
}

/// Traffic is back (the window ending `end`): the anomaly `name` resolves itself, and no other
/// is raised.
async fn traffic_back_resolves_it(
    client: &kube::Client,
    collector: &kube::Client,
    baselines: &Api<GryviaNetworkBaseline>,
    node: &str,
    end: jiff::Timestamp,
    name: &str,
) {
    fold(collector, baselines, node, end, 100_000).await;
    let resolved = wait_for("the anomaly resolved", Duration::from_secs(60), || async {
        let a = Api::<GryviaNetworkAnomaly>::all(client.clone())
            .get(name)
            .await
            .ok()?;
        a.status.as_ref()?.resolved_at.as_ref()?;
        Some(a)
    })
    .await
    .unwrap();
    // Here the whole drop takes under a second, and times keep whole seconds.
    assert!(resolved.status.unwrap().resolved_at.unwrap().0 >= resolved.spec.detected_at.0);
    assert_eq!(
        resolved.metadata.annotations.unwrap()["gryvia.io/raised-at-sample"],
        "7",
        "raised by the seventh sample of bytesPerSecond"
    );
    assert_eq!(anomalies_of(client, node).await.len(), 1);
    event_seen(client, name, "Resolved").await;
}

/// Back to normal for a while, then another drop: a second anomaly (the first stays resolved),
/// and the baseline's second NetworkAnomaly Event is a series of the first.
async fn second_drop_is_a_second_anomaly(
    client: &kube::Client,
    collector: &kube::Client,
    baselines: &Api<GryviaNetworkBaseline>,
    node: &str,
    first: jiff::Timestamp,
    name: &str,
) {
    // Back to normal for a while, then another drop: a second anomaly (the first stays
    // resolved), and the baseline's second NetworkAnomaly Event is a series of the first.
    for i in 9..15 {
        fold(collector, baselines, node, at(first, i), 100_000).await;
    }
    fold(collector, baselines, node, at(first, 15), 100).await;
    let both = wait_for("a second anomaly", Duration::from_secs(30), || async {
        let all = anomalies_of(client, node).await;
        (all.len() == 2).then_some(all)
    })
    .await
    .unwrap();
    assert_eq!(both[0].metadata.name.as_deref(), Some(name));
    assert!(both[0].status.as_ref().unwrap().resolved_at.is_some());
    assert!(
        both[1]
            .status
            .as_ref()
            .is_none_or(|s| s.resolved_at.is_none())
    );
    wait_for("the Event's series", Duration::from_secs(30), || async {
        Api::<Event>::all(client.clone())
            .list(&ListParams::default().fields(&format!("regarding.name={node}")))
            .await
            .ok()?
            .items
            .into_iter()
            .find(|e| e.reason.as_deref() == Some("NetworkAnomaly"))?
            .series
            .filter(|s| s.count >= 2)
    })
    .await
    .unwrap();
}

/// The operator keeps leading: it renews its Lease in `ns`.
async fn lease_is_renewed(client: &kube::Client, ns: &str) {
    // The operator keeps leading: it renews its Lease.
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(client.clone(), ns);
    let renewed = |l: k8s_openapi::api::coordination::v1::Lease| l.spec?.renew_time;
    let first_renewal = renewed(leases.get("gryvia-network-operator").await.unwrap());
    wait_for(
        "a renewal of the Lease",
        Duration::from_secs(30),
        || async {
            let now = renewed(leases.get("gryvia-network-operator").await.ok()?);
            (now.is_some() && now != first_renewal).then_some(())
        },
    )
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bandwidth_drop_raises_one_anomaly_while_it_lasts_and_it_resolves_when_traffic_is_back() {
    let Some(client) = gryvia_testsupport::client().await else {
        return;
    };
    gryvia_client::crds::install(&client, Duration::from_secs(60))
        .await
        .unwrap();
    let ns = TestNamespace::create(&client, "netbase").await.unwrap();
    let (operator_access, collector_access) = common::accesses(&client, &ns.name, "base").await;
    let collector = collector_access.client().await.unwrap();
    let node = ns.name.replace("e2e-", "node-");
    let baselines: Api<GryviaNetworkBaseline> = Api::all(client.clone());
    let baseline = json!({"apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaNetworkBaseline",
                          "metadata": {"name": node},
                          "spec": {"nodeName": node, "sensitivitySigma": 3.0, "minSamples": 5}});
    let baseline = serde_json::from_value(baseline).unwrap();
    baselines
        .create(&PostParams::default(), &baseline)
        .await
        .unwrap();
    let _operator = common::operator(&operator_access, &ns.name, "network-operator-baseline");

    // Windows of 10 s, the first an hour ago (the operator reads the collector's times, not
    // its own clock): five at 10,000 B/s learn the baseline.
    // (Whole seconds: the API server keeps a Time to the second.)
    let first = jiff::Timestamp::from_second(jiff::Timestamp::now().as_second() - 3600).unwrap();
    let at = |i: i64| at(first, i);
    for i in 0..5 {
        fold(&collector, &baselines, &node, at(i), 100_000).await;
    }
    let b = fold(&collector, &baselines, &node, at(5), 100_000).await;
    let status = b.status.unwrap();
    assert_eq!(status.samples, 6);
    let bytes = &status.metrics["bytesPerSecond"];
    assert_eq!(
        (bytes.mean, bytes.samples, bytes.deviating),
        (10_000.0, 6, false)
    );
    assert_eq!(status.metrics["connections"].mean, 1.0);
    assert!(anomalies_of(&client, &node).await.is_empty());

    // Bandwidth drops to 10 B/s for two windows: one anomaly.
    fold(&collector, &baselines, &node, at(6), 100).await;
    let b = fold(&collector, &baselines, &node, at(7), 100).await;
    assert!(b.status.unwrap().metrics["bytesPerSecond"].deviating);
    let raised = anomalies_of(&client, &node).await;
    assert_eq!(raised.len(), 1, "{raised:#?}");
    let a = &raised[0];
    assert_eq!(
        (a.spec.type_, a.spec.severity, a.spec.metric.as_str()),
        (
            AnomalyType::BandwidthDrop,
            Severity::Critical,
            "bytesPerSecond"
        )
    );
    assert_eq!((a.spec.observed, a.spec.baseline), (10.0, 10_000.0));
    let name = a.metadata.name.clone().unwrap();
    assert!(
        a.metadata
            .owner_references
            .iter()
            .flatten()
            .any(|o| o.kind == "GryviaNetworkBaseline" && o.name == node),
        "the anomaly is the baseline's: {:?}",
        a.metadata.owner_references
    );
    event_seen(&client, &node, "NetworkAnomaly").await;
    assert!(
        a.status.as_ref().is_none_or(|s| s.resolved_at.is_none()),
        "still open while the drop lasts"
    );

    traffic_back_resolves_it(&client, &collector, &baselines, &node, at(8), &name).await;
    second_drop_is_a_second_anomaly(&client, &collector, &baselines, &node, first, &name).await;
    lease_is_renewed(&client, &ns.name).await;

    baselines
        .delete(&node, &DeleteParams::background())
        .await
        .unwrap();
    let _ = Api::<gryvia_types::GryviaFlowAggregate>::all(client.clone())
        .delete(&node, &DeleteParams::background())
        .await;
}
