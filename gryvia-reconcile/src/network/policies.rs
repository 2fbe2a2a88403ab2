//! The network-operator's flow policy decisions.
//!
//! [`FlowPolicyReconciler`]: a GryviaFlowPolicy with `action: allow` is applied as the
//! NetworkPolicy of the same name ([`compile`]), which the cluster's network plugin enforces;
//! `deny` is resolved to addresses in its status ([`resolve_deny`]), which each node's
//! collector loads into its eBPF deny map, and the drops the collectors report in their
//! GryviaFabricSignals are summed into it; `audit` replays each node's new flow records
//! against its rules and counts the records outside them.
//!
//! [`AutoPolicyReconciler`]: a GryviaAutoPolicy learns the flows of the pods it selects from
//! every node's new windows for `learningPeriodMinutes`, then suggests one allow policy per
//! workload ([`learn`]), checks that every learned flow replays as allowed against them, and
//! with `mode: enforce` applies each as a GryviaFlowPolicy.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use gryvia_types::conditions::{self, READY, Status};
use gryvia_types::k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use gryvia_types::{
    AutoPolicyMode, FlowAction, FlowRecord, GryviaAutoPolicy, GryviaAutoPolicyStatus,
    GryviaFlowAggregateStatus, GryviaFlowPolicy, GryviaFlowPolicySpec, GryviaFlowPolicyStatus,
    LearnedFlow, SuggestedPolicy,
};

use super::flows::local_is_client;
use super::learn::{Flow, Peer, allows, learn, protocol_name};
use super::newer;
use super::policy::{
    Addresses, compile, flow_of, learned, replayed, resolve_deny, selects, suggestion_name,
    workload_selector,
};
use crate::{Child, ObjectRef, Plan, Reconcile, Timestamp};

/// The latest violations an audit policy keeps.
pub const RECENT_VIOLATIONS: usize = 20;
/// The flows an auto policy keeps while learning.
pub const MAX_LEARNED: usize = 2_000;

/// What a flow policy or auto policy is decided against.
#[derive(Clone, Debug, Default)]
pub struct PolicyWorld {
    /// The cluster's pods and Services.
    pub addresses: Addresses,
    /// Each namespace's labels.
    pub namespaces: BTreeMap<String, BTreeMap<String, String>>,
    /// Each node's latest flow window.
    pub aggregates: Vec<(String, GryviaFlowAggregateStatus)>,
    /// Each node's drops per flow policy (`namespace/name`), from its GryviaFabricSignal.
    pub drops: BTreeMap<String, BTreeMap<String, i64>>,
}

fn ns_name(meta: &ObjectMeta) -> (String, String) {
    (
        meta.namespace.clone().unwrap_or_default(),
        meta.name.clone().unwrap_or_default(),
    )
}

/// The new windows of `aggregates` against `folded`, with the records of each; `folded` moves
/// to their ends.
fn new_windows<'a>(
    aggregates: &'a [(String, GryviaFlowAggregateStatus)],
    folded: &mut BTreeMap<String, Time>,
) -> Vec<(&'a str, Timestamp, &'a [FlowRecord])> {
    let mut out = Vec::new();
    for (node, a) in aggregates {
        let Some(end) = a.window_end.as_ref() else {
            continue;
        };
        if newer(folded.get(node), Some(end)) {
            folded.insert(node.clone(), Time(end.0));
            out.push((node.as_str(), end.0, a.flows.as_slice()));
        }
    }
    out
}

fn end_name(ip: &str, a: &Addresses) -> String {
    a.pods.get(ip).map_or_else(
        || ip.to_owned(),
        |p| format!("{}/{}", p.namespace, p.workload),
    )
}

/// `record` as a line: `client -> server:port/PROTOCOL`, pods by workload.
fn describe(record: &FlowRecord, a: &Addresses) -> String {
    let (client, server, port) = if local_is_client(record.src_port, record.dst_port, false) {
        (&record.src_ip, &record.dst_ip, record.dst_port)
    } else {
        (&record.dst_ip, &record.src_ip, record.src_port)
    };
    let proto = protocol_name(record.protocol);
    format!(
        "{} -> {}:{port}/{proto}",
        end_name(client, a),
        end_name(server, a)
    )
}

