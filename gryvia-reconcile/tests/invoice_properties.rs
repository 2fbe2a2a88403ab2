//! Properties of invoices (`gryvia_reconcile::invoice`): for any usage records and any split
//! of a period, the two invoices' charges add up exactly to the whole period's (money in
//! micro-units and GPU-seconds, per job and per currency), and of any set of invoices of a
//! tenant, those not refused for overlapping cover disjoint periods, so a record is never in
//! two invoices.

#![expect(clippy::unwrap_used, reason = "test helpers panic on broken fixtures")]

use std::collections::BTreeMap;

use gryvia_reconcile::Timestamp;
use gryvia_reconcile::invoice::{Charges, charges, overlapping, piece, totals};
use gryvia_reconcile::metering::Sku;
use gryvia_types::{GryviaInvoice, GryviaUsageRecord};
use proptest::prelude::*;

/// 2026-08-01T00:00:00Z.
const AUGUST: i64 = 1_785_542_400;
/// Seconds in the span the generated records and periods fall in (40 days).
const SPAN: i64 = 40 * 86_400;

fn at(secs: i64) -> Timestamp {
    Timestamp::from_second(secs).unwrap()
}

fn time(secs: i64) -> String {
    at(secs).to_string()
}

fn skus() -> Vec<Sku> {
    vec![
        Sku {
            name: "h100".into(),
            gpu_product: "H100".into(),
            price_micros: 4_123_457,
            currency: "USD".into(),
        },
        Sku {
            name: "a100".into(),
            gpu_product: "A100".into(),
            price_micros: 1_999_999,
            currency: "USD".into(),
        },
        Sku {
            name: "eu".into(),
            gpu_product: "EU".into(),
            price_micros: 333_333,
            currency: "EUR".into(),
        },
    ]
}

prop_compose! {
    fn arb_record()(
        tenant in prop::sample::select(vec!["ml", "cv"]),
        job in 0..6u8,
        sku in prop::sample::select(vec!["h100", "a100", "eu", "unknown"]),
        gpus in 0..17i32,
        start in 0..SPAN,
        length in prop::option::of(1..SPAN),
    ) -> GryviaUsageRecord {
        let mut spec = serde_json::json!({
            "tenant": tenant, "namespace": format!("tenant-{tenant}"),
            "workload": {"kind": "GryviaAIJob", "name": format!("job-{job}")}, "sku": sku,
            "gpuCount": gpus, "startTime": time(AUGUST + start),
        });
        if let Some(l) = length {
            spec["endTime"] = time(AUGUST + start + l).into();
        }
        serde_json::from_value(serde_json::json!({
            "apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaUsageRecord",
            "metadata": {"name": "r"}, "spec": spec
        }))
        .unwrap()
    }
}

/// GPU-seconds and micro-units per job of `parts`, added up.
fn per_job(parts: &[&Charges]) -> BTreeMap<(String, String, String, String), (i64, i64)> {
    let mut out: BTreeMap<_, (i64, i64)> = BTreeMap::new();
    for c in parts {
        for (k, j) in &c.jobs {
            let e = out.entry(k.clone()).or_default();
            e.0 += j.gpu_seconds;
            e.1 += j.micros;
        }
    }
    out
}

/// Micro-units per currency of `parts`, added up.
fn per_currency(parts: &[&Charges]) -> BTreeMap<String, i64> {
    let mut out: BTreeMap<String, i64> = BTreeMap::new();
    for c in parts {
        for (cur, v) in c.totals() {
            *out.entry(cur).or_default() += v;
        }
    }
    out
}

proptest! {
    #[test]
    fn a_records_pieces_add_up_to_the_whole(
        start in 0..SPAN,
        gpus in 0..64i64,
        price in 0..100_000_000i64,
        cuts in prop::collection::vec(0..SPAN, 2..6),
    ) {
        let mut cuts = cuts;
        cuts.sort_unstable();
        let whole = piece(start, gpus, price, cuts[0], cuts[cuts.len() - 1]);
        let parts = cuts.windows(2).map(|w| piece(start, gpus, price, w[0], w[1]));
        let sum = parts.fold((0, 0), |acc, p| (acc.0 + p.0, acc.1 + p.1));
        prop_assert_eq!(sum, whole);
    }

    #[test]
    fn two_invoices_splitting_a_period_charge_exactly_what_the_whole_period_does(
        records in prop::collection::vec(arb_record(), 0..30),
        from in 0..SPAN,
        split in 0..SPAN,
        to in 0..SPAN,
        now in 0..SPAN + 86_400,
    ) {
        let mut bounds = [from, split, to];
        bounds.sort_unstable();
        let [from, split, to] = bounds.map(|b| AUGUST + b);
        // Open records count up to now: every invoice is taken at the same moment.
        let upto = |t: i64| at(t.min(AUGUST + now).max(from));
        for tenant in ["ml", "cv"] {
            let whole = charges(tenant, at(from), upto(to), &records, &skus());
            let first = charges(tenant, at(from), upto(split), &records, &skus());
            let second = charges(tenant, upto(split), upto(to), &records, &skus());
            prop_assert_eq!(per_currency(&[&first, &second]), per_currency(&[&whole]));
            prop_assert_eq!(first.gpu_seconds() + second.gpu_seconds(), whole.gpu_seconds());
            prop_assert_eq!(per_job(&[&first, &second]), per_job(&[&whole]));
            // The gate's totals are the invoice's.
            let (usd, gpu) = totals(tenant, at(from), upto(to), &records, &skus(), "USD");
            prop_assert_eq!(usd, whole.totals().get("USD").copied().unwrap_or(0));
            prop_assert_eq!(gpu, whole.gpu_seconds());
        }
    }

    #[test]
    fn invoices_not_refused_for_overlapping_cover_disjoint_periods(
        ranges in prop::collection::vec((0..SPAN, 1..SPAN, 0..1000i64), 1..12),
    ) {
        let invoices: Vec<GryviaInvoice> = ranges
            .iter()
            .enumerate()
            .map(|(i, (start, length, created))| {
                serde_json::from_value(serde_json::json!({
                    "apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaInvoice",
                    "metadata": {"name": format!("inv-{i}"), "creationTimestamp": time(AUGUST + created)},
                    "spec": {"tenant": "ml", "periodStart": time(AUGUST + start),
                             "periodEnd": time(AUGUST + start + length)}
                }))
                .unwrap()
            })
            .collect();
        let accepted: Vec<&GryviaInvoice> =
            invoices.iter().filter(|i| overlapping(i, &invoices).is_none()).collect();
        prop_assert!(!accepted.is_empty(), "the earliest invoice is never refused");
        for (n, a) in accepted.iter().enumerate() {
            for b in &accepted[n + 1..] {
                let disjoint = a.spec.period_end.0 <= b.spec.period_start.0
                    || b.spec.period_end.0 <= a.spec.period_start.0;
                prop_assert!(disjoint, "{:?} and {:?}", a.metadata.name, b.metadata.name);
            }
        }
    }
}
