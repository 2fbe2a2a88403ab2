//! End-to-end: `spec.storage` of a GryviaAIJob against a real control plane (testenv/): the
//! ai-operator binary (under the RBAC of `deploy/ai-operator`) makes the job's
//! PersistentVolumeClaim, kube-controller-manager binds it to a PersistentVolume, the
//! scheduler places the workers with it and every worker mounts it at `/data`.

#[allow(dead_code, reason = "each test file uses part of the shared harness")]
mod common;

use std::time::Duration;

use gryvia_testsupport::{Process, TestNamespace, unique, wait_for};
use gryvia_types::{GryviaAIJob, JobPhase};
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::json;

/// Deletes a PersistentVolume of the test's when dropped (also when the test panics).
struct VolumeCleanup(String);

impl Drop for VolumeCleanup {
    fn drop(&mut self) {
        let name = self.0.clone();
        gryvia_testsupport::on_drop(move |client| async move {
            let _ = Api::<PersistentVolume>::all(client)
                .delete(&name, &DeleteParams::background())
                .await;
        });
    }
}

#[tokio::test]
#[expect(
    clippy::too_many_lines,
    reason = "one end-to-end scenario, read top to bottom"
)]
async fn a_job_with_storage_gets_a_bound_claim_that_every_worker_mounts_at_data() {
    let Some(client) = gryvia_testsupport::client().await else {
        return;
    };
    gryvia_client::crds::install(&client, Duration::from_secs(60))
        .await
        .unwrap();
    let lease_ns = TestNamespace::create(&client, "aiop-st").await.unwrap();
    let ns = TestNamespace::create(&client, "aijob-storage")
        .await
        .unwrap();

    // A volume of a StorageClass name only this test uses: nothing else binds to it, and no
    // provisioner is needed (kube-controller-manager binds the claim to it).
    let class = unique("e2e-storage");
    let pv_name = unique("e2e-data");
    let pv: PersistentVolume = serde_json::from_value(json!({
        "metadata": {"name": pv_name, "labels": {"gryvia.io/e2e": "true"}},
        "spec": {"storageClassName": class, "capacity": {"storage": "10Gi"},
                 "accessModes": ["ReadWriteMany"], "persistentVolumeReclaimPolicy": "Retain",
                 "hostPath": {"path": format!("/tmp/{pv_name}")}}
    }))
    .unwrap();
    Api::<PersistentVolume>::all(client.clone())
        .create(&PostParams::default(), &pv)
        .await
        .unwrap();
    let _pv = VolumeCleanup(pv_name.clone());

    let access = common::operator_access(&client, &lease_ns.name).await;
    let (_operator, _port) = Process::operator(
        env!("CARGO_BIN_EXE_gryvia-ai-operator"),
        &lease_ns.name,
        &[],
        Some(&access.kubeconfig),
        "ai-operator-storage",
    )
    .unwrap();

    let jobs: Api<GryviaAIJob> = Api::namespaced(client.clone(), &ns.name);
    let job: GryviaAIJob = serde_json::from_value(json!({
        "metadata": {"name": "train", "namespace": ns.name},
        "spec": {"image": "registry.local/train:1", "gpus": 1, "replicas": 2,
                 "storage": {"size": "5Gi", "storageClassName": class, "accessMode": "ReadWriteMany"}}
    }))
    .unwrap();
    jobs.create(&PostParams::default(), &job).await.unwrap();

    // The claim: named after the job, as the spec asks, owned by the job.
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &ns.name);
    let claim = wait_for(
        "the job's claim to be bound",
        Duration::from_secs(60),
        || {
            let claims = claims.clone();
            async move {
                let c = claims.get("train-data").await.ok()?;
                (c.status.as_ref()?.phase.as_deref() == Some("Bound")).then_some(c)
            }
        },
    )
    .await
    .unwrap();
    let spec = claim.spec.unwrap();
    assert_eq!(spec.storage_class_name.as_deref(), Some(class.as_str()));
    assert_eq!(spec.access_modes.unwrap(), vec!["ReadWriteMany"]);
    assert_eq!(
        spec.resources.unwrap().requests.unwrap()["storage"].0,
        "5Gi"
    );
    assert_eq!(spec.volume_name.as_deref(), Some(pv_name.as_str()));
    let owner = &claim.metadata.owner_references.unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str()),
        ("GryviaAIJob", "train")
    );
    assert_eq!(
        claim.metadata.labels.unwrap()["gryvia.io/job-name"],
        "train"
    );

    // The workers are placed with the bound claim and the job runs to the end.
    let done = wait_for("the job to succeed", Duration::from_secs(120), || {
        let jobs = jobs.clone();
        async move {
            let j = jobs.get("train").await.ok()?;
            (j.status.as_ref()?.phase == Some(JobPhase::Succeeded)).then_some(j)
        }
    })
    .await;
    if let Err(e) = done {
        let now = jobs.get("train").await.map(|j| j.status);
        panic!("{e:#}; status now: {now:?}");
    }
    let pods = Api::<Pod>::namespaced(client.clone(), &ns.name)
        .list(&ListParams::default().labels("gryvia.io/job-name=train"))
        .await
        .unwrap()
        .items;
    assert_eq!(pods.len(), 2, "{pods:?}");
    for p in &pods {
        let spec = p.spec.as_ref().unwrap();
        let volume = spec
            .volumes
            .as_ref()
            .unwrap()
            .iter()
            .find(|v| v.name == "gryvia-data")
            .unwrap();
        assert_eq!(
            volume.persistent_volume_claim.as_ref().unwrap().claim_name,
            "train-data"
        );
        let worker = spec.containers.iter().find(|c| c.name == "worker").unwrap();
        let mount = worker
            .volume_mounts
            .as_ref()
            .unwrap()
            .iter()
            .find(|m| m.name == "gryvia-data")
            .unwrap();
        assert_eq!(mount.mount_path, "/data");
        assert!(spec.node_name.is_some(), "{p:?}");
        assert_eq!(
            p.status.as_ref().unwrap().phase.as_deref(),
            Some("Succeeded")
        );
    }
}
