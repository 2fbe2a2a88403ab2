//! GPU health policy: every threshold, staleness, flap, guard, drain and ladder branch.

#![expect(clippy::unwrap_used, reason = "tests")]

use std::collections::BTreeMap;

use gryvia_reconcile::health::{
    HealthCheckReconciler, HealthOptions, HealthWorld, NodeInfo, PdbInfo, PodInfo, drain_plan,
    evaluate_gpu, evaluate_node, selector_matches, target_nodes,
};
use gryvia_reconcile::{NodeOp, Plan, Reconcile, TaintEffect, Timestamp};
use gryvia_types::k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    LabelSelector, LabelSelectorRequirement, Time,
};
use gryvia_types::testing::{gpu, gpu_node, health_check};
use gryvia_types::{
    CheckType, GryviaGpuNode, GryviaHealthCheck, GryviaHealthCheckStatus, HealthCheckItem,
    NvLinkObservation, RemediationAction, RemediationResult, RemediationSpec, StepPhase,
    TargetType, Threshold, Verdict, XidEvent, labels,
};

fn now() -> Timestamp {
    "2026-12-02T12:00:00Z".parse().unwrap()
}

fn secs(n: i64) -> jiff::SignedDuration {
    jiff::SignedDuration::from_secs(n)
}

fn check(
    type_: CheckType,
    max: Option<f64>,
    min: Option<f64>,
    warning: Option<f64>,
) -> GryviaHealthCheck {
    let mut hc = health_check("gpu-health", type_, 0.0);
    hc.spec.checks[0].threshold = Threshold { max, min, warning };
    hc
}

fn verdict_of(hc: &GryviaHealthCheck, g: gryvia_types::GpuObservation) -> (Verdict, Vec<String>) {
    let r = evaluate_gpu(&hc.spec, &g, now());
    (r.verdict, r.reasons)
}

#[test]
fn temperature_above_max_fails_above_warning_warns_and_below_min_fails() {
    let hc = check(
        CheckType::GpuTemperature,
        Some(90.0),
        Some(10.0),
        Some(80.0),
    );
    let mut g = gpu(0, now());
    g.temperature_c = Some(91);
    let (v, reasons) = verdict_of(&hc, g.clone());
    assert_eq!(v, Verdict::Failed);
    assert_eq!(reasons, vec!["check: temperature (C) 91 above max 90"]);
    g.temperature_c = Some(85);
    assert_eq!(verdict_of(&hc, g.clone()).0, Verdict::Warning);
    g.temperature_c = Some(5);
    assert_eq!(
        verdict_of(&hc, g.clone()).1,
        vec!["check: temperature (C) 5 below min 10"]
    );
    g.temperature_c = Some(90);
    assert_eq!(
        verdict_of(&hc, g).0,
        Verdict::Warning,
        "at max is not above it"
    );
}

#[test]
fn utilization_memory_and_power_are_judged_on_their_own_units() {
    let mut g = gpu(0, now());
    g.utilization_percent = Some(3);
    let hc = check(CheckType::GpuUtilization, None, Some(5.0), None);
    assert_eq!(
        verdict_of(&hc, g.clone()).1,
        vec!["check: utilization (%) 3 below min 5"]
    );

    g.memory_used_mib = Some(78000);
    g.memory_total_mib = Some(80000);
    let hc = check(CheckType::GpuMemory, Some(99.0), None, Some(95.0));
    let (v, reasons) = verdict_of(&hc, g.clone());
    assert_eq!(v, Verdict::Warning);
    assert_eq!(
        reasons,
        vec!["check: memory used (%) 97.5 above warning 95"]
    );
    g.memory_total_mib = Some(0);
    assert_eq!(
        verdict_of(&hc, g.clone()).0,
        Verdict::Unknown,
        "no total, no percentage"
    );

    g.power_draw_watts = Some(710.5);
    let hc = check(CheckType::GpuPower, Some(700.0), None, None);
    assert_eq!(
        verdict_of(&hc, g).1,
        vec!["check: power draw (W) 710.5 above max 700"]
    );
}

#[test]
fn uncorrected_ecc_errors_fail_and_corrected_ones_only_warn() {
    let hc = check(CheckType::GpuEccErrors, Some(0.0), None, Some(100.0));
    let mut g = gpu(2, now());
    g.ecc_double_bit = Some(1);
    let (v, reasons) = verdict_of(&hc, g.clone());
    assert_eq!(v, Verdict::Failed);
    assert_eq!(reasons, vec!["check: uncorrected ECC errors 1 above max 0"]);
    g.ecc_double_bit = Some(0);
    g.ecc_single_bit = Some(250);
    assert_eq!(
        verdict_of(&hc, g.clone()),
        (
            Verdict::Warning,
            vec!["check: corrected ECC errors 250 above warning 100".to_owned()]
        )
    );
    g.ecc_single_bit = Some(5);
    assert_eq!(verdict_of(&hc, g.clone()).0, Verdict::Healthy);
    g.ecc_double_bit = None;
    assert_eq!(
        verdict_of(&hc, g),
        (Verdict::Unknown, vec!["check: no ECC reading".to_owned()])
    );
}

#[test]
fn nvlink_counts_links_down_plus_errors_and_gpus_without_nvlink_pass() {
    let hc = check(CheckType::GpuNvlink, Some(0.0), None, None);
    let mut g = gpu(0, now());
    assert_eq!(verdict_of(&hc, g.clone()).0, Verdict::Healthy);
    g.nvlink = Some(NvLinkObservation {
        links_total: 18,
        links_up: 17,
        crc_errors: 2,
        replay_errors: 0,
        recovery_errors: 0,
    });
    let (v, reasons) = verdict_of(&hc, g);
    assert_eq!(v, Verdict::Failed);
    assert_eq!(
        reasons,
        vec!["check: NVLink links down (1) plus errors (2) 3 above max 0"]
    );
}

