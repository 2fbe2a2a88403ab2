//! Admission decisions and mutations of GryviaAIJobs.

#![expect(clippy::unwrap_used, reason = "test helpers panic on broken fixtures")]

use std::collections::BTreeMap;

use gryvia_reconcile::admission::{
    AdmissionWorld, GpuQuota, ReservationFacts, TemplateState, TenantFacts, mutate_job,
    training_env, validate_job,
};
use gryvia_types::GryviaAIJob;
use gryvia_types::testing::ai_job;
use serde_json::{Value, json};

fn job(spec: Value) -> GryviaAIJob {
    let mut j = ai_job("tenant-ml", "train", "img");
    let mut s = serde_json::to_value(&j.spec).unwrap();
    for (k, v) in spec.as_object().unwrap() {
        s[k] = v.clone();
    }
    j.spec = serde_json::from_value(s).unwrap();
    j
}

fn world() -> AdmissionWorld {
    AdmissionWorld {
        tenant: Some(TenantFacts {
            name: "ml".into(),
            allowed_skus: vec!["h100".into()],
            gpus_per_type: BTreeMap::from([("NVIDIA-H100-80GB-HBM3".into(), 16)]),
            gpus_in_use_by_type: BTreeMap::from([("NVIDIA-H100-80GB-HBM3".into(), 8)]),
            ..TenantFacts::default()
        }),
        skus: BTreeMap::from([
            ("h100".into(), "NVIDIA-H100-80GB-HBM3".into()),
            ("a100".into(), "NVIDIA-A100-SXM4-80GB".into()),
        ]),
        gpu_quota: Some(GpuQuota {
            name: "gryvia-tenant".into(),
            hard: 32,
            used: 20,
        }),
        template: None,
        reservation: None,
        tiers: BTreeMap::new(),
        requester: None,
        preemptible: BTreeMap::new(),
        blocked_budgets: Vec::new(),
        spend: None,
    }
}

fn with_annotation(mut j: GryviaAIJob, k: &str, v: &str) -> GryviaAIJob {
    j.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(k.into(), v.into());
    j
}

#[test]
fn a_disallowed_sku_is_rejected_naming_the_field_and_the_allowed_skus() {
    let d = validate_job(&job(json!({"gpuType": "NVIDIA-A100-SXM4-80GB"})), &world());
    assert!(!d.allowed);
    assert_eq!(
        d.message.unwrap(),
        "spec.gpuType: NVIDIA-A100-SXM4-80GB is not allowed for tenant ml (allowed SKUs: h100; products: NVIDIA-H100-80GB-HBM3)"
    );
}

#[test]
fn an_allowed_sku_by_product_or_by_sku_name_is_admitted() {
    assert!(validate_job(&job(json!({"gpuType": "NVIDIA-H100-80GB-HBM3"})), &world()).allowed);
    assert!(validate_job(&job(json!({"gpuType": "h100", "gpus": 1})), &world()).allowed);
}

#[test]
fn a_gpu_job_without_a_gpu_type_is_rejected_when_the_tenant_restricts_skus() {
    let d = validate_job(&job(json!({})), &world());
    assert!(
        d.message
            .unwrap()
            .starts_with("spec.gpuType: tenant ml may only use SKUs h100")
    );
    assert!(
        validate_job(&job(json!({"gpus": 0})), &world()).allowed,
        "CPU jobs need no SKU"
    );
}

#[test]
fn a_job_over_the_namespace_gpu_quota_is_rejected_with_what_is_left() {
    let mut w = world();
    w.tenant = None;
    let d = validate_job(&job(json!({"gpus": 8, "replicas": 2})), &w);
    assert_eq!(
        d.message.unwrap(),
        "spec.gpus: the job needs 16 GPUs (gpus x replicas) and the namespace has 12 of its 32-GPU quota left (ResourceQuota gryvia-tenant)"
    );
    assert!(validate_job(&job(json!({"gpus": 4, "replicas": 3})), &w).allowed);
}

