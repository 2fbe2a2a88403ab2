//! How many trials, and GPU-hours, each search algorithm needs to come within 1 % of a known
//! optimum, over 20 seeds: `cargo run --release -p gryvia-benches --bin tuner-quality
//! [ALGORITHM...]` (all four by default).
//!
//! Each study runs through the real policy (`TunerReconciler::reconcile`, the function the
//! ai-operator runs) against a simulated cluster, one tick per training step: trials start
//! when a plan creates their job, report their objective every step, finish after their last
//! step, and stop when a plan deletes their job (ASHA). A full trial is one GPU-hour; a trial
//! stopped early counts the steps it ran. A study ends when its best succeeded trial is within
//! 1 % of the optimum (reached: the trials started and GPU-hours spent by then) or its budget
//! of trials runs out (not reached).
//!
//! Objectives:
//! - **Branin** (x1 in [-5, 10], x2 in [0, 15], minimum 0.397887 at three points), one step
//!   per trial: the classic small test of sample efficiency.
//! - **Learning curves**: lr (log, 1e-4..1) and momentum (0..0.99); the final loss is
//!   1 + (log10 lr + 2)^2 / 4 + 2 (momentum - 0.9)^2 (minimum 1), reached after 27 steps along
//!   a curve from 3 whose speed depends on lr, with reporting noise (sd 0.002): what ASHA is
//!   for.

#![expect(
    clippy::expect_used,
    reason = "a benchmark runner: a simulation that breaks stops it loudly"
)]

use std::collections::BTreeMap;
use std::time::Instant;

use gryvia_reconcile::Reconcile;
use gryvia_reconcile::tuner::metrics::Report;
use gryvia_reconcile::tuner::rng::{Purpose, Rng};
use gryvia_reconcile::tuner::{TrialJob, TunerReconciler, TunerWorld};
use gryvia_types::{GryviaAIJob, GryviaAutoTuner, JobPhase};
use serde_json::{Value, json};

const SEEDS: i64 = 20;
const PARALLEL: i32 = 4;

/// A test problem.
struct Problem {
    name: &'static str,
    parameters: Value,
    /// Training steps of a full trial.
    steps: i64,
    optimum: f64,
    /// The true final objective of a point.
    fin: fn(&BTreeMap<String, String>) -> f64,
    /// The reported value at `step` (noise from `rng`).
    at: fn(&BTreeMap<String, String>, i64, &mut Rng) -> f64,
}

fn num(p: &BTreeMap<String, String>, k: &str) -> f64 {
    p[k].parse().unwrap_or(f64::NAN)
}

fn branin(p: &BTreeMap<String, String>) -> f64 {
    let (x1, x2) = (num(p, "x1"), num(p, "x2"));
    let pi = std::f64::consts::PI;
    let b = 5.1 / (4.0 * pi * pi);
    let c = 5.0 / pi;
    let t = 1.0 / (8.0 * pi);
    (x2 - b * x1 * x1 + c * x1 - 6.0).powi(2) + 10.0 * (1.0 - t) * x1.cos() + 10.0
}

fn curve_final(p: &BTreeMap<String, String>) -> f64 {
    let (lr, m) = (num(p, "lr"), num(p, "momentum"));
    1.0 + (lr.log10() + 2.0).powi(2) / 4.0 + 2.0 * (m - 0.9).powi(2)
}

#[expect(clippy::cast_precision_loss, reason = "steps are small")]
fn curve_at(p: &BTreeMap<String, String>, step: i64, rng: &mut Rng) -> f64 {
    let fin = curve_final(p);
    // Larger learning rates fall faster early on (exponent 1.5 .. 4.5 over lr 1e-4 .. 1).
    let speed = 1.5 + 0.75 * (num(p, "lr").log10() + 4.0);
    let left = (1.0 - step as f64 / 27.0).max(0.0);
    fin + (3.0 - fin) * left.powf(speed) + 0.002 * rng.normal()
}

/// What one study came to.
struct Outcome {
    /// Trials started and GPU-hours spent when the target was reached.
    reached: Option<(usize, f64)>,
}

