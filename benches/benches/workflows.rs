//! Job hooks and workflows at scale: a hook over the 10,000 jobs of a busy namespace (nothing
//! new, and 100 jobs just finished), and a 50-step workflow (the most a workflow may have).

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use gryvia_reconcile::Reconcile;
use gryvia_reconcile::hooks::{HookReconciler, HookWorld, SecretState, Subject};
use gryvia_reconcile::workflow::{StepJob, WorkflowReconciler, WorkflowWorld, job_name};
use gryvia_types::k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use gryvia_types::{GryviaJobHook, GryviaWorkflow, JobPhase};
use serde_json::json;

fn ts(s: &str) -> jiff::Timestamp {
    s.parse().unwrap_or(jiff::Timestamp::UNIX_EPOCH)
}

fn subject(i: usize, phase: JobPhase) -> Subject {
    let finished = matches!(phase, JobPhase::Succeeded | JobPhase::Failed);
    Subject {
        kind: gryvia_reconcile::hooks::SubjectKind::GryviaAIJob,
        name: format!("job-{i:05}"),
        uid: format!("00000000-0000-0000-0000-{i:012}"),
        labels: [("team".to_owned(), "ml".to_owned())].into(),
        created: Some(ts("2026-01-01T10:01:00Z")),
        phase: Some(phase),
        retries: i32::from(i.is_multiple_of(10)),
        start_time: Some(ts("2026-01-01T10:02:00Z")),
        completion_time: finished.then(|| ts("2026-01-01T10:50:00Z")),
    }
}

fn hooks(c: &mut Criterion) {
    let mut hook: GryviaJobHook = serde_json::from_value(json!({
        "apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaJobHook",
        "metadata": {"name": "notify", "namespace": "ml", "uid": "hook-uid",
                     "creationTimestamp": "2026-01-01T10:00:00Z"},
        "spec": {"events": ["Started", "Retried", "Succeeded", "Failed"],
                 "selector": {"matchLabels": {"team": "ml"}},
                 "url": "https://hooks.example/in", "secretRef": {"name": "k"}}
    }))
    .unwrap_or_else(|e| panic!("hook: {e}"));
    // 10,000 running jobs, all seen: the steady state.
    let running: Vec<Subject> = (0..10_000).map(|i| subject(i, JobPhase::Running)).collect();
    let world = HookWorld {
        subjects: running.clone(),
        secret: SecretState::Present,
    };
    let now = ts("2026-01-01T10:40:00Z");
    let first = HookReconciler.reconcile(&hook, &world, now);
    let mut status = first.status.unwrap_or_default();
    for d in &mut status.deliveries {
        d.state = gryvia_types::DeliveryState::Delivered;
        d.attempts = 1;
        d.last_attempt = Some(Time(now));
    }
    hook.status = Some(status);
    // One more reconcile trims the delivered ones to the newest 100: the steady state.
    if let Some(trimmed) = HookReconciler.reconcile(&hook, &world, now).status {
        hook.status = Some(trimmed);
    }
    let size = serde_json::to_vec(&hook.status).map_or(0, |v| v.len());
    eprintln!("hook status with 10,000 tracked jobs and 100 deliveries: {size} bytes of JSON");
    c.bench_function("hooks/reconcile/10000_jobs_nothing_new", |b| {
        b.iter(|| black_box(HookReconciler.reconcile(black_box(&hook), &world, now)));
    });
    // 100 of them just finished.
    let mut finishing = running;
    for s in finishing.iter_mut().take(100) {
        s.phase = Some(JobPhase::Succeeded);
        s.completion_time = Some(ts("2026-01-01T10:50:00Z"));
    }
    let world = HookWorld {
        subjects: finishing,
        secret: SecretState::Present,
    };
    let later = ts("2026-01-01T10:50:05Z");
    c.bench_function("hooks/reconcile/10000_jobs_100_finished", |b| {
        b.iter(|| black_box(HookReconciler.reconcile(black_box(&hook), &world, later)));
    });
}

fn workflows(c: &mut Criterion) {
    // 50 steps in 10 layers of 5; every step depends on the whole layer before it.
    let steps: Vec<serde_json::Value> = (0..50)
        .map(|i| {
            let layer = i / 5;
            let deps: Vec<String> = if layer == 0 {
                Vec::new()
            } else {
                (0..5)
                    .map(|j| format!("s{}", (layer - 1) * 5 + j))
                    .collect()
            };
            json!({"name": format!("s{i}"), "dependsOn": deps,
                   "job": {"image": "registry.local/step:1", "gpus": 1}})
        })
        .collect();
    let wf: GryviaWorkflow = serde_json::from_value(json!({
        "apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaWorkflow",
        "metadata": {"name": "pipe", "namespace": "ml", "generation": 1},
        "spec": {"steps": steps}
    }))
    .unwrap_or_else(|e| panic!("workflow: {e}"));
    // Half done: the first 25 steps succeeded, so the next layer starts.
    let world = WorkflowWorld {
        jobs: (0..25)
            .map(|i| StepJob {
                step: format!("s{i}"),
                name: job_name("pipe", &format!("s{i}")),
                phase: Some(JobPhase::Succeeded),
                start_time: Some(ts("2026-01-01T10:00:00Z")),
                completion_time: Some(ts("2026-01-01T10:05:00Z")),
            })
            .collect(),
        templates: Default::default(),
    };
    let now = ts("2026-01-01T11:00:00Z");
    c.bench_function("workflow/reconcile/50_steps_half_done", |b| {
        b.iter(|| black_box(WorkflowReconciler.reconcile(black_box(&wf), &world, now)));
    });
}

criterion_group!(benches, hooks, workflows);
criterion_main!(benches);
