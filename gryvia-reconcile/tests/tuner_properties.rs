//! Properties of the hyperparameter search (`gryvia_reconcile::tuner`): the grid covers its
//! space exactly once, random and bayesian suggestions stay in bounds and repeat from the
//! seed, ASHA keeps exactly the best 1/reductionFactor of a rung, and a study never runs more
//! than `parallelTrials` at once nor more than `maxTrials` in all.

#![expect(clippy::unwrap_used, reason = "tests")]

use std::collections::{BTreeMap, BTreeSet};

use gryvia_reconcile::Reconcile;
use gryvia_reconcile::tuner::metrics::Report;
use gryvia_reconcile::tuner::space::Space;
use gryvia_reconcile::tuner::{self, TrialJob, TunerReconciler, TunerWorld, asha};
use gryvia_types::{Goal, GryviaAIJob, GryviaAutoTuner, GryviaAutoTunerSpec, JobPhase, Trial};
use proptest::prelude::*;
use serde_json::{Value, json};

/// A search parameter of one of the three types.
fn parameter(i: usize) -> impl Strategy<Value = Value> {
    prop_oneof![
        (1usize..5).prop_map(move |n| json!({"name": format!("c{i}"), "type": "categorical",
            "values": (0..n).map(|v| format!("v{v}")).collect::<Vec<_>>()})),
        (-20i64..20, 1i64..12, any::<bool>()).prop_map(move |(lo, span, log)| {
            let lo = if log { lo.abs() + 1 } else { lo };
            json!({"name": format!("i{i}"), "type": "int", "min": lo, "max": lo + span, "logScale": log})
        }),
        (0.001f64..10.0, 0.01f64..100.0, any::<bool>(), 2i32..6).prop_map(move |(lo, span, log, points)| {
            json!({"name": format!("d{i}"), "type": "double", "min": lo, "max": lo + span,
                   "logScale": log, "gridPoints": points})
        }),
    ]
}

fn spec(
    algorithm: &str,
    params: Vec<Value>,
    seed: i64,
    max: i32,
    parallel: i32,
) -> GryviaAutoTunerSpec {
    let mut s = json!({
        "objective": {"metric": "loss", "goal": "minimize"},
        "algorithm": algorithm,
        "parameters": params,
        "maxTrials": max,
        "parallelTrials": parallel,
        "seed": seed,
        "trialTemplate": {"image": "registry.local/train:1", "gpus": 1}
    });
    if algorithm == "asha" {
        s["earlyStopping"] = json!({"minTrials": 2, "reductionFactor": 3});
    }
    serde_json::from_value(s).unwrap()
}