#[test]
fn critical_xids_fail_and_application_xids_are_ignored() {
    let hc = check(CheckType::GpuXid, None, None, None);
    let mut g = gpu(0, now());
    g.xid_events = vec![XidEvent {
        code: 13,
        observed_at: Time(now()),
        message: None,
    }];
    assert_eq!(
        verdict_of(&hc, g.clone()).0,
        Verdict::Healthy,
        "XID 13 is an application fault"
    );
    g.xid_events.push(XidEvent {
        code: 79,
        observed_at: Time(now()),
        message: Some("GPU has fallen off the bus".into()),
    });
    assert_eq!(
        verdict_of(&hc, g).1,
        vec!["check: critical XID errors 1 above max 0 (XID 79)"]
    );
}

#[test]
fn a_missing_reading_is_unknown_and_a_stale_observation_is_unknown_whatever_it_says() {
    let hc = check(CheckType::GpuTemperature, Some(90.0), None, None);
    let mut g = gpu(0, now());
    g.temperature_c = None;
    assert_eq!(
        verdict_of(&hc, g.clone()),
        (
            Verdict::Unknown,
            vec!["check: no temperature reading".to_owned()]
        )
    );
    g.temperature_c = Some(120);
    g.observed_at = Time(now() - secs(301));
    assert_eq!(
        verdict_of(&hc, g),
        (
            Verdict::Unknown,
            vec!["observation is 301s old (staleAfterSeconds 300)".to_owned()]
        )
    );
}

#[test]
fn a_node_is_as_bad_as_its_worst_gpu_and_lists_only_unhealthy_gpus() {
    let hc = check(CheckType::GpuEccErrors, Some(0.0), None, None);
    let mut node = gpu_node("n1", 8, now());
    let st = node.status.as_mut().unwrap();
    st.gpus[3].ecc_double_bit = Some(4);
    st.gpus[5].observed_at = Time(now() - secs(1000));
    let e = evaluate_node(&hc.spec, node.status.as_ref(), now());
    assert_eq!(
        e.verdict,
        Verdict::Failed,
        "a failed GPU outweighs an unknown one"
    );
    assert_eq!(
        e.gpus.iter().map(|g| g.index).collect::<Vec<_>>(),
        vec![3, 5]
    );
    assert_eq!(
        e.reasons[0],
        "gpu 3: check: uncorrected ECC errors 4 above max 0"
    );
    assert_eq!(
        evaluate_node(&hc.spec, None, now()).reasons,
        vec!["no GryviaGpuNode reports this node"]
    );
}

// ---------------------------------------------------------------------------------------------
// The reconcile
// ---------------------------------------------------------------------------------------------

struct Sim {
    reconciler: HealthCheckReconciler,
    hc: GryviaHealthCheck,
    world: HealthWorld,
    now: Timestamp,
}

fn node(name: &str) -> NodeInfo {
    NodeInfo {
        name: name.to_owned(),
        labels: BTreeMap::from([("pool".to_owned(), "a".to_owned())]),
        gpu_capacity: 8,
        ..Default::default()
    }
}

impl Sim {
    /// `n` nodes with 8 healthy GPUs each, an ECC check acting after `consecutive` failures,
    /// cordon on, remediation enabled, every 10 seconds.
    fn new(n: usize, consecutive: i32) -> Sim {
        let mut hc = check(CheckType::GpuEccErrors, Some(0.0), None, None);
        hc.spec.schedule = "*/10 * * * * *".to_owned();
        hc.spec.on_failure.cordon = true;
        hc.spec.on_failure.consecutive_failures = consecutive;
        hc.spec.max_quarantined_percent = 50;
        let mut world = HealthWorld::default();
        for i in 0..n {
            let name = format!("n{i}");
            world.nodes.push(node(&name));
            world
                .gpu_nodes
                .insert(name.clone(), std::sync::Arc::new(gpu_node(&name, 8, now())));
        }
        Sim {
            reconciler: HealthCheckReconciler {
                options: HealthOptions { remediation: true },
            },
            hc,
            world,
            now: now(),
        }
    }

    fn status(&self) -> &GryviaHealthCheckStatus {
        self.hc.status.as_ref().unwrap()
    }

    /// A node's result; a healthy node without state is only counted in the summary, so it
    /// reads as healthy with no failures.
    fn result(&self, node: &str) -> gryvia_types::NodeHealthResult {
        self.status()
            .nodes
            .iter()
            .find(|r| r.node == node)
            .cloned()
            .unwrap_or_else(|| gryvia_reconcile::health::healthy_result(node))
    }

    fn gpu_node(&mut self, node: &str) -> &mut GryviaGpuNode {
        std::sync::Arc::make_mut(self.world.gpu_nodes.get_mut(node).unwrap())
    }

    /// Fresh observations at the current time; `dbe` double-bit errors on GPU 0 of `node`.
    fn observe(&mut self, node: &str, dbe: i64) {
        let at = self.now;
        let st = self.gpu_node(node).status.as_mut().unwrap();
        for g in &mut st.gpus {
            g.observed_at = Time(at);
        }
        st.gpus[0].ecc_double_bit = Some(dbe);
    }

