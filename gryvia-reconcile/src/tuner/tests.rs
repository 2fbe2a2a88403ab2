use std::collections::BTreeMap;

use gryvia_types::{GryviaAutoTuner, GryviaAutoTunerSpec, JobPhase};
use serde_json::json;

use super::metrics::Report;
use super::*;
use crate::Reconcile;

fn ts(s: &str) -> Timestamp {
    s.parse().unwrap()
}

fn at(secs: i64) -> Timestamp {
    ts("2026-01-01T10:00:00Z") + jiff::SignedDuration::from_secs(secs)
}

fn tuner(spec: serde_json::Value) -> GryviaAutoTuner {
    let spec: GryviaAutoTunerSpec = serde_json::from_value(spec).unwrap();
    let mut t = GryviaAutoTuner::new("study", spec);
    t.metadata.namespace = Some("ml".to_owned());
    t.metadata.generation = Some(1);
    t
}

fn asha_spec(max: i32, parallel: i32) -> serde_json::Value {
    json!({
        "objective": {"metric": "loss", "goal": "minimize"},
        "algorithm": "asha",
        "parameters": [
            {"name": "lr", "type": "double", "min": 0.0001, "max": 0.1, "logScale": true},
            {"name": "layers", "type": "int", "min": 1, "max": 8},
            {"name": "opt", "type": "categorical", "values": ["adam", "sgd"]}
        ],
        "maxTrials": max,
        "parallelTrials": parallel,
        "earlyStopping": {"minTrials": 2, "reductionFactor": 3},
        "seed": 42,
        "trialTemplate": {
            "image": "registry.local/train:1",
            "gpus": 1,
            "args": ["--lr={{ .lr }}", "--layers={{.layers}}"],
            "podAnnotations": {"note": "opt {{ .opt }}"}
        }
    })
}

/// A simulated cluster: the jobs the plans created, moved along by the test.
#[derive(Default)]
struct Cluster {
    jobs: BTreeMap<String, TrialJob>,
}

