//! The network-intelligence operator's decisions: baselines and anomalies, the service graph.
//!
//! [`BaselineReconciler`]: a GryviaNetworkBaseline folds each new window of its node's
//! GryviaFlowAggregate (bytes per second, connections) and each new GryviaFabricSignal
//! (retransmits per second, median RTT) in once, records per metric whether the value deviated
//! and when it was folded, and raises a GryviaNetworkAnomaly (with a Warning Event) for a
//! metric that deviates while none of it is open.
//!
//! [`AnomalyReconciler`]: an open GryviaNetworkAnomaly is resolved (`status.resolvedAt`, a
//! Normal Event) once its node's baseline folded a value of its metric, after the anomaly was
//! detected, that did not deviate. Each controller writes only its own object's status.
//!
//! [`ServiceGraphReconciler`]: a GryviaServiceGraph folds each new window of every node's
//! GryviaFlowAggregate in once, its flows resolved to workloads ([`super::flows`]), into
//! buckets over `windowMinutes`, and comes back when the oldest bucket is due to leave.
//!
//! [`NetworkCostReconciler`]: a GryviaNetworkCost folds each new window of every node's
//! GryviaFlowAggregate in once ([`super::cost`]) and, with `spec.usageRecords` (the first such
//! object by name), writes each namespace's hourly GryviaUsageRecords.
//!
//! [`TrainingInsightReconciler`]: a GryviaTrainingInsight shows its job's running ranks'
//! traffic from the last window of each rank's node ([`super::straggler`]), names the
//! stragglers (a Warning Event when a rank becomes one) and the rank-to-rank bytes.

use std::collections::BTreeMap;

use gryvia_types::k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use gryvia_types::{
    GryviaFabricSignalStatus, GryviaFlowAggregateStatus, GryviaNetworkAnomaly,
    GryviaNetworkAnomalyStatus, GryviaNetworkBaseline, GryviaNetworkBaselineStatus,
    GryviaServiceGraph, GryviaServiceGraphStatus,
};

use gryvia_types::conditions::{self, Status};
use gryvia_types::{
    GryviaNetworkCost, GryviaNetworkCostStatus, GryviaTrainingInsight, GryviaTrainingInsightStatus,
};

use super::anomaly::{Change, changes, is_open, wire};
use super::baseline::{Metric, sample, step};
use super::cost::{self, CostDirectory, CostWindow};
use super::flows::{Directory, resolve};
use super::graph::{NodeWindow, WorkloadFlow, bucket_seconds, fold};
use super::newer;
use super::straggler::{self, Rank};
use crate::{Child, EventType, Plan, Reconcile, Timestamp};

/// Reason of the Warning Event on a baseline that raised an anomaly.
pub const RAISED: &str = "NetworkAnomaly";
/// Reason of the Normal Event on an anomaly that is over.
pub const RESOLVED: &str = "Resolved";
/// Annotation of an anomaly: how many samples of its metric its baseline had folded when it
/// was raised. A later sample within bounds resolves it (times have whole seconds, and a
/// cached baseline may be older than the anomaly: neither can say "later").
pub const RAISED_AT_SAMPLE: &str = "gryvia.io/raised-at-sample";

/// What a baseline's reconcile reads: its node's collector data and open anomalies.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BaselineWorld {
    /// The node's GryviaFlowAggregate status, when its collector wrote one.
    pub aggregate: Option<GryviaFlowAggregateStatus>,
    /// The node's GryviaFabricSignal status, when its collector wrote one.
    pub signal: Option<GryviaFabricSignalStatus>,
    /// The node's open (unresolved) anomalies, name by metric.
    pub open: BTreeMap<Metric, String>,
}

/// The node's open anomalies among `anomalies`, name by metric (the latest detected when there
/// are several of one metric).
pub fn open_anomalies<'a>(
    node: &str,
    anomalies: impl IntoIterator<Item = &'a GryviaNetworkAnomaly>,
) -> BTreeMap<Metric, String> {
    let mut latest: BTreeMap<Metric, (Timestamp, String)> = BTreeMap::new();
    for a in anomalies {
        let (Some(metric), Some(name)) = (Metric::of_key(&a.spec.metric), &a.metadata.name) else {
            continue;
        };
        if a.spec.node != node || !is_open(a) {
            continue;
        }
        let at = a.spec.detected_at.0;
        if latest.get(&metric).is_none_or(|(t, _)| at >= *t) {
            latest.insert(metric, (at, name.clone()));
        }
    }
    latest.into_iter().map(|(m, (_, n))| (m, n)).collect()
}