    fn refresh_all(&mut self) {
        let names: Vec<String> = self.world.gpu_nodes.keys().cloned().collect();
        for n in names {
            let dbe = self.gpu_node(&n).status.as_ref().unwrap().gpus[0]
                .ecc_double_bit
                .unwrap();
            self.observe(&n, dbe);
        }
    }

    /// Reconciles and applies the Plan to the simulated world, like the executor would.
    fn step(&mut self) -> Plan<GryviaHealthCheckStatus> {
        let plan = self.reconciler.reconcile(&self.hc, &self.world, self.now);
        if let Some(s) = &plan.status {
            self.hc.status = Some(s.clone());
        }
        for op in &plan.node_ops {
            let n = self
                .world
                .nodes
                .iter_mut()
                .find(|n| n.name == op.node())
                .unwrap();
            match op {
                NodeOp::Cordon { .. } => n.unschedulable = true,
                NodeOp::Uncordon { .. } => n.unschedulable = false,
                NodeOp::Taint { taint, .. } => {
                    assert_eq!(taint.key, labels::GPU_UNHEALTHY_TAINT);
                    assert_eq!(taint.effect, TaintEffect::NoSchedule);
                    n.quarantined_by = Some(taint.value.clone());
                }
                NodeOp::RemoveTaint { .. } => n.quarantined_by = None,
                other => panic!("unexpected {other:?}"),
            }
        }
        for child in &plan.apply {
            assert_eq!(child.object_ref.kind, "GryviaGpuNode");
            assert!(!child.owned, "a GryviaGpuNode belongs to its agent");
            let req: gryvia_types::RemediationRequest =
                serde_json::from_value(child.object["spec"]["remediationRequest"].clone()).unwrap();
            self.gpu_node(&child.object_ref.name)
                .spec
                .remediation_request = Some(req);
        }
        let evicted: Vec<(String, String)> = plan
            .evictions
            .iter()
            .map(|e| (e.namespace.clone(), e.pod.clone()))
            .collect();
        let pdbs = self.world.pdbs.clone();
        for pods in self.world.pods.values_mut() {
            pods.retain(|p| {
                let blocked = drain_plan(std::slice::from_ref(p), &pdbs).blocked.len() == 1;
                blocked || !evicted.contains(&(p.namespace.clone(), p.name.clone()))
            });
        }
        plan
    }

    fn advance(&mut self, s: i64) {
        self.now += secs(s);
    }

    /// The agent answers the pending request with `phase`.
    fn agent_answers(&mut self, node: &str, phase: StepPhase) -> RemediationAction {
        let at = self.now;
        let gn = self.gpu_node(node);
        let req = gn.spec.remediation_request.clone().unwrap();
        gn.status.as_mut().unwrap().remediation_result = Some(RemediationResult {
            id: req.id,
            action: req.action,
            phase,
            started_at: Some(Time(at)),
            finished_at: Some(Time(at)),
            message: Some(format!("dry-run {:?}", req.action)),
        });
        req.action
    }

    fn actions(&self) -> Vec<String> {
        self.status()
            .actions
            .iter()
            .map(|a| format!("{} {}", a.node, a.action))
            .collect()
    }
}

fn cordons(plan: &Plan<GryviaHealthCheckStatus>) -> Vec<String> {
    plan.node_ops
        .iter()
        .filter(|o| matches!(o, NodeOp::Cordon { .. }))
        .map(|o| o.node().to_owned())
        .collect()
}

#[test]
fn ecc_errors_over_threshold_cordon_and_taint_the_node() {
    let mut sim = Sim::new(2, 1);
    sim.observe("n1", 2);
    let plan = sim.step();
    assert_eq!(cordons(&plan), vec!["n1"]);
    assert!(plan.node_ops.contains(&NodeOp::Taint {
        node: "n1".into(),
        taint: gryvia_reconcile::Taint {
            key: labels::GPU_UNHEALTHY_TAINT.into(),
            value: "gpu-health".into(),
            effect: TaintEffect::NoSchedule,
        }
    }));
    assert!(plan.events.iter().any(|e| e.reason == "Quarantine"));
    assert_eq!(sim.status().summary.failed, 1);
    assert_eq!(sim.status().summary.quarantined, 1);
    assert!(sim.result("n1").quarantined);
    assert_eq!(sim.actions(), vec!["n1 Quarantine"]);
}

#[test]
fn flap_damping_acts_only_after_n_consecutive_failing_runs_and_unknown_holds_the_count() {
    let mut sim = Sim::new(2, 3);
    sim.observe("n1", 1);
    assert!(cordons(&sim.step()).is_empty());
    assert_eq!(sim.result("n1").consecutive_failures, 1);
    // A healthy run resets the counter.
    sim.advance(10);
    sim.refresh_all();
    sim.observe("n1", 0);
    sim.step();
    assert_eq!(sim.result("n1").consecutive_failures, 0);
    sim.advance(10);
    sim.refresh_all();
    sim.observe("n1", 1);
    sim.step();
    // An unknown run (stale observations) neither counts nor resets.
    sim.advance(400);
    sim.step();
    assert_eq!(sim.result("n1").verdict, Verdict::Unknown);
    assert_eq!(sim.result("n1").consecutive_failures, 1);
    sim.advance(10);
    sim.refresh_all();
    sim.observe("n1", 1);
    assert!(cordons(&sim.step()).is_empty());
    assert_eq!(sim.result("n1").consecutive_failures, 2);
    sim.advance(10);
    sim.refresh_all();
    assert_eq!(cordons(&sim.step()), vec!["n1"]);
}

