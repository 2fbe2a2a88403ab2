//! End-to-end: the network-operator (the binary, under the RBAC of
//! `deploy/network-operator/rbac.yaml`) keeps a GryviaTrainingInsight of a three-rank job whose
//! pods run on three KWOK nodes, from the nodes' GryviaFlowAggregate windows written here under
//! the collector's RBAC: the slow rank is named a straggler with its node (and a Warning
//! Event), the rank-to-rank bytes are exact, and `gryvia gpu training` and `gryvia gpu nccl
//! --job` show them. Against a real control plane.

#![expect(clippy::unwrap_used, reason = "test helpers panic on failure")]

mod common;

use std::time::Duration;

use common::{flow, pod_ip};
use gryvia_testsupport::{KwokNodes, TestNamespace, wait_for};
use gryvia_types::{GryviaAIJob, GryviaFlowAggregate, GryviaTrainingInsight, RankPair};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::json;

fn cli() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_BIN_EXE_gryvia-network-operator")).with_file_name("gryvia")
}

async fn gryvia(args: &[&str]) -> String {
    let (ok, out, err) = gryvia_testsupport::run_binary(cli().to_str().unwrap(), args).await;
    assert!(ok, "{err}");
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[expect(
    clippy::too_many_lines,
    reason = "one end-to-end scenario, read top to bottom"
)]
async fn the_slow_rank_of_a_job_is_named_with_its_node_and_the_cli_shows_the_ranks() {
    let Some(client) = gryvia_testsupport::client().await else {
        return;
    };
    gryvia_client::crds::install(&client, Duration::from_secs(60))
        .await
        .unwrap();
    let ns = TestNamespace::create(&client, "netinsight").await.unwrap();
    let n = ns.name.as_str();
    let (operator_access, collector_access) = common::accesses(&client, n, "insight").await;
    let nodes = KwokNodes::create(&client, "netinsight", 3, 1)
        .await
        .unwrap();

    // The job (nothing runs it here: its pods are made as its Indexed Job would make them).
    let jobs: Api<GryviaAIJob> = Api::namespaced(client.clone(), n);
    let job = serde_json::from_value(json!({
        "apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaAIJob", "metadata": {"name": "train"},
        "spec": {"image": "registry.local/train:1", "gpus": 1, "replicas": 3,
                 "env": [{"name": "NCCL_DEBUG", "value": "INFO"}, {"name": "OTHER", "value": "x"}]}
    }))
    .unwrap();
    jobs.create(&PostParams::default(), &job).await.unwrap();
    let mut ips = Vec::new();
    for (rank, node) in nodes.names.iter().enumerate() {
        let labels = json!({"gryvia.io/job-name": "train",
                            "batch.kubernetes.io/job-completion-index": rank.to_string()});
        ips.push(pod_ip(&client, n, &format!("train-{rank}"), node, labels).await);
    }
    let insights: Api<GryviaTrainingInsight> = Api::namespaced(client.clone(), n);
    let insight = serde_json::from_value(json!({
        "apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaTrainingInsight",
        "metadata": {"name": "train"}, "spec": {"jobName": "train"}
    }))
    .unwrap();
    insights
        .create(&PostParams::default(), &insight)
        .await
        .unwrap();
    let _operator = common::operator(&operator_access, n, "network-operator-insight");

    // A ring: rank r sends to rank r+1. Ranks 0 and 2 move 1,000,000 bytes each way in the
    // 10 s window; rank 1, on a slow node, 100,000.
    let collector = collector_access.client().await.unwrap();
    let end = jiff::Timestamp::now() - jiff::SignedDuration::from_secs(5);
    let moved = [1_000_000_i64, 100_000, 1_000_000];
    for (rank, node) in nodes.names.iter().enumerate() {
        let next = (rank + 1) % 3;
        let f = flow(
            (&ips[rank], 40000),
            (&ips[next], 29500),
            moved[rank],
            moved[rank],
            &format!("{n}/train-{rank}"),
        );
        common::write_window(&collector, node, end, json!([f])).await;
    }

    let status = wait_for("the insight", Duration::from_secs(60), || async {
        let s = insights.get("train").await.ok()?.status?;
        (s.workers.len() == 3).then_some(s)
    })
    .await
    .unwrap();
    assert_eq!(status.straggler_count, 1);
    let slow = &status.workers[1];
    assert!(slow.straggler && slow.node == nodes.names[1], "{status:?}");
    assert_eq!(slow.tx_bytes_per_second, 10_000.0);
    assert_eq!(status.median_bytes_per_second, Some(200_000.0));
    assert_eq!(
        status.matrix,
        [
            RankPair {
                from: 0,
                to: 1,
                bytes: 2_000_000
            },
            RankPair {
                from: 1,
                to: 2,
                bytes: 200_000
            },
            RankPair {
                from: 2,
                to: 0,
                bytes: 2_000_000
            },
        ]
    );
    assert!(
        status.recommendations[0].starts_with(&format!(
            "rank 1 ({n}/train-1) on node {} moves 10%",
            nodes.names[1]
        )),
        "{:?}",
        status.recommendations
    );
    let events: Api<Event> = Api::namespaced(client.clone(), n);
    let warned = wait_for("the Straggler Event", Duration::from_secs(30), || async {
        events
            .list(&ListParams::default().fields("reason=Straggler"))
            .await
            .ok()?
            .items
            .into_iter()
            .find(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("train"))
    })
    .await
    .unwrap();
    assert!(warned.note.unwrap_or_default().contains(&nodes.names[1]));

    let table = gryvia(&["gpu", "training", "-n", n]).await;
    assert!(
        table.lines().any(|l| l
            .split_whitespace()
            .take(5)
            .eq([n, "train", "3", "1", "200000"])),
        "{table}"
    );
    let report = gryvia(&["gpu", "nccl", "--job", "train", "-n", n]).await;
    for line in [
        "  NCCL_DEBUG=INFO",
        "  WORLD_SIZE=3",
        "  MASTER_ADDR=train-0.train",
        "  MASTER_PORT=29500",
        "Stragglers: 1",
    ] {
        assert!(report.contains(line), "{line}: {report}");
    }
    assert!(!report.contains("OTHER"), "{report}");
    assert!(
        report
            .lines()
            .any(|l| l.split_whitespace().eq(["1", "2", "200000"])),
        "{report}"
    );

    for node in &nodes.names {
        let _ = Api::<GryviaFlowAggregate>::all(client.clone())
            .delete(node, &DeleteParams::background())
            .await;
    }
}