#[test]
fn a_job_over_the_tenants_per_product_limit_is_rejected() {
    let mut w = world();
    w.gpu_quota = None;
    let d = validate_job(
        &job(json!({"gpuType": "h100", "gpus": 8, "replicas": 2})),
        &w,
    );
    assert!(d.message.unwrap().contains("tenant ml uses 8 of its 16"));
    assert!(validate_job(&job(json!({"gpuType": "h100", "gpus": 8})), &w).allowed);
}

#[test]
fn a_priority_outside_0_to_100_is_rejected() {
    let mut j = job(json!({"gpus": 0}));
    j.spec.priority = 101;
    assert_eq!(
        validate_job(&j, &AdmissionWorld::default())
            .message
            .unwrap(),
        "spec.priority: 101 is outside 0..100"
    );
}

#[test]
fn a_template_label_must_name_a_valid_template() {
    let mut j = job(json!({"gpus": 0}));
    j.metadata.labels = Some(BTreeMap::from([("gryvia.io/template".into(), "t".into())]));
    let mut w = AdmissionWorld {
        template: Some(TemplateState::Missing),
        ..Default::default()
    };
    assert!(
        validate_job(&j, &w)
            .message
            .unwrap()
            .ends_with("template t does not exist")
    );
    w.template = Some(TemplateState::Invalid("defaults.image: required".into()));
    assert!(
        validate_job(&j, &w)
            .message
            .unwrap()
            .contains("is not valid: defaults.image")
    );
    w.template = Some(TemplateState::Valid);
    assert!(validate_job(&j, &w).allowed);
}

#[test]
fn a_reservation_must_exist_and_belong_to_the_jobs_tenant() {
    let j = with_annotation(
        job(json!({"gpuType": "h100"})),
        "gryvia.io/reservation",
        "r1",
    );
    let mut w = world();
    w.reservation = Some(ReservationFacts {
        exists: false,
        owner: None,
        ..ReservationFacts::default()
    });
    assert!(
        validate_job(&j, &w)
            .message
            .unwrap()
            .contains("reservation r1 does not exist")
    );
    w.reservation = Some(ReservationFacts {
        exists: true,
        owner: Some("other-team".into()),
        ..ReservationFacts::default()
    });
    assert!(
        validate_job(&j, &w)
            .message
            .unwrap()
            .contains("belongs to other-team")
    );
    w.reservation = Some(ReservationFacts {
        exists: true,
        owner: Some("ml".into()),
        ..ReservationFacts::default()
    });
    assert!(validate_job(&j, &w).allowed);
}

#[test]
fn tolerating_the_reserved_taint_without_the_reservation_annotation_is_rejected() {
    let j = job(
        json!({"gpus": 0, "tolerations": [{"key": "gryvia.io/reserved", "operator": "Exists"}]}),
    );
    let d = validate_job(&j, &AdmissionWorld::default());
    assert!(d.message.unwrap().starts_with("spec.tolerations[0]"));
    let blanket = job(json!({"gpus": 0, "tolerations": [{"operator": "Exists"}]}));
    assert!(!validate_job(&blanket, &AdmissionWorld::default()).allowed);
}

#[test]
fn the_mutation_adds_the_reservations_toleration_and_node_selector_which_then_validate() {
    let j = with_annotation(
        job(json!({"gpuType": "h100"})),
        "gryvia.io/reservation",
        "r1",
    );
    let ops = mutate_job(&j, &AdmissionWorld::default());
    let mut doc = serde_json::to_value(&j).unwrap();
    let patch: json_patch_apply::Patch = ops.clone();
    json_patch_apply::apply(&mut doc, &patch);
    let mutated: GryviaAIJob = serde_json::from_value(doc).unwrap();
    assert_eq!(mutated.spec.node_selector["gryvia.io/reserved"], "r1");
    let t = &mutated.spec.tolerations[0];
    assert_eq!(t.key.as_deref(), Some("gryvia.io/reserved"));
    assert_eq!(t.value.as_deref(), Some("r1"));
    let mut w = world();
    w.reservation = Some(ReservationFacts {
        exists: true,
        owner: Some("ml".into()),
        ..ReservationFacts::default()
    });
    assert!(validate_job(&mutated, &w).allowed);
    // Mutating the mutated job adds nothing more.
    let again: Vec<Value> = mutate_job(&mutated, &AdmissionWorld::default())
        .into_iter()
        .filter(|op| op["path"] != "/spec/env")
        .collect();
    assert!(again.is_empty(), "{again:?}");
}

