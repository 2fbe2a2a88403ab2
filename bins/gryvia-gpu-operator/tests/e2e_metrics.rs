//! End-to-end: the gpu-operator binary (`--gpu-health`) serves Prometheus `/metrics` with the
//! reconcile counter of its health-check controller, and `/healthz` and `/readyz`, while it
//! runs against a real control plane (testenv/).

#![expect(clippy::unwrap_used, reason = "test helpers panic on failure")]

use std::io::{Read, Write};
use std::time::Duration;

use gryvia_testsupport::{NODE_GROUP_LABEL, Process, TestNamespace, wait_for};
use gryvia_types::GryviaHealthCheck;
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
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    // Evaluation only (no --gpu-remediation): it acts on no node of anyone's.
    let _operator = Process::start(
        env!("CARGO_BIN_EXE_gryvia-gpu-operator"),
        &[
            "--gpu-health",
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
            (code == 200 && sample(&text, "gryvia_reconciles_total", "gryvia-gpu-health")? >= 1.0)
                .then_some(text)
        },
    )
    .await
    .unwrap();
    assert!(text.contains("# TYPE gryvia_reconciles counter"), "{text}");
    assert!(
        sample(
            &text,
            "gryvia_reconcile_duration_seconds_count",
            "gryvia-gpu-health"
        )
        .is_some_and(|n| n >= 1.0),
        "{text}"
    );
    assert_eq!(
        sample(&text, "gryvia_leader", "gryvia-gpu-operator"),
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
