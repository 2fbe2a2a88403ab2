//! `--dry-run` against a real control plane: the operator observes and decides as usual, logs
//! every Plan, and changes nothing in the cluster.

use std::time::Duration;

use gryvia_types::GryviaTenant;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DeleteParams, PostParams};

fn log_path(name: &str) -> std::path::PathBuf {
    gryvia_testsupport::repo_root().join(format!("target/e2e-logs/{name}.log"))
}

#[tokio::test]
async fn an_operator_in_dry_run_changes_nothing_and_logs_its_plans() {
    let Some(client) = gryvia_testsupport::client().await else {
        return;
    };
    gryvia_client::crds::install(&client, Duration::from_secs(60))
        .await
        .unwrap();
    let name = format!(
        "dry-{}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis()
            % 1_000_000
    );
    let log_name = format!("quota-operator-{name}");
    let _operator = gryvia_testsupport::Process::start(
        env!("CARGO_BIN_EXE_gryvia-quota-operator"),
        &["--dry-run", "--metering", "--metrics-addr", "127.0.0.1:0"],
        None,
        &log_name,
    )
    .unwrap();
    let tenants: Api<GryviaTenant> = Api::all(client.clone());
    let tenant: GryviaTenant = serde_json::from_value(serde_json::json!({
        "apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaTenant",
        "metadata": {"name": name},
        "spec": {"displayName": "dry run", "quotas": {"concurrentGPUs": 4},
                 "networkPolicy": {"isolated": true}}
    }))
    .unwrap();
    tenants
        .create(&PostParams::default(), &tenant)
        .await
        .unwrap();

    // The Plan is logged: the tenant's namespace and quota would be applied, its status set.
    let namespace = format!("tenant-{name}");
    let line = gryvia_testsupport::wait_for(
        "the dry-run Plan of the tenant in the operator's log",
        Duration::from_secs(60),
        || async {
            let log = std::fs::read_to_string(log_path(&log_name)).unwrap_or_default();
            log.lines()
                .find(|l| {
                    l.contains("dry run: would apply plan")
                        && l.contains(&format!("Namespace/{namespace}"))
                })
                .map(str::to_owned)
        },
    )
    .await
    .unwrap();
    assert!(line.contains("ResourceQuota"), "{line}");
    assert!(line.contains("update status"), "{line}");

    // ... and nothing was done: no namespace, no status, no finalizer, no Lease sought.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        Api::<Namespace>::all(client.clone())
            .get_opt(&namespace)
            .await
            .unwrap()
            .is_none(),
        "a dry run created the namespace"
    );
    let stored = tenants.get(&name).await.unwrap();
    assert!(
        stored.status.is_none(),
        "a dry run wrote a status: {:?}",
        stored.status
    );
    assert!(
        stored.metadata.finalizers.unwrap_or_default().is_empty(),
        "a dry run added a finalizer"
    );
    let log = std::fs::read_to_string(log_path(&log_name)).unwrap();
    assert!(
        !log.contains("waiting for leadership") && !log.contains("became leader"),
        "a dry run took part in leader election"
    );
    tenants
        .delete(&name, &DeleteParams::default())
        .await
        .unwrap();
}