fn number(x: f64) -> String {
    if x.abs() >= 1e5 {
        format!("{x:.3e}")
    } else {
        format!("{x:.1}")
    }
}

/// Folds the node's new collector data into a baseline and raises anomalies.
#[derive(Clone, Copy, Debug, Default)]
pub struct BaselineReconciler;

impl Reconcile for BaselineReconciler {
    type Object = GryviaNetworkBaseline;
    type World = BaselineWorld;
    type Status = GryviaNetworkBaselineStatus;

    fn name(&self) -> &'static str {
        "network-baseline"
    }

    fn reconcile(
        &self,
        b: &GryviaNetworkBaseline,
        world: &BaselineWorld,
        now: Timestamp,
    ) -> Plan<GryviaNetworkBaselineStatus> {
        let current = b.status.clone().unwrap_or_default();
        let aggregate = world
            .aggregate
            .as_ref()
            .filter(|a| newer(current.window_end.as_ref(), a.window_end.as_ref()));
        let signal = world
            .signal
            .as_ref()
            .filter(|s| newer(current.signal_at.as_ref(), s.updated_at.as_ref()));
        let mut plan = Plan::new();
        if aggregate.is_none() && signal.is_none() {
            return plan;
        }
        let mut status = current.clone();
        if let Some(a) = aggregate {
            status.window_end.clone_from(&a.window_end);
        }
        if let Some(s) = signal {
            status.signal_at.clone_from(&s.updated_at);
        }
        let values = sample(aggregate, signal);
        if !values.is_empty() {
            let node = &b.spec.node_name;
            let folded = step(
                current.samples,
                &current.metrics,
                &values,
                i64::from(b.spec.min_samples),
                b.spec.sensitivity_sigma,
            );
            status.samples = folded.samples;
            status.metrics = folded.metrics;
            for m in values.keys() {
                if let Some(mb) = status.metrics.get_mut(m.key()) {
                    mb.at = Some(Time(now));
                }
            }
            // A metric that deviated in the last sample already has its anomaly (raised then,
            // perhaps not yet in the cache the world was read from).
            let mut found = folded.anomalies.clone();
            found.retain(|m, _| !current.metrics.get(m.key()).is_some_and(|b| b.deviating));
            for change in changes(node, &world.open, &values, &found, now) {
                if let Change::Raise { name, spec } = change {
                    let sample = status.metrics.get(&spec.metric).map_or(0, |m| m.samples);
                    let severity = wire(spec.severity);
                    let message = format!(
                        "{} on {node}: {} against a baseline of {} ({severity}); anomaly {name}",
                        spec.metric,
                        number(spec.observed),
                        number(spec.baseline),
                    );
                    let mut anomaly = GryviaNetworkAnomaly::new(&name, spec);
                    anomaly.metadata.annotations = Some(BTreeMap::from([(
                        RAISED_AT_SAMPLE.to_owned(),
                        sample.to_string(),
                    )]));
                    plan.apply_built(Child::from_resource(&anomaly));
                    plan.event(EventType::Warning, RAISED, message);
                }
                // A resolved one is the anomaly controller's: it reads this status.
            }
        }
        plan.set_status_if_changed(b.status.as_ref(), status);
        plan
    }
}

/// What an anomaly's reconcile reads: its node's baseline.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AnomalyWorld {
    /// The status of the GryviaNetworkBaseline of the anomaly's node.
    pub baseline: Option<GryviaNetworkBaselineStatus>,
}

/// Resolves an anomaly once its metric is back within bounds.
#[derive(Clone, Copy, Debug, Default)]
pub struct AnomalyReconciler;

impl Reconcile for AnomalyReconciler {
    type Object = GryviaNetworkAnomaly;
    type World = AnomalyWorld;
    type Status = GryviaNetworkAnomalyStatus;

