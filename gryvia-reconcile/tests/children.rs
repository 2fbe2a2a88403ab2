//! What the API server receives: the children every reconcile applies, compared with the
//! snapshots in `tests/golden/` (server-side apply takes ownership of every field sent, so an
//! extra field or a missing one is a change of behaviour).
//!
//! `GRYVIA_BLESS=1 cargo test -p gryvia-reconcile --test children` rewrites the snapshots.

#![expect(clippy::unwrap_used, reason = "test helpers panic on broken fixtures")]

use std::collections::BTreeMap;
use std::path::PathBuf;

use gryvia_reconcile::Reconcile;
use gryvia_reconcile::metering::{MeteringReconciler, MeteringWorld, Sku};
use gryvia_reconcile::priority::{PriorityReconciler, PriorityWorld};
use gryvia_reconcile::tenancy::{
    NamespaceState, QuotaReconciler, QuotaWorld, TenantOptions, TenantReconciler, TenantSummary,
    TenantWorld,
};
use gryvia_reconcile::workflow::{WorkflowReconciler, WorkflowWorld};
use gryvia_types::k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use gryvia_types::testing::{ai_job, tenant};
use gryvia_types::{
    GryviaPriority, GryviaQuota, GryviaWorkflow, MemberKind, MemberRole, TenantMember,
    TenantNetworkPolicy,
};
use serde_json::{Value, json};

fn now() -> jiff::Timestamp {
    jiff::Timestamp::from_second(1_800_000_000).unwrap()
}

/// The whole Plan as JSON: its children (identity, ownership, object), and the status, events
/// and node operations around them.
fn children<S: serde::Serialize>(plan: &gryvia_reconcile::Plan<S>) -> Value {
    serde_json::to_value(plan).unwrap()
}

/// Compares `actual` with `tests/golden/<name>.json` (or writes it when blessing).
fn golden(name: &str, actual: &Value) {
    let path: PathBuf = [
        env!("CARGO_MANIFEST_DIR"),
        "tests",
        "golden",
        &format!("{name}.json"),
    ]
    .iter()
    .collect();
    let text = serde_json::to_string_pretty(actual).unwrap() + "\n";
    if std::env::var_os("GRYVIA_BLESS").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, text).unwrap();
        return;
    }
    let expected: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(
        actual,
        &expected,
        "{name} differs from its snapshot:\n{}",
        serde_json::to_string_pretty(actual).unwrap()
    );
}

fn full_tenant() -> gryvia_types::GryviaTenant {
    let mut t = tenant("ml", 16);
    t.spec.members = vec![
        TenantMember {
            kind: MemberKind::User,
            username: "bob".into(),
            role: MemberRole::Member,
        },
        TenantMember {
            kind: MemberKind::User,
            username: "alice".into(),
            role: MemberRole::Admin,
        },
    ];
    t.spec
        .storage_quotas
        .insert("fast".to_owned(), Quantity("1Ti".to_owned()));
    t.spec.network_policy = Some(TenantNetworkPolicy {
        isolated: true,
        allowed_tenants: vec!["cv".to_owned()],
    });
    t
}

#[test]
fn a_tenants_children_are_sent_as_before() {
    let t = full_tenant();
    let world = TenantWorld {
        tenants: vec![TenantSummary::of(&t)],
        ..TenantWorld::default()
    };
    let rbac = TenantReconciler {
        options: TenantOptions { tenant_rbac: true },
    };
    golden("tenant", &children(&rbac.reconcile(&t, &world, now())));
    let mut unlimited = t.clone();
    unlimited.spec.quotas = None;
    unlimited.spec.storage_quotas.clear();
    let world = TenantWorld {
        tenants: vec![TenantSummary::of(&unlimited)],
        ..TenantWorld::default()
    };
    golden(
        "tenant-unlimited",
        &children(&TenantReconciler::default().reconcile(&unlimited, &world, now())),
    );
}

#[test]
fn a_retained_tenant_namespace_is_sent_as_before() {
    let t = full_tenant();
    let world = TenantWorld {
        tenants: vec![TenantSummary::of(&t)],
        namespace: Some(NamespaceState {
            tenant_label: Some("ml".to_owned()),
            terminating: false,
        }),
        workloads: 2,
        ..TenantWorld::default()
    };
    golden(
        "tenant-retained",
        &children(&TenantReconciler::default().cleanup(&t, &world, now())),
    );
}

#[test]
fn a_quotas_resource_quotas_are_sent_as_before() {
    let q: GryviaQuota = serde_json::from_value(json!({
        "apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaQuota",
        "metadata": {"name": "team", "generation": 1},
        "spec": {"namespaces": ["a", "b"],
                 "hard": {"gpus": 4, "cpu": "16", "memory": "64Gi", "storage": "1Ti", "pods": 20}}
    }))
    .unwrap();
    let world = QuotaWorld {
        existing_namespaces: ["a".to_owned()].into(),
        ..QuotaWorld::default()
    };
    golden(
        "quota",
        &children(&QuotaReconciler.reconcile(&q, &world, now())),
    );
}

#[test]
fn a_priority_class_is_sent_as_before() {
    let p: GryviaPriority = serde_json::from_value(json!({
        "apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaPriority",
        "metadata": {"name": "high", "generation": 1},
        "spec": {"value": 1000, "preemptionPolicy": "Never", "description": "urgent work"}
    }))
    .unwrap();
    golden(
        "priority",
        &children(&PriorityReconciler.reconcile(&p, &PriorityWorld::default(), now())),
    );
}