#[test]
fn stale_or_missing_observations_give_unknown_and_never_act() {
    let mut sim = Sim::new(3, 1);
    sim.observe("n1", 5);
    sim.world.gpu_nodes.remove("n2");
    sim.advance(301);
    let plan = sim.step();
    assert!(plan.node_ops.is_empty(), "{:?}", plan.node_ops);
    assert_eq!(sim.result("n1").verdict, Verdict::Unknown);
    assert_eq!(
        sim.result("n2").reasons,
        vec!["no GryviaGpuNode reports this node"]
    );
    assert_eq!(sim.status().summary.unknown, 3);
}

#[test]
fn runs_follow_the_schedule_and_a_spec_change_runs_at_once() {
    let mut sim = Sim::new(1, 1);
    sim.hc.spec.on_failure.cordon = false;
    sim.hc.spec.checks.push(HealthCheckItem {
        name: "hot".into(),
        type_: CheckType::GpuTemperature,
        threshold: Threshold {
            max: Some(90.0),
            min: None,
            warning: None,
        },
    });
    let plan = sim.step();
    assert_eq!(sim.status().last_run, Some(Time(now())));
    assert_eq!(
        sim.status().next_run,
        Some(Time("2026-12-02T12:00:10Z".parse().unwrap()))
    );
    assert_eq!(plan.requeue_after_ms, Some(10_000));
    // Not due yet: the old verdict stands even though the GPU went bad (too hot: not a fatal
    // reading, which would be evaluated at once).
    sim.advance(4);
    sim.observe("n0", 0);
    sim.gpu_node("n0").status.as_mut().unwrap().gpus[0].temperature_c = Some(95);
    let plan = sim.step();
    assert!(plan.status.is_none(), "nothing changed, nothing written");
    assert_eq!(plan.requeue_after_ms, Some(6_000));
    assert_eq!(sim.result("n0").verdict, Verdict::Healthy);
    // A spec change (new generation) runs now.
    sim.hc.metadata.generation = Some(2);
    sim.step();
    assert_eq!(sim.result("n0").verdict, Verdict::Failed);
    assert_eq!(sim.status().observed_generation, Some(2));
}

#[test]
fn a_fatal_reading_is_evaluated_at_once_between_runs_and_one_report_counts_once() {
    let mut sim = Sim::new(2, 2);
    sim.step();
    // Between runs: an uncorrected ECC error is evaluated at once (one failing evaluation).
    sim.advance(3);
    sim.observe("n1", 2);
    let plan = sim.step();
    assert!(cordons(&plan).is_empty(), "two failures are needed");
    assert_eq!(sim.result("n1").consecutive_failures, 1);
    assert_eq!(sim.status().last_run, Some(Time(now())), "not a run");
    // The same report again (another change of the object): counted once.
    let plan = sim.step();
    assert!(plan.status.is_none() && cordons(&plan).is_empty());
    assert_eq!(sim.result("n1").consecutive_failures, 1);
    // A new report with the error: the second failure quarantines, still between runs.
    sim.advance(2);
    sim.observe("n1", 2);
    let plan = sim.step();
    assert_eq!(cordons(&plan), vec!["n1"]);
    assert_eq!(sim.result("n1").consecutive_failures, 2);
    // The healthy node has no result: it is only counted.
    assert!(sim.status().nodes.iter().all(|r| r.node == "n1"));
    assert_eq!(sim.status().summary.healthy, 1);
}

#[test]
fn the_guard_holds_back_quarantines_beyond_the_allowed_share() {
    let mut sim = Sim::new(4, 1);
    sim.hc.spec.max_quarantined_percent = 25;
    sim.observe("n1", 1);
    sim.observe("n2", 1);
    let plan = sim.step();
    assert_eq!(cordons(&plan), vec!["n1"], "25% of 4 nodes is one node");
    assert!(plan.events.iter().any(|e| e.reason == "QuarantineHeldBack"
        && e.message.contains("1 of 4 targeted nodes are quarantined")));
    assert!(!sim.result("n2").quarantined);
    // A node quarantined by hand (another check's taint) counts too.
    let mut sim = Sim::new(4, 1);
    sim.hc.spec.max_quarantined_percent = 25;
    sim.world.nodes[0].quarantined_by = Some("other-check".into());
    sim.observe("n1", 1);
    assert!(cordons(&sim.step()).is_empty());
}

#[test]
fn without_gpu_remediation_checks_are_evaluated_and_reported_only() {
    let mut sim = Sim::new(2, 1);
    sim.reconciler.options.remediation = false;
    sim.hc.spec.on_failure.alert = true;
    sim.observe("n1", 1);
    let plan = sim.step();
    assert!(plan.node_ops.is_empty());
    assert_eq!(plan.events.len(), 1);
    assert_eq!(plan.events[0].reason, "GpuUnhealthy");
    assert_eq!(sim.status().summary.failed, 1);
    let ready = &sim.status().conditions[0];
    assert!(
        ready.message.contains("evaluation only"),
        "{}",
        ready.message
    );
    // The alert is raised once, not on every failing run.
    sim.advance(10);
    sim.refresh_all();
    assert!(sim.step().events.is_empty());
}

fn pod(ns: &str, name: &str, app: &str) -> PodInfo {
    PodInfo {
        namespace: ns.into(),
        name: name.into(),
        labels: BTreeMap::from([("app".to_owned(), app.to_owned())]),
        owner_kind: Some("ReplicaSet".into()),
        phase: "Running".into(),
        ..Default::default()
    }
}

