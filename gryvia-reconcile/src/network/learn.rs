//! Flow policy learned from traffic (GryviaAutoPolicy): after the learning period, one
//! NetworkPolicy per workload that allows exactly the flows seen into it (ingress) and out of
//! it (egress), by peer workload (pod and namespace selectors), by address for peers outside
//! the cluster, and by port and protocol. [`allows`] evaluates NetworkPolicies the way the
//! Kubernetes API defines them, so a proposal is checked by replaying the learned flows
//! against it. Pure.

use std::collections::{BTreeMap, BTreeSet};

use gryvia_types::Protocol;
use gryvia_types::k8s_openapi::api::networking::v1::{
    IPBlock, NetworkPolicy, NetworkPolicyEgressRule, NetworkPolicyIngressRule, NetworkPolicyPeer,
    NetworkPolicyPort, NetworkPolicySpec,
};
use gryvia_types::k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use gryvia_types::k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

/// The label every namespace carries with its own name.
pub const NAMESPACE_NAME_LABEL: &str = "kubernetes.io/metadata.name";

/// A workload: the pods of one namespace that a selector picks (its owner's selector).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Workload {
    /// Namespace.
    pub namespace: String,
    /// The labels that select its pods.
    pub selector: BTreeMap<String, String>,
}

/// One end of a flow.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Peer {
    /// A pod of a workload, with all its labels.
    Pod {
        /// Its workload.
        workload: Workload,
        /// The pod's labels (a superset of the workload's selector).
        labels: BTreeMap<String, String>,
    },
    /// An address outside the cluster.
    Address(String),
}

/// A flow seen: who opened it, to whom, on which port.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Flow {
    /// The client.
    pub from: Peer,
    /// The server.
    pub to: Peer,
    /// The server's port.
    pub port: u16,
    /// The protocol.
    pub protocol: Protocol,
}

fn protocol_name(p: Protocol) -> String {
    serde_json::to_value(p)
        .ok()
        .and_then(|v| v.as_str().map(str::to_uppercase))
        .unwrap_or_else(|| "TCP".to_owned())
}

fn selector(labels: &BTreeMap<String, String>) -> LabelSelector {
    LabelSelector {
        match_labels: Some(labels.clone()),
        match_expressions: None,
    }
}

fn peer_of(p: &Peer) -> NetworkPolicyPeer {
    match p {
        Peer::Pod { workload, .. } => NetworkPolicyPeer {
            pod_selector: Some(selector(&workload.selector)),
            namespace_selector: Some(selector(&BTreeMap::from([(
                NAMESPACE_NAME_LABEL.to_owned(),
                workload.namespace.clone(),
            )]))),
            ip_block: None,
        },
        Peer::Address(ip) => NetworkPolicyPeer {
            ip_block: Some(IPBlock {
                cidr: if ip.contains(':') {
                    format!("{ip}/128")
                } else {
                    format!("{ip}/32")
                },
                except: None,
            }),
            ..NetworkPolicyPeer::default()
        },
    }
}

/// The name of a workload's learned policy: `<policy>-<n>`, `n` its place among the
/// workloads in order.
fn policy_name(prefix: &str, n: usize) -> String {
    format!("{prefix}-{n}")
}