/// Folds the new windows into an audit policy's status: each record of a flow that touches a
/// selected pod and that the policy's rules would not allow is a violation. Windows that ended
/// by the second the audit began (`since`) are marked folded without counting.
fn audit(
    namespace: &str,
    name: &str,
    spec: &GryviaFlowPolicySpec,
    st: &mut GryviaFlowPolicyStatus,
    world: &PolicyWorld,
    now: Timestamp,
) {
    let np = [compile(name, namespace, spec)];
    let since = st.since.get_or_insert(Time(now)).0.as_second();
    let mut folded = std::mem::take(&mut st.folded);
    for (node, end, records) in new_windows(&world.aggregates, &mut folded) {
        if end.as_second() <= since {
            // A window that ended by the second the audit began: marked, not counted.
            continue;
        }
        for r in records {
            let Some(f) = flow_of(node, r, &world.addresses) else {
                continue;
            };
            let touches = selects(namespace, &spec.pod_selector, &f.from)
                || selects(namespace, &spec.pod_selector, &f.to);
            if touches && !allows(&np, &f) {
                st.violations += 1;
                st.recent_violations.push(describe(r, &world.addresses));
            }
        }
    }
    st.folded = folded;
    let extra = st.recent_violations.len().saturating_sub(RECENT_VIOLATIONS);
    st.recent_violations.drain(..extra);
}

/// Decides a GryviaFlowPolicy (see the module).
#[derive(Clone, Copy, Debug, Default)]
pub struct FlowPolicyReconciler;

impl Reconcile for FlowPolicyReconciler {
    type Object = GryviaFlowPolicy;
    type World = PolicyWorld;
    type Status = GryviaFlowPolicyStatus;

    fn name(&self) -> &'static str {
        "flow-policy"
    }

    fn reconcile(
        &self,
        fp: &GryviaFlowPolicy,
        world: &PolicyWorld,
        now: Timestamp,
    ) -> Plan<GryviaFlowPolicyStatus> {
        let (namespace, name) = ns_name(&fp.metadata);
        let current = fp.status.clone().unwrap_or_default();
        let mut st = GryviaFlowPolicyStatus {
            observed_generation: fp.metadata.generation,
            conditions: current.conditions.clone(),
            ..GryviaFlowPolicyStatus::default()
        };
        let mut plan = Plan::new();
        if fp.spec.action != FlowAction::Allow && current.network_policy.is_some() {
            plan.delete.push(ObjectRef::namespaced(
                "networking.k8s.io/v1",
                "NetworkPolicy",
                &namespace,
                &name,
            ));
        }
        let (reason, message) = match fp.spec.action {
            FlowAction::Allow => {
                plan.apply_built(Child::from_resource(&compile(&name, &namespace, &fp.spec)));
                st.network_policy = Some(name.clone());
                (
                    "Applied",
                    format!("NetworkPolicy {name} allows only the listed peers"),
                )
            }
            FlowAction::Deny => {
                let (deny, left_out) =
                    resolve_deny(&namespace, &fp.spec, &world.addresses, &world.namespaces);
                let key = format!("{namespace}/{name}");
                st.drops_by_node = world
                    .drops
                    .iter()
                    .filter_map(|(node, d)| Some((node.clone(), *d.get(&key)?)))
                    .collect();
                st.drops = st.drops_by_node.values().sum();
                let pods = deny.pods.len();
                st.deny = Some(deny);
                if left_out > 0 {
                    (
                        "TooManyPods",
                        format!(
                            "{pods} selected pods are enforced, {left_out} more are not: narrow the pod selector"
                        ),
                    )
                } else {
                    (
                        "Enforced",
                        format!(
                            "{pods} selected pods; each node's collector drops matching packets"
                        ),
                    )
                }
            }
            FlowAction::Audit => {
                st.violations = current.violations;
                st.recent_violations = current.recent_violations.clone();
                st.since = current.since.clone();
                st.folded = current.folded.clone();
                audit(&namespace, &name, &fp.spec, &mut st, world, now);
                (
                    "Auditing",
                    format!("{} flow records outside the rules", st.violations),
                )
            }
        };
        let status = if reason == "TooManyPods" {
            Status::False
        } else {
            Status::True
        };
        let cond = conditions::new(READY, status, reason, message, fp.metadata.generation, now);
        conditions::set(&mut st.conditions, cond);
        plan.set_status_if_changed(fp.status.as_ref(), st);
        plan
    }
}

/// The workload name of a pod end, from the cluster's pods.
fn workload_names(a: &Addresses) -> BTreeMap<(String, BTreeMap<String, String>), String> {
    a.pods
        .values()
        .map(|p| {
            (
                (p.namespace.clone(), workload_selector(&p.labels)),
                p.workload.clone(),
            )
        })
        .collect()
}

