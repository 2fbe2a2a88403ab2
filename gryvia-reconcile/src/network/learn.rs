//! Flow policy learned from traffic (GryviaAutoPolicy): after the learning period, one allow
//! policy per workload that allows exactly the flows seen into it (ingress) and out of it
//! (egress), by peer workload (pod and namespace selectors), by address for peers outside the
//! cluster, and by port and protocol. [`allows`] evaluates NetworkPolicies the way the
//! Kubernetes API defines them, so a proposal is checked by replaying the learned flows
//! against it. Pure.

use std::collections::{BTreeMap, BTreeSet};

use gryvia_types::k8s_openapi::api::networking::v1::{
    NetworkPolicy, NetworkPolicyPeer, NetworkPolicyPort, NetworkPolicySpec,
};
use gryvia_types::k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use gryvia_types::k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use gryvia_types::{FlowAction, FlowPort, FlowRule, GryviaFlowPolicySpec, Protocol};

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

/// A rule allowing `peer` on `port`: a pod peer by its namespace's name and its workload's
/// selector, an address as its own block.
fn rule_for(peer: &Peer, port: u16, protocol: Protocol) -> FlowRule {
    let ports = vec![FlowPort {
        port: i32::from(port),
        protocol,
    }];
    match peer {
        Peer::Pod { workload, .. } => FlowRule {
            namespace_selector: BTreeMap::from([(
                NAMESPACE_NAME_LABEL.to_owned(),
                workload.namespace.clone(),
            )]),
            pod_selector: workload.selector.clone(),
            cidrs: vec![],
            ports,
        },
        Peer::Address(ip) => FlowRule {
            cidrs: vec![if ip.contains(':') {
                format!("{ip}/128")
            } else {
                format!("{ip}/32")
            }],
            ports,
            ..FlowRule::default()
        },
    }
}

/// The allow policies that allow exactly `flows`: for each workload that sent or received any,
/// a GryviaFlowPolicy spec selecting its pods, with an ingress rule per (peer, port) seen
/// coming in and an egress rule per (peer, port) seen going out. In workload order.
pub fn learn(flows: &[Flow]) -> Vec<(Workload, GryviaFlowPolicySpec)> {
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
        .map(|(w, (ingress, egress))| {
            let spec = GryviaFlowPolicySpec {
                pod_selector: w.selector.clone(),
                action: FlowAction::Allow,
                ingress: ingress
                    .iter()
                    .map(|(peer, p, proto)| rule_for(peer, *p, *proto))
                    .collect(),
                egress: egress
                    .iter()
                    .map(|(peer, p, proto)| rule_for(peer, *p, *proto))
                    .collect(),
            };
            (w, spec)
        })
        .collect()
}

/// A protocol as a NetworkPolicy port names it.
pub fn protocol_name(p: Protocol) -> &'static str {
    match p {
        Protocol::TCP => "TCP",
        Protocol::UDP => "UDP",
        Protocol::SCTP => "SCTP",
    }
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

/// Whether `ip` lies in `cidr` (IPv4 by prefix; an IPv6 block only as the exact address).
fn in_block(cidr: &str, ip: &str) -> bool {
    if let (Some((net, len)), Ok(addr)) = (
        super::policy::ipv4_block(cidr),
        ip.parse::<std::net::Ipv4Addr>(),
    ) {
        let mask = if len == 0 {
            0
        } else {
            u32::MAX << (32 - u32::from(len))
        };
        return u32::from(net) & mask == u32::from(addr) & mask;
    }
    cidr == format!("{ip}/128")
}

/// Whether a rule's peer names `p`, for a policy in `namespace`: a pod selector without a
/// namespace selector names pods of the policy's own namespace.
fn peer_matches(rule_peer: &NetworkPolicyPeer, p: &Peer, namespace: Option<&str>) -> bool {
    match (p, &rule_peer.ip_block) {
        (Peer::Address(ip), Some(block)) => {
            in_block(&block.cidr, ip) && !block.except.iter().flatten().any(|e| in_block(e, ip))
        }
        (Peer::Pod { workload, labels }, None) => {
            let ns_labels =
                BTreeMap::from([(NAMESPACE_NAME_LABEL.to_owned(), workload.namespace.clone())]);
            let ns_ok = match &rule_peer.namespace_selector {
                None => namespace == Some(workload.namespace.as_str()),
                Some(sel) => selects(Some(sel), &ns_labels),
            };
            (rule_peer.pod_selector.is_some() || rule_peer.namespace_selector.is_some())
                && ns_ok
                && selects(rule_peer.pod_selector.as_ref(), labels)
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
                .then_some((spec, np.metadata.namespace.as_deref()))
        })
        .peekable();
    if governing.peek().is_none() {
        return true;
    }
    governing.any(|(spec, namespace)| {
        dir.rules(spec).into_iter().any(|(ports, peers)| {
            port_matches(ports, flow.port, flow.protocol)
                && peers.is_none_or(|ps| {
                    ps.is_empty() || ps.iter().any(|p| peer_matches(p, other, namespace))
                })
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

    /// The learned policies as the NetworkPolicies an allow flow policy applies.
    fn compiled(seen: &[Flow]) -> Vec<NetworkPolicy> {
        learn(seen)
            .iter()
            .enumerate()
            .map(|(n, (w, spec))| {
                super::super::policy::compile(&format!("p-{n}"), &w.namespace, spec)
            })
            .collect()
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
        let policies = compiled(&seen);
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
    fn each_workload_gets_an_allow_policy_selecting_its_pods() {
        let p = learn(&[flow(pod("ml", "a", 1), pod("ml", "b", 1), 80)]);
        assert_eq!(p.len(), 2);
        let (w, spec) = &p[1];
        assert_eq!(
            (w.namespace.as_str(), &w.selector["app"]),
            ("ml", &"b".to_owned())
        );
        assert_eq!(spec.action, FlowAction::Allow);
        assert_eq!(spec.pod_selector, w.selector);
        assert_eq!(spec.ingress.len(), 1);
        assert_eq!(spec.ingress[0].ports[0].port, 80);
        assert!(spec.egress.is_empty());
    }

    #[test]
    fn a_block_lets_its_addresses_through_and_a_bare_pod_selector_stays_in_its_namespace() {
        assert!(in_block("10.0.0.0/8", "10.200.1.1"));
        assert!(!in_block("10.0.0.0/8", "11.0.0.1"));
        assert!(in_block("0.0.0.0/0", "192.0.2.1"));
        assert!(in_block("2001:db8::1/128", "2001:db8::1"));
        let peer = NetworkPolicyPeer {
            pod_selector: Some(LabelSelector {
                match_labels: Some(BTreeMap::from([("app".to_owned(), "x".to_owned())])),
                match_expressions: None,
            }),
            ..NetworkPolicyPeer::default()
        };
        assert!(peer_matches(&peer, &pod("a", "x", 1), Some("a")));
        assert!(!peer_matches(&peer, &pod("b", "x", 1), Some("a")));
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
            let policies = compiled(&seen);
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