fn pdb(ns: &str, name: &str, app: &str, allowed: i32) -> PdbInfo {
    PdbInfo {
        namespace: ns.into(),
        name: name.into(),
        selector: Some(LabelSelector {
            match_labels: Some(BTreeMap::from([("app".to_owned(), app.to_owned())])),
            match_expressions: None,
        }),
        disruptions_allowed: allowed,
    }
}

#[test]
fn drain_evicts_all_but_daemonset_mirror_and_finished_pods_and_reports_pdb_blocks() {
    let mut ds = pod("kube-system", "agent", "agent");
    ds.owner_kind = Some("DaemonSet".into());
    let mut mirror = pod("kube-system", "static", "static");
    mirror.mirror = true;
    let mut done = pod("ml", "finished", "batch");
    done.phase = "Succeeded".into();
    let mut leaving = pod("ml", "leaving", "batch");
    leaving.terminating = true;
    let pods = vec![
        pod("ml", "train", "train"),
        pod("ml", "serve", "serve"),
        ds,
        mirror,
        done,
        leaving,
    ];
    let pdbs = vec![
        pdb("ml", "serve-pdb", "serve", 0),
        pdb("ml", "train-pdb", "train", 1),
    ];
    let plan = drain_plan(&pods, &pdbs);
    assert_eq!(
        plan.evict.iter().map(PodInfo::key).collect::<Vec<_>>(),
        vec!["ml/train"]
    );
    let blocked: Vec<String> = plan.blocked.iter().map(ToString::to_string).collect();
    assert_eq!(blocked, vec!["ml/serve (pdb serve-pdb)"]);
    assert_eq!(plan.terminating, vec!["ml/leaving"]);
    assert_eq!(plan.skipped.len(), 3);
    assert!(!plan.complete());
}

#[test]
fn a_quarantined_node_is_drained_and_a_blocked_eviction_is_reported_once_and_retried() {
    let mut sim = Sim::new(2, 1);
    sim.hc.spec.on_failure.drain = true;
    sim.world.pods.insert(
        "n1".into(),
        vec![pod("ml", "train", "train"), pod("ml", "serve", "serve")],
    );
    sim.world.pdbs = vec![pdb("ml", "serve-pdb", "serve", 0)];
    sim.observe("n1", 1);
    let plan = sim.step();
    assert_eq!(cordons(&plan), vec!["n1"]);
    assert!(
        plan.evictions.is_empty(),
        "eviction starts once the taint is in place"
    );
    assert_eq!(plan.requeue_after_ms, Some(3_000));
    sim.advance(1);
    let plan = sim.step();
    assert_eq!(plan.evictions.len(), 1);
    assert_eq!(plan.evictions[0].pod, "train");
    assert!(plan.events.iter().any(|e| {
        e.reason == "EvictionBlocked"
            && e.message
                .contains("ml/serve (pdb serve-pdb) allows no disruption")
    }));
    let drain = sim.result("n1").drain.clone().unwrap();
    assert_eq!(drain.blocked, vec!["ml/serve (pdb serve-pdb)"]);
    assert!(!drain.complete);
    // Retried, not reported again.
    sim.advance(3);
    let plan = sim.step();
    assert!(plan.events.is_empty(), "{:?}", plan.events);
    assert_eq!(plan.requeue_after_ms, Some(3_000));
    // The budget allows a disruption again: the pod goes and the drain completes.
    sim.world.pdbs[0].disruptions_allowed = 1;
    sim.advance(3);
    let plan = sim.step();
    assert_eq!(plan.evictions[0].pod, "serve");
    sim.advance(3);
    let plan = sim.step();
    assert!(plan.events.iter().any(|e| e.reason == "Drained"));
    assert!(sim.result("n1").drain.as_ref().unwrap().complete);
    assert_eq!(
        sim.actions(),
        vec![
            "n1 Quarantine",
            "n1 Evict",
            "n1 EvictionBlocked",
            "n1 Evict",
            "n1 Drained"
        ]
    );
}

fn ladder_sim(nodes: usize) -> Sim {
    let mut sim = Sim::new(nodes, 1);
    sim.hc.spec.max_quarantined_percent = 100;
    sim.hc.spec.on_failure.auto_remediate = true;
    sim.hc.spec.remediation = Some(RemediationSpec {
        steps: vec![
            RemediationAction::GpuReset,
            RemediationAction::DriverReload,
            RemediationAction::Reboot,
        ],
        step_timeout_seconds: 60,
        reboot_method: Default::default(),
        max_concurrent_nodes: 1,
    });
    sim
}

fn requested(plan: &Plan<GryviaHealthCheckStatus>) -> Vec<(String, String)> {
    plan.apply
        .iter()
        .map(|c| {
            (
                c.object_ref.name.clone(),
                c.object["spec"]["remediationRequest"]["action"]
                    .as_str()
                    .unwrap()
                    .to_owned(),
            )
        })
        .collect()
}