/// When learning ends.
fn learning_ends(since: Timestamp, minutes: i32) -> Timestamp {
    since
        .checked_add(jiff::SignedDuration::from_mins(i64::from(minutes)))
        .unwrap_or(since)
}

/// The suggestions for the learned `flows`: one per workload of `namespace` that
/// `pod_selector` selects, and whether every flow replays as allowed against them.
pub fn suggestions(
    auto: &str,
    namespace: &str,
    pod_selector: &BTreeMap<String, String>,
    flows: &[LearnedFlow],
) -> (Vec<SuggestedPolicy>, bool) {
    let replay: Vec<Flow> = flows.iter().map(replayed).collect();
    let names: BTreeMap<(String, BTreeMap<String, String>), String> = flows
        .iter()
        .flat_map(|f| [&f.from, &f.to])
        .filter_map(|e| {
            Some((
                (e.namespace.clone()?, e.selector.clone()),
                e.workload.clone()?,
            ))
        })
        .collect();
    let out: Vec<SuggestedPolicy> = learn(&replay)
        .into_iter()
        .filter(|(w, _)| {
            w.namespace == namespace
                && pod_selector
                    .iter()
                    .all(|(k, v)| w.selector.get(k) == Some(v))
        })
        .map(|(w, spec)| {
            let workload = names
                .get(&(w.namespace.clone(), w.selector.clone()))
                .cloned()
                .unwrap_or_else(|| w.selector.values().cloned().collect::<Vec<_>>().join("-"));
            SuggestedPolicy {
                name: suggestion_name(auto, &workload),
                workload: format!("{namespace}/{workload}"),
                spec,
            }
        })
        .collect();
    let compiled: Vec<_> = out
        .iter()
        .map(|s| compile(&s.name, namespace, &s.spec))
        .collect();
    let all = replay.iter().all(|f| allows(&compiled, f));
    (out, all)
}

/// Decides a GryviaAutoPolicy (see the module).
#[derive(Clone, Copy, Debug, Default)]
pub struct AutoPolicyReconciler;

impl AutoPolicyReconciler {
    /// Learns the new windows' flows that touch the selected pods into `st`.
    fn learn_windows(ap: &GryviaAutoPolicy, st: &mut GryviaAutoPolicyStatus, world: &PolicyWorld) {
        let namespace = ap.metadata.namespace.clone().unwrap_or_default();
        let names = workload_names(&world.addresses);
        let name_of = |p: &Peer| match p {
            Peer::Pod { workload, .. } => names
                .get(&(workload.namespace.clone(), workload.selector.clone()))
                .cloned(),
            Peer::Address(_) => None,
        };
        let mut flows: BTreeSet<LearnedFlow> = std::mem::take(&mut st.flows).into_iter().collect();
        let mut folded = std::mem::take(&mut st.folded);
        for (node, _, records) in new_windows(&world.aggregates, &mut folded) {
            for r in records {
                let Some(f) = flow_of(node, r, &world.addresses) else {
                    continue;
                };
                let sel = &ap.spec.pod_selector;
                if (selects(&namespace, sel, &f.from) || selects(&namespace, sel, &f.to))
                    && flows.len() < MAX_LEARNED
                {
                    flows.insert(learned(&f, name_of));
                }
            }
        }
        st.folded = folded;
        st.flows = flows.into_iter().collect();
        st.observed_flows = i64::try_from(st.flows.len()).unwrap_or(i64::MAX);
    }
}

impl Reconcile for AutoPolicyReconciler {
    type Object = GryviaAutoPolicy;
    type World = PolicyWorld;
    type Status = GryviaAutoPolicyStatus;

