//! The GPU health policy at fleet scale: evaluating a health check (the guide's temperature
//! and ECC checks plus NVLink, power and XID) over 10,000 nodes x 8 GPUs, alone and as a full
//! reconcile with status, quarantine decisions and the guard.

use std::collections::BTreeMap;
use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use gryvia_reconcile::Reconcile;
use gryvia_reconcile::health::{
    HealthCheckReconciler, HealthOptions, HealthWorld, NodeInfo, evaluate_node,
};
use gryvia_types::{CheckType, HealthCheckItem, Threshold};

fn world(nodes: usize, gpus: i32, now: jiff::Timestamp) -> HealthWorld {
    let mut w = HealthWorld::default();
    for i in 0..nodes {
        let name = format!("gpu-node-{i:05}");
        w.nodes.push(NodeInfo {
            name: name.clone(),
            labels: BTreeMap::new(),
            gpu_capacity: i64::from(gpus),
            ..Default::default()
        });
        let mut g = gryvia_types::testing::gpu_node(&name, gpus, now);
        // One node in a hundred has a GPU with uncorrected ECC errors.
        if i % 100 == 7
            && let Some(s) = g.status.as_mut()
        {
            s.gpus[3].ecc_double_bit = Some(2);
        }
        w.gpu_nodes.insert(name, std::sync::Arc::new(g));
    }
    w
}

fn bench(c: &mut Criterion) {
    let now = jiff::Timestamp::from_second(1_800_000_000).unwrap_or(jiff::Timestamp::UNIX_EPOCH);
    let mut hc = gryvia_types::testing::health_check("fleet", CheckType::GpuTemperature, 90.0);
    hc.spec.checks[0].threshold.warning = Some(80.0);
    for (name, type_, max) in [
        ("ecc", CheckType::GpuEccErrors, 0.0),
        ("nvlink", CheckType::GpuNvlink, 0.0),
        ("power", CheckType::GpuPower, 700.0),
        ("xid", CheckType::GpuXid, 0.0),
    ] {
        hc.spec.checks.push(HealthCheckItem {
            name: name.into(),
            type_,
            threshold: Threshold {
                max: Some(max),
                min: None,
                warning: None,
            },
        });
    }
    hc.spec.on_failure.cordon = true;
    hc.spec.on_failure.consecutive_failures = 1;
    let w = world(10_000, 8, now);
    c.bench_function("evaluate/10000_nodes_x_8_gpus", |b| {
        b.iter(|| {
            let mut failed = 0usize;
            for g in w.gpu_nodes.values() {
                let e = evaluate_node(black_box(&hc.spec), g.status.as_ref(), now);
                failed += usize::from(e.verdict == gryvia_types::Verdict::Failed);
            }
            failed
        })
    });
    let reconciler = HealthCheckReconciler {
        options: HealthOptions { remediation: true },
    };
    c.bench_function("reconcile_health_check/10000_nodes_x_8_gpus", |b| {
        b.iter(|| reconciler.reconcile(black_box(&hc), black_box(&w), now))
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