#[expect(clippy::cast_precision_loss, reason = "step counts are small")]
fn run(problem: &Problem, algorithm: &str, seed: i64, budget: i32, extra: &Value) -> Outcome {
    let mut spec = json!({
        "objective": {"metric": "loss", "goal": "minimize"},
        "algorithm": algorithm,
        "parameters": problem.parameters,
        "maxTrials": budget,
        "parallelTrials": PARALLEL,
        "seed": seed,
        "trialTemplate": {"image": "registry.local/train:1", "gpus": 1}
    });
    for (k, v) in extra.as_object().into_iter().flatten() {
        spec[k] = v.clone();
    }
    if algorithm == "grid" {
        for p in spec["parameters"].as_array_mut().into_iter().flatten() {
            p["gridPoints"] = extra["gridPoints"].clone();
        }
        spec.as_object_mut().map(|o| o.remove("gridPoints"));
    }
    let mut tuner = GryviaAutoTuner::new("study", serde_json::from_value(spec).expect("spec"));
    tuner.metadata.namespace = Some("bench".to_owned());
    let reconciler = TunerReconciler::default();
    // The simulated trials' jobs, as the observer would report them.
    let mut jobs: BTreeMap<String, TrialJob> = BTreeMap::new();
    let mut gpu_steps: i64 = 0;
    let start: jiff::Timestamp = "2026-01-01T00:00:00Z".parse().expect("time");
    let target = problem.optimum.abs() * 1.01 + if problem.optimum == 0.0 { 0.01 } else { 0.0 };
    for tick in 0..1_000_000i64 {
        let now = start + jiff::SignedDuration::from_secs(tick);
        let world = TunerWorld {
            jobs: jobs.values().cloned().collect(),
        };
        let plan = reconciler.reconcile(&tuner, &world, now);
        for c in &plan.apply {
            let job: GryviaAIJob = serde_json::from_value(c.object.clone()).expect("job");
            jobs.insert(
                c.object_ref.name.clone(),
                TrialJob {
                    phase: Some(JobPhase::Running),
                    creation_time: Some(now),
                    reports: Some(Vec::new()),
                    ..TrialJob::of(&job)
                },
            );
        }
        for d in &plan.delete {
            jobs.remove(&d.name);
        }
        if let Some(s) = plan.status {
            tuner.status = Some(s);
        }
        let status = tuner.status.clone().unwrap_or_default();
        if let Some(best) = &status.best_trial
            && (problem.fin)(&best.parameters) <= target
        {
            return Outcome {
                reached: Some((status.trials.len(), gpu_steps as f64 / problem.steps as f64)),
            };
        }
        if status.phase.is_some_and(JobPhase::is_finished) {
            return Outcome { reached: None };
        }
        // One step of every running trial.
        for j in jobs
            .values_mut()
            .filter(|j| j.phase == Some(JobPhase::Running))
        {
            gpu_steps += 1;
            let started = j
                .creation_time
                .map_or(0, |c| c.duration_since(start).as_secs());
            let step = tick + 1 - started;
            let index = j.index.unwrap_or_default();
            let mut rng = Rng::stream(
                seed,
                u64::try_from(index * 1000).unwrap_or(0) + u64::try_from(step).unwrap_or(0),
                Purpose::Noise,
            );
            let value = (problem.at)(j.parameters.as_ref().expect("params"), step, &mut rng);
            j.reports
                .get_or_insert_with(Vec::new)
                .push(Report { step, value });
            if step >= problem.steps {
                j.phase = Some(JobPhase::Succeeded);
            }
        }
    }
    Outcome { reached: None }
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    let n = xs.len();
    if n == 0 {
        return f64::NAN;
    }
    if n % 2 == 1 {
        xs[n / 2]
    } else {
        (xs[n / 2 - 1] + xs[n / 2]) / 2.0
    }
}

fn main() {
    let only: Vec<String> = std::env::args().skip(1).collect();
    let problems = [
        Problem {
            name: "Branin",
            parameters: json!([
                {"name": "x1", "type": "double", "min": -5.0, "max": 10.0},
                {"name": "x2", "type": "double", "min": 0.0, "max": 15.0}
            ]),
            steps: 1,
            optimum: 0.397_887,
            fin: branin,
            at: |p, _, _| branin(p),
        },
        Problem {
            name: "Learning curves",
            parameters: json!([
                {"name": "lr", "type": "double", "min": 0.0001, "max": 1.0, "logScale": true},
                {"name": "momentum", "type": "double", "min": 0.0, "max": 0.99}
            ]),
            steps: 27,
            optimum: 1.0,
            fin: curve_final,
            at: curve_at,
        },
    ];
    println!(
        "| objective | algorithm | budget (trials) | seeds within 1 % | median trials | median GPU-hours |"
    );
    println!("| --- | --- | --- | --- | --- | --- |");
    for problem in &problems {
        let asha = json!({"earlyStopping": {"minTrials": 4, "reductionFactor": 3, "minStep": 1}});
        let mut runs: Vec<(&str, i32, Value)> = vec![
            ("random", 4000, json!({})),
            ("bayesian", 150, json!({})),
            ("grid", 10_000, json!({"gridPoints": 100})),
        ];
        if problem.steps > 1 {
            runs.push(("asha", 4000, asha));
        }
        for (algorithm, budget, extra) in runs {
            if !only.is_empty() && !only.iter().any(|a| a == algorithm) {
                continue;
            }
            let t0 = Instant::now();
            // Grid does not depend on the seed: one run.
            let seeds = if algorithm == "grid" { 1 } else { SEEDS };
            let outcomes: Vec<Outcome> = (1..=seeds)
                .map(|seed| run(problem, algorithm, seed, budget, &extra))
                .collect();
            let hit: Vec<(usize, f64)> = outcomes.iter().filter_map(|o| o.reached).collect();
            #[expect(clippy::cast_precision_loss, reason = "trial counts are small")]
            let trials = median(hit.iter().map(|h| h.0 as f64).collect());
            let hours = median(hit.iter().map(|h| h.1).collect());
            let label = if algorithm == "grid" {
                "grid (100 x 100 points, seed-independent)".to_owned()
            } else {
                algorithm.to_owned()
            };
            println!(
                "| {} | {label} | {budget} | {} of {seeds} | {trials:.0} | {hours:.1} |",
                problem.name,
                hit.len(),
            );
            eprintln!(
                "{} {algorithm}: {:.1} s",
                problem.name,
                t0.elapsed().as_secs_f64()
            );
        }
    }
}