fn trial(index: i32, parameters: BTreeMap<String, String>, value: Option<f64>) -> Trial {
    Trial {
        phase: Some(if value.is_some() {
            JobPhase::Succeeded
        } else {
            JobPhase::Running
        }),
        objective_value: value,
        ..Trial::new(tuner::trial_name("s", index), index, parameters)
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn the_grid_covers_its_space_exactly_once(params in prop::collection::vec(0usize..3, 1..4)
        .prop_flat_map(|kinds| kinds.iter().enumerate().map(|(i, _)| parameter(i)).collect::<Vec<_>>())) {
        let s = spec("grid", params, 0, 10_000, 1);
        let space = Space::of(&s).unwrap();
        let size = space.grid_size();
        let expected: u64 = space.params.iter().map(|p| p.grid.len() as u64).product();
        prop_assert_eq!(size, expected);
        let mut seen = BTreeSet::new();
        let mut trials = Vec::new();
        for i in 0..size {
            let p = tuner::suggest(&s, &trials).unwrap().unwrap();
            prop_assert!(space.contains(&p), "{:?}", p);
            for q in &space.params {
                prop_assert!(q.grid.contains(&p[&q.name]));
            }
            prop_assert!(seen.insert(p.clone()), "point {:?} twice", p);
            trials.push(trial(i32::try_from(i).unwrap(), p, None));
        }
        prop_assert_eq!(tuner::suggest(&s, &trials).unwrap(), None, "nothing past the grid");
    }

    #[test]
    fn random_and_bayesian_stay_in_bounds_and_repeat_from_the_seed(
        params in prop::collection::vec(0usize..3, 1..4)
            .prop_flat_map(|kinds| kinds.iter().enumerate().map(|(i, _)| parameter(i)).collect::<Vec<_>>()),
        seed in any::<i64>(),
        values in prop::collection::vec(-5.0f64..5.0, 8),
    ) {
        for algorithm in ["random", "bayesian", "asha"] {
            let s = spec(algorithm, params.clone(), seed, 100, 2);
            let space = Space::of(&s).unwrap();
            let mut trials = Vec::new();
            for (i, v) in values.iter().enumerate() {
                let p = tuner::suggest(&s, &trials).unwrap().unwrap();
                prop_assert!(space.contains(&p), "{} gave {:?}", algorithm, p);
                prop_assert_eq!(&tuner::suggest(&s, &trials).unwrap().unwrap(), &p);
                // The last one is still running.
                let done = i + 1 < values.len();
                trials.push(trial(i32::try_from(i).unwrap(), p, done.then_some(*v)));
            }
        }
    }

    #[test]
    fn asha_keeps_exactly_the_best_part_of_a_rung(
        values in prop::collection::btree_set(-1000i32..1000, 1..40),
        eta in 2i32..6,
        maximize in any::<bool>(),
    ) {
        let goal = if maximize { Goal::Maximize } else { Goal::Minimize };
        let values: Vec<f64> = values.into_iter().map(f64::from).collect();
        let kept: Vec<f64> = values
            .iter()
            .copied()
            .filter(|v| {
                let others: Vec<f64> = values.iter().copied().filter(|o| o != v).collect();
                asha::goes_on(*v, &others, goal, eta)
            })
            .collect();
        let n = values.len();
        let keep = asha::kept(n, eta);
        if keep == 0 {
            prop_assert_eq!(kept.len(), n, "a thin rung stops nobody");
        } else {
            prop_assert_eq!(kept.len(), keep);
            let mut sorted = values.clone();
            sorted.sort_by(f64::total_cmp);
            if maximize {
                sorted.reverse();
            }
            for v in &kept {
                prop_assert!(sorted[..keep].contains(v));
            }
        }
    }

    #[test]
    fn a_study_never_exceeds_parallel_or_max_trials(
        max in 1i32..30,
        parallel in 1i32..8,
        algorithm in prop::sample::select(vec!["random", "asha", "grid", "bayesian"]),
        outcomes in prop::collection::vec(0u8..5, 200),
    ) {
        let parallel = parallel.min(max);
        let params = vec![json!({"name": "x", "type": "int", "min": 0, "max": 50})];
        let mut t = GryviaAutoTuner::new("s", spec(algorithm, params, 3, max, parallel));
        t.metadata.namespace = Some("ml".to_owned());
        let mut jobs: BTreeMap<String, TrialJob> = BTreeMap::new();
        let start: jiff::Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        for (tick, outcome) in outcomes.iter().enumerate() {
            let now = start + jiff::SignedDuration::from_secs(i64::try_from(tick).unwrap());
            let world = TunerWorld { jobs: jobs.values().cloned().collect() };
            let plan = TunerReconciler::default().reconcile(&t, &world, now);
            for c in &plan.apply {
                let job: GryviaAIJob = serde_json::from_value(c.object.clone()).unwrap();
                jobs.insert(c.object_ref.name.clone(), TrialJob {
                    phase: Some(JobPhase::Running),
                    creation_time: Some(now),
                    reports: Some(Vec::new()),
                    ..TrialJob::of(&job)
                });
            }
            for d in &plan.delete {
                jobs.remove(&d.name);
            }
            if let Some(s) = plan.status {
                t.status = Some(s);
            }
            let st = t.status.clone().unwrap_or_default();
            let running = st.trials.iter().filter(|x| !tuner::trial_done(x)).count();
            prop_assert!(running <= usize::try_from(parallel).unwrap());
            prop_assert!(st.trials.len() <= usize::try_from(max).unwrap());
            prop_assert_eq!(usize::try_from(st.running_trials).unwrap(), running);
            // Move one running job along: a report, success, failure, or it vanishes.
            let live: Vec<String> = jobs
                .iter()
                .filter(|(_, j)| !j.phase.is_some_and(JobPhase::is_finished))
                .map(|(n, _)| n.clone())
                .collect();
            if let Some(name) = live.get(tick % live.len().max(1)) {
                let j = jobs.get_mut(name).unwrap();
                let reports = j.reports.get_or_insert_with(Vec::new);
                let step = i64::try_from(reports.len()).unwrap() + 1;
                match outcome {
                    0 | 1 => reports.push(Report { step, value: f64::from(u8::try_from(tick % 97).unwrap()) }),
                    2 => { j.phase = Some(JobPhase::Succeeded); reports.push(Report { step, value: 1.0 }); }
                    3 => j.phase = Some(JobPhase::Failed),
                    _ => { jobs.remove(name); }
                }
            }
        }
    }
}
