//! Collector settings (GryviaCollectorConfig): which config a node's collector follows and what
//! it runs, and a config's status from what the collectors report. Pure.
//!
//! A collector follows the first GryviaCollectorConfig by name whose `nodeSelector` its node's
//! labels match (an empty selector matches every node); with none, it runs its command-line
//! settings. It reports the config and generation it runs (or why it could not apply it) in
//! its node's GryviaFabricSignal, from which [`CollectorConfigReconciler`] counts the nodes
//! that run a config's current generation.

use std::collections::{BTreeMap, BTreeSet};

use gryvia_types::conditions::{self, Status};
use gryvia_types::{
    CollectorProgram, GryviaCollectorConfig, GryviaCollectorConfigStatus, GryviaFabricSignal,
};

use crate::component_health::fresh;
use crate::facts::labels_match;
use crate::{Plan, Reconcile, Timestamp};

/// What a collector runs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Settings {
    /// The programs.
    pub programs: BTreeSet<CollectorProgram>,
    /// Seconds between two map reads.
    pub interval_seconds: u64,
    /// The interfaces the interface program counts on.
    pub interfaces: Vec<String>,
    /// The config they come from (name and generation); `None`: the command line.
    pub source: Option<(String, i64)>,
}

/// The config a node with `labels` follows: the first by name whose selector matches, configs
/// being deleted left out.
pub fn selected<'a>(
    configs: &'a [GryviaCollectorConfig],
    labels: &BTreeMap<String, String>,
) -> Option<&'a GryviaCollectorConfig> {
    configs
        .iter()
        .filter(|c| c.metadata.deletion_timestamp.is_none())
        .filter(|c| labels_match(&c.spec.node_selector, labels))
        .min_by(|a, b| a.metadata.name.cmp(&b.metadata.name))
}

/// What a node with `labels` runs: the selected config's settings, else `defaults`.
pub fn settings(
    configs: &[GryviaCollectorConfig],
    labels: &BTreeMap<String, String>,
    defaults: &Settings,
) -> Settings {
    match selected(configs, labels) {
        Some(c) => Settings {
            programs: c.spec.programs.iter().copied().collect(),
            interval_seconds: u64::try_from(c.spec.interval_seconds.clamp(1, 3600)).unwrap_or(10),
            interfaces: c.spec.interfaces.clone(),
            source: Some((
                c.metadata.name.clone().unwrap_or_default(),
                c.metadata.generation.unwrap_or(0),
            )),
        },
        None => Settings {
            source: None,
            ..defaults.clone()
        },
    }
}

/// Condition of a GryviaCollectorConfig.
pub const READY: &str = "Ready";

/// How often a config's status is worked out again (reports go stale without an event).
pub const RECHECK: std::time::Duration = std::time::Duration::from_secs(30);

/// The status of `config` from the nodes' fabric signals at `now`: the nodes whose fresh report
/// says they run its current generation, those that could not apply it, and `Ready`.
pub fn config_status(
    config: &GryviaCollectorConfig,
    signals: &[GryviaFabricSignal],
    current: Option<&GryviaCollectorConfigStatus>,
    now: Timestamp,
) -> GryviaCollectorConfigStatus {
    let name = config.metadata.name.clone().unwrap_or_default();
    let generation = config.metadata.generation.unwrap_or(0);
    let mut running = 0_i32;
    let mut behind = 0_i32;
    let mut failing = Vec::new();
    for s in signals {
        let Some(st) = &s.status else { continue };
        if !fresh(st.updated_at.as_ref(), st.window_seconds, now) {
            continue;
        }
        let Some(applied) = st.config.as_ref().filter(|a| a.name == name) else {
            continue;
        };
        match (&applied.error, applied.generation == generation) {
            (Some(e), _) => failing.push(format!("{}: {e}", s.spec.node_name)),
            (None, true) => running += 1,
            (None, false) => behind += 1,
        }
    }
    failing.sort();
    let (st, reason, message) = if !failing.is_empty() {
        (
            Status::False,
            "NotApplied",
            format!(
                "{} node(s) could not apply generation {generation}: {}",
                failing.len(),
                failing.join("; ")
            ),
        )
    } else if behind > 0 {
        (
            Status::False,
            "Applying",
            format!("{running} node(s) run generation {generation}, {behind} an earlier one"),
        )
    } else if running == 0 {
        (
            Status::False,
            "NoCollectors",
            "no collector reports following it (on a node its nodeSelector selects, with no config before it by name)".to_owned(),
        )
    } else {
        (
            Status::True,
            "Applied",
            format!("{running} node(s) run generation {generation}"),
        )
    };
    let mut conds = current.map(|c| c.conditions.clone()).unwrap_or_default();
    conditions::set(
        &mut conds,
        conditions::new(READY, st, reason, message, Some(generation), now),
    );
    GryviaCollectorConfigStatus {
        nodes_reporting: running,
        failing,
        conditions: conds,
    }
}

/// What a config's reconcile reads: every node's fabric signal.
#[derive(Clone, Debug, Default)]
pub struct CollectorConfigWorld {
    /// The fabric signals.
    pub signals: Vec<GryviaFabricSignal>,
}