#[test]
fn a_gpu_reset_that_works_and_a_passing_check_on_fresh_observations_release_the_node() {
    let mut sim = ladder_sim(2);
    sim.observe("n1", 1);
    let plan = sim.step();
    assert!(
        plan.apply.is_empty(),
        "the ladder starts once the node is quarantined"
    );
    sim.advance(1);
    let plan = sim.step();
    assert_eq!(
        requested(&plan),
        vec![("n1".to_owned(), "gpu-reset".to_owned())]
    );
    let req = sim.gpu_node("n1").spec.remediation_request.clone().unwrap();
    assert_eq!(req.gpu_indices, vec![0], "only the failing GPU is reset");
    assert_eq!(req.timeout_seconds, 60);
    sim.advance(2);
    sim.agent_answers("n1", StepPhase::Succeeded);
    sim.step();
    let state = sim.result("n1").remediation.clone().unwrap();
    assert_eq!(state.phase, StepPhase::Succeeded);
    // The next run still sees the pre-reset observation: no verdict on it.
    sim.advance(7);
    let plan = sim.step();
    assert!(plan.node_ops.is_empty());
    // Fresh, healthy observations: released.
    sim.advance(10);
    sim.refresh_all();
    sim.observe("n1", 0);
    let plan = sim.step();
    assert_eq!(
        plan.node_ops,
        vec![
            NodeOp::RemoveTaint {
                node: "n1".into(),
                key: labels::GPU_UNHEALTHY_TAINT.into(),
                effect: TaintEffect::NoSchedule
            },
            NodeOp::Uncordon { node: "n1".into() }
        ]
    );
    assert!(!sim.result("n1").quarantined);
    assert!(sim.result("n1").remediation.is_none());
    assert_eq!(
        sim.actions(),
        vec![
            "n1 Quarantine",
            "n1 GpuReset",
            "n1 GpuResetSucceeded",
            "n1 Recovered"
        ]
    );
}

#[test]
fn the_ladder_escalates_reset_then_reload_then_reboot_and_gives_up_after_the_last_step() {
    let mut sim = ladder_sim(2);
    sim.observe("n1", 1);
    sim.step();
    sim.advance(1);
    sim.step();
    // The reset fails outright: driver reload next.
    sim.advance(5);
    assert_eq!(
        sim.agent_answers("n1", StepPhase::Failed),
        RemediationAction::GpuReset
    );
    let plan = sim.step();
    assert_eq!(
        requested(&plan),
        vec![("n1".to_owned(), "driver-reload".to_owned())]
    );
    // The reload succeeds, but the next run on fresh observations still fails: reboot.
    sim.advance(1);
    sim.agent_answers("n1", StepPhase::Succeeded);
    sim.step();
    sim.advance(10);
    sim.refresh_all();
    let plan = sim.step();
    assert_eq!(
        requested(&plan),
        vec![("n1".to_owned(), "reboot".to_owned())]
    );
    // The reboot never reports back: timeout, ladder exhausted, node stays quarantined.
    sim.advance(61);
    let plan = sim.step();
    assert!(plan.apply.is_empty());
    assert!(
        plan.events
            .iter()
            .any(|e| e.reason == "RemediationExhausted"
                && e.message.contains("Reboot timed out after 60s"))
    );
    let r = sim.result("n1");
    assert!(r.quarantined);
    assert_eq!(r.remediation.as_ref().unwrap().phase, StepPhase::Failed);
    // Nothing more happens to it.
    sim.advance(10);
    sim.refresh_all();
    let plan = sim.step();
    assert!(plan.apply.is_empty() && plan.node_ops.is_empty());
    assert_eq!(
        sim.actions(),
        vec![
            "n1 Quarantine",
            "n1 GpuReset",
            "n1 DriverReload",
            "n1 DriverReloadSucceeded",
            "n1 Reboot",
            "n1 RemediationExhausted"
        ]
    );
}

#[test]
fn one_node_at_a_time_climbs_the_ladder() {
    let mut sim = ladder_sim(3);
    sim.observe("n0", 1);
    sim.observe("n2", 1);
    let plan = sim.step();
    assert_eq!(cordons(&plan), vec!["n0", "n2"]);
    sim.advance(1);
    let plan = sim.step();
    assert_eq!(
        requested(&plan),
        vec![("n0".to_owned(), "gpu-reset".to_owned())]
    );
    // n0 climbs alone; the moment it runs out of steps, n2 starts.
    for next in ["driver-reload", "reboot"] {
        sim.advance(1);
        sim.agent_answers("n0", StepPhase::Failed);
        let plan = sim.step();
        assert_eq!(requested(&plan), vec![("n0".to_owned(), next.to_owned())]);
    }
    sim.advance(1);
    sim.agent_answers("n0", StepPhase::Failed);
    let plan = sim.step();
    assert_eq!(
        requested(&plan),
        vec![("n2".to_owned(), "gpu-reset".to_owned())]
    );
    assert!(
        plan.events
            .iter()
            .any(|e| e.reason == "RemediationExhausted")
    );
}

#[test]
fn remediation_waits_for_the_drain_to_finish() {
    let mut sim = ladder_sim(2);
    sim.hc.spec.on_failure.drain = true;
    sim.world
        .pods
        .insert("n1".into(), vec![pod("ml", "serve", "serve")]);
    sim.world.pdbs = vec![pdb("ml", "serve-pdb", "serve", 0)];
    sim.observe("n1", 1);
    sim.step();
    sim.advance(1);
    let plan = sim.step();
    assert!(
        plan.apply.is_empty(),
        "no GPU reset while a pod is still on the node"
    );
    sim.world.pdbs.clear();
    sim.advance(3);
    sim.step();
    sim.advance(3);
    let plan = sim.step();
    assert_eq!(
        requested(&plan),
        vec![("n1".to_owned(), "gpu-reset".to_owned())]
    );
}

