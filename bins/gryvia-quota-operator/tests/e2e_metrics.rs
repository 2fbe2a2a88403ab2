//! End-to-end: the quota-operator binary serves Prometheus `/metrics` with the reconcile
//! counters of its controllers, and `/healthz` and `/readyz`, while it runs against a real
//! control plane (testenv/).

use std::time::Duration;

use gryvia_testsupport::{
    Process, ServiceAccountAccess, TestNamespace, http_get, metric_sample, unique, wait_for,
};
use gryvia_types::{GryviaBudget, GryviaTenant};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;

#[tokio::test]
#[expect(
    clippy::too_many_lines,
    reason = "one end-to-end scenario, read top to bottom"
)]
async fn the_quota_operator_serves_reconcile_counters_of_its_controllers_and_answers_its_probes() {
    let Some(client) = gryvia_testsupport::client().await else {
        return;
    };
    gryvia_client::crds::install(&client, Duration::from_secs(60))
        .await
        .unwrap();
    let lease_ns = TestNamespace::create(&client, "qop-metrics").await.unwrap();
    // The operator runs under exactly the RBAC the chart renders (deploy/quota-operator), with
    // its opt-ins on: per-tenant RoleBindings, metering and invoices.
    let access = ServiceAccountAccess::create(
        &client,
        "deploy/quota-operator/rbac.yaml",
        "gryvia-quota-operator",
        &lease_ns.name,
        "quota-operator-metrics",
    )
    .await
    .unwrap();
    let (_operator, port) = Process::operator(
        env!("CARGO_BIN_EXE_gryvia-quota-operator"),
        &lease_ns.name,
        &["--tenant-rbac", "--metering", "--invoices"],
        Some(&access.kubeconfig),
        "quota-operator-metrics",
    )
    .unwrap();

    // A tenant and a budget of the test's own, each reconciled by its controller.
    let tenant = unique("metrics");
    let tenants: Api<GryviaTenant> = Api::all(client.clone());
    tenants
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": tenant},
                "spec": {"displayName": "Metrics", "networkPolicy": {"isolated": true},
                         "members": [{"username": "alice", "role": "admin"},
                                     {"username": "bob", "role": "viewer"}]}
            }))
            .unwrap(),
        )
        .await
        .unwrap();
    let budget = unique("e2e-metrics-budget");
    let budgets: Api<GryviaBudget> = Api::all(client.clone());
    budgets
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": budget},
                "spec": {"scope": {"type": "tenant", "name": tenant}, "period": {"type": "monthly"},
                         "limits": {"costUSD": 100}}
            }))
            .unwrap(),
        )
        .await
        .unwrap();
    wait_for(
        "the tenant and the budget to be reconciled",
        Duration::from_secs(60),
        || async {
            let t = tenants.get(&tenant).await.ok()?.status?;
            let b = budgets.get(&budget).await.ok()?.status?;
            (gryvia_types::conditions::is_true(&t.conditions, "Ready") && b.state.is_some())
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
                && metric_sample(&text, "gryvia_reconciles_total", "gryvia-tenants")? >= 1.0
                && metric_sample(&text, "gryvia_reconciles_total", "gryvia-budgets")? >= 1.0)
                .then_some(text)
        },
    )
    .await
    .unwrap();
    assert!(text.contains("# TYPE gryvia_reconciles counter"), "{text}");
    // Every request it sent, by verb and resource: its caches' watches among them.
    assert!(
        text.lines().any(|l| l
            .starts_with(r#"gryvia_api_requests_total{verb="watch",resource="gryviatenants"}"#)),
        "{text}"
    );
    assert!(
        text.contains("# TYPE gryvia_reconcile_duration_seconds histogram"),
        "{text}"
    );
    for controller in ["gryvia-tenants", "gryvia-budgets"] {
        assert!(
            metric_sample(&text, "gryvia_reconcile_duration_seconds_count", controller)
                .is_some_and(|n| n >= 1.0),
            "no duration of {controller}: {text}"
        );
    }
    assert_eq!(
        metric_sample(&text, "gryvia_leader", "gryvia-quota-operator"),
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

    let _ = budgets.delete(&budget, &DeleteParams::default()).await;
    let _ = tenants.delete(&tenant, &DeleteParams::default()).await;
    // The operator removes the tenant's finalizer before it is stopped.
    let _ = wait_for("the tenant to go", Duration::from_secs(30), || async {
        matches!(tenants.get_opt(&tenant).await, Ok(None)).then_some(())
    })
    .await;
    let _ = Api::<Namespace>::all(client.clone())
        .delete(&format!("tenant-{tenant}"), &DeleteParams::background())
        .await;
}
