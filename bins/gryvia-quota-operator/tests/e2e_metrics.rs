//! End-to-end: the quota-operator binary serves Prometheus `/metrics` with the reconcile
//! counters of its controllers, and `/healthz` and `/readyz`, while it runs against a real
//! control plane (testenv/).

#![expect(clippy::unwrap_used, reason = "test helpers panic on failure")]

use std::io::{Read, Write};
use std::time::Duration;

use gryvia_testsupport::{Process, TestNamespace, wait_for};
use gryvia_types::{GryviaBudget, GryviaTenant};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;

/// A port nobody listens on now.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `GET path` on `127.0.0.1:port`: the status code and the body, or `None` while nothing
/// answers.
async fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    let path = path.to_owned();
    tokio::task::spawn_blocking(move || {
        let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
        stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
        write!(
            stream,
            "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
        )
        .ok()?;
        let mut response = String::new();
        stream.read_to_string(&mut response).ok()?;
        let (head, body) = response.split_once("\r\n\r\n")?;
        let code = head.split_whitespace().nth(1)?.parse().ok()?;
        Some((code, body.to_owned()))
    })
    .await
    .unwrap()
}

/// The value of the sample `name{controller="<controller>"}` in Prometheus text.
fn sample(text: &str, name: &str, controller: &str) -> Option<f64> {
    let key = format!("{name}{{controller=\"{controller}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&key))
        .and_then(|v| v.trim().parse().ok())
}

fn unique(prefix: &str) -> String {
    format!(
        "{prefix}-{:x}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_micros()
            % 0xffff_ffff
    )
}

#[tokio::test]
async fn the_quota_operator_serves_reconcile_counters_of_its_controllers_and_answers_its_probes() {
    let Some(client) = gryvia_testsupport::client().await else {
        return;
    };
    gryvia_client::crds::install(&client, Duration::from_secs(60))
        .await
        .unwrap();
    let lease_ns = TestNamespace::create(&client, "qop-metrics").await.unwrap();
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let _operator = Process::start(
        env!("CARGO_BIN_EXE_gryvia-quota-operator"),
        &[
            "--metrics-addr",
            &addr,
            "--lease-namespace",
            &lease_ns.name,
            "--lease-duration",
            "4",
            "--lease-grace",
            "1",
        ],
        None,
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
                "metadata": {"name": tenant}, "spec": {"displayName": "Metrics"}
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
                && sample(&text, "gryvia_reconciles_total", "gryvia-tenants")? >= 1.0
                && sample(&text, "gryvia_reconciles_total", "gryvia-budgets")? >= 1.0)
                .then_some(text)
        },
    )
    .await
    .unwrap();
    assert!(text.contains("# TYPE gryvia_reconciles counter"), "{text}");
    assert!(
        text.contains("# TYPE gryvia_reconcile_duration_seconds histogram"),
        "{text}"
    );
    for controller in ["gryvia-tenants", "gryvia-budgets"] {
        assert!(
            sample(&text, "gryvia_reconcile_duration_seconds_count", controller)
                .is_some_and(|n| n >= 1.0),
            "no duration of {controller}: {text}"
        );
    }
    assert_eq!(
        sample(&text, "gryvia_leader", "gryvia-quota-operator"),
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
