//! End-to-end: the network-operator (the binary, under the RBAC of
//! `deploy/network-operator/rbac.yaml`) keeps a GryviaServiceGraph from the GryviaFlowAggregates
//! of two KWOK nodes, written here under the collector's RBAC as the collector writes them:
//! flows between pods of two workloads (seen by both nodes, counted once), to a Service and to
//! an outside address, with exact bytes; `gryvia network graph` shows it as a table, JSON and
//! DOT. Against a real control plane.

#![expect(clippy::unwrap_used, reason = "test helpers panic on failure")]

mod common;

use std::time::Duration;

use gryvia_testsupport::{KwokNodes, ServiceAccountAccess, TestNamespace, wait_for};
use gryvia_types::{GryviaFlowAggregate, GryviaServiceGraph};
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::{Value, json};

fn cli() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_BIN_EXE_gryvia-network-operator")).with_file_name("gryvia")
}

/// `node`'s window ending `end` (Unix seconds) with `flows`, as its collector writes it.
async fn write_window(client: &kube::Client, node: &str, end: i64, flows: Value) {
    common::write_window(
        client,
        node,
        jiff::Timestamp::from_second(end).unwrap(),
        flows,
    )
    .await;
}

use common::{flow, pod_ip};

/// The graph's edges as (from, to, port, bytes, connections), once it has `count` of them and
/// the bytes of the first sum to `first_bytes`.
async fn edges_once(
    api: &Api<GryviaServiceGraph>,
    count: usize,
    bytes: i64,
) -> Vec<(String, String, i32, i64, i64)> {
    wait_for("the graph's edges", Duration::from_secs(60), || async {
        let s = api.get("ml").await.ok()?.status?;
        let edges: Vec<_> = s
            .edges
            .iter()
            .map(|e| (e.from.clone(), e.to.clone(), e.port, e.bytes, e.connections))
            .collect();
        (edges.len() == count && edges.iter().map(|e| e.3).sum::<i64>() == bytes).then_some(edges)
    })
    .await
    .unwrap()
}

async fn graph_cli(ns: &str, output: &str) -> String {
    let (ok, out, err) = gryvia_testsupport::run_binary(
        cli().to_str().unwrap(),
        &["network", "graph", "-n", ns, "-o", output],
    )
    .await;
    assert!(ok, "{err}");
    out
}

/// The cluster side of the test: a namespace, the two components' access, two KWOK nodes, a
/// job's pod on the first, a store pod on the second behind a Service, the graph and the
/// operator.
struct Rig {
    ns: TestNamespace,
    _operator_access: ServiceAccountAccess,
    collector_access: ServiceAccountAccess,
    nodes: KwokNodes,
    trainer: String,
    store: String,
    service_ip: String,
    _operator: gryvia_testsupport::Process,
}

impl Rig {
    async fn start(client: &kube::Client) -> Rig {
        let client = client.clone();
        let ns = TestNamespace::create(&client, "netgraph").await.unwrap();
        let n = ns.name.clone();
        let n = n.as_str();
        let (operator_access, collector_access) = common::accesses(&client, n, "graph").await;
        let nodes = KwokNodes::create(&client, "netgraph", 2, 1).await.unwrap();
        let (a, b) = (nodes.names[0].as_str(), nodes.names[1].as_str());

        // A job's pod on node a, a store pod on node b behind a Service.
        let trainer = pod_ip(
            &client,
            n,
            "trainer-0",
            a,
            json!({"gryvia.io/job-name": "trainer"}),
        )
        .await;
        let store = pod_ip(&client, n, "store-0", b, json!({"app": "store"})).await;
        let service_ip = common::store_service(&client, n).await;

        let graphs: Api<GryviaServiceGraph> = Api::namespaced(client.clone(), n);
        let graph = serde_json::from_value(json!({
            "apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaServiceGraph",
            "metadata": {"name": "ml"}, "spec": {"windowMinutes": 60}
        }))
        .unwrap();
        graphs.create(&PostParams::default(), &graph).await.unwrap();
        let operator = common::operator(&operator_access, n, "network-operator-graph");

        Rig {
            ns,
            _operator_access: operator_access,
            collector_access,
            nodes,
            trainer,
            store,
            service_ip,
            _operator: operator,
        }
    }
}