    fn name(&self) -> &'static str {
        "network-anomaly"
    }

    fn reconcile(
        &self,
        a: &GryviaNetworkAnomaly,
        world: &AnomalyWorld,
        _now: Timestamp,
    ) -> Plan<GryviaNetworkAnomalyStatus> {
        let mut plan = Plan::new();
        let current = a.status.clone().unwrap_or_default();
        if current.resolved_at.is_some() {
            return plan;
        }
        let Some(m) = world
            .baseline
            .as_ref()
            .and_then(|b| b.metrics.get(&a.spec.metric))
        else {
            return plan;
        };
        // A sample folded after the one that raised it (by count; by time for an anomaly
        // without the annotation), within bounds.
        let raised_at = a
            .metadata
            .annotations
            .as_ref()
            .and_then(|n| n.get(RAISED_AT_SAMPLE))
            .and_then(|n| n.parse::<i64>().ok());
        let later = match raised_at {
            Some(n) => m.samples > n,
            None => m.at.as_ref().is_some_and(|t| t.0 > a.spec.detected_at.0),
        };
        let Some(at) = m.at.as_ref().filter(|_| later && !m.deviating) else {
            return plan;
        };
        plan.event(
            EventType::Normal,
            RESOLVED,
            format!(
                "{} on {} is back within bounds: {} against a baseline of {}",
                a.spec.metric,
                a.spec.node,
                m.last.map_or_else(|| "-".to_owned(), number),
                number(m.mean),
            ),
        );
        plan.set_status_if_changed(
            a.status.as_ref(),
            GryviaNetworkAnomalyStatus {
                resolved_at: Some(at.clone()),
                ..current
            },
        );
        plan
    }
}

/// What a service graph's reconcile reads: every node's last window, and the directory to
/// resolve its flows with.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GraphWorld {
    /// Each reporting node's GryviaFlowAggregate status, by node.
    pub aggregates: BTreeMap<String, GryviaFlowAggregateStatus>,
    /// Pods, Services and reporting nodes.
    pub directory: Directory,
}

/// The flows of `aggregate` (written by `node`'s collector) that count, as workload flows.
pub fn workload_flows(
    node: &str,
    aggregate: &GryviaFlowAggregateStatus,
    directory: &Directory,
) -> Vec<WorkloadFlow> {
    aggregate
        .flows
        .iter()
        .filter_map(|r| resolve(node, r, directory))
        .map(|r| WorkloadFlow {
            from: r.client.name().to_owned(),
            to: r.server.name().to_owned(),
            port: r.port,
            bytes: r.bytes,
            retransmits: r.retransmits,
        })
        .collect()
}

/// Keeps a service graph's edges over its window.
#[derive(Clone, Copy, Debug, Default)]
pub struct ServiceGraphReconciler;

impl Reconcile for ServiceGraphReconciler {
    type Object = GryviaServiceGraph;
    type World = GraphWorld;
    type Status = GryviaServiceGraphStatus;

    fn name(&self) -> &'static str {
        "service-graph"
    }

    fn reconcile(
        &self,
        g: &GryviaServiceGraph,
        world: &GraphWorld,
        now: Timestamp,
    ) -> Plan<GryviaServiceGraphStatus> {
        let current = g.status.clone().unwrap_or_default();
        let namespaces = if g.spec.namespaces.is_empty() {
            g.metadata.namespace.iter().cloned().collect()
        } else {
            g.spec.namespaces.clone()
        };
        let windows: Vec<NodeWindow> = world
            .aggregates
            .iter()
            .filter_map(|(node, a)| {
                // Only new windows have their flows resolved (fold skips the others too).
                let end = a.window_end.as_ref()?;
                newer(current.folded.get(node), Some(end)).then(|| NodeWindow {
                    node: node.clone(),
                    end: end.0,
                    flows: workload_flows(node, a, &world.directory),
                })
            })
            .collect();
        let status = fold(&current, g.spec.window_minutes, &namespaces, &windows, now);
        let mut plan = Plan::new();
        if !status.buckets.is_empty() {
            // Back when the oldest bucket is due to leave the window.
            plan.requeue(std::time::Duration::from_secs(
                bucket_seconds(g.spec.window_minutes).unsigned_abs(),
            ));
        }
        plan.set_status_if_changed(g.status.as_ref(), status);
        plan
    }
}

/// What a network cost's reconcile reads: every node's aggregate, the addresses, and which
/// GryviaNetworkCost writes the usage records.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CostWorld {
    /// Each reporting node's GryviaFlowAggregate status, by node.
    pub aggregates: BTreeMap<String, GryviaFlowAggregateStatus>,
    /// Pods, Services, nodes and zones.
    pub directory: CostDirectory,
    /// The first GryviaNetworkCost by name with `spec.usageRecords` (the one that writes them).
    pub metering: Option<String>,
}

/// Condition of a GryviaNetworkCost with `spec.usageRecords`: whether it writes them.
pub const METERING: &str = "Metering";

/// Folds every node's new windows into a network cost and writes its usage records.
#[derive(Clone, Copy, Debug, Default)]
pub struct NetworkCostReconciler;

impl Reconcile for NetworkCostReconciler {
    type Object = GryviaNetworkCost;
    type World = CostWorld;
    type Status = GryviaNetworkCostStatus;

