//! End-to-end: a hyperparameter study (GryviaAutoTuner, ASHA) run by the ai-operator binary
//! against a real control plane (testenv/): its trials are GryviaAIJobs on KWOK GPU nodes
//! whose simulated logs (testenv's `gryvia.io/testenv-log` annotation, filled with each
//! trial's own values) report learning curves, read by the operator through the API server's
//! `pods/log`. The poor trials are stopped early and their jobs deleted, a crashing trial
//! fails without stalling the study, the operator is killed midway and a new one finishes
//! the study from its objects, and `gryvia tune status` shows it.
//!
//! The `gryvia` binary is the one cargo built beside the ai-operator (`cargo test --workspace`
//! builds it; alone: `cargo build -p gryvia-cli`).

#![expect(clippy::unwrap_used, reason = "test helpers panic on failure")]

#[allow(dead_code, reason = "each test file uses part of the shared harness")]
mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use gryvia_reconcile::tuner::{self, asha};
use gryvia_testsupport::{KwokNodes, NODE_GROUP_TAINT, Process, TestNamespace, wait_for};
use gryvia_types::{GryviaAIJob, GryviaAutoTuner, GryviaAutoTunerSpec, JobPhase, labels};
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;

/// The study: x (an int) is each trial's final loss; its log reports 5x, 2x and x (as text:
/// "5" + x ...) at steps 1, 3 and 9, 2, 6 and 12 s after it starts, and it ends after 16 s;
/// `crash` makes a quarter of the trials fail.
fn spec(product: &str, seed: i64) -> GryviaAutoTunerSpec {
    serde_json::from_value(json!({
        "objective": {"metric": "loss", "goal": "minimize"},
        "algorithm": "asha",
        "parameters": [
            {"name": "x", "type": "int", "min": 10, "max": 99},
            {"name": "crash", "type": "categorical", "values": ["false", "false", "false", "true"]}
        ],
        "maxTrials": 12,
        "parallelTrials": 4,
        "earlyStopping": {"minTrials": 2, "reductionFactor": 3, "minStep": 1},
        "seed": seed,
        "trialTemplate": {
            "image": "registry.local/train:1",
            "gpus": 1,
            "gpuType": product,
            "retryLimit": 0,
            "args": ["--x={{ .x }}"],
            "tolerations": [{"key": NODE_GROUP_TAINT, "operator": "Exists", "effect": "NoSchedule"}],
            "podAnnotations": {
                "gryvia.io/testenv-duration": "16s",
                "gryvia.io/testenv-fail": "{{ .crash }}",
                "gryvia.io/testenv-log": "@2 gryvia-metric loss=5{{ .x }} step=1\n@6 gryvia-metric loss=2{{ .x }} step=3\n@12 gryvia-metric loss={{ .x }} step=9"
            }
        }
    }))
    .unwrap()
}