    fn name(&self) -> &'static str {
        "auto-policy"
    }

    fn reconcile(
        &self,
        ap: &GryviaAutoPolicy,
        world: &PolicyWorld,
        now: Timestamp,
    ) -> Plan<GryviaAutoPolicyStatus> {
        let (namespace, name) = ns_name(&ap.metadata);
        let mut st = ap.status.clone().unwrap_or_default();
        let since = st.learning_since.as_ref().map_or(now, |t| t.0);
        st.learning_since = Some(Time(since));
        let ends = learning_ends(since, ap.spec.learning_period_minutes);
        let mut plan = Plan::new();
        let generation = ap.metadata.generation;
        if now < ends {
            Self::learn_windows(ap, &mut st, world);
            st.phase = Some("Learning".to_owned());
            let message = format!(
                "learning until {ends}: {} distinct flows so far",
                st.observed_flows
            );
            let cond = conditions::new(READY, Status::False, "Learning", message, generation, now);
            conditions::set(&mut st.conditions, cond);
            let left = ends.as_second() - now.as_second();
            plan.requeue(Duration::from_secs(
                u64::try_from(left.clamp(1, 300)).unwrap_or(1),
            ));
        } else {
            if st.phase.as_deref() != Some("Ready") {
                // The windows up to the end of learning.
                Self::learn_windows(ap, &mut st, world);
            }
            let (suggested, replays) =
                suggestions(&name, &namespace, &ap.spec.pod_selector, &st.flows);
            st.phase = Some("Ready".to_owned());
            let wanted: Vec<String> = match ap.spec.mode {
                AutoPolicyMode::Enforce if replays => {
                    suggested.iter().map(|s| s.name.clone()).collect()
                }
                _ => vec![],
            };
            for s in suggested.iter().filter(|s| wanted.contains(&s.name)) {
                let mut fp = GryviaFlowPolicy::new(&s.name, s.spec.clone());
                fp.metadata.namespace = Some(namespace.clone());
                fp.metadata.labels = Some(BTreeMap::from([(
                    "gryvia.io/auto-policy".to_owned(),
                    name.clone(),
                )]));
                plan.apply_built(Child::from_resource(&fp));
            }
            for gone in st.applied.iter().filter(|a| !wanted.contains(a)) {
                plan.delete.push(ObjectRef::namespaced(
                    "gryvia.io/v1alpha1",
                    "GryviaFlowPolicy",
                    &namespace,
                    gone,
                ));
            }
            st.applied = wanted;
            let (status, reason, message) = if !replays {
                (
                    Status::False,
                    "ReplayDenied",
                    "a learned flow does not replay as allowed against the suggestions; nothing is applied".to_owned(),
                )
            } else {
                let verb = match ap.spec.mode {
                    AutoPolicyMode::Enforce => "applied",
                    AutoPolicyMode::Suggest => "suggested",
                };
                (
                    Status::True,
                    "Learned",
                    format!(
                        "{} policies {verb}; all {} learned flows replay as allowed",
                        suggested.len(),
                        st.flows.len()
                    ),
                )
            };
            st.suggestions = suggested;
            let cond = conditions::new(READY, status, reason, message, generation, now);
            conditions::set(&mut st.conditions, cond);
        }
        plan.set_status_if_changed(ap.status.as_ref(), st);
        plan
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::network::policy::PodInfo;
    use gryvia_types::GryviaAutoPolicySpec;

    fn world(records: &[(&str, i32, &str, i32)], end: i64) -> PolicyWorld {
        let pod = |w: &str, node: &str| PodInfo {
            namespace: "ml".into(),
            workload: w.into(),
            labels: BTreeMap::from([("app".to_owned(), w.to_owned())]),
            node: node.into(),
        };
        let flows: Vec<FlowRecord> = records
            .iter()
            .map(|(s, sp, d, dp)| {
                serde_json::from_value(serde_json::json!({
                    "srcIp": s, "srcPort": sp, "dstIp": d, "dstPort": dp,
                    "protocol": "TCP", "txBytes": 1, "rxBytes": 1
                }))
                .unwrap()
            })
            .collect();
        PolicyWorld {
            addresses: Addresses {
                pods: BTreeMap::from([
                    ("10.0.0.1".to_owned(), pod("trainer", "n1")),
                    ("10.0.0.2".to_owned(), pod("store", "n1")),
                ]),
                services: BTreeSet::new(),
            },
            aggregates: vec![(
                "n1".to_owned(),
                GryviaFlowAggregateStatus {
                    window_end: Some(Time(at(end))),
                    flows,
                    ..GryviaFlowAggregateStatus::default()
                },
            )],
            ..PolicyWorld::default()
        }
    }

    fn at(s: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + s).unwrap()
    }

    fn auto(mode: AutoPolicyMode) -> GryviaAutoPolicy {
        let mut a = GryviaAutoPolicy::new(
            "learn",
            GryviaAutoPolicySpec {
                pod_selector: BTreeMap::new(),
                learning_period_minutes: 5,
                mode,
            },
        );
        a.metadata.namespace = Some("ml".into());
        a
    }

    #[test]
    fn an_auto_policy_learns_then_suggests_and_enforce_applies_flow_policies() {
        let traffic = [
            ("10.0.0.1", 40000, "10.0.0.2", 9000),
            ("10.0.0.1", 40001, "203.0.113.5", 443),
        ];
        let mut a = auto(AutoPolicyMode::Enforce);
        let plan = AutoPolicyReconciler.reconcile(&a, &world(&traffic, 10), at(10));
        let st = plan.status.clone().unwrap();
        assert_eq!(st.phase.as_deref(), Some("Learning"));
        assert_eq!(st.observed_flows, 2);
        assert!(plan.apply.is_empty());
        a.status = Some(st);
        // The same window again adds nothing; after five minutes, the suggestions.
        let plan = AutoPolicyReconciler.reconcile(&a, &world(&traffic, 10), at(311));
        let st = plan.status.clone().unwrap();
        assert_eq!(st.phase.as_deref(), Some("Ready"));
        let names: Vec<_> = st.suggestions.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["learn-store", "learn-trainer"]);
        assert!(conditions::is_true(&st.conditions, READY));
        assert_eq!(plan.apply.len(), 2, "two GryviaFlowPolicies");
        assert_eq!(st.applied, ["learn-store", "learn-trainer"]);
        // Back to suggest: the applied ones are deleted.
        a.status = Some(st);
        a.spec.mode = AutoPolicyMode::Suggest;
        let plan = AutoPolicyReconciler.reconcile(&a, &world(&traffic, 10), at(400));
        assert_eq!(plan.delete.len(), 2);
        assert!(plan.status.unwrap().applied.is_empty());
    }

    fn flow_policy(action: FlowAction) -> GryviaFlowPolicy {
        let mut fp = GryviaFlowPolicy::new(
            "fp",
            GryviaFlowPolicySpec {
                pod_selector: BTreeMap::from([("app".to_owned(), "trainer".to_owned())]),
                action,
                ingress: vec![],
                egress: vec![gryvia_types::FlowRule {
                    pod_selector: BTreeMap::from([("app".to_owned(), "store".to_owned())]),
                    ..gryvia_types::FlowRule::default()
                }],
            },
        );
        fp.metadata.namespace = Some("ml".into());
        fp
    }

    #[test]
    fn allow_applies_a_network_policy_deny_resolves_and_sums_drops_audit_counts() {
        let traffic = [
            ("10.0.0.1", 40000, "10.0.0.2", 9000),
            ("10.0.0.1", 40001, "203.0.113.5", 443),
        ];
        let mut w = world(&traffic, 10);
        let plan = FlowPolicyReconciler.reconcile(&flow_policy(FlowAction::Allow), &w, at(10));
        assert_eq!(plan.apply.len(), 1);
        assert_eq!(plan.status.unwrap().network_policy.as_deref(), Some("fp"));

        w.drops = BTreeMap::from([
            ("n1".to_owned(), BTreeMap::from([("ml/fp".to_owned(), 7)])),
            (
                "n2".to_owned(),
                BTreeMap::from([("ml/other".to_owned(), 3)]),
            ),
        ]);
        let mut fp = flow_policy(FlowAction::Deny);
        fp.status = Some(GryviaFlowPolicyStatus {
            network_policy: Some("fp".into()),
            ..GryviaFlowPolicyStatus::default()
        });
        let plan = FlowPolicyReconciler.reconcile(&fp, &w, at(10));
        assert_eq!(
            plan.delete.len(),
            1,
            "the allow policy's NetworkPolicy goes"
        );
        let st = plan.status.unwrap();
        let deny = st.deny.unwrap();
        assert_eq!(
            (deny.pods.as_slice(), deny.egress[0].cidrs.as_slice()),
            (
                &["10.0.0.1".to_owned()][..],
                &["10.0.0.2/32".to_owned()][..]
            )
        );
        assert_eq!((st.drops, st.drops_by_node.len()), (7, 1));

        // A window that ended by the second the audit began is not counted.
        let plan = FlowPolicyReconciler.reconcile(&flow_policy(FlowAction::Audit), &w, at(10));
        assert_eq!(plan.status.unwrap().violations, 0);
        let plan = FlowPolicyReconciler.reconcile(&flow_policy(FlowAction::Audit), &w, at(9));
        let st = plan.status.unwrap();
        assert_eq!(st.violations, 1);
        assert_eq!(st.recent_violations, ["ml/trainer -> 203.0.113.5:443/TCP"]);
    }
}
