//! The tenancy policy at fleet scale: hierarchical GPU allocation over all tenants (what every
//! tenant reconcile computes) and one full tenant reconcile.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use gryvia_reconcile::Reconcile;
use gryvia_reconcile::tenancy::{TenantReconciler, TenantSummary, TenantWorld, allocate};

/// `n` tenants: a tenth are roots, the rest children of a root.
fn tenants(n: usize) -> Vec<TenantSummary> {
    (0..n)
        .map(|i| TenantSummary {
            name: format!("t{i:05}"),
            parent: (i % 10 != 0).then(|| format!("t{:05}", i - i % 10)),
            gpus: Some(8 + (i % 7) as i32),
            created: jiff::Timestamp::from_second(1_700_000_000 + i as i64).ok(),
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    for n in [1_000, 10_000] {
        let ts = tenants(n);
        c.bench_function(&format!("allocate/{n}_tenants"), |b| {
            b.iter(|| allocate(black_box(&ts)))
        });
    }
    let mut tenant = gryvia_types::testing::tenant("t00011", 12);
    tenant.spec.parent_tenant = Some("t00010".into());
    let world = TenantWorld {
        tenants: tenants(1_000),
        ..Default::default()
    };
    let now = jiff::Timestamp::from_second(1_800_000_000).unwrap_or(jiff::Timestamp::UNIX_EPOCH);
    c.bench_function("reconcile_tenant/among_1000", |b| {
        b.iter(|| TenantReconciler::default().reconcile(black_box(&tenant), black_box(&world), now))
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
