//! The native queue scheduler at fleet scale: one admission cycle over 10,000 pending jobs of
//! 100 queues (10 cohorts) on 1,000 GPU nodes of two products, with 2,000 jobs already running
//! (half the GPUs in use), every job with an expected run time so blocked heads get an
//! expected start and backfill is checked against it. Reported per cycle; per decision is the
//! cycle time over the 10,000 pending jobs.

use std::collections::BTreeMap;
use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use gryvia_reconcile::queue::{
    JobInfo, JobKey, JobState, NodeCapacity, ONE_GPU, QueueInfo, QueueWorld, QuotaEntry, Share,
    Slot, Used, cycle, decide,
};
use gryvia_types::scheduling::QueueingStrategy;

const PRODUCTS: [&str; 2] = ["NVIDIA-H100-80GB-HBM3", "NVIDIA-A100-SXM4-80GB"];

fn now() -> jiff::Timestamp {
    jiff::Timestamp::from_second(1_800_000_000).unwrap_or(jiff::Timestamp::UNIX_EPOCH)
}

fn queues(n: usize, preempt: bool) -> Vec<QueueInfo> {
    (0..n)
        .map(|i| QueueInfo {
            name: format!("q{i:03}"),
            namespaces: vec![format!("q{i:03}")],
            cohort: Some(format!("c{}", i % 10)),
            resources: PRODUCTS
                .iter()
                .map(|p| QuotaEntry {
                    gpu_type: (*p).to_owned(),
                    nominal: 40 * ONE_GPU,
                    borrowing_limit: Some(40 * ONE_GPU),
                    lending_limit: None,
                })
                .collect(),
            strategy: if i % 2 == 0 {
                QueueingStrategy::StrictFIFO
            } else {
                QueueingStrategy::BestEffortFIFO
            },
            preempt_lower_priority: preempt,
            reclaim_within_cohort: preempt,
            gang_admission: true,
        })
        .collect()
}

fn nodes(n: usize) -> Vec<NodeCapacity> {
    (0..n)
        .map(|i| NodeCapacity {
            name: format!("gpu-{i:04}"),
            product: Some(PRODUCTS[i % 2].to_owned()),
            allocatable: Used(BTreeMap::from([(Slot::Gpu, 8)])),
            ..NodeCapacity::default()
        })
        .collect()
}

fn job(i: usize, queues: usize, offset: usize) -> JobInfo {
    let k = i + offset;
    JobInfo {
        key: JobKey::new(format!("q{:03}", k % queues), format!("job-{k:05}")),
        created: now()
            .checked_sub(jiff::SignedDuration::from_secs(
                i64::try_from(k).unwrap_or(0),
            ))
            .unwrap_or(now()),
        class_value: if k.is_multiple_of(17) { 1000 } else { 0 },
        priority: i32::try_from(k % 101).unwrap_or(50),
        gpu_type: Some(PRODUCTS[k % 2].to_owned()),
        workers: [1, 1, 2, 4][k % 4],
        share: Share::Gpus([1, 2, 4, 8][(k / 4) % 4]),
        reservation: None,
        expected_seconds: Some(3600 * (1 + i64::try_from(k % 4).unwrap_or(0))),
        grace_seconds: 30,
        state: JobState::Pending,
        live: BTreeMap::new(),
        node_selector: BTreeMap::new(),
        tolerations: Vec::new(),
        sla_seconds: None,
        quota_override_percent: 0,
    }
}

/// 2,000 jobs admitted by a first cycle, then 10,000 more pending.
fn world(preempt: bool) -> QueueWorld {
    let mut w = QueueWorld {
        queues: queues(100, preempt),
        nodes: nodes(1_000),
        jobs: (0..2_000).map(|i| job(i, 100, 0)).collect(),
    };
    let first = cycle(&w, now());
    for a in first.admitted {
        if let Some(j) = w.jobs.iter_mut().find(|j| j.key == a.job) {
            for n in &a.admission.nodes {
                *j.live.entry(n.clone()).or_insert(0) += 1;
            }
            j.state = JobState::Admitted(a.admission);
        }
    }
    w.jobs.retain(|j| matches!(j.state, JobState::Admitted(_)));
    w.jobs.extend((0..10_000).map(|i| job(i, 100, 2_000)));
    w
}

