//! End-to-end: the CRDs on a real API server (testenv/), and the KWOK GPU nodes running work.
//!
//! Skipped with a printed reason when no control plane is available and `GRYVIA_E2E` is not
//! set; required (failing when the control plane is missing) under `GRYVIA_E2E=1`.

#![expect(clippy::unwrap_used, reason = "test helpers panic on failure")]

use std::path::Path;
use std::time::Duration;

use gryvia_testsupport::{TestNamespace, wait_for};
use gryvia_types::validation::parse_yaml_documents;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, PostParams,
};
use serde_json::Value;

fn fixtures(rel: &str) -> Vec<Value> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../gryvia-types/tests/data")
        .join(rel);
    parse_yaml_documents(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// The Api for a Gryvia object, in `namespace` when its kind is namespaced.
fn api_for(client: &kube::Client, doc: &Value, namespace: &str) -> (Api<DynamicObject>, bool) {
    let kind = doc["kind"].as_str().unwrap();
    let crd = gryvia_types::crds::by_kind(kind).unwrap();
    let gvk = GroupVersionKind::gvk(gryvia_types::GROUP, gryvia_types::VERSION, kind);
    let ar = ApiResource::from_gvk_with_plural(&gvk, &crd.spec.names.plural);
    if crd.spec.scope == "Namespaced" {
        (Api::namespaced_with(client.clone(), namespace, &ar), true)
    } else {
        (Api::all_with(client.clone(), &ar), false)
    }
}

fn to_dynamic(doc: &Value, namespace: &str, namespaced: bool) -> DynamicObject {
    let mut doc = doc.clone();
    if namespaced {
        doc["metadata"]["namespace"] = Value::String(namespace.to_owned());
    }
    serde_json::from_value(doc).unwrap()
}

async fn installed(client: &kube::Client) {
    let names = gryvia_client::crds::install(client, Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(names.len(), gryvia_types::crds::all().len());
}

#[tokio::test]
async fn crds_install_and_become_established() {
    let Some(client) = gryvia_testsupport::client().await else {
        return;
    };
    installed(&client).await;
    // Installing again is a no-op that still succeeds.
    installed(&client).await;
    let crds: Api<CustomResourceDefinition> = Api::all(client);
    for crd in gryvia_types::crds::all() {
        let name = crd.metadata.name.unwrap();
        let live = crds.get(&name).await.unwrap();
        let established = live
            .status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .into_iter()
            .any(|c| c.type_ == "Established" && c.status == "True");
        assert!(established, "{name} is not Established");
        assert_eq!(live.spec.names.categories, Some(vec!["gryvia".to_owned()]));
    }
}

#[tokio::test]
async fn the_guide_tenant_is_accepted_and_stored() {
    let Some(client) = gryvia_testsupport::client().await else {
        return;
    };
    installed(&client).await;
    let mut doc = fixtures("guide/tenant.yaml").remove(0);
    let name = format!("ml-research-{}", std::process::id());
    doc["metadata"]["name"] = Value::String(name.clone());
    let (api, _) = api_for(&client, &doc, "");
    let created = api
        .create(&PostParams::default(), &to_dynamic(&doc, "", false))
        .await
        .unwrap();
    assert_eq!(created.data["spec"]["quotas"]["concurrentGPUs"], 128);
    // The API server applied the schema default.
    assert_eq!(created.data["spec"]["deletionPolicy"], "Retain");
    let typed: gryvia_types::GryviaTenant =
        serde_json::from_value(serde_json::to_value(&created).unwrap()).unwrap();
    assert_eq!(typed.spec.display_name, "Machine Learning Research");
    api.delete(&name, &DeleteParams::default()).await.unwrap();
}

#[tokio::test]
async fn every_guide_example_and_valid_fixture_passes_the_api_server() {
    let Some(client) = gryvia_testsupport::client().await else {
        return;
    };
    installed(&client).await;
    let ns = TestNamespace::create(&client, "valid").await.unwrap();
    let dry_run = PostParams {
        dry_run: true,
        ..Default::default()
    };
    let mut docs = fixtures("valid/all.yaml");
    for f in ["healthcheck", "reservation", "tenant", "template", "budget"] {
        docs.extend(fixtures(&format!("guide/{f}.yaml")));
    }
    assert_eq!(docs.len(), gryvia_types::crds::all().len());
    for doc in &docs {
        let (api, namespaced) = api_for(&client, doc, &ns.name);
        if let Err(e) = api
            .create(&dry_run, &to_dynamic(doc, &ns.name, namespaced))
            .await
        {
            panic!("API server rejected valid {}: {e}", doc["kind"]);
        }
    }
}

#[tokio::test]
async fn invalid_objects_are_rejected_by_the_api_server_naming_the_field() {
    let Some(client) = gryvia_testsupport::client().await else {
        return;
    };
    installed(&client).await;
    let ns = TestNamespace::create(&client, "invalid").await.unwrap();
    let dry_run = PostParams {
        dry_run: true,
        ..Default::default()
    };
    let docs = fixtures("invalid/cases.yaml");
    assert!(docs.len() >= 20);
    for doc in &docs {
        let expected = doc["metadata"]["annotations"]["test.gryvia.io/expect"]
            .as_str()
            .unwrap();
        let (api, namespaced) = api_for(&client, doc, &ns.name);
        match api
            .create(&dry_run, &to_dynamic(doc, &ns.name, namespaced))
            .await
        {
            Ok(_) => panic!("API server accepted invalid {} ({expected})", doc["kind"]),
            Err(kube::Error::Api(status)) => {
                assert_eq!(status.code, 422, "{status:?}");
                assert!(
                    status.message.contains(expected),
                    "expected {expected:?} in the API server's message {:?}",
                    status.message
                );
            }
            Err(e) => panic!("unexpected error for {}: {e}", doc["kind"]),
        }
    }
}

#[tokio::test]
async fn a_gpu_job_runs_to_completion_on_a_kwok_gpu_node() {
    let Some(client) = gryvia_testsupport::client().await else {
        return;
    };
    let ns = TestNamespace::create(&client, "gpujob").await.unwrap();
    let job: Job = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "gpu-smoke"},
        "spec": {
            "backoffLimit": 0,
            "template": {"spec": {
                "restartPolicy": "Never",
                "containers": [{
                    "name": "main", "image": "busybox",
                    "resources": {"limits": {"nvidia.com/gpu": "1"}}
                }]
            }}
        }
    }))
    .unwrap();
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns.name);
    jobs.create(&PostParams::default(), &job).await.unwrap();
    wait_for("the job to succeed", Duration::from_secs(90), || async {
        let j = jobs.get("gpu-smoke").await.ok()?;
        (j.status?.succeeded? == 1).then_some(())
    })
    .await
    .unwrap();
    let pods: Api<Pod> = Api::namespaced(client, &ns.name);
    let list = pods
        .list(&ListParams::default().labels("job-name=gpu-smoke"))
        .await
        .unwrap();
    let pod = list.items.first().expect("the job's pod");
    let node = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .unwrap_or_default();
    assert!(node.starts_with("gpu-node-"), "pod ran on {node:?}");
}