/// A seed whose first four trials (all started at once, before anything can be stopped)
/// hold exactly one crashing trial: it fails for certain.
fn seed_with_one_early_crash(product: &str) -> i64 {
    (1..1000)
        .find(|seed| {
            let s = spec(product, *seed);
            let mut trials = Vec::new();
            let mut crashes = 0;
            for i in 0..4 {
                let p = tuner::suggest(&s, &trials).unwrap().unwrap();
                crashes += usize::from(p["crash"] == "true");
                trials.push(gryvia_types::Trial::new(tuner::trial_name("t", i), i, p));
            }
            crashes == 1
        })
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[expect(
    clippy::too_many_lines,
    reason = "one end-to-end scenario, read top to bottom"
)]
async fn an_asha_study_stops_poor_trials_survives_a_restart_and_a_crash_and_picks_the_best() {
    let Some(client) = gryvia_testsupport::client().await else {
        return;
    };
    gryvia_client::crds::install(&client, Duration::from_secs(60))
        .await
        .unwrap();
    let lease_ns = TestNamespace::create(&client, "aiop").await.unwrap();
    let ns = TestNamespace::create(&client, "tune").await.unwrap();
    let product = gryvia_testsupport::unique("TUNE-GPU");
    let _nodes = KwokNodes::create_with_product(&client, "tune", 2, 2, &product)
        .await
        .unwrap();
    let access = common::operator_access(&client, &lease_ns.name).await;
    let args = ["--tuner-poll-seconds", "1"];
    let (mut operator, _) = Process::operator(
        env!("CARGO_BIN_EXE_gryvia-ai-operator"),
        &lease_ns.name,
        &args,
        Some(&access.kubeconfig),
        "ai-operator-tune",
    )
    .unwrap();

    let seed = seed_with_one_early_crash(&product);
    let studies: Api<GryviaAutoTuner> = Api::namespaced(client.clone(), &ns.name);
    let jobs: Api<GryviaAIJob> = Api::namespaced(client.clone(), &ns.name);
    let study = GryviaAutoTuner::new("sweep", spec(&product, seed));
    studies
        .create(&PostParams::default(), &study)
        .await
        .unwrap();

    // Trials run as jobs with their values filled in, never more than four at once; the
    // operator is killed once six trials exist and a new one takes over.
    let mut most_running = 0;
    let mut restarted: Option<Process> = None;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(240);
    let mut seen_args = false;
    let done =
        loop {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the study did not finish in 240 s: {:#?}",
                studies.get("sweep").await.unwrap().status
            );
            let st = studies
                .get("sweep")
                .await
                .unwrap()
                .status
                .unwrap_or_default();
            let live = jobs
                .list(&ListParams::default().labels(&format!("{}=sweep", labels::AUTOTUNER)))
                .await
                .unwrap()
                .items;
            let running = live
                .iter()
                .filter(|j| {
                    !j.status
                        .as_ref()
                        .and_then(|s| s.phase)
                        .is_some_and(JobPhase::is_finished)
                })
                .count();
            most_running = most_running
                .max(running)
                .max(usize::try_from(st.running_trials).unwrap());
            if !seen_args && let Some(j) = live.first() {
                let t = st
                    .trials
                    .iter()
                    .find(|t| Some(&t.name) == j.metadata.name.as_ref());
                if let Some(t) = t {
                    assert_eq!(j.spec.args, vec![format!("--x={}", t.parameters["x"])]);
                    assert!(j.spec.env.iter().any(|e| e.name == "GRYVIA_PARAM_X"
                        && e.value.as_ref() == Some(&t.parameters["x"])));
                    seen_args = true;
                }
            }
            if restarted.is_none() && st.trials.len() >= 6 {
                operator.kill();
                let (p, _) = Process::operator(
                    env!("CARGO_BIN_EXE_gryvia-ai-operator"),
                    &lease_ns.name,
                    &args,
                    Some(&access.kubeconfig),
                    "ai-operator-tune-again",
                )
                .unwrap();
                restarted = Some(p);
            }
            if st.phase.is_some_and(JobPhase::is_finished) {
                break st;
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        };
    assert!(restarted.is_some(), "the operator was restarted midway");
    assert!(seen_args, "a trial's job carried its values");
    assert!(
        most_running <= 4,
        "at most parallelTrials at once, saw {most_running}"
    );

    // Every trial once, with the values the seed gives.
    let names: Vec<String> = done.trials.iter().map(|t| t.name.clone()).collect();
    assert_eq!(
        names,
        (0..12)
            .map(|i| tuner::trial_name("sweep", i))
            .collect::<Vec<_>>()
    );
    let s = spec(&product, seed);
    for (i, t) in done.trials.iter().enumerate() {
        let expected = tuner::suggest(&s, &done.trials[..i]).unwrap().unwrap();
        assert_eq!(t.parameters, expected, "trial {i}");
        assert!(!t.vanished, "{t:?}");
    }
    assert_eq!(done.completed_trials, 12);
    assert_eq!(done.running_trials, 0);
    assert_eq!(
        done.succeeded_trials + done.failed_trials + done.early_stopped_trials,
        12
    );

    // The crash in the first wave failed and was counted; the study went on.
    let crashed: Vec<_> = done
        .trials
        .iter()
        .filter(|t| t.parameters["crash"] == "true" && !t.early_stopped)
        .collect();
    assert!(!crashed.is_empty());
    for t in &crashed {
        assert_eq!(t.phase, Some(JobPhase::Failed), "{t:?}");
    }
    assert_eq!(done.failed_trials, i32::try_from(crashed.len()).unwrap());

    // Stopped early: each was, at its rung, outranked by at least as many trials as the rung
    // kept, and its job is gone (its GPU freed); the others' jobs remain.
    let stopped: Vec<_> = done.trials.iter().filter(|t| t.early_stopped).collect();
    assert!(
        !stopped.is_empty(),
        "ASHA stopped no trial: {:#?}",
        done.trials
    );
    for t in &stopped {
        let last = t.rungs.last().unwrap();
        let better = done
            .trials
            .iter()
            .filter(|o| o.name != t.name)
            .filter_map(|o| o.rungs.iter().find(|r| r.rung == last.rung))
            .filter(|r| asha::better(gryvia_types::Goal::Minimize, r.value, last.value))
            .count();
        let message = t.message.as_deref().unwrap();
        assert!(
            message.contains(&format!("rung {}", last.rung)),
            "{message}"
        );
        let kept: usize = message
            .split("among the best ")
            .nth(1)
            .and_then(|m| m.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap();
        assert!(
            kept >= 1 && better >= kept,
            "{t:?}: {better} better, {kept} kept"
        );
    }
    let c = client.clone();
    let n = ns.name.clone();
    let stopped_names: BTreeSet<String> = stopped.iter().map(|t| t.name.clone()).collect();
    wait_for(
        "the stopped trials' jobs to be gone",
        Duration::from_secs(30),
        || {
            let (c, n, s) = (c.clone(), n.clone(), stopped_names.clone());
            async move {
                let left: Vec<String> = Api::<GryviaAIJob>::namespaced(c, &n)
                    .list(&ListParams::default())
                    .await
                    .ok()?
                    .items
                    .into_iter()
                    .filter_map(|j| j.metadata.name)
                    .collect();
                (s.iter().all(|x| !left.contains(x)) && left.len() == 12 - s.len()).then_some(())
            }
        },
    )
    .await
    .unwrap();

    // The best is the succeeded trial with the lowest x, and its objective is x.
    let best = done.best_trial.clone().unwrap();
    let want = done
        .trials
        .iter()
        .filter(|t| t.phase == Some(JobPhase::Succeeded) && !t.early_stopped)
        .map(|t| t.parameters["x"].parse::<f64>().unwrap())
        .fold(f64::INFINITY, f64::min);
    assert_eq!(best.objective_value, Some(want));
    assert_eq!(best.parameters["x"].parse::<f64>().unwrap(), want);
    assert_eq!(done.phase, Some(JobPhase::Succeeded));
    let ready = gryvia_types::conditions::find(&done.conditions, "Ready").unwrap();
    assert_eq!(ready.reason, "Completed");

    // The CLI shows it.
    let gryvia_testsupport::Cluster::Ready { kubeconfig } = gryvia_testsupport::cluster() else {
        unreachable!("the test runs against a control plane")
    };
    let out = std::process::Command::new(common::cli())
        .args(["tune", "status", "sweep", "-n", &ns.name])
        .env("KUBECONFIG", &kubeconfig)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("Progress:   12 of 12 trials finished, 0 running (at most 4)"),
        "{text}"
    );
    assert!(
        text.contains(&format!("Best:       {} loss={want}", best.name)),
        "{text}"
    );
    assert!(text.contains("EarlyStopped"), "{text}");
    let missing = std::process::Command::new(common::cli())
        .args(["tune", "status", "nope", "-n", &ns.name])
        .env("KUBECONFIG", &kubeconfig)
        .output()
        .unwrap();
    assert!(!missing.status.success());
    assert!(String::from_utf8_lossy(&missing.stderr).contains("not found"));
}