#[test]
fn pytorch_jobs_get_torchrun_and_nccl_environment_without_overriding_the_users() {
    let j = job(json!({"framework": "pytorch", "replicas": 4, "gpus": 8,
        "env": [{"name": "NCCL_DEBUG", "value": "INFO"}]}));
    let env = training_env(&j);
    let get = |n: &str| {
        env.iter()
            .find(|e| e["name"] == n)
            .map(|e| e["value"].clone())
    };
    assert_eq!(get("PET_NNODES"), Some(json!("4")));
    assert_eq!(get("PET_NPROC_PER_NODE"), Some(json!("8")));
    assert_eq!(get("PET_NODE_RANK"), Some(json!("$(RANK)")));
    assert_eq!(get("NCCL_SOCKET_IFNAME"), Some(json!("^lo,docker0")));
    assert_eq!(get("NCCL_DEBUG"), None, "the job's own NCCL_DEBUG stays");
    let ops = mutate_job(&j, &AdmissionWorld::default());
    let all = ops[0]["value"].as_array().unwrap();
    assert_eq!(all[0], json!({"name": "NCCL_DEBUG", "value": "INFO"}));
}

#[test]
fn tensorflow_jax_and_mpi_get_their_own_environment() {
    let tf = training_env(&job(json!({"framework": "tensorflow", "replicas": 2})));
    let cfg = tf.iter().find(|e| e["name"] == "TF_CONFIG").unwrap()["value"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        cfg,
        r#"{"cluster":{"worker":["train-0.train:2222","train-1.train:2222"]},"task":{"type":"worker","index":$(RANK)}}"#
    );
    let jax = training_env(&job(json!({"framework": "jax", "replicas": 2})));
    assert!(
        jax.iter().any(|e| e["name"] == "JAX_COORDINATOR_ADDRESS"
            && e["value"] == "$(MASTER_ADDR):$(MASTER_PORT)")
    );
    let mpi = training_env(&job(json!({"framework": "mpi", "replicas": 2})));
    assert!(
        mpi.iter()
            .any(|e| e["name"] == "GRYVIA_WORKER_HOSTS"
                && e["value"] == "train-0.train,train-1.train")
    );
    let cpu = training_env(&job(json!({"gpus": 0})));
    assert!(cpu.is_empty(), "a CPU job without a framework gets nothing");
}

/// A minimal RFC 6902 `add` applier for the tests (the API server applies the real patch in
/// the e2e tests).
mod json_patch_apply {
    use serde_json::Value;

    pub type Patch = Vec<Value>;

    pub fn apply(doc: &mut Value, patch: &Patch) {
        for op in patch {
            assert_eq!(op["op"], "add");
            let path = op["path"].as_str().unwrap();
            let mut parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
            let last = parts.pop().unwrap();
            let mut cur = &mut *doc;
            for p in parts {
                cur = &mut cur[p];
            }
            cur[last] = op["value"].clone();
        }
    }
}

#[test]
fn a_blocked_budget_rejects_gpu_jobs_and_lets_cpu_jobs_through() {
    let mut w = world();
    w.blocked_budgets = vec![gryvia_reconcile::admission::BlockedBudget {
        name: "ml-monthly".into(),
        spend_usd: Some("50012.5".into()),
    }];
    let d = validate_job(
        &job(json!({"gpus": 1, "gpuType": "NVIDIA-H100-80GB-HBM3"})),
        &w,
    );
    assert!(!d.allowed);
    assert_eq!(
        d.message.unwrap(),
        "GryviaBudget ml-monthly is blocked (spend 50012.5 USD of its limit): new GPU jobs in its scope are rejected until its period ends or its limit is raised"
    );
    assert!(validate_job(&job(json!({"gpus": 0})), &w).allowed);
}
