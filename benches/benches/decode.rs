//! The typed decode of a list response (`gryvia_types::crds::typed_list`), which
//! `gryvia.Client.list` and `gryvia.decode_list` run: 10,000 GryviaAIJobs shaped like those of
//! `benches/python/decode.py`, against a plain `serde_json::Value` parse of the same body.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::{Value, json};

fn item(i: usize) -> Value {
    let name = format!("train-{i:05}");
    let conditions = json!([
        {"type": "Running", "status": "False", "reason": "Finished", "message": "all workers done",
         "lastTransitionTime": "2026-12-02T12:10:00Z"},
        {"type": "Succeeded", "status": "True", "reason": "Completed", "message": "2 of 2 succeeded",
         "lastTransitionTime": "2026-12-02T12:10:00Z"}]);
    json!({
        "apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaAIJob",
        "metadata": {"name": name, "namespace": format!("team-{}", i % 20),
            "uid": format!("00000000-0000-4000-8000-{i:012}"), "resourceVersion": (100_000 + i).to_string(),
            "generation": 1, "creationTimestamp": "2026-12-02T12:00:00Z",
            "labels": {"gryvia.io/tenant": format!("team-{}", i % 20), "app": "train", "run": format!("r{}", i % 7)},
            "annotations": {"gryvia.io/owner": "ml-platform", "note": "nightly fine-tune"}},
        "spec": {"image": "registry.local/train:1.4", "command": ["torchrun", "train.py"],
            "args": ["--epochs=10"], "gpus": 2, "replicas": 2, "framework": "pytorch",
            "gpuType": "NVIDIA-H100-80GB-HBM3", "retryLimit": 3,
            "env": [{"name": "EPOCHS", "value": "10"}, {"name": "SEED", "value": i.to_string()}]},
        "status": {"phase": "Succeeded", "jobName": name, "active": 0, "succeeded": 2, "failed": 0,
            "retries": 0, "startTime": "2026-12-02T12:00:05Z", "completionTime": "2026-12-02T12:10:00Z",
            "conditions": conditions}
    })
}

fn bench(c: &mut Criterion) {
    let items: Vec<Value> = (0..10_000).map(item).collect();
    let body = json!({"apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaAIJobList",
        "metadata": {"resourceVersion": "200000"}, "items": items})
    .to_string()
    .into_bytes();
    let mut group = c.benchmark_group("decode");
    group.sample_size(10);
    group.bench_function("typed_list/10000_aijobs", |b| {
        b.iter(|| gryvia_types::crds::typed_list(black_box(&body)))
    });
    group.bench_function("json_value/10000_aijobs", |b| {
        b.iter(|| serde_json::from_slice::<Value>(black_box(&body)))
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