/// `gryvia network graph` in namespace `n`: a table, JSON, DOT.
async fn the_cli_shows_it(n: &str) {
    let trainer_w = format!("{n}/trainer");
    let table = graph_cli(n, "table").await;
    assert!(
        table.lines().any(|l| l.split_whitespace().eq([
            "ml",
            trainer_w.as_str(),
            &format!("{n}/store-0"),
            "9000",
            "1700",
            "2",
            "2"
        ])),
        "{table}"
    );
    let out: Value = serde_json::from_str(&graph_cli(n, "json").await).unwrap();
    assert_eq!(out["edges"].as_array().unwrap().len(), 3);
    assert_eq!(out["nodes"].as_array().unwrap().len(), 4);
    let dot = graph_cli(n, "dot").await;
    assert!(
        dot.contains(&format!(
            "\"{n}/trainer\" -> \"{n}/store-0\" [label=\":9000 1700 B, 2 conn\"];"
        )),
        "{dot}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_service_graph_counts_each_connection_once_with_exact_bytes_and_shows_in_the_cli() {
    let Some(client) = gryvia_testsupport::client().await else {
        return;
    };
    gryvia_client::crds::install(&client, Duration::from_secs(60))
        .await
        .unwrap();
    let rig = Rig::start(&client).await;
    let (a, b, n) = (
        rig.nodes.names[0].as_str(),
        rig.nodes.names[1].as_str(),
        rig.ns.name.as_str(),
    );
    let (trainer, store, service_ip) = (&rig.trainer, &rig.store, &rig.service_ip);
    let collector = rig.collector_access.client().await.unwrap();
    let graphs: Api<GryviaServiceGraph> = Api::namespaced(client.clone(), n);

    // One window on each node. Node b sees the trainer's connection to the store from the
    // server's side: the same connection, counted once (from node a).
    let now = jiff::Timestamp::now().as_second();
    let pod = |name: &str| format!("{n}/{name}");
    write_window(
        &collector,
        a,
        now - 20,
        json!([
            flow(
                (trainer, 45000),
                (store, 9000),
                1000,
                200,
                &pod("trainer-0")
            ),
            flow(
                (trainer, 45001),
                (service_ip, 80),
                10,
                20,
                &pod("trainer-0")
            ),
            flow(
                (trainer, 51000),
                ("8.8.8.8", 443),
                30,
                70,
                &pod("trainer-0")
            ),
        ]),
    )
    .await;
    write_window(
        &collector,
        b,
        now - 20,
        json!([flow(
            (store, 9000),
            (trainer, 45000),
            200,
            1000,
            &pod("store-0")
        )]),
    )
    .await;
    let trainer_w = format!("{n}/trainer");
    let edge = |to: &str, port: i32, bytes: i64, conns: i64| {
        (trainer_w.clone(), to.to_owned(), port, bytes, conns)
    };
    assert_eq!(
        edges_once(&graphs, 3, 1330).await,
        [
            edge(&format!("{n}/store"), 80, 30, 1),
            edge(&format!("{n}/store-0"), 9000, 1200, 1),
            edge("external/8.8.8.8", 443, 100, 1),
        ]
    );

    // The next window of node a adds to the same edge: exact sums over the window.
    write_window(
        &collector,
        a,
        now - 10,
        json!([flow(
            (trainer, 45002),
            (store, 9000),
            400,
            100,
            &pod("trainer-0")
        )]),
    )
    .await;
    let edges = edges_once(&graphs, 3, 1830).await;
    assert_eq!(edges[1], edge(&format!("{n}/store-0"), 9000, 1700, 2));

    the_cli_shows_it(n).await;

    for node in [a, b] {
        let _ = Api::<GryviaFlowAggregate>::all(client.clone())
            .delete(node, &DeleteParams::background())
            .await;
    }
}