/// The NetworkPolicies that allow exactly `flows`: for each workload of the cluster that sent
/// or received any, one policy in its namespace, named `<prefix>-<n>` and labelled
/// `gryvia.io/auto-policy: <prefix>`, with an ingress rule per (peer, port) seen coming in
/// and an egress rule per (peer, port) seen going out. Sorted by namespace and name.
pub fn learn(prefix: &str, flows: &[Flow]) -> Vec<NetworkPolicy> {
    type Rules = BTreeSet<(Peer, u16, Protocol)>;
    let mut by: BTreeMap<Workload, (Rules, Rules)> = BTreeMap::new();
    for f in flows {
        if let Peer::Pod { workload, .. } = &f.to {
            let strip = strip_labels(&f.from);
            by.entry(workload.clone())
                .or_default()
                .0
                .insert((strip, f.port, f.protocol));
        }
        if let Peer::Pod { workload, .. } = &f.from {
            let strip = strip_labels(&f.to);
            by.entry(workload.clone())
                .or_default()
                .1
                .insert((strip, f.port, f.protocol));
        }
    }
    by.into_iter()
        .enumerate()
        .map(|(n, (w, (ingress, egress)))| {
            let port = |p: u16, proto: Protocol| NetworkPolicyPort {
                port: Some(IntOrString::Int(i32::from(p))),
                protocol: Some(protocol_name(proto)),
                end_port: None,
            };
            NetworkPolicy {
                metadata: ObjectMeta {
                    name: Some(policy_name(prefix, n)),
                    namespace: Some(w.namespace.clone()),
                    labels: Some(BTreeMap::from([(
                        "gryvia.io/auto-policy".to_owned(),
                        prefix.to_owned(),
                    )])),
                    ..ObjectMeta::default()
                },
                spec: Some(NetworkPolicySpec {
                    pod_selector: Some(selector(&w.selector)),
                    policy_types: Some(vec!["Ingress".to_owned(), "Egress".to_owned()]),
                    ingress: Some(
                        ingress
                            .iter()
                            .map(|(peer, p, proto)| NetworkPolicyIngressRule {
                                from: Some(vec![peer_of(peer)]),
                                ports: Some(vec![port(*p, *proto)]),
                            })
                            .collect(),
                    ),
                    egress: Some(
                        egress
                            .iter()
                            .map(|(peer, p, proto)| NetworkPolicyEgressRule {
                                to: Some(vec![peer_of(peer)]),
                                ports: Some(vec![port(*p, *proto)]),
                            })
                            .collect(),
                    ),
                }),
            }
        })
        .collect()
}

/// A peer as a rule names it: a pod by its workload only.
fn strip_labels(p: &Peer) -> Peer {
    match p {
        Peer::Pod { workload, .. } => Peer::Pod {
            workload: workload.clone(),
            labels: workload.selector.clone(),
        },
        other => other.clone(),
    }
}

fn selects(sel: Option<&LabelSelector>, labels: &BTreeMap<String, String>) -> bool {
    let Some(sel) = sel else {
        return true;
    };
    if sel
        .match_expressions
        .as_ref()
        .is_some_and(|e| !e.is_empty())
    {
        // Learned policies never use expressions; a policy that does is judged not to match.
        return false;
    }
    sel.match_labels
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v))
}

fn peer_matches(rule_peer: &NetworkPolicyPeer, p: &Peer) -> bool {
    match (p, &rule_peer.ip_block) {
        (Peer::Address(ip), Some(block)) => {
            block.cidr == format!("{ip}/32") || block.cidr == format!("{ip}/128")
        }
        (Peer::Pod { workload, labels }, None) => {
            let ns_labels =
                BTreeMap::from([(NAMESPACE_NAME_LABEL.to_owned(), workload.namespace.clone())]);
            (rule_peer.pod_selector.is_some() || rule_peer.namespace_selector.is_some())
                && selects(rule_peer.pod_selector.as_ref(), labels)
                && selects(rule_peer.namespace_selector.as_ref(), &ns_labels)
        }
        _ => false,
    }
}

fn port_matches(ports: Option<&Vec<NetworkPolicyPort>>, port: u16, proto: Protocol) -> bool {
    let Some(ports) = ports.filter(|p| !p.is_empty()) else {
        return true;
    };
    ports.iter().any(|p| {
        let proto_ok = p.protocol.as_deref().unwrap_or("TCP") == protocol_name(proto);
        let port_ok = match &p.port {
            None => true,
            Some(IntOrString::Int(n)) => {
                let end = p.end_port.unwrap_or(*n);
                (*n..=end).contains(&i32::from(port))
            }
            Some(IntOrString::String(_)) => false,
        };
        proto_ok && port_ok
    })
}