impl Cluster {
    /// Applies `plan` to the cluster and the tuner; returns the plan.
    fn step(&mut self, t: &mut GryviaAutoTuner, now: Timestamp) -> Plan<GryviaAutoTunerStatus> {
        let world = TunerWorld {
            jobs: self.jobs.values().cloned().collect(),
        };
        let plan = TunerReconciler::default().reconcile(t, &world, now);
        for c in &plan.apply {
            let job: GryviaAIJob = serde_json::from_value(c.object.clone()).unwrap();
            self.jobs.insert(
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
            self.jobs.remove(&d.name);
        }
        if let Some(s) = &plan.status {
            t.status = Some(s.clone());
        }
        plan
    }

    fn finish(&mut self, name: &str, phase: JobPhase, reports: &[(i64, f64)], now: Timestamp) {
        let j = self.jobs.get_mut(name).unwrap();
        j.phase = Some(phase);
        j.completion_time = Some(now);
        j.reports = Some(
            reports
                .iter()
                .map(|&(step, value)| Report { step, value })
                .collect(),
        );
        if phase == JobPhase::Failed {
            j.message = Some("BackoffLimitExceeded: retries used up (exit code 1)".to_owned());
        }
    }

    fn report(&mut self, name: &str, reports: &[(i64, f64)]) {
        self.jobs.get_mut(name).unwrap().reports = Some(
            reports
                .iter()
                .map(|&(step, value)| Report { step, value })
                .collect(),
        );
    }
}

fn status(t: &GryviaAutoTuner) -> &GryviaAutoTunerStatus {
    t.status.as_ref().unwrap()
}

fn reasons(plan: &Plan<GryviaAutoTunerStatus>) -> Vec<&str> {
    plan.events.iter().map(|e| e.reason.as_str()).collect()
}

#[test]
fn trials_are_rendered_with_their_values_and_at_most_parallel_run() {
    let mut t = tuner(asha_spec(12, 3));
    let mut c = Cluster::default();
    let plan = c.step(&mut t, at(0));
    assert_eq!(plan.apply.len(), 3);
    let job: GryviaAIJob = serde_json::from_value(plan.apply[0].object.clone()).unwrap();
    assert_eq!(job.metadata.name.as_deref(), Some("study-0"));
    let params = &status(&t).trials[0].parameters;
    assert_eq!(job.spec.args[0], format!("--lr={}", params["lr"]));
    assert_eq!(job.spec.args[1], format!("--layers={}", params["layers"]));
    assert_eq!(
        job.spec.pod_annotations["note"],
        format!("opt {}", params["opt"])
    );
    let env: BTreeMap<_, _> = job
        .spec
        .env
        .iter()
        .map(|e| (e.name.as_str(), e.value.clone().unwrap()))
        .collect();
    assert_eq!(env["GRYVIA_PARAM_LR"], params["lr"]);
    assert_eq!(env["GRYVIA_PARAM_OPT"], params["opt"]);
    assert_eq!(job.metadata.labels.unwrap()[labels::AUTOTUNER], "study");
    assert_eq!(status(&t).running_trials, 3);
    assert_eq!(status(&t).phase, Some(JobPhase::Running));
    assert_eq!(plan.requeue_after(), Some(DEFAULT_POLL));
    // Nothing more starts while three run; a finished trial makes room for one.
    assert!(c.step(&mut t, at(5)).apply.is_empty());
    c.finish("study-1", JobPhase::Succeeded, &[(1, 0.9), (9, 0.4)], at(6));
    let plan = c.step(&mut t, at(7));
    assert_eq!(plan.apply.len(), 1);
    assert_eq!(plan.apply[0].object_ref.name, "study-3");
    let s = status(&t);
    assert_eq!(
        (s.completed_trials, s.running_trials, s.succeeded_trials),
        (1, 3, 1)
    );
    assert_eq!(s.best_trial.as_ref().unwrap().name, "study-1");
    assert_eq!(s.best_trial.as_ref().unwrap().objective_value, Some(0.4));
}

#[test]
fn asha_stops_a_poor_trial_records_it_then_deletes_its_job() {
    let mut t = tuner(asha_spec(12, 6));
    let mut c = Cluster::default();
    c.step(&mut t, at(0));
    // Two trials succeed (minTrials 2): rung 0 (step 1) holds 0.5 and 0.6.
    c.finish(
        "study-0",
        JobPhase::Succeeded,
        &[(1, 0.5), (3, 0.3), (9, 0.2)],
        at(10),
    );
    c.finish(
        "study-1",
        JobPhase::Succeeded,
        &[(1, 0.6), (3, 0.5), (9, 0.45)],
        at(10),
    );
    c.step(&mut t, at(11));
    // A running trial reaches rung 0 with 0.9: 3 values, the best one goes on; it is not it.
    c.report("study-2", &[(1, 0.9)]);
    // Another reaches rung 0 with 0.1: it goes on.
    c.report("study-3", &[(1, 0.1)]);
    let plan = c.step(&mut t, at(12));
    assert!(
        reasons(&plan).contains(&"TrialEarlyStopped"),
        "{:?}",
        reasons(&plan)
    );
    assert!(plan.delete.is_empty(), "recorded before its job is deleted");
    assert_eq!(plan.requeue_after(), Some(STOP_DELAY));
    let s = status(&t);
    let t2 = s.trials.iter().find(|x| x.name == "study-2").unwrap();
    assert!(t2.early_stopped);
    assert!(
        t2.message
            .as_ref()
            .unwrap()
            .contains("rung 0 (step 1): loss 0.9"),
        "{:?}",
        t2.message
    );
    assert!(
        !s.trials
            .iter()
            .find(|x| x.name == "study-3")
            .unwrap()
            .early_stopped
    );
    assert_eq!(s.early_stopped_trials, 1);
    // The next reconcile deletes the job and starts another trial in its place.
    let plan = c.step(&mut t, at(13));
    assert_eq!(
        plan.delete
            .iter()
            .map(|d| d.name.as_str())
            .collect::<Vec<_>>(),
        vec!["study-2"]
    );
    assert!(!c.jobs.contains_key("study-2"));
    // A trial that shows several rungs at once is judged at the first and keeps only that one.
    c.report("study-4", &[(1, 0.95), (3, 0.05), (9, 0.01)]);
    c.step(&mut t, at(13));
    let t4 = status(&t)
        .trials
        .iter()
        .find(|x| x.name == "study-4")
        .unwrap()
        .clone();
    assert!(t4.early_stopped, "{t4:?}");
    assert_eq!(t4.rungs.iter().map(|r| r.rung).collect::<Vec<_>>(), vec![0]);
    // Once its job is gone, the trial stays stopped early (not vanished).
    c.step(&mut t, at(14));
    let t2 = status(&t)
        .trials
        .iter()
        .find(|x| x.name == "study-2")
        .unwrap()
        .clone();
    assert!(t2.early_stopped && !t2.vanished);
}

#[test]
fn a_failed_trial_counts_as_failed_and_the_study_goes_on_to_the_end() {
    let mut spec = asha_spec(3, 1);
    spec["algorithm"] = json!("random");
    spec.as_object_mut().unwrap().remove("earlyStopping");
    let mut t = tuner(spec);
    let mut c = Cluster::default();
    c.step(&mut t, at(0));
    c.finish("study-0", JobPhase::Failed, &[], at(5));
    let plan = c.step(&mut t, at(6));
    assert!(reasons(&plan).contains(&"TrialFailed"));
    assert_eq!(plan.apply[0].object_ref.name, "study-1");
    assert_eq!(status(&t).failed_trials, 1);
    c.finish("study-1", JobPhase::Succeeded, &[(1, 2.0)], at(7));
    c.step(&mut t, at(8));
    c.finish("study-2", JobPhase::Succeeded, &[], at(9));
    let plan = c.step(&mut t, at(10));
    assert!(plan.apply.is_empty());
    assert!(reasons(&plan).contains(&"StudyCompleted"));
    let s = status(&t);
    assert_eq!(s.phase, Some(JobPhase::Succeeded));
    assert_eq!(
        (s.completed_trials, s.succeeded_trials, s.failed_trials),
        (3, 2, 1)
    );
    assert_eq!(s.best_trial.as_ref().unwrap().name, "study-1");
    assert_eq!(
        s.trials[2].message.as_deref(),
        Some("succeeded without reporting loss")
    );
    assert!(s.completion_time.is_some());
    assert_eq!(plan.requeue_after(), None);
    // Finished: nothing more, and a second pass changes nothing.
    let again = c.step(&mut t, at(20));
    assert!(again.apply.is_empty() && again.status.is_none() && again.events.is_empty());
}

#[test]
fn a_vanished_job_is_recorded_after_the_grace_and_a_lost_status_is_rebuilt_from_the_jobs() {
    let mut t = tuner(asha_spec(4, 2));
    let mut c = Cluster::default();
    c.step(&mut t, at(0));
    // The status write was lost: the trials come back from their jobs.
    t.status = None;
    let plan = c.step(&mut t, at(1));
    assert!(plan.apply.is_empty(), "no trial is created twice");
    let names: Vec<String> = status(&t).trials.iter().map(|x| x.name.clone()).collect();
    assert_eq!(names, vec!["study-0", "study-1"]);
    // A job seen Running then deleted by someone: vanished at once, and replaced.
    c.jobs.remove("study-0");
    let plan = c.step(&mut t, at(2));
    assert!(reasons(&plan).contains(&"TrialVanished"));
    let t0 = &status(&t).trials[0];
    assert!(t0.vanished);
    assert!(
        t0.message
            .as_ref()
            .unwrap()
            .contains("disappeared while Running")
    );
    assert_eq!(plan.apply[0].object_ref.name, "study-2");
    // A job never seen: missing from the cache within the grace is not vanished.
    c.jobs.remove("study-2");
    let mut fresh = status(&t).clone();
    fresh.trials[2].phase = None;
    t.status = Some(fresh);
    let plan = c.step(&mut t, at(3));
    assert!(!status(&t).trials[2].vanished);
    assert!(plan.requeue_after().unwrap() <= VANISH_GRACE);
    c.step(&mut t, at(40));
    assert!(status(&t).trials[2].vanished);
}

#[test]
fn an_invalid_spec_starts_nothing_and_says_why() {
    let mut spec = asha_spec(4, 2);
    spec["trialTemplate"]["args"] = json!(["--lr={{ .learning_rate }}"]);
    let t = tuner(spec);
    let plan = TunerReconciler::default().reconcile(&t, &TunerWorld::default(), at(0));
    assert!(plan.apply.is_empty());
    let s = plan.status.unwrap();
    assert_eq!(s.phase, Some(JobPhase::Failed));
    let c = &s.conditions[0];
    assert_eq!(c.reason, conditions::REASON_INVALID_SPEC);
    assert!(
        c.message.contains("spec.trialTemplate.args[0]") && c.message.contains("learning_rate"),
        "{}",
        c.message
    );

    for (patch, want) in [
        (
            json!({"parameters": [{"name": "lr", "type": "double", "min": 0.0, "max": 1.0, "logScale": true}]}),
            "logScale needs min above 0",
        ),
        (
            json!({"parameters": [{"name": "n", "type": "int", "min": 0.5, "max": 4}]}),
            "whole min and max",
        ),
        (
            json!({"algorithm": "grid", "earlyStopping": null, "parameters": [{"name": "lr", "type": "double", "min": 0.1, "max": 1.0}]}),
            "needs gridPoints or values",
        ),
        (json!({"earlyStopping": null}), "asha needs earlyStopping"),
        (json!({"algorithm": "random"}), "only the asha algorithm"),
    ] {
        let mut spec = asha_spec(4, 2);
        for (k, v) in patch.as_object().unwrap() {
            spec[k] = v.clone();
        }
        if spec["earlyStopping"].is_null() {
            spec.as_object_mut().unwrap().remove("earlyStopping");
        }
        spec["trialTemplate"]["args"] = json!([]);
        spec["trialTemplate"]["podAnnotations"] = json!({});
        let why = check(&tuner(spec)).unwrap_or_default();
        assert!(why.contains(want), "{why:?} should say {want:?}");
    }
    let mut long = tuner(asha_spec(1000, 2));
    long.metadata.name = Some("s".repeat(50));
    assert!(check(&long).unwrap().contains("longer than 52"));
}

#[test]
fn a_refused_trial_is_recorded_as_a_condition() {
    let t = tuner(asha_spec(4, 2));
    let s = TunerReconciler::default()
        .record_failure(&t, "admission webhook denied: budget exhausted", at(0))
        .unwrap();
    assert_eq!(s.conditions[0].reason, "TrialNotCreated");
    assert!(s.conditions[0].message.contains("budget exhausted"));
}

#[test]
fn grid_runs_every_point_once_then_completes() {
    let t = tuner(json!({
        "objective": {"metric": "acc", "goal": "maximize"},
        "algorithm": "grid",
        "parameters": [
            {"name": "lr", "type": "double", "min": 0.001, "max": 0.1, "logScale": true, "gridPoints": 3},
            {"name": "bs", "type": "categorical", "values": ["32", "64"]}
        ],
        "maxTrials": 100,
        "parallelTrials": 10,
        "trialTemplate": {"image": "registry.local/train:1", "gpus": 1}
    }));
    let mut t = t;
    let mut c = Cluster::default();
    let plan = c.step(&mut t, at(0));
    assert_eq!(plan.apply.len(), 6, "3 x 2 points");
    let points: Vec<String> = status(&t)
        .trials
        .iter()
        .map(|x| format!("{}/{}", x.parameters["lr"], x.parameters["bs"]))
        .collect();
    assert_eq!(
        points,
        vec![
            "0.001/32", "0.001/64", "0.01/32", "0.01/64", "0.1/32", "0.1/64"
        ]
    );
    for (i, v) in [0.1, 0.2, 0.9, 0.3, 0.5, 0.4].iter().enumerate() {
        c.finish(
            &format!("study-{i}"),
            JobPhase::Succeeded,
            &[(1, *v)],
            at(5),
        );
    }
    c.step(&mut t, at(6));
    let s = status(&t);
    assert_eq!(s.phase, Some(JobPhase::Succeeded));
    assert_eq!(s.best_trial.as_ref().unwrap().name, "study-2");
}

#[test]
fn bayesian_suggestions_are_reproducible_and_in_bounds() {
    let mut spec = asha_spec(40, 1);
    spec["algorithm"] = json!("bayesian");
    spec.as_object_mut().unwrap().remove("earlyStopping");
    let spec: GryviaAutoTunerSpec = serde_json::from_value(spec).unwrap();
    let space = Space::of(&spec).unwrap();
    let mut trials: Vec<Trial> = Vec::new();
    for i in 0..12 {
        let p = suggest(&spec, &trials).unwrap().unwrap();
        assert!(space.contains(&p), "{p:?}");
        assert_eq!(suggest(&spec, &trials).unwrap().unwrap(), p, "reproducible");
        let lr: f64 = p["lr"].parse().unwrap();
        let layers: f64 = p["layers"].parse().unwrap();
        trials.push(Trial {
            phase: Some(JobPhase::Succeeded),
            objective_value: Some((lr.log10() + 2.0).powi(2) + (layers - 4.0).powi(2) / 10.0),
            ..Trial::new(trial_name("study", i), i, p)
        });
    }
}
