//! End-to-end: the gpu-operator binary (`--gpu-health`) serves Prometheus `/metrics` with the
//! reconcile counter of its health-check controller, and `/healthz` and `/readyz`, while it
//! runs against a real control plane (testenv/).

use std::time::Duration;

use gryvia_testsupport::{
    NODE_GROUP_LABEL, Process, TestNamespace, http_get, metric_sample, unique, wait_for,
};
use gryvia_types::GryviaHealthCheck;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;

#[tokio::test]
async fn the_gpu_operator_serves_the_reconcile_counter_of_its_health_checks_and_answers_its_probes()
{
    let Some(client) = gryvia_testsupport::client().await else {
        return;
    };
    gryvia_client::crds::install(&client, Duration::from_secs(60))
        .await
        .unwrap();
    let lease_ns = TestNamespace::create(&client, "gpuop-metrics")
        .await
        .unwrap();
    // Evaluation only (no --gpu-remediation): it acts on no node of anyone's.
    let (_operator, port) = Process::operator(
        env!("CARGO_BIN_EXE_gryvia-gpu-operator"),
        &lease_ns.name,
        &["--gpu-health"],
        None,
        "gpu-operator-metrics",
    )
    .unwrap();

    // A check of the test's own, over a node group that has no node.
    let name = unique("e2e-metrics");
    let checks: Api<GryviaHealthCheck> = Api::all(client.clone());
    let check: GryviaHealthCheck = serde_json::from_value(json!({
        "apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaHealthCheck",
        "metadata": {"name": name},
        "spec": {"schedule": "*/30 * * * * *",
                 "target": {"type": "selector", "nodeSelector": {NODE_GROUP_LABEL: name}},
                 "checks": [{"name": "ecc", "type": "gpu-ecc-errors", "threshold": {"max": 0}}]}
    }))
    .unwrap();
    checks.create(&PostParams::default(), &check).await.unwrap();
    wait_for("the check to be evaluated", Duration::from_secs(60), || {
        let checks = checks.clone();
        let name = name.clone();
        async move {
            let st = checks.get(&name).await.ok()?.status?;
            st.last_run.is_some().then_some(())
        }
    })
    .await
    .unwrap();

    let text = wait_for(
        "the reconcile counter on /metrics",
        Duration::from_secs(30),
        || async {
            let (code, text) = http_get(port, "/metrics").await?;
            (code == 200
                && metric_sample(&text, "gryvia_reconciles_total", "gryvia-gpu-health")? >= 1.0)
                .then_some(text)
        },
    )
    .await
    .unwrap();
    assert!(text.contains("# TYPE gryvia_reconciles counter"), "{text}");
    assert!(
        metric_sample(
            &text,
            "gryvia_reconcile_duration_seconds_count",
            "gryvia-gpu-health"
        )
        .is_some_and(|n| n >= 1.0),
        "{text}"
    );
    assert_eq!(
        metric_sample(&text, "gryvia_leader", "gryvia-gpu-operator"),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        http_get(port, "/healthz").await,
        Some((200, "ok".to_owned()))
    );
    assert_eq!(
        http_get(port, "/readyz").await,
        Some((200, "ok".to_owned()))
    );
    let _ = checks.delete(&name, &DeleteParams::default()).await;
}