fn pod_of(p: &Peer) -> Option<(&Workload, &BTreeMap<String, String>)> {
    match p {
        Peer::Pod { workload, labels } => Some((workload, labels)),
        Peer::Address(_) => None,
    }
}

/// A rule of a policy: its ports and its peers (`from` or `to`).
type Rule<'a> = (
    Option<&'a Vec<NetworkPolicyPort>>,
    Option<&'a Vec<NetworkPolicyPeer>>,
);

/// A direction of traffic, as a policy sees it from the pod it selects.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Direction {
    Ingress,
    Egress,
}

impl Direction {
    fn name(self) -> &'static str {
        match self {
            Direction::Ingress => "Ingress",
            Direction::Egress => "Egress",
        }
    }

    /// Whether a policy with `spec` in `namespace` governs this direction of a pod of `w`
    /// with `labels` (without `policyTypes`, ingress always and egress when it has rules).
    fn governs(
        self,
        spec: &NetworkPolicySpec,
        namespace: Option<&str>,
        w: &Workload,
        labels: &BTreeMap<String, String>,
    ) -> bool {
        namespace == Some(w.namespace.as_str())
            && selects(spec.pod_selector.as_ref(), labels)
            && spec
                .policy_types
                .as_ref()
                .map_or(self == Direction::Ingress || spec.egress.is_some(), |ts| {
                    ts.iter().any(|t| t == self.name())
                })
    }

    /// The rules of `spec` for this direction, each as its ports and its peers.
    fn rules(self, spec: &NetworkPolicySpec) -> Vec<Rule<'_>> {
        match self {
            Direction::Ingress => spec
                .ingress
                .iter()
                .flatten()
                .map(|r| (r.ports.as_ref(), r.from.as_ref()))
                .collect(),
            Direction::Egress => spec
                .egress
                .iter()
                .flatten()
                .map(|r| (r.ports.as_ref(), r.to.as_ref()))
                .collect(),
        }
    }
}

/// Whether the pod at the flow's end for `dir` (the client for egress, the server for ingress)
/// may take part in it: open unless a policy governs that direction of it, and then only what
/// one of their rules allows.
fn side_allows(policies: &[NetworkPolicy], flow: &Flow, dir: Direction) -> bool {
    let (end, other) = match dir {
        Direction::Egress => (&flow.from, &flow.to),
        Direction::Ingress => (&flow.to, &flow.from),
    };
    let Some((w, labels)) = pod_of(end) else {
        return true;
    };
    let mut governing = policies
        .iter()
        .filter_map(|np| {
            let spec = np.spec.as_ref()?;
            dir.governs(spec, np.metadata.namespace.as_deref(), w, labels)
                .then_some(spec)
        })
        .peekable();
    if governing.peek().is_none() {
        return true;
    }
    governing.any(|spec| {
        dir.rules(spec).into_iter().any(|(ports, peers)| {
            port_matches(ports, flow.port, flow.protocol)
                && peers.is_none_or(|ps| ps.is_empty() || ps.iter().any(|p| peer_matches(p, other)))
        })
    })
}