#[test]
fn a_node_in_manual_maintenance_is_not_uncordoned_on_recovery() {
    let mut sim = ladder_sim(2);
    sim.observe("n1", 1);
    sim.step();
    sim.advance(1);
    sim.step();
    sim.world.nodes[1].maintenance = true;
    sim.advance(1);
    sim.agent_answers("n1", StepPhase::Succeeded);
    sim.step();
    sim.advance(8);
    sim.refresh_all();
    sim.observe("n1", 0);
    let plan = sim.step();
    assert_eq!(plan.node_ops.len(), 1);
    assert!(matches!(plan.node_ops[0], NodeOp::RemoveTaint { .. }));
}

#[test]
fn a_settled_world_reconciles_to_nothing_but_a_requeue() {
    let mut sim = Sim::new(3, 1);
    sim.observe("n1", 1);
    sim.step();
    let again = sim.reconciler.reconcile(&sim.hc, &sim.world, sim.now);
    assert!(again.is_noop(), "{:?}", again.summary());
    assert!(again.requeue_after_ms.is_some());
}

#[test]
fn an_invalid_schedule_is_reported_naming_the_field() {
    let mut sim = Sim::new(1, 1);
    sim.hc.spec.schedule = "61 * * * *".into();
    let plan = sim.step();
    assert!(plan.node_ops.is_empty());
    let c = &sim.status().conditions[0];
    assert_eq!(c.reason, "InvalidSpec");
    assert_eq!(c.message, "spec.schedule: minute: 61 is outside 0-59");
}

#[test]
fn a_suspended_check_does_not_run() {
    let mut sim = Sim::new(1, 1);
    sim.hc.spec.suspend = true;
    sim.observe("n0", 1);
    let plan = sim.step();
    assert!(plan.node_ops.is_empty());
    assert_eq!(sim.status().last_run, None);
    assert_eq!(sim.status().conditions[0].reason, "Suspended");
}

#[test]
fn targets_are_gpu_nodes_listed_nodes_or_selected_nodes() {
    let mut hc = health_check("h", CheckType::GpuTemperature, 90.0);
    let mut cpu = node("cpu");
    cpu.gpu_capacity = 0;
    let mut other = node("b");
    other.labels.insert("pool".into(), "b".into());
    let nodes = vec![node("a"), other, cpu];
    assert_eq!(target_nodes(&hc.spec, &nodes), vec!["a", "b"]);
    hc.spec.target.type_ = TargetType::Nodes;
    hc.spec.target.nodes = vec!["z".into(), "a".into()];
    assert_eq!(target_nodes(&hc.spec, &nodes), vec!["a", "z"]);
    hc.spec.target.type_ = TargetType::Selector;
    hc.spec.target.node_selector = BTreeMap::from([("pool".into(), "a".into())]);
    assert_eq!(target_nodes(&hc.spec, &nodes), vec!["a", "cpu"]);
}

#[test]
fn a_listed_node_that_does_not_exist_is_unknown() {
    let mut sim = Sim::new(1, 1);
    sim.hc.spec.target.type_ = TargetType::Nodes;
    sim.hc.spec.target.nodes = vec!["n0".into(), "ghost".into()];
    sim.step();
    assert_eq!(sim.result("ghost").verdict, Verdict::Unknown);
    assert_eq!(sim.result("ghost").reasons, vec!["node not found"]);
}

#[test]
fn label_selectors_match_like_kubernetes() {
    let labels = BTreeMap::from([
        ("app".to_owned(), "x".to_owned()),
        ("tier".to_owned(), "gpu".to_owned()),
    ]);
    let expr = |key: &str, op: &str, values: &[&str]| LabelSelector {
        match_labels: None,
        match_expressions: Some(vec![LabelSelectorRequirement {
            key: key.into(),
            operator: op.into(),
            values: Some(values.iter().map(|v| (*v).to_owned()).collect()),
        }]),
    };
    assert!(selector_matches(Some(&LabelSelector::default()), &labels));
    assert!(!selector_matches(None, &labels));
    assert!(selector_matches(
        Some(&expr("app", "In", &["x", "y"])),
        &labels
    ));
    assert!(!selector_matches(
        Some(&expr("app", "NotIn", &["x"])),
        &labels
    ));
    assert!(selector_matches(
        Some(&expr("zone", "DoesNotExist", &[])),
        &labels
    ));
    assert!(selector_matches(
        Some(&expr("tier", "Exists", &[])),
        &labels
    ));
    assert!(!selector_matches(
        Some(&expr("tier", "Bogus", &[])),
        &labels
    ));
}

#[test]
fn every_check_of_the_guide_example_is_evaluated() {
    let mut hc = check(CheckType::GpuTemperature, Some(90.0), None, Some(80.0));
    hc.spec.checks.push(HealthCheckItem {
        name: "ecc-errors".into(),
        type_: CheckType::GpuEccErrors,
        threshold: Threshold {
            max: Some(0.0),
            min: None,
            warning: None,
        },
    });
    let mut g = gpu(1, now());
    g.temperature_c = Some(85);
    g.ecc_double_bit = Some(3);
    let r = evaluate_gpu(&hc.spec, &g, now());
    assert_eq!(r.verdict, Verdict::Failed);
    assert_eq!(r.reasons.len(), 2);
}

// ---------------------------------------------------------------------------------------------
// Invariants
// ---------------------------------------------------------------------------------------------

mod invariants {
    use super::*;
    use proptest::prelude::*;

    /// A fleet: per node, (already quarantined by someone, failing, observation stale).
    fn fleet() -> impl Strategy<Value = (Vec<(bool, bool, bool)>, i32, i32)> {
        (
            proptest::collection::vec((any::<bool>(), any::<bool>(), any::<bool>()), 1..40),
            0..=100i32,
            1..=3i32,
        )
    }