    fn name(&self) -> &'static str {
        "network-cost"
    }

    fn reconcile(
        &self,
        c: &GryviaNetworkCost,
        world: &CostWorld,
        now: Timestamp,
    ) -> Plan<GryviaNetworkCostStatus> {
        let name = c.metadata.name.clone().unwrap_or_default();
        let current = c.status.clone().unwrap_or_default();
        let metering = c.spec.usage_records && world.metering.as_deref() == Some(name.as_str());
        let windows: Vec<CostWindow> = world
            .aggregates
            .iter()
            .filter_map(|(node, a)| {
                let end = a.window_end.as_ref()?;
                newer(current.folded.get(node), Some(end)).then(|| CostWindow {
                    node: node.clone(),
                    end: end.0,
                    transfers: cost::transfers(node, a, &world.directory),
                })
            })
            .collect();
        let mut status = cost::fold(&current, &c.spec, &windows, metering, now);
        let mut plan = Plan::new();
        if c.spec.usage_records {
            let (st, reason, message) = if metering {
                (
                    Status::True,
                    "WritesUsageRecords",
                    "writes hourly usage records per namespace".to_owned(),
                )
            } else {
                let other = world.metering.clone().unwrap_or_default();
                (
                    Status::False,
                    "AnotherCostMeters",
                    format!(
                        "GryviaNetworkCost {other} writes the usage records (the first by name): two would bill the same bytes twice"
                    ),
                )
            };
            let cond = conditions::new(METERING, st, reason, message, c.metadata.generation, now);
            conditions::set(&mut status.conditions, cond);
        } else {
            status.conditions.retain(|x| x.type_ != METERING);
        }
        if metering {
            for r in cost::usage_records(&name, &c.spec.currency, &status, now) {
                plan.apply_built(Child::from_resource(&r).map(Child::unowned));
            }
            if !status.hours.is_empty() {
                // Back when an hour is due to close (or a closed one to leave).
                plan.requeue(std::time::Duration::from_secs(60));
            }
        }
        plan.set_status_if_changed(c.status.as_ref(), status);
        plan
    }
}

/// What a training insight's reconcile reads: its job's running ranks and the last window of
/// each of their nodes.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct InsightWorld {
    /// The job's running ranks.
    pub ranks: Vec<Rank>,
    /// The GryviaFlowAggregate status of each rank's node that has one, by node.
    pub aggregates: BTreeMap<String, GryviaFlowAggregateStatus>,
}

/// Reason of the Warning Event on an insight when a rank becomes a straggler.
pub const STRAGGLER: &str = "Straggler";

/// Keeps a training insight of its job's ranks' last windows.
#[derive(Clone, Copy, Debug, Default)]
pub struct TrainingInsightReconciler;

impl Reconcile for TrainingInsightReconciler {
    type Object = GryviaTrainingInsight;
    type World = InsightWorld;
    type Status = GryviaTrainingInsightStatus;