/// Writes each GryviaCollectorConfig's status from the collectors' reports.
#[derive(Clone, Copy, Debug, Default)]
pub struct CollectorConfigReconciler;

impl Reconcile for CollectorConfigReconciler {
    type Object = GryviaCollectorConfig;
    type World = CollectorConfigWorld;
    type Status = GryviaCollectorConfigStatus;

    fn name(&self) -> &'static str {
        "collector-config"
    }

    fn reconcile(
        &self,
        c: &GryviaCollectorConfig,
        world: &CollectorConfigWorld,
        now: Timestamp,
    ) -> Plan<GryviaCollectorConfigStatus> {
        let mut plan = Plan::new();
        let status = config_status(c, &world.signals, c.status.as_ref(), now);
        plan.set_status_if_changed(c.status.as_ref(), status);
        plan.requeue(RECHECK);
        plan
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gryvia_types::k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use gryvia_types::{AppliedCollectorConfig, GryviaFabricSignalStatus};

    fn config(name: &str, selector: &[(&str, &str)], generation: i64) -> GryviaCollectorConfig {
        let mut c: GryviaCollectorConfig = serde_json::from_value(serde_json::json!({
            "apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaCollectorConfig",
            "metadata": {"name": name, "generation": generation},
            "spec": {"programs": ["tcp-flows", "cgroup-traffic"], "intervalSeconds": 5,
                     "interfaces": ["ib0"]}
        }))
        .unwrap();
        c.spec.node_selector = selector
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        c
    }

    fn at(s: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + s).unwrap()
    }

    #[test]
    fn a_node_follows_the_first_matching_config_by_name_else_its_flags() {
        let labels = BTreeMap::from([("pool".to_owned(), "a100".to_owned())]);
        let configs = [
            config("b-pool", &[("pool", "a100")], 3),
            config("c-all", &[], 1),
            config("a-other", &[("pool", "h100")], 1),
        ];
        let defaults = Settings {
            programs: [CollectorProgram::TcpFlows].into(),
            interval_seconds: 10,
            interfaces: vec![],
            source: None,
        };
        let s = settings(&configs, &labels, &defaults);
        assert_eq!(s.source, Some(("b-pool".to_owned(), 3)));
        assert_eq!(s.interval_seconds, 5);
        assert_eq!(
            s.programs,
            [CollectorProgram::CgroupTraffic, CollectorProgram::TcpFlows].into()
        );
        assert_eq!(s.interfaces, ["ib0"]);
        // Another node: the empty selector matches it.
        let s = settings(&configs, &BTreeMap::new(), &defaults);
        assert_eq!(s.source, Some(("c-all".to_owned(), 1)));
        // None matches: the flags.
        assert_eq!(
            settings(&configs[2..], &BTreeMap::new(), &defaults),
            defaults
        );
        let mut going = config("a-going", &[], 1);
        going.metadata.deletion_timestamp = Some(Time(at(0)));
        assert_eq!(
            selected(&[going, config("z", &[], 1)], &labels).and_then(|c| c.metadata.name.clone()),
            Some("z".to_owned())
        );
    }

    fn signal(
        node: &str,
        applied: Option<(&str, i64, Option<&str>)>,
        updated: i64,
    ) -> GryviaFabricSignal {
        let mut s = GryviaFabricSignal::new(
            node,
            gryvia_types::GryviaFabricSignalSpec {
                node_name: node.into(),
            },
        );
        s.status = Some(GryviaFabricSignalStatus {
            window_seconds: 5,
            updated_at: Some(Time(at(updated))),
            config: applied.map(|(name, generation, error)| AppliedCollectorConfig {
                name: name.into(),
                generation,
                error: error.map(str::to_owned),
            }),
            ..GryviaFabricSignalStatus::default()
        });
        s
    }

    #[test]
    fn the_status_counts_fresh_nodes_on_the_current_generation_and_names_failures() {
        let c = config("pool", &[], 2);
        let signals = [
            signal("n1", Some(("pool", 2, None)), 100),
            signal("n2", Some(("pool", 2, None)), 100),
            signal("n3", Some(("pool", 1, None)), 100),
            // Stale, another config's, the flags'.
            signal("n4", Some(("pool", 2, None)), 0),
            signal("n5", Some(("other", 2, None)), 100),
            signal("n6", None, 100),
        ];
        let st = config_status(&c, &signals, None, at(100));
        assert_eq!(st.nodes_reporting, 2);
        let ready = conditions::find(&st.conditions, READY).unwrap();
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_str()),
            ("False", "Applying")
        );
        let st = config_status(&c, &signals[..2], None, at(100));
        assert!(conditions::is_true(&st.conditions, READY));
        let failed = [signal(
            "n7",
            Some(("pool", 2, Some("interface ib0: no such device"))),
            100,
        )];
        let st = config_status(&c, &failed, None, at(100));
        assert_eq!(st.failing, ["n7: interface ib0: no such device"]);
        let ready = conditions::find(&st.conditions, READY).unwrap();
        assert_eq!(ready.reason, "NotApplied");
        let st = config_status(&c, &[], None, at(100));
        assert_eq!(
            conditions::find(&st.conditions, READY).unwrap().reason,
            "NoCollectors"
        );
    }
}
