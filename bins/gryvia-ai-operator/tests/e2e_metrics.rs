//! End-to-end: the ai-operator binary serves Prometheus `/metrics` with the reconcile counters
//! of its controllers, and `/healthz` and `/readyz`, while it runs against a real control plane
//! (testenv/).

use std::time::Duration;

use gryvia_testsupport::{Process, TestNamespace, http_get, metric_sample, unique, wait_for};
use gryvia_types::{GryviaAIJob, GryviaTemplate, JobPhase};
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;

#[tokio::test]
async fn the_ai_operator_serves_reconcile_counters_of_its_controllers_and_answers_its_probes() {
    let Some(client) = gryvia_testsupport::client().await else {
        return;
    };
    gryvia_client::crds::install(&client, Duration::from_secs(60))
        .await
        .unwrap();
    let lease_ns = TestNamespace::create(&client, "aiop-metrics")
        .await
        .unwrap();
    let ns = TestNamespace::create(&client, "aijob-metrics")
        .await
        .unwrap();
    let (_operator, port) = Process::operator(
        env!("CARGO_BIN_EXE_gryvia-ai-operator"),
        &lease_ns.name,
        &[],
        None,
        "ai-operator-metrics",
    )
    .unwrap();

    // A job and a template of the test's own, each reconciled by its controller.
    let jobs: Api<GryviaAIJob> = Api::namespaced(client.clone(), &ns.name);
    let job: GryviaAIJob = serde_json::from_value(json!({
        "metadata": {"name": "counted", "namespace": ns.name},
        "spec": {"image": "registry.local/train:1", "gpus": 1}
    }))
    .unwrap();
    jobs.create(&PostParams::default(), &job).await.unwrap();
    let template = unique("e2e-metrics-tpl");
    let templates: Api<GryviaTemplate> = Api::all(client.clone());
    let tpl: GryviaTemplate = serde_json::from_value(json!({
        "apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaTemplate",
        "metadata": {"name": template},
        "spec": {"category": "training",
                 "defaults": {"image": "registry.local/train:1", "resources": {"gpuCount": 1}}}
    }))
    .unwrap();
    templates
        .create(&PostParams::default(), &tpl)
        .await
        .unwrap();
    wait_for(
        "the job to succeed and the template to be checked",
        Duration::from_secs(90),
        || async {
            let j = jobs.get("counted").await.ok()?.status?;
            let t = templates.get(&template).await.ok()?.status?;
            (j.phase == Some(JobPhase::Succeeded)
                && gryvia_types::conditions::find(&t.conditions, "Valid").is_some())
            .then_some(())
        },
    )
    .await
    .unwrap();

    let text = wait_for(
        "reconcile counters on /metrics",
        Duration::from_secs(30),
        || async {
            let (code, text) = http_get(port, "/metrics").await?;
            (code == 200
                && metric_sample(&text, "gryvia_reconciles_total", "gryvia-ai-jobs")? >= 1.0
                && metric_sample(&text, "gryvia_reconciles_total", "gryvia-templates")? >= 1.0)
                .then_some(text)
        },
    )
    .await
    .unwrap();
    assert!(text.contains("# TYPE gryvia_reconciles counter"), "{text}");
    for controller in ["gryvia-ai-jobs", "gryvia-templates"] {
        assert!(
            metric_sample(&text, "gryvia_reconcile_duration_seconds_count", controller)
                .is_some_and(|n| n >= 1.0),
            "no duration of {controller}: {text}"
        );
    }
    assert_eq!(
        metric_sample(&text, "gryvia_leader", "gryvia-ai-operator"),
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
    let _ = templates.delete(&template, &DeleteParams::default()).await;
}
