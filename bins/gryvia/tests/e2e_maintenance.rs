//! End-to-end: `gryvia maintenance`, `gryvia get node` and `gryvia health` against a real
//! control plane (testenv/), on KWOK GPU nodes of the test's own.

#![expect(clippy::unwrap_used, reason = "test helpers panic on failure")]

use std::process::{Command, Output};

use gryvia_testsupport::{KwokNodes, TestNamespace, bind_pod, create_pdb, pod_gone};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, DeleteParams};

fn gryvia(args: &[&str]) -> Output {
    let kubeconfig = match gryvia_testsupport::cluster() {
        gryvia_testsupport::Cluster::Ready { kubeconfig } => kubeconfig,
        gryvia_testsupport::Cluster::Skip(r) => panic!("{r}"),
    };
    Command::new(env!("CARGO_BIN_EXE_gryvia"))
        .args(args)
        .env("KUBECONFIG", kubeconfig)
        .output()
        .unwrap()
}

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[expect(
    clippy::too_many_lines,
    reason = "one end-to-end scenario, read top to bottom"
)]
async fn maintenance_drain_respects_a_pdb_and_end_returns_the_node() {
    let Some(client) = gryvia_testsupport::client().await else {
        return;
    };
    gryvia_client::crds::install(&client, std::time::Duration::from_secs(60))
        .await
        .unwrap();
    let ns = TestNamespace::create(&client, "maint").await.unwrap();
    let nodes = KwokNodes::create(&client, "maint", 1, 8).await.unwrap();
    let node = nodes.names[0].clone();
    bind_pod(&client, &ns.name, "train", &node, "train")
        .await
        .unwrap();
    bind_pod(&client, &ns.name, "serve", &node, "serve")
        .await
        .unwrap();
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), &ns.name);
    create_pdb(&client, &ns.name, "serve-pdb", "serve")
        .await
        .unwrap();

    // The budget blocks one pod: the drain evicts the other, reports the block, gives up at
    // the timeout with a non-zero exit, and leaves the node cordoned.
    let out = gryvia(&[
        "maintenance",
        "start",
        &node,
        "--reason",
        "gpu-reset",
        "--drain",
        "--timeout",
        "6",
    ]);
    let (stdout, stderr) = text(&out);
    assert!(!out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains(&format!("node {node} cordoned (reason: gpu-reset)")),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!("evicted {}/train", ns.name)),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!(
            "eviction of {}/serve blocked by a PodDisruptionBudget; retrying",
            ns.name
        )),
        "{stdout}"
    );
    assert!(
        stdout.contains("1 blocked by a PodDisruptionBudget"),
        "{stdout}"
    );
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
    assert!(
        stderr.contains("drain of") && stderr.contains("incomplete (the node stays cordoned)"),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!("{}/serve (pdb serve-pdb)", ns.name)),
        "{stderr}"
    );
    assert!(pod_gone(&client, &ns.name, "train").await.unwrap());
    assert!(
        !pod_gone(&client, &ns.name, "serve").await.unwrap(),
        "never deleted past its budget"
    );
    let n = Api::<Node>::all(client.clone()).get(&node).await.unwrap();
    assert_eq!(n.spec.unwrap().unschedulable, Some(true));

    let (stdout, _) = text(&gryvia(&["get", "node", &node]));
    assert!(stdout.contains("Schedulable:   no (cordoned)"), "{stdout}");
    assert!(stdout.contains("Maintenance:   yes: gpu-reset"), "{stdout}");
    assert!(stdout.contains("no GryviaGpuNode"), "{stdout}");

    // Without the budget the drain completes.
    pdbs.delete("serve-pdb", &DeleteParams::default())
        .await
        .unwrap();
    let out = gryvia(&[
        "maintenance",
        "start",
        &node,
        "--reason",
        "gpu-reset",
        "--drain",
        "--timeout",
        "60",
    ]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("was already cordoned"), "{stdout}");
    assert!(stdout.contains(&format!("node {node} drained")), "{stdout}");
    assert!(pod_gone(&client, &ns.name, "serve").await.unwrap());

    // End: uncordoned, annotations gone; a taint a health check left is removed too.
    let out = gryvia(&["maintenance", "end", &node]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(stdout.contains("uncordoned"), "{stdout}");
    let n = Api::<Node>::all(client.clone()).get(&node).await.unwrap();
    assert_ne!(n.spec.unwrap().unschedulable, Some(true));
    assert!(
        !n.metadata
            .annotations
            .unwrap_or_default()
            .contains_key("gryvia.io/maintenance")
    );

    let out = gryvia(&["health", "gpu"]);
    assert!(out.status.success(), "{:?}", text(&out));
    assert!(text(&out).0.contains("HEALTH CHECK"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn maintenance_of_an_unknown_node_fails_in_one_line() {
    let Some(_client) = gryvia_testsupport::client().await else {
        return;
    };
    let out = gryvia(&["maintenance", "start", "no-such-node", "--reason", "x"]);
    let (_, stderr) = text(&out);
    assert!(!out.status.success());
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("read node no-such-node") && stderr.contains("not found"),
        "{stderr}"
    );
    let out = gryvia(&["get", "node", "no-such-node"]);
    assert!(!out.status.success());
    assert_eq!(text(&out).1.lines().count(), 1);
}
