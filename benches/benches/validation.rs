//! Client-side validation (OpenAPI schema, strict fields, CEL) of one object, as `gryvia
//! validate` and the Python SDK run it.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use gryvia_types::validation::{Validator, parse_yaml_documents};

fn bench(c: &mut Criterion) {
    let Ok(validator) = Validator::new() else {
        return;
    };
    c.bench_function("validator_new/31_kinds", |b| b.iter(Validator::new));
    let text = include_str!("../../gryvia-types/tests/data/guide/tenant.yaml");
    let Ok(mut docs) = parse_yaml_documents(text) else {
        return;
    };
    let tenant = docs.remove(0);
    c.bench_function("validate/guide_tenant", |b| {
        b.iter(|| validator.validate(black_box(&tenant)))
    });
    let text = include_str!("../../gryvia-types/tests/data/guide/healthcheck.yaml");
    let Ok(mut docs) = parse_yaml_documents(text) else {
        return;
    };
    let hc = docs.remove(0);
    c.bench_function("validate/guide_healthcheck", |b| {
        b.iter(|| validator.validate(black_box(&hc)))
    });
    c.bench_function("parse_yaml/guide_healthcheck", |b| {
        b.iter(|| parse_yaml_documents(black_box(text)))
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
