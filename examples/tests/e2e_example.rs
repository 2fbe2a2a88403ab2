//! The example reconciler, run by Gryvia's runtime against a real control plane.

use std::process::{Command, Stdio};
use std::time::Duration;

use gryvia_testsupport::{TestNamespace, wait_for};
use k8s_openapi::api::core::v1::{Namespace, ResourceQuota};
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

#[tokio::test]
async fn the_example_reconciler_creates_and_removes_a_quota() {
    let Some(client) = gryvia_testsupport::client().await else {
        return;
    };
    let gryvia_testsupport::Cluster::Ready { kubeconfig } = gryvia_testsupport::cluster() else {
        return;
    };
    let ns = TestNamespace::create(&client, "example").await.unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_namespace-gpu-quota"))
        .env("KUBECONFIG", kubeconfig)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let annotate = |v: serde_json::Value| json!({"metadata": {"annotations": {gryvia_examples::ANNOTATION: v}}});
    namespaces
        .patch(
            &ns.name,
            &PatchParams::default(),
            &Patch::Merge(annotate(json!("3"))),
        )
        .await
        .unwrap();
    let quotas: Api<ResourceQuota> = Api::namespaced(client.clone(), &ns.name);
    let found = wait_for("the example quota", Duration::from_secs(30), || async {
        let rq = quotas.get(gryvia_examples::QUOTA).await.ok()?;
        (rq.spec?.hard?.get("requests.nvidia.com/gpu")?.0 == "3").then_some(())
    })
    .await;
    namespaces
        .patch(
            &ns.name,
            &PatchParams::default(),
            &Patch::Merge(annotate(serde_json::Value::Null)),
        )
        .await
        .unwrap();
    let removed = wait_for(
        "the example quota to go",
        Duration::from_secs(30),
        || async {
            quotas
                .get_opt(gryvia_examples::QUOTA)
                .await
                .ok()?
                .is_none()
                .then_some(())
        },
    )
    .await;
    let _ = child.kill();
    let _ = child.wait();
    found.unwrap();
    removed.unwrap();
}