/// Kueue's own scheduler scenario (`configs/baseline/generator.yaml`), as
/// `benches/scheduler/run` gives it to the native queue: 5 cohorts of 6 queues (nominal 20
/// GPUs, borrowing limit 100, BestEffortFIFO, preemption within the queue and reclaim within
/// the cohort), 350 small (1 GPU, priority 25), 100 medium (5 GPUs, 50) and 50 large (20 GPUs,
/// 100) one-worker jobs per queue without an expected run time, quota only (no gang
/// admission); a first cycle's admissions run, the other 14,000-odd jobs wait.
fn kueue_baseline() -> QueueWorld {
    const PRODUCT: &str = "NVIDIA-H100-80GB-HBM3";
    let queues: Vec<QueueInfo> = (0..30)
        .map(|i| {
            let name = format!("q-{}-{}", i / 6, i % 6);
            QueueInfo {
                namespaces: vec![name.clone()],
                name,
                cohort: Some(format!("cohort-{}", i / 6)),
                resources: vec![QuotaEntry {
                    gpu_type: PRODUCT.to_owned(),
                    nominal: 20 * ONE_GPU,
                    borrowing_limit: Some(100 * ONE_GPU),
                    lending_limit: None,
                }],
                strategy: QueueingStrategy::BestEffortFIFO,
                preempt_lower_priority: true,
                reclaim_within_cohort: true,
                gang_admission: false,
            }
        })
        .collect();
    let nodes = (0..10)
        .map(|i| NodeCapacity {
            name: format!("kwok-{i:02}"),
            product: Some(PRODUCT.to_owned()),
            allocatable: Used(BTreeMap::from([(Slot::Gpu, 128)])),
            ..NodeCapacity::default()
        })
        .collect();
    let mut jobs = Vec::new();
    for q in &queues {
        for (class, count, gpus, priority) in [
            ("small", 350, 1, 25),
            ("medium", 100, 5, 50),
            ("large", 50, 20, 100),
        ] {
            for k in 0..count {
                jobs.push(JobInfo {
                    key: JobKey::new(q.name.clone(), format!("{class}-{k}")),
                    created: now()
                        .checked_sub(jiff::SignedDuration::from_secs(
                            i64::try_from(20_000 - jobs.len()).unwrap_or(0),
                        ))
                        .unwrap_or(now()),
                    class_value: 0,
                    priority,
                    gpu_type: Some(PRODUCT.to_owned()),
                    workers: 1,
                    share: Share::Gpus(gpus),
                    reservation: None,
                    expected_seconds: None,
                    grace_seconds: 30,
                    state: JobState::Pending,
                    live: BTreeMap::new(),
                    node_selector: BTreeMap::new(),
                    tolerations: Vec::new(),
                    sla_seconds: None,
                    quota_override_percent: 0,
                });
            }
        }
    }
    let mut w = QueueWorld {
        queues,
        nodes,
        jobs,
    };
    let first = cycle(&w, now());
    for a in first.admitted {
        if let Some(j) = w.jobs.iter_mut().find(|j| j.key == a.job) {
            j.state = JobState::Admitted(a.admission);
        }
    }
    w
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("queue");
    g.sample_size(10);
    for preempt in [false, true] {
        let w = world(preempt);
        let running = w
            .jobs
            .iter()
            .filter(|j| matches!(j.state, JobState::Admitted(_)))
            .count();
        let name = format!(
            "cycle/10000_pending_{running}_running_100_queues_1000_nodes{}",
            if preempt { "_preemption_on" } else { "" }
        );
        g.bench_function(&name, |b| b.iter(|| cycle(black_box(&w), now())));
    }
    let w = kueue_baseline();
    let (running, pending) = w.jobs.iter().fold((0, 0), |(r, p), j| match j.state {
        JobState::Pending => (r, p + 1),
        _ => (r + 1, p),
    });
    let name = format!("cycle/kueue_baseline_{pending}_pending_{running}_running_30_queues");
    g.bench_function(&name, |b| b.iter(|| cycle(black_box(&w), now())));
    // The cycles between full ones with a long queue: the same decisions, no standings.
    let name = format!("decide/kueue_baseline_{pending}_pending_{running}_running_30_queues");
    g.bench_function(&name, |b| b.iter(|| decide(black_box(&w), now())));
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