    proptest! {
        #[test]
        fn the_guard_never_quarantines_beyond_the_allowed_share_and_unknown_never_acts(
            (nodes, percent, consecutive) in fleet(),
            runs in 1..4usize,
        ) {
            let mut sim = Sim::new(nodes.len(), consecutive);
            sim.hc.spec.max_quarantined_percent = percent;
            for (i, (quarantined, failing, stale)) in nodes.iter().enumerate() {
                let name = format!("n{i}");
                if *quarantined {
                    sim.world.nodes[i].quarantined_by = Some("someone-else".into());
                }
                sim.observe(&name, i64::from(*failing));
                if *stale {
                    let st = sim.gpu_node(&name).status.as_mut().unwrap();
                    for g in &mut st.gpus {
                        g.observed_at = Time(now() - secs(10_000));
                    }
                }
            }
            let before = nodes.iter().filter(|n| n.0).count();
            let allowed = gryvia_reconcile::health::quarantine_limit(nodes.len(), percent);
            for _ in 0..runs {
                let plan = sim.step();
                for op in &plan.node_ops {
                    let i: usize = op.node()[1..].parse().unwrap();
                    let (_, failing, stale) = nodes[i];
                    prop_assert!(failing && !stale, "acted on a healthy or unknown node: {op:?}");
                }
                sim.advance(10);
            }
            let after = sim.world.nodes.iter().filter(|n| n.quarantined_by.is_some()).count();
            prop_assert!(after <= before.max(allowed), "{after} quarantined, {before} before, {allowed} allowed");
        }
    }

    /// One step of the interleaving: an agent reports on a node (failing or not), a reconcile
    /// between runs (as a GryviaGpuNode change triggers), the scheduled run, or time passing.
    #[derive(Clone, Debug)]
    enum Op {
        Report { node: usize, failing: bool },
        Event,
        Run,
        Wait(i64),
    }

    fn op(nodes: usize) -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => (0..nodes, any::<bool>()).prop_map(|(node, failing)| Op::Report { node, failing }),
            3 => Just(Op::Event),
            2 => Just(Op::Run),
            1 => (1..400i64).prop_map(Op::Wait),
        ]
    }

    proptest! {
        #[test]
        fn fatal_readings_at_once_and_scheduled_runs_count_the_same_and_keep_the_guard(
            consecutive in 1..=3i32,
            percent in 0..=100i32,
            ops in proptest::collection::vec(op(5), 1..80),
        ) {
            const N: usize = 5;
            let mut sim = Sim::new(N, consecutive);
            sim.hc.spec.max_quarantined_percent = percent;
            let allowed = gryvia_reconcile::health::quarantine_limit(N, percent);
            sim.step(); // the first run: every node healthy
            // The model: failing evaluations in a row per node, and the newest observation an
            // evaluation counted.
            let mut in_row = [0i32; N];
            let mut counted: [Option<Timestamp>; N] = [None; N];
            for op in ops {
                let due = match op {
                    Op::Report { node, failing } => {
                        sim.advance(1);
                        sim.observe(&format!("n{node}"), i64::from(failing));
                        continue;
                    }
                    Op::Wait(s) => {
                        sim.advance(s);
                        continue;
                    }
                    Op::Event => sim.status().next_run.as_ref().is_some_and(|n| sim.now >= n.0),
                    Op::Run => {
                        let next = sim.status().next_run.clone().unwrap().0;
                        sim.now = sim.now.max(next);
                        true
                    }
                };
                let tainted_before: Vec<bool> =
                    sim.world.nodes.iter().map(|n| n.quarantined_by.is_some()).collect();
                let mut evaluated = [false; N];
                for i in 0..N {
                    let g = &sim.world.gpu_nodes[&format!("n{i}")];
                    let st = g.status.as_ref().unwrap();
                    let observed = st.gpus.iter().map(|g| g.observed_at.0).max().unwrap();
                    let oldest = st.gpus.iter().map(|g| g.observed_at.0).min().unwrap();
                    let fresh = sim.now.as_second() - oldest.as_second() <= 300;
                    let failing = fresh && st.gpus[0].ecc_double_bit.unwrap_or(0) > 0;
                    let new_fatal = failing && counted[i].is_none_or(|c| observed > c);
                    if due || new_fatal {
                        evaluated[i] = true;
                        counted[i] = Some(observed);
                        if !fresh {
                            // Unknown holds the count.
                        } else if failing {
                            in_row[i] += 1;
                        } else {
                            in_row[i] = 0;
                        }
                    }
                }
                sim.step();
                let tainted: Vec<bool> =
                    sim.world.nodes.iter().map(|n| n.quarantined_by.is_some()).collect();
                let total = tainted.iter().filter(|t| **t).count();
                prop_assert!(total <= allowed, "{total} quarantined, {allowed} allowed");
                for i in 0..N {
                    let r = sim.result(&format!("n{i}"));
                    prop_assert_eq!(r.consecutive_failures, in_row[i], "n{}: counter", i);
                    if tainted[i] && !tainted_before[i] {
                        prop_assert!(evaluated[i] && in_row[i] >= consecutive,
                            "n{i} quarantined after {} failing evaluations in a row", in_row[i]);
                    }
                    if evaluated[i] && in_row[i] >= consecutive && !tainted[i] {
                        prop_assert_eq!(total, allowed, "n{} held back with the guard not full", i);
                    }
                }
            }
        }
    }
}