#[test]
fn an_ai_jobs_children_are_sent_as_before() {
    let mut j = ai_job("team-a", "train", "trainer:1");
    let spec = json!({
        "image": "trainer:1", "gpus": 2, "replicas": 3, "gpuType": "H100",
        "command": ["python"], "args": ["train.py"], "cpu": "8", "memory": "64Gi",
        "env": [{"name": "A", "value": "1"}, {"name": "RANK", "value": "9"}],
        "volumes": [
            {"name": "cfg", "configMap": {"name": "cfg"}},
            {"name": "sec", "secret": {"name": "s"}},
            {"name": "scratch", "emptyDir": {"medium": "Memory"}},
            {"name": "host", "hostPath": {"path": "/mnt"}},
            {"name": "pvc", "persistentVolumeClaim": {"claimName": "c", "readOnly": true}}
        ],
        "volumeMounts": [{"name": "cfg", "mountPath": "/cfg", "readOnly": true, "subPath": "x"},
                         {"name": "pvc", "mountPath": "/pvc"}],
        "storage": {"size": "100Gi", "storageClassName": "fast"},
        "nodeSelector": {"zone": "a"},
        "tolerations": [{"key": "k", "operator": "Exists"}],
        "podLabels": {"team": "x"}, "podAnnotations": {"a": "b"},
        "activeDeadlineSeconds": 3600, "ttlSecondsAfterFinished": 60
    });
    j.spec = serde_json::from_value(spec).unwrap();
    j.metadata.annotations = Some(BTreeMap::from([(
        "gryvia.io/priority-class".to_owned(),
        "high".to_owned(),
    )]));
    j.metadata.labels = Some(BTreeMap::from([(
        "gryvia.io/template".to_owned(),
        "t".to_owned(),
    )]));
    let world = gryvia_reconcile::aijob::AIJobWorld {
        priority_class_exists: true,
        ..Default::default()
    };
    golden(
        "aijob",
        &children(&gryvia_reconcile::aijob::AIJobReconciler.reconcile(&j, &world, now())),
    );
    let one = ai_job("team-a", "one", "trainer:1");
    golden(
        "aijob-one-worker",
        &children(&gryvia_reconcile::aijob::AIJobReconciler.reconcile(
            &one,
            &Default::default(),
            now(),
        )),
    );
}

#[test]
fn a_usage_record_is_sent_as_before() {
    let mut j = ai_job("tenant-ml", "train", "trainer:1");
    j.status = Some(serde_json::from_value(json!({"startTime": "2026-01-01T00:00:00Z"})).unwrap());
    let world = MeteringWorld {
        skus: vec![Sku {
            name: "h100".into(),
            gpu_product: "H100".into(),
            price_micros: 1,
            currency: "USD".into(),
        }],
        tenant: Some("ml".into()),
        node_product: Some("H100".into()),
    };
    golden(
        "usage-record",
        &children(&MeteringReconciler.reconcile(&j, &world, now())),
    );
}

#[test]
fn a_workflow_steps_job_is_sent_as_before() {
    let wf: GryviaWorkflow = serde_json::from_value(json!({
        "apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaWorkflow",
        "metadata": {"name": "pipe", "namespace": "ml", "generation": 1,
                     "annotations": {"gryvia.io/priority-class": "high", "other": "x"}},
        "spec": {"steps": [{"name": "prep", "job": {"image": "prep:1", "gpus": 1}}]}
    }))
    .unwrap();
    golden(
        "workflow",
        &children(&WorkflowReconciler.reconcile(&wf, &WorkflowWorld::default(), now())),
    );
}

#[test]
fn a_remediation_request_is_sent_as_before() {
    use gryvia_reconcile::health::{HealthCheckReconciler, HealthOptions, HealthWorld, NodeInfo};
    use gryvia_types::testing::{gpu_node, health_check};
    use gryvia_types::{CheckType, RemediationAction, RemediationSpec};
    let mut hc = health_check("hc", CheckType::GpuEccErrors, 0.0);
    hc.spec.on_failure.cordon = true;
    hc.spec.on_failure.auto_remediate = true;
    for (steps, name) in [
        (vec![RemediationAction::GpuReset], "remediation-request"),
        (
            vec![RemediationAction::Reboot],
            "remediation-request-reboot",
        ),
    ] {
        hc.spec.remediation = Some(RemediationSpec {
            steps,
            step_timeout_seconds: 60,
            reboot_method: Default::default(),
            max_concurrent_nodes: 1,
        });
        let mut gn = gpu_node("n1", 2, now());
        gn.status.as_mut().unwrap().gpus[1].ecc_double_bit = Some(3);
        let world = HealthWorld {
            nodes: vec![NodeInfo {
                name: "n1".into(),
                gpu_capacity: 2,
                unschedulable: true,
                quarantined_by: Some("hc".into()),
                ..NodeInfo::default()
            }],
            gpu_nodes: BTreeMap::from([("n1".to_owned(), std::sync::Arc::new(gn))]),
            ..HealthWorld::default()
        };
        let reconciler = HealthCheckReconciler {
            options: HealthOptions { remediation: true },
        };
        golden(name, &children(&reconciler.reconcile(&hc, &world, now())));
    }
}