/// Whether `policies` let `flow` through, as Kubernetes defines it: each direction is open
/// unless a policy of that type selects the pod, and then only what one of their rules allows.
pub fn allows(policies: &[NetworkPolicy], flow: &Flow) -> bool {
    side_allows(policies, flow, Direction::Egress)
        && side_allows(policies, flow, Direction::Ingress)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn pod(ns: &str, app: &str, n: u8) -> Peer {
        let workload = Workload {
            namespace: ns.to_owned(),
            selector: BTreeMap::from([("app".to_owned(), app.to_owned())]),
        };
        Peer::Pod {
            labels: BTreeMap::from([
                ("app".to_owned(), app.to_owned()),
                ("pod-template-hash".to_owned(), format!("h{n}")),
            ]),
            workload,
        }
    }

    fn flow(from: Peer, to: Peer, port: u16) -> Flow {
        Flow {
            from,
            to,
            port,
            protocol: Protocol::TCP,
        }
    }

    #[test]
    fn the_learned_policies_allow_every_flow_seen_and_nothing_else() {
        let seen = vec![
            flow(pod("ml", "trainer", 1), pod("ml", "store", 1), 9000),
            flow(pod("ml", "trainer", 2), pod("data", "cache", 1), 6379),
            flow(
                pod("ml", "trainer", 1),
                Peer::Address("203.0.113.7".into()),
                443,
            ),
        ];
        let policies = learn("learned", &seen);
        assert_eq!(policies.len(), 3, "trainer, store and cache");
        for f in &seen {
            assert!(allows(&policies, f), "{f:?}");
        }
        // Another replica of a workload is allowed what its workload was seen doing.
        assert!(allows(
            &policies,
            &flow(pod("ml", "trainer", 9), pod("ml", "store", 3), 9000)
        ));
        // Another port, another peer, the other direction, another address: denied.
        assert!(!allows(
            &policies,
            &flow(pod("ml", "trainer", 1), pod("ml", "store", 1), 22)
        ));
        assert!(!allows(
            &policies,
            &flow(pod("ml", "intruder", 1), pod("ml", "store", 1), 9000)
        ));
        assert!(!allows(
            &policies,
            &flow(pod("ml", "store", 1), pod("ml", "trainer", 1), 9000)
        ));
        assert!(!allows(
            &policies,
            &flow(
                pod("ml", "trainer", 1),
                Peer::Address("198.51.100.1".into()),
                443
            )
        ));
        // The same app name in another namespace is another workload.
        assert!(!allows(
            &policies,
            &flow(pod("other", "trainer", 1), pod("ml", "store", 1), 9000)
        ));
    }

    #[test]
    fn policies_are_named_labelled_and_namespaced() {
        let p = learn("auto", &[flow(pod("ml", "a", 1), pod("ml", "b", 1), 80)]);
        assert_eq!(p[0].metadata.name.as_deref(), Some("auto-0"));
        assert_eq!(p[0].metadata.namespace.as_deref(), Some("ml"));
        let spec = p[1].spec.as_ref().unwrap();
        assert_eq!(spec.ingress.as_ref().unwrap().len(), 1);
        let port = &spec.ingress.as_ref().unwrap()[0].ports.as_ref().unwrap()[0];
        assert_eq!(port.protocol.as_deref(), Some("TCP"));
    }

    #[test]
    fn without_policies_everything_flows() {
        assert!(allows(&[], &flow(pod("a", "x", 1), pod("b", "y", 1), 1)));
    }

    proptest! {
        #[test]
        fn replaying_any_learned_flows_is_allowed(
            flows in proptest::collection::vec(
                (0u8..3, 0u8..4, 0u8..3, 0u8..4, 1u16..3, any::<bool>()), 1..20),
        ) {
            let apps = ["a", "b", "c", "d"];
            let nss = ["x", "y", "z"];
            let seen: Vec<Flow> = flows
                .iter()
                .map(|&(fns, fapp, tns, tapp, port, external)| {
                    let to = if external {
                        Peer::Address(format!("192.0.2.{tapp}"))
                    } else {
                        pod(nss[tns as usize], apps[tapp as usize], tapp)
                    };
                    flow(pod(nss[fns as usize], apps[fapp as usize], fapp), to, port)
                })
                .collect();
            let policies = learn("p", &seen);
            for f in &seen {
                prop_assert!(allows(&policies, f), "{:?}", f);
            }
            // A port never seen is never allowed between pods.
            for f in seen.iter().filter(|f| matches!(f.to, Peer::Pod { .. })) {
                let other = Flow { port: 999, ..f.clone() };
                prop_assert!(!allows(&policies, &other));
            }
        }
    }
}
