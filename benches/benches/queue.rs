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
    Slot, Used, cycle,
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
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
