//! The AI job policy on its hot paths: one job reconcile (render the batch Job, classify 64
//! worker pods), an admission decision and mutation (what each webhook review computes besides
//! JSON), rendering a template, and a reservation's node choice over 1,000 nodes.

use std::collections::BTreeMap;
use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use gryvia_reconcile::Reconcile;
use gryvia_reconcile::admission::{
    AdmissionWorld, GpuQuota, TenantFacts, mutate_job, validate_job,
};
use gryvia_reconcile::aijob::{
    AIJobReconciler, AIJobWorld, ObservedJob, ObservedNode, ObservedPod,
};
use gryvia_reconcile::reservation::{CandidateNode, ReservationWorld, choose_nodes};
use gryvia_types::{GryviaAIJob, GryviaTemplate};
use serde_json::json;

fn job() -> GryviaAIJob {
    serde_json::from_value(json!({
        "apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaAIJob",
        "metadata": {"name": "llm-pretrain", "namespace": "tenant-ml", "uid": "u1", "generation": 1},
        "spec": {"image": "registry.local/train:1", "gpus": 8, "replicas": 64, "framework": "pytorch",
                 "gpuType": "NVIDIA-H100-80GB-HBM3", "retryLimit": 5,
                 "storage": {"size": "1Ti", "accessMode": "ReadWriteMany"},
                 "env": [{"name": "EPOCHS", "value": "10"}]}
    }))
    .unwrap_or_else(|e| unreachable!("fixture: {e}"))
}

fn bench(c: &mut Criterion) {
    let now = jiff::Timestamp::from_second(1_800_000_000).unwrap_or(jiff::Timestamp::UNIX_EPOCH);
    let j = job();
    let pods: Vec<ObservedPod> = (0..64)
        .map(|i| ObservedPod {
            name: format!("llm-pretrain-{i}-abcde"),
            node: Some(format!("node-{i}")),
            phase: if i % 16 == 0 { "Failed" } else { "Running" }.to_owned(),
            exit_code: (i % 16 == 0).then_some(1),
            ..Default::default()
        })
        .collect();
    let nodes: BTreeMap<String, ObservedNode> = (0..64)
        .map(|i| (format!("node-{i}"), ObservedNode::default()))
        .collect();
    let world = AIJobWorld {
        job: Some(ObservedJob {
            owned: true,
            backoff_limit: 5,
            active: 60,
            ready: 60,
            ..Default::default()
        }),
        pods,
        nodes,
        priority_class_exists: false,
        queued: false,
        kueue: None,
        sla_seconds: None,
    };
    c.bench_function("reconcile_aijob/64_workers", |b| {
        b.iter(|| AIJobReconciler.reconcile(black_box(&j), black_box(&world), now))
    });

    let admission = AdmissionWorld {
        tenant: Some(TenantFacts {
            name: "ml".into(),
            allowed_skus: vec!["h100".into(), "a100".into()],
            gpus_per_type: BTreeMap::from([("NVIDIA-H100-80GB-HBM3".into(), 1024)]),
            gpus_in_use_by_type: BTreeMap::from([("NVIDIA-H100-80GB-HBM3".into(), 256)]),
            ..TenantFacts::default()
        }),
        skus: BTreeMap::from([
            ("h100".into(), "NVIDIA-H100-80GB-HBM3".into()),
            ("a100".into(), "NVIDIA-A100-SXM4-80GB".into()),
        ]),
        tiers: BTreeMap::new(),
        requester: None,
        preemptible: BTreeMap::new(),
        gpu_quota: Some(GpuQuota {
            name: "q".into(),
            hard: 2048,
            used: 512,
        }),
        template: None,
        reservation: None,
        blocked_budgets: Vec::new(),
        spend: None,
    };
    c.bench_function("admission/validate", |b| {
        b.iter(|| validate_job(black_box(&j), black_box(&admission)))
    });
    c.bench_function("admission/mutate", |b| {
        b.iter(|| mutate_job(black_box(&j), &AdmissionWorld::default()))
    });

    let tpl: GryviaTemplate = serde_json::from_value(json!({
        "apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaTemplate",
        "metadata": {"name": "fine-tune"},
        "spec": {"category": "fine-tuning",
                 "defaults": {"image": "registry.local/ft:{{ .version }}", "gpus": 4,
                              "command": ["torchrun", "ft.py", "--data={{ .dataPath }}", "--lr={{ .lr }}"]},
                 "parameters": [{"name": "dataPath", "required": true, "validation": {"pattern": "/[a-z0-9/_-]+"}},
                                {"name": "lr", "type": "number", "default": "0.0001", "validation": {"min": 0, "max": 1}},
                                {"name": "version", "default": "v2", "validation": {"enum": ["v1", "v2"]}}]}
    }))
    .unwrap_or_else(|e| unreachable!("fixture: {e}"));
    let params = BTreeMap::from([("dataPath".to_owned(), "/datasets/reviews".to_owned())]);
    c.bench_function("template/render", |b| {
        b.iter(|| {
            gryvia_reconcile::template::render(black_box(&tpl), "job", "ns", black_box(&params))
        })
    });

    let fleet = ReservationWorld {
        nodes: (0..1000)
            .map(|i| CandidateNode {
                name: format!("gpu-{i:04}"),
                product: Some(if i % 2 == 0 { "H100" } else { "A100" }.into()),
                gpus: 8,
                gpus_in_use: i % 9,
                reserved_by: (i % 50 == 0).then(|| "other".to_owned()),
                ..Default::default()
            })
            .collect(),
        ..ReservationWorld::default()
    };
    c.bench_function("reservation/choose_256_gpus_of_1000_nodes", |b| {
        b.iter(|| choose_nodes("r1", "H100", 256, black_box(&fleet)))
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
