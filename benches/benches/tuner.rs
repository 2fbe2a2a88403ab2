//! The tuner's costs: one bayesian suggestion (fitting the Gaussian process and scoring the
//! candidates) with 50 and 300 finished trials (300 is the most the model is fitted on), and one
//! reconcile of a 1,000-trial ASHA study with 8 trials running and reporting.

use std::collections::BTreeMap;
use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use gryvia_reconcile::Reconcile;
use gryvia_reconcile::tuner::metrics::Report;
use gryvia_reconcile::tuner::{self, TrialJob, TunerReconciler, TunerWorld};
use gryvia_types::{GryviaAutoTuner, GryviaAutoTunerSpec, JobPhase, Trial};
use serde_json::json;

fn spec(algorithm: &str, max: i32) -> GryviaAutoTunerSpec {
    let mut s = json!({
        "objective": {"metric": "loss", "goal": "minimize"},
        "algorithm": algorithm,
        "parameters": [
            {"name": "lr", "type": "double", "min": 0.0001, "max": 1.0, "logScale": true},
            {"name": "momentum", "type": "double", "min": 0.0, "max": 0.99},
            {"name": "layers", "type": "int", "min": 1, "max": 12},
            {"name": "opt", "type": "categorical", "values": ["adam", "sgd", "lamb"]}
        ],
        "maxTrials": max,
        "parallelTrials": 8,
        "seed": 5,
        "trialTemplate": {"image": "registry.local/train:1", "gpus": 1}
    });
    if algorithm == "asha" {
        s["earlyStopping"] = json!({"minTrials": 4, "reductionFactor": 3});
    }
    serde_json::from_value(s).unwrap_or_else(|e| panic!("spec: {e}"))
}

fn loss(p: &BTreeMap<String, String>) -> f64 {
    let lr: f64 = p["lr"].parse().unwrap_or(1.0);
    let m: f64 = p["momentum"].parse().unwrap_or(0.0);
    (lr.log10() + 2.0).powi(2) + (m - 0.9).powi(2) + f64::from(u8::from(p["opt"] == "sgd"))
}

/// `n` finished trials of `spec` (random points), the last `running` of them still running.
fn history(spec: &GryviaAutoTunerSpec, n: i32, running: i32) -> Vec<Trial> {
    let random = GryviaAutoTunerSpec {
        algorithm: gryvia_types::TunerAlgorithm::Random,
        early_stopping: None,
        ..spec.clone()
    };
    let mut trials: Vec<Trial> = Vec::new();
    for i in 0..n {
        let p = tuner::suggest(&random, &trials)
            .ok()
            .flatten()
            .unwrap_or_default();
        let done = i < n - running;
        trials.push(Trial {
            objective_value: Some(loss(&p)),
            phase: Some(if done {
                JobPhase::Succeeded
            } else {
                JobPhase::Running
            }),
            step: Some(9),
            ..Trial::new(tuner::trial_name("study", i), i, p)
        });
    }
    trials
}

fn suggest(c: &mut Criterion) {
    let s = spec("bayesian", 1000);
    for n in [50, 300] {
        let trials = history(&s, n, 4);
        c.bench_function(&format!("tuner/bayesian_suggest/{n}_trials"), |b| {
            b.iter(|| black_box(tuner::suggest(&s, black_box(&trials))));
        });
    }
}

fn reconcile(c: &mut Criterion) {
    let s = spec("asha", 2000);
    let trials = history(&s, 1000, 8);
    let mut study = GryviaAutoTuner::new("study", s);
    study.metadata.namespace = Some("ml".to_owned());
    study.status = Some(gryvia_types::GryviaAutoTunerStatus {
        trials: trials.clone(),
        ..Default::default()
    });
    let now: jiff::Timestamp = "2026-01-01T10:00:00Z"
        .parse()
        .unwrap_or(jiff::Timestamp::UNIX_EPOCH);
    let world = TunerWorld {
        jobs: trials
            .iter()
            .map(|t| TrialJob {
                name: t.name.clone(),
                index: Some(t.index),
                parameters: Some(t.parameters.clone()),
                phase: t.phase,
                creation_time: Some(now),
                completion_time: None,
                message: None,
                reports: (t.phase == Some(JobPhase::Running)).then(|| {
                    (1..=9)
                        .map(|step| Report {
                            step,
                            value: 2.0 / f64::from(u8::try_from(step).unwrap_or(1)),
                        })
                        .collect()
                }),
            })
            .collect(),
    };
    c.bench_function("tuner/reconcile/asha_1000_trials_8_running", |b| {
        b.iter(|| black_box(TunerReconciler::default().reconcile(black_box(&study), &world, now)));
    });
}

criterion_group!(benches, suggest, reconcile);
criterion_main!(benches);
