//! Billing on its hot paths, over a month of a busy tenant (20,000 usage records, 4 SKUs):
//! what the admission gate computes per new GPU job of a tenant with a money or GPU-hour quota
//! (`admission::month_spend`: the month's use and the job's estimate), an invoice's charges
//! (`invoice::charges`) and a whole invoice status (`invoice::fill`).

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use gryvia_reconcile::Timestamp;
use gryvia_reconcile::admission::month_spend;
use gryvia_reconcile::invoice::{charges, fill};
use gryvia_reconcile::metering::Sku;
use gryvia_types::{GryviaAIJob, GryviaInvoiceStatus, GryviaUsageRecord};
use serde_json::json;

const RECORDS: usize = 20_000;

fn at(secs: i64) -> Timestamp {
    Timestamp::from_second(secs).unwrap_or_else(|e| unreachable!("fixture: {e}"))
}

fn skus() -> Vec<Sku> {
    ["H100", "A100", "L40S", "B200"]
        .iter()
        .enumerate()
        .map(|(i, p)| Sku {
            name: p.to_lowercase(),
            gpu_product: (*p).to_owned(),
            price_micros: 1_000_000 * (i64::try_from(i).unwrap_or(0) + 1),
            currency: "USD".to_owned(),
        })
        .collect()
}

/// A month (from 2026-12-01) of records: 200 jobs of 8 templates, 100 runs each, a few hours
/// long, one in ten still open.
fn records() -> Vec<GryviaUsageRecord> {
    let month = 1_796_083_200_i64;
    (0..RECORDS)
        .map(|i| {
            let n = i64::try_from(i).unwrap_or(0);
            let start = month + (n * 113) % (28 * 86_400);
            let sku = ["h100", "a100", "l40s", "b200"][i % 4];
            let mut spec = json!({
                "tenant": "ml", "namespace": "tenant-ml",
                "workload": {"kind": "GryviaAIJob", "name": format!("job-{}", i % 200)},
                "sku": sku,
                "gpuCount": 8, "startTime": at(start).to_string(),
                "template": format!("tpl-{}", i % 8),
            });
            if i % 10 != 0 {
                spec["endTime"] = at(start + 3600 + (n % 7) * 600).to_string().into();
            }
            serde_json::from_value(json!({"metadata": {"name": format!("r{i}")}, "spec": spec}))
                .unwrap_or_else(|e| unreachable!("fixture: {e}"))
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let records = records();
    let skus = skus();
    let now = at(1_796_083_200 + 29 * 86_400);
    let job: GryviaAIJob = serde_json::from_value(json!({
        "apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaAIJob",
        "metadata": {"name": "new", "namespace": "tenant-ml", "labels": {"gryvia.io/template": "tpl-3"}},
        "spec": {"image": "registry.local/train:1", "gpus": 8, "gpuType": "H100"}
    }))
    .unwrap_or_else(|e| unreachable!("fixture: {e}"));
    let refs: Vec<&GryviaUsageRecord> = records.iter().collect();
    c.bench_function("billing/month_spend/20000_records", |b| {
        b.iter(|| month_spend(black_box(&job), "ml", black_box(&refs), &skus, now));
    });
    let start = at(1_796_083_200);
    c.bench_function("billing/invoice_charges/20000_records", |b| {
        b.iter(|| charges("ml", start, now, black_box(&records), &skus));
    });
    let counted = charges("ml", start, now, &records, &skus);
    c.bench_function("billing/invoice_fill/200_jobs", |b| {
        b.iter(|| {
            let mut st = GryviaInvoiceStatus::default();
            fill(&mut st, "USD", black_box(&counted));
            st
        });
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