    fn name(&self) -> &'static str {
        "training-insight"
    }

    fn reconcile(
        &self,
        i: &GryviaTrainingInsight,
        world: &InsightWorld,
        now: Timestamp,
    ) -> Plan<GryviaTrainingInsightStatus> {
        let current = i.status.clone().unwrap_or_default();
        let mut status = straggler::insight(
            &world.ranks,
            &world.aggregates,
            i.spec.straggler_threshold_percent,
        );
        let job = &i.spec.job_name;
        let (st, reason, message) = if world.ranks.is_empty() {
            (
                Status::False,
                "NoRanks",
                format!("no running pod of GryviaAIJob {job} in this namespace"),
            )
        } else if status.workers.is_empty() {
            (
                Status::False,
                "NoWindows",
                format!("no collector window for the nodes of {job}'s ranks yet"),
            )
        } else {
            (
                Status::True,
                "Measured",
                format!(
                    "{} of {} ranks measured",
                    status.workers.len(),
                    world.ranks.len()
                ),
            )
        };
        status.conditions.clone_from(&current.conditions);
        let ready = conditions::new("Ready", st, reason, message, i.metadata.generation, now);
        conditions::set(&mut status.conditions, ready);
        let mut plan = Plan::new();
        let before: std::collections::BTreeSet<i32> = current
            .workers
            .iter()
            .filter(|w| w.straggler)
            .map(|w| w.rank)
            .collect();
        for w in status
            .workers
            .iter()
            .filter(|w| w.straggler && !before.contains(&w.rank))
        {
            let prefix = format!("rank {} (", w.rank);
            let line = status
                .recommendations
                .iter()
                .find(|r| r.starts_with(&prefix))
                .cloned()
                .unwrap_or_else(|| format!("rank {} on node {} is a straggler", w.rank, w.node));
            plan.event(EventType::Warning, STRAGGLER, line);
        }
        status.updated_at.clone_from(&current.updated_at);
        if status != current {
            status.updated_at = Some(Time(now));
        }
        plan.set_status_if_changed(i.status.as_ref(), status);
        plan
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gryvia_types::{
        FlowRecord, GryviaNetworkAnomalySpec, GryviaNetworkBaselineSpec, Protocol, Severity,
    };

    fn t(s: i64) -> Time {
        Time(Timestamp::from_second(1_800_000_000 + s).unwrap())
    }

    fn baseline(min_samples: i32) -> GryviaNetworkBaseline {
        GryviaNetworkBaseline::new(
            "node-1",
            GryviaNetworkBaselineSpec {
                node_name: "node-1".into(),
                sensitivity_sigma: 3.0,
                min_samples,
            },
        )
    }

    /// A 10 s window ending at `end` with `bytes` sent by one flow.
    fn window(end: i64, bytes: i64) -> GryviaFlowAggregateStatus {
        GryviaFlowAggregateStatus {
            window_start: Some(t(end - 10)),
            window_end: Some(t(end)),
            flows: vec![FlowRecord {
                src_ip: "10.0.0.1".into(),
                src_port: 40000,
                dst_ip: "10.0.0.2".into(),
                dst_port: 5000,
                protocol: Protocol::TCP,
                tx_bytes: bytes,
                rx_bytes: 0,
                retransmits: 0,
                pod: None,
            }],
            flow_count: 1,
        }
    }

    /// Runs the baseline over windows of `bytes`, one every 10 s, applying its status; returns
    /// the baseline and every Plan.
    fn run(
        b: &mut GryviaNetworkBaseline,
        world: &mut BaselineWorld,
        from: i64,
        bytes: &[i64],
    ) -> Vec<Plan<GryviaNetworkBaselineStatus>> {
        let mut plans = Vec::new();
        for (i, &x) in bytes.iter().enumerate() {
            let end = from + 10 * i as i64;
            world.aggregate = Some(window(end, x));
            let plan = BaselineReconciler.reconcile(b, world, t(end).0);
            if let Some(s) = &plan.status {
                b.status = Some(s.clone());
            }
            for c in &plan.apply {
                let a: GryviaNetworkAnomaly = serde_json::from_value(c.object.clone()).unwrap();
                world.open.insert(
                    Metric::of_key(&a.spec.metric).unwrap(),
                    c.object_ref.name.clone(),
                );
            }
            plans.push(plan);
        }
        plans
    }

    #[test]
    fn each_window_is_folded_once_and_a_drop_raises_one_anomaly_while_it_lasts() {
        let mut b = baseline(30);
        let mut world = BaselineWorld::default();
        let plans = run(&mut b, &mut world, -300, &[100_000; 30]);
        assert!(plans.iter().all(|p| p.apply.is_empty()));
        assert_eq!(b.status.as_ref().unwrap().samples, 30);

        // The same window again: nothing.
        let again = BaselineReconciler.reconcile(&b, &world, t(100).0);
        assert!(again.is_noop(), "{again:?}");

        // Bandwidth drops for three windows: one anomaly, raised by the first.
        let plans = run(&mut b, &mut world, 70, &[100, 200, 100]);
        let raised: Vec<_> = plans.iter().flat_map(|p| &p.apply).collect();
        assert_eq!(raised.len(), 1, "{plans:#?}");
        assert_eq!(
            raised[0].object_ref.name,
            "node-1-bandwidth-drop-1800000070"
        );
        let spec = &raised[0].object["spec"];
        assert_eq!(spec["metric"], "bytesPerSecond");
        assert_eq!(spec["observed"], 10.0);
        assert_eq!(spec["baseline"], 10_000.0);
        assert_eq!(plans[0].events[0].reason, RAISED);
        assert!(
            plans[0].events[0].message.contains(
                "bytesPerSecond on node-1: 10.0 against a baseline of 10000.0 (critical)"
            ),
            "{:?}",
            plans[0].events
        );
        let bytes = &b.status.as_ref().unwrap().metrics["bytesPerSecond"];
        assert!(bytes.deviating);
        assert_eq!(bytes.at, Some(t(90)));
    }

    fn anomaly(metric: &str, detected: i64) -> GryviaNetworkAnomaly {
        GryviaNetworkAnomaly::new(
            "node-1-x",
            GryviaNetworkAnomalySpec {
                node: "node-1".into(),
                type_: Metric::of_key(metric).unwrap().anomaly(),
                severity: Severity::Warning,
                detected_at: t(detected),
                metric: metric.into(),
                baseline: 10_000.0,
                observed: 10.0,
                subject: None,
            },
        )
    }

    #[test]
    fn an_anomaly_is_resolved_by_a_later_value_within_bounds_only() {
        let mut b = baseline(30);
        let mut world = BaselineWorld::default();
        run(&mut b, &mut world, -300, &[100_000; 30]);
        run(&mut b, &mut world, 60, &[100]);
        let a = anomaly("bytesPerSecond", 60);
        let of = |b: &GryviaNetworkBaseline| AnomalyWorld {
            baseline: b.status.clone(),
        };
        // The fold that raised it (same time, deviating), or a stale baseline: nothing.
        assert!(AnomalyReconciler.reconcile(&a, &of(&b), t(61).0).is_noop());
        let mut stale = b.clone();
        stale
            .status
            .as_mut()
            .unwrap()
            .metrics
            .get_mut("bytesPerSecond")
            .unwrap()
            .deviating = false;
        stale
            .status
            .as_mut()
            .unwrap()
            .metrics
            .get_mut("bytesPerSecond")
            .unwrap()
            .at = Some(t(50));
        assert!(
            AnomalyReconciler
                .reconcile(&a, &of(&stale), t(61).0)
                .is_noop()
        );
        // Still off at 70: open. Back at 80: resolved at 80.
        run(&mut b, &mut world, 70, &[200]);
        assert!(AnomalyReconciler.reconcile(&a, &of(&b), t(71).0).is_noop());
        run(&mut b, &mut world, 80, &[100_000]);
        let plan = AnomalyReconciler.reconcile(&a, &of(&b), t(81).0);
        assert_eq!(plan.status.as_ref().unwrap().resolved_at, Some(t(80)));
        assert_eq!(plan.events[0].reason, RESOLVED);
        // Resolved stays resolved, and is no longer open for the baseline.
        let mut done = a.clone();
        done.status = plan.status.clone();
        assert!(
            AnomalyReconciler
                .reconcile(&done, &of(&b), t(90).0)
                .is_noop()
        );
        assert!(open_anomalies("node-1", [&done]).is_empty());
        assert_eq!(
            open_anomalies("node-1", [&a, &anomaly("rttMicros", 10)]).len(),
            2
        );
        assert!(open_anomalies("node-2", [&a]).is_empty());
    }

    #[test]
    fn an_anomaly_not_yet_in_the_cache_is_not_raised_twice_and_resolves_by_sample_count() {
        let mut b = baseline(30);
        let mut world = BaselineWorld::default();
        run(&mut b, &mut world, -300, &[100_000; 30]);
        let raised = run(&mut b, &mut world, 60, &[100]);
        let child = &raised[0].apply[0];
        assert_eq!(
            child.object["metadata"]["annotations"][RAISED_AT_SAMPLE],
            "31"
        );
        // The next window comes before the anomaly reached the operator's cache.
        world.open.clear();
        let again = run(&mut b, &mut world, 70, &[100]);
        assert!(again[0].apply.is_empty(), "{again:?}");
        // Back within bounds, folded in the same second as the raise (times have whole
        // seconds): resolved by the sample count.
        let a: GryviaNetworkAnomaly = serde_json::from_value(child.object.clone()).unwrap();
        run(&mut b, &mut world, 80, &[100_000]);
        let mut status = b.status.clone().unwrap();
        status.metrics.get_mut("bytesPerSecond").unwrap().at = Some(t(60));
        let world = AnomalyWorld {
            baseline: Some(status),
        };
        let plan = AnomalyReconciler.reconcile(&a, &world, t(81).0);
        assert_eq!(plan.status.unwrap().resolved_at, Some(t(60)));
    }

    #[test]
    fn a_service_graph_counts_each_connection_once_and_each_window_once() {
        use super::super::flows::PodEntry;
        use gryvia_types::GryviaServiceGraphSpec;
        let pod = |w: &str, n: &str| PodEntry {
            workload: w.into(),
            node: n.into(),
        };
        let directory = Directory {
            pods: BTreeMap::from([
                ("10.0.1.5".into(), pod("ml/trainer", "node-a")),
                ("10.0.2.7".into(), pod("ml/store", "node-b")),
            ]),
            services: BTreeMap::new(),
            reporting: ["node-a".to_owned(), "node-b".to_owned()].into(),
        };
        let flow = |src: (&str, i32), dst: (&str, i32), tx, rx| FlowRecord {
            src_ip: src.0.into(),
            src_port: src.1,
            dst_ip: dst.0.into(),
            dst_port: dst.1,
            protocol: Protocol::TCP,
            tx_bytes: tx,
            rx_bytes: rx,
            retransmits: 0,
            pod: None,
        };
        let aggregate = |end: i64, flows| GryviaFlowAggregateStatus {
            window_start: Some(t(end - 10)),
            window_end: Some(t(end)),
            flows,
            flow_count: 1,
        };
        let world = GraphWorld {
            aggregates: BTreeMap::from([
                (
                    "node-a".into(),
                    aggregate(
                        10,
                        vec![
                            flow(("10.0.1.5", 45000), ("10.0.2.7", 9000), 1000, 200),
                            flow(("10.0.1.5", 45001), ("8.8.8.8", 443), 30, 70),
                        ],
                    ),
                ),
                (
                    "node-b".into(),
                    aggregate(
                        10,
                        vec![flow(("10.0.2.7", 9000), ("10.0.1.5", 45000), 200, 1000)],
                    ),
                ),
            ]),
            directory,
        };
        let mut g = GryviaServiceGraph::new(
            "ml",
            GryviaServiceGraphSpec {
                namespaces: vec![],
                window_minutes: 60,
            },
        );
        g.metadata.namespace = Some("ml".into());
        let plan = ServiceGraphReconciler.reconcile(&g, &world, t(15).0);
        let status = plan.status.clone().unwrap();
        let edges: Vec<_> = status
            .edges
            .iter()
            .map(|e| {
                (
                    e.from.as_str(),
                    e.to.as_str(),
                    e.port,
                    e.bytes,
                    e.connections,
                )
            })
            .collect();
        assert_eq!(
            edges,
            [
                ("ml/trainer", "external/8.8.8.8", 443, 100, 1),
                ("ml/trainer", "ml/store", 9000, 1200, 1),
            ]
        );
        assert_eq!(
            plan.requeue_after(),
            Some(std::time::Duration::from_secs(300))
        );
        // Read again before the next windows: nothing to write.
        g.status = Some(status);
        assert!(
            ServiceGraphReconciler
                .reconcile(&g, &world, t(20).0)
                .status
                .is_none()
        );
    }

    #[test]
    fn a_new_signal_folds_retransmits_and_rtt_without_the_aggregate() {
        let mut b = baseline(5);
        let signal = |at: i64, retransmits: i64, rtt: i64| GryviaFabricSignalStatus {
            tcp_retransmits: retransmits,
            median_srtt_micros: Some(rtt),
            window_seconds: 10,
            updated_at: Some(t(at)),
            ..GryviaFabricSignalStatus::default()
        };
        let mut world = BaselineWorld::default();
        for i in 0..6 {
            world.signal = Some(signal(10 * i, 10, 200));
            let plan = BaselineReconciler.reconcile(&b, &world, t(10 * i).0);
            b.status = plan.status.clone().or(b.status.clone());
            assert!(plan.apply.is_empty());
        }
        world.signal = Some(signal(60, 10, 9000));
        let plan = BaselineReconciler.reconcile(&b, &world, t(60).0);
        assert_eq!(plan.apply.len(), 1);
        assert_eq!(plan.apply[0].object["spec"]["type"], "latency-spike");
        let st = plan.status.unwrap();
        assert_eq!(st.metrics["rttMicros"].samples, 7);
        assert_eq!(st.metrics["retransmitsPerSecond"].last, Some(1.0));
        assert!(!st.metrics.contains_key("bytesPerSecond"));
        assert_eq!(st.signal_at, Some(t(60)));
        assert_eq!(st.window_end, None);
    }

    fn cost_world(metering: &str) -> CostWorld {
        use super::super::cost::{CostPod, Groups};
        let pod = |ns: &str, node: &str| CostPod {
            groups: Groups {
                namespace: ns.into(),
                team: Some(format!("team-{ns}")),
                ..Groups::default()
            },
            node: node.into(),
        };
        let flow = FlowRecord {
            src_ip: "10.0.1.5".into(),
            src_port: 45000,
            dst_ip: "8.8.8.8".into(),
            dst_port: 443,
            protocol: Protocol::TCP,
            tx_bytes: 1 << 30,
            rx_bytes: 5,
            retransmits: 0,
            pod: None,
        };
        CostWorld {
            aggregates: BTreeMap::from([(
                "node-a".into(),
                GryviaFlowAggregateStatus {
                    window_start: Some(t(0)),
                    window_end: Some(t(10)),
                    flows: vec![flow],
                    flow_count: 1,
                },
            )]),
            directory: CostDirectory {
                pods: BTreeMap::from([("10.0.1.5".into(), pod("ml", "node-a"))]),
                reporting: ["node-a".to_owned()].into(),
                ..CostDirectory::default()
            },
            metering: Some(metering.into()),
        }
    }

    fn cost(name: &str) -> GryviaNetworkCost {
        GryviaNetworkCost::new(
            name,
            gryvia_types::GryviaNetworkCostSpec {
                group_by: gryvia_types::CostGrouping::Team,
                egress_per_gib: gryvia_types::money::Decimal::parse("0.09").unwrap(),
                cross_zone_per_gib: gryvia_types::money::Decimal::parse("0.01").unwrap(),
                currency: "USD".into(),
                usage_records: true,
            },
        )
    }

    #[test]
    fn the_first_cost_with_usage_records_writes_them_and_a_second_says_why_it_does_not() {
        let plan = NetworkCostReconciler.reconcile(&cost("a"), &cost_world("a"), t(15).0);
        let st = plan.status.clone().unwrap();
        assert_eq!(st.entries[0].name, "team-ml");
        assert_eq!(
            st.total.as_ref().map(|d| d.as_str().to_owned()),
            Some("0.09".into())
        );
        assert_eq!(plan.apply.len(), 1);
        let r = &plan.apply[0].object;
        assert_eq!(r["spec"]["tenant"], "team-ml");
        assert_eq!(r["spec"]["network"]["egressBytes"], 1 << 30);
        assert!(plan.apply[0].owned.eq(&false));
        assert!(conditions::is_true(&st.conditions, METERING));
        let plan = NetworkCostReconciler.reconcile(&cost("b"), &cost_world("a"), t(15).0);
        let st = plan.status.clone().unwrap();
        assert!(plan.apply.is_empty());
        let c = conditions::find(&st.conditions, METERING).unwrap();
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("False", "AnotherCostMeters")
        );
        // Its cost is still folded.
        assert_eq!(st.entries[0].egress_bytes, 1 << 30);
        assert!(st.hours.is_empty());
    }

    #[test]
    fn a_rank_that_becomes_a_straggler_gets_one_event_and_no_ranks_is_a_condition() {
        use super::super::straggler::Rank;
        let flow = |pod: &str, bytes: i64| FlowRecord {
            src_ip: "10.0.0.9".into(),
            src_port: 40000,
            dst_ip: "10.9.9.9".into(),
            dst_port: 29500,
            protocol: Protocol::TCP,
            tx_bytes: bytes,
            rx_bytes: 0,
            retransmits: 0,
            pod: Some(pod.into()),
        };
        let window = |pod: &str, bytes| GryviaFlowAggregateStatus {
            window_start: Some(t(0)),
            window_end: Some(t(10)),
            flows: vec![flow(pod, bytes)],
            flow_count: 1,
        };
        let rank = |i: i32, node: &str| Rank {
            rank: i,
            pod: format!("ml/t-{i}"),
            node: node.into(),
            ip: None,
        };
        let world = InsightWorld {
            ranks: vec![rank(0, "a"), rank(1, "b"), rank(2, "c")],
            aggregates: BTreeMap::from([
                ("a".into(), window("ml/t-0", 1000)),
                ("b".into(), window("ml/t-1", 100)),
                ("c".into(), window("ml/t-2", 1000)),
            ]),
        };
        let mut insight = GryviaTrainingInsight::new(
            "t",
            gryvia_types::GryviaTrainingInsightSpec {
                job_name: "t".into(),
                straggler_threshold_percent: 70,
            },
        );
        let plan = TrainingInsightReconciler.reconcile(&insight, &world, t(11).0);
        assert_eq!(plan.events.len(), 1);
        assert_eq!(plan.events[0].reason, STRAGGLER);
        assert!(
            plan.events[0].message.contains("node b"),
            "{:?}",
            plan.events
        );
        insight.status = plan.status.clone();
        assert!(conditions::is_true(
            &insight.status.as_ref().unwrap().conditions,
            "Ready"
        ));
        // The same window again: nothing changes, no second Event.
        let again = TrainingInsightReconciler.reconcile(&insight, &world, t(12).0);
        assert!(again.events.is_empty() && again.status.is_none());
        // No running rank: a condition, not a crash.
        let none = TrainingInsightReconciler.reconcile(&insight, &InsightWorld::default(), t(13).0);
        let st = none.status.unwrap();
        let c = conditions::find(&st.conditions, "Ready").unwrap();
        assert_eq!((c.status.as_str(), c.reason.as_str()), ("False", "NoRanks"));
        assert!(st.workers.is_empty());
    }
}
