//! GryviaFlowPolicy and GryviaAutoPolicy, as pure functions.
//!
//! - [`compile`]: a flow policy's rules as a NetworkPolicy (what `allow` applies and `audit`
//!   replays flows against), with Kubernetes' peer semantics: a rule with a pod selector only
//!   names pods of the policy's namespace, a namespace selector only every pod of those
//!   namespaces, both the pods that match in the namespaces that match, `cidrs` address
//!   blocks; a rule with no peer at all matches every peer, one with no port every port.
//! - [`resolve_deny`]: a `deny` policy's selected pods and peers as IPv4 addresses and blocks,
//!   which each node's collector turns into entries of its eBPF deny map ([`deny_entries`]).
//! - [`flow_of`]: a collector's flow record as a flow between workloads (with their pods'
//!   labels) or addresses, to learn from (GryviaAutoPolicy) or audit; [`suggest`]: the learned
//!   flows as one allow policy per workload ([`super::learn::learn`]).

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;

use gryvia_types::k8s_openapi::api::core::v1::Service;
use gryvia_types::k8s_openapi::api::networking::v1::{
    IPBlock, NetworkPolicy, NetworkPolicyEgressRule, NetworkPolicyIngressRule, NetworkPolicyPeer,
    NetworkPolicyPort, NetworkPolicySpec,
};
use gryvia_types::k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use gryvia_types::k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use gryvia_types::{
    CachedPod, FlowAction, FlowEnd, FlowRecord, FlowRule, GryviaFlowPolicy, GryviaFlowPolicySpec,
    LearnedFlow, Protocol, ResolvedDeny, ResolvedRule,
};

use super::flows::{JOB_LABEL, controller_of, local_is_client, workload_of};
use super::learn::{Flow, NAMESPACE_NAME_LABEL, Peer, Workload, protocol_name};
use crate::facts::labels_match;

/// Label on a NetworkPolicy rendered from a GryviaFlowPolicy: the flow policy's name.
pub const FLOW_POLICY_LABEL: &str = "gryvia.io/flow-policy";

/// At most this many selected pods' addresses in a resolved deny policy.
pub const MAX_DENY_PODS: usize = 512;

/// Labels that differ between the pods of one workload (revision, ordinal, index, uid): left
/// out of the labels that select a workload's pods.
const PER_POD_LABELS: [&str; 7] = [
    "pod-template-hash",
    "controller-revision-hash",
    "statefulset.kubernetes.io/pod-name",
    "apps.kubernetes.io/pod-index",
    "batch.kubernetes.io/job-completion-index",
    "batch.kubernetes.io/controller-uid",
    "controller-uid",
];

/// The labels that select a pod's workload: a Gryvia job's pods by the job label, any other
/// pod by its labels without the per-pod ones.
pub fn workload_selector(labels: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    if let Some(job) = labels.get(JOB_LABEL) {
        return BTreeMap::from([(JOB_LABEL.to_owned(), job.clone())]);
    }
    labels
        .iter()
        .filter(|(k, _)| !PER_POD_LABELS.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// A pod as policies see it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodInfo {
    /// Namespace.
    pub namespace: String,
    /// Its workload's name (without the namespace).
    pub workload: String,
    /// Its labels.
    pub labels: BTreeMap<String, String>,
    /// Its node.
    pub node: String,
}

/// The cluster's pods by address and its Services' cluster IPs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Addresses {
    /// Pods with an address, by address.
    pub pods: BTreeMap<String, PodInfo>,
    /// Cluster IPs.
    pub services: BTreeSet<String>,
}

/// The [`Addresses`] of `pods` and `services`.
pub fn addresses<'a>(
    pods: impl IntoIterator<Item = &'a CachedPod>,
    services: impl IntoIterator<Item = &'a Service>,
) -> Addresses {
    let mut a = Addresses::default();
    for p in pods {
        let Some(ip) = p.pod_ip.clone() else { continue };
        let ns = p.metadata.namespace.clone().unwrap_or_default();
        let name = p.metadata.name.as_deref().unwrap_or_default();
        let labels = p.metadata.labels.clone().unwrap_or_default();
        let workload = workload_of(&ns, name, &labels, controller_of(p));
        let workload = workload
            .split_once('/')
            .map_or(workload.clone(), |(_, w)| w.to_owned());
        a.pods.insert(
            ip,
            PodInfo {
                namespace: ns,
                workload,
                labels,
                node: p.node_name.clone().unwrap_or_default(),
            },
        );
    }
    for s in services {
        if let Some(ip) = s.spec.as_ref().and_then(|s| s.cluster_ip.clone())
            && !ip.is_empty()
            && ip != "None"
        {
            a.services.insert(ip);
        }
    }
    a
}

fn peer(ip: &str, a: &Addresses) -> Peer {
    match a.pods.get(ip) {
        Some(p) => Peer::Pod {
            workload: Workload {
                namespace: p.namespace.clone(),
                selector: workload_selector(&p.labels),
            },
            labels: p.labels.clone(),
        },
        None => Peer::Address(ip.to_owned()),
    }
}

/// `record`, seen by the collector of `node`, as a flow from its client to its server; `None`
/// for a record whose peer is a Service's cluster IP (the backend's node sees the same flow
/// with the pods' own addresses) or whose local address is another node's pod.
pub fn flow_of(node: &str, record: &FlowRecord, a: &Addresses) -> Option<Flow> {
    if a.services.contains(&record.dst_ip) {
        return None;
    }
    if a.pods.get(&record.src_ip).is_some_and(|p| p.node != node) {
        return None;
    }
    let (local, remote) = (peer(&record.src_ip, a), peer(&record.dst_ip, a));
    let (from, to, port) = if local_is_client(record.src_port, record.dst_port, false) {
        (local, remote, record.dst_port)
    } else {
        (remote, local, record.src_port)
    };
    Some(Flow {
        from,
        to,
        port: u16::try_from(port).ok()?,
        protocol: record.protocol,
    })
}

fn end_of(p: &Peer) -> FlowEnd {
    match p {
        Peer::Pod { workload, .. } => FlowEnd {
            namespace: Some(workload.namespace.clone()),
            workload: None,
            selector: workload.selector.clone(),
            address: None,
        },
        Peer::Address(ip) => FlowEnd {
            address: Some(ip.clone()),
            ..FlowEnd::default()
        },
    }
}

fn peer_of_end(e: &FlowEnd) -> Peer {
    match (&e.namespace, &e.address) {
        (Some(ns), _) => Peer::Pod {
            workload: Workload {
                namespace: ns.clone(),
                selector: e.selector.clone(),
            },
            labels: e.selector.clone(),
        },
        (None, a) => Peer::Address(a.clone().unwrap_or_default()),
    }
}

/// A flow as an auto policy's status keeps it (pod ends by their workload's selector).
pub fn learned(f: &Flow, workload: impl Fn(&Peer) -> Option<String>) -> LearnedFlow {
    let mut from = end_of(&f.from);
    from.workload = workload(&f.from);
    let mut to = end_of(&f.to);
    to.workload = workload(&f.to);
    LearnedFlow {
        from,
        to,
        port: i32::from(f.port),
        protocol: f.protocol,
    }
}

/// A kept flow back as a flow (a pod end's labels are its workload's selector).
pub fn replayed(f: &LearnedFlow) -> Flow {
    Flow {
        from: peer_of_end(&f.from),
        to: peer_of_end(&f.to),
        port: u16::try_from(f.port).unwrap_or(0),
        protocol: f.protocol,
    }
}

fn selector(labels: &BTreeMap<String, String>) -> LabelSelector {
    LabelSelector {
        match_labels: Some(labels.clone()),
        match_expressions: None,
    }
}

fn peers(rule: &FlowRule) -> Option<Vec<NetworkPolicyPeer>> {
    let mut out = Vec::new();
    if !rule.pod_selector.is_empty() || !rule.namespace_selector.is_empty() {
        out.push(NetworkPolicyPeer {
            // A namespace selector alone: every pod of those namespaces.
            pod_selector: (!rule.pod_selector.is_empty() || rule.namespace_selector.is_empty())
                .then(|| selector(&rule.pod_selector)),
            namespace_selector: (!rule.namespace_selector.is_empty())
                .then(|| selector(&rule.namespace_selector)),
            ip_block: None,
        });
    }
    out.extend(rule.cidrs.iter().map(|c| NetworkPolicyPeer {
        ip_block: Some(IPBlock {
            cidr: c.clone(),
            except: None,
        }),
        ..NetworkPolicyPeer::default()
    }));
    (!out.is_empty()).then_some(out)
}

fn ports(rule: &FlowRule) -> Option<Vec<NetworkPolicyPort>> {
    (!rule.ports.is_empty()).then(|| {
        rule.ports
            .iter()
            .map(|p| NetworkPolicyPort {
                port: Some(IntOrString::Int(p.port)),
                protocol: Some(protocol_name(p.protocol).to_owned()),
                end_port: None,
            })
            .collect()
    })
}

/// The NetworkPolicy `name` in `namespace` that allows only what `spec`'s rules list, with
/// Kubernetes' defaults for the directions: ingress is always governed (no ingress rule:
/// nothing comes in), egress when the spec has egress rules.
pub fn compile(name: &str, namespace: &str, spec: &GryviaFlowPolicySpec) -> NetworkPolicy {
    let mut types = vec!["Ingress".to_owned()];
    if !spec.egress.is_empty() {
        types.push("Egress".to_owned());
    }
    NetworkPolicy {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some(namespace.to_owned()),
            labels: Some(BTreeMap::from([(
                FLOW_POLICY_LABEL.to_owned(),
                name.to_owned(),
            )])),
            ..ObjectMeta::default()
        },
        spec: Some(NetworkPolicySpec {
            pod_selector: Some(selector(&spec.pod_selector)),
            policy_types: Some(types),
            ingress: Some(
                spec.ingress
                    .iter()
                    .map(|r| NetworkPolicyIngressRule {
                        from: peers(r),
                        ports: ports(r),
                    })
                    .collect(),
            ),
            egress: (!spec.egress.is_empty()).then(|| {
                spec.egress
                    .iter()
                    .map(|r| NetworkPolicyEgressRule {
                        to: peers(r),
                        ports: ports(r),
                    })
                    .collect()
            }),
        }),
    }
}

/// A valid IPv4 block `a.b.c.d/n` (a bare address is its /32); `None` for anything else.
pub fn ipv4_block(cidr: &str) -> Option<(Ipv4Addr, u8)> {
    let (addr, len) = cidr.split_once('/').unwrap_or((cidr, "32"));
    let len: u8 = len.parse().ok().filter(|l| *l <= 32)?;
    Some((addr.parse().ok()?, len))
}

/// The addresses of the pods a rule's selectors name, as `/32` blocks, plus its `cidrs`
/// (IPv4 only); every address (`0.0.0.0/0`) for a rule without peers.
fn rule_blocks(
    rule: &FlowRule,
    namespace: &str,
    a: &Addresses,
    namespaces: &BTreeMap<String, BTreeMap<String, String>>,
) -> Vec<String> {
    let selects = !rule.pod_selector.is_empty() || !rule.namespace_selector.is_empty();
    if !selects && rule.cidrs.is_empty() {
        return vec!["0.0.0.0/0".to_owned()];
    }
    let mut out: BTreeSet<String> = rule
        .cidrs
        .iter()
        .filter(|c| ipv4_block(c).is_some())
        .cloned()
        .collect();
    if selects {
        for (ip, p) in &a.pods {
            let ns_ok = if rule.namespace_selector.is_empty() {
                p.namespace == namespace
            } else {
                let mut labels = namespaces.get(&p.namespace).cloned().unwrap_or_default();
                labels.insert(NAMESPACE_NAME_LABEL.to_owned(), p.namespace.clone());
                labels_match(&rule.namespace_selector, &labels)
            };
            if ns_ok && labels_match(&rule.pod_selector, &p.labels) && ipv4_block(ip).is_some() {
                out.insert(format!("{ip}/32"));
            }
        }
    }
    out.into_iter().collect()
}

/// A `deny` policy in `namespace` resolved against the cluster's pods: the IPv4 addresses of
/// the pods it selects (at most [`MAX_DENY_PODS`]; the second value counts those left out)
/// and each rule's peers as address blocks. `namespaces`: each namespace's labels.
pub fn resolve_deny(
    namespace: &str,
    spec: &GryviaFlowPolicySpec,
    a: &Addresses,
    namespaces: &BTreeMap<String, BTreeMap<String, String>>,
) -> (ResolvedDeny, usize) {
    let selected: Vec<String> = a
        .pods
        .iter()
        .filter(|(ip, p)| {
            p.namespace == namespace
                && labels_match(&spec.pod_selector, &p.labels)
                && ipv4_block(ip).is_some()
        })
        .map(|(ip, _)| ip.clone())
        .collect();
    let left_out = selected.len().saturating_sub(MAX_DENY_PODS);
    let rules = |rules: &[FlowRule]| -> Vec<ResolvedRule> {
        rules
            .iter()
            .map(|r| ResolvedRule {
                cidrs: rule_blocks(r, namespace, a, namespaces),
                ports: r.ports.clone(),
            })
            .collect()
    };
    (
        ResolvedDeny {
            pods: selected.into_iter().take(MAX_DENY_PODS).collect(),
            ingress: rules(&spec.ingress),
            egress: rules(&spec.egress),
        },
        left_out,
    )
}

/// One entry of a node's deny map, for the collector to load (`gryvia_ebpf::DenyEntry`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct DenyEntry {
    /// Traffic out of the pod (else into it).
    pub egress: bool,
    /// IP protocol number, 0 for any.
    pub protocol: u8,
    /// The pod's port (ingress) or the peer's (egress); 0 for any.
    pub port: u16,
    /// The pod's address.
    pub local: Ipv4Addr,
    /// The peer block's address.
    pub remote: Ipv4Addr,
    /// The peer block's prefix length.
    pub prefix: u8,
}

fn protocol_number(p: Protocol) -> u8 {
    match p {
        Protocol::TCP => 6,
        Protocol::UDP => 17,
        Protocol::SCTP => 132,
    }
}

/// The entries that enforce `deny` for the selected pods `local` says this node runs: one per
/// pod, rule, peer block and port (one for every port when the rule lists none).
pub fn deny_entries(deny: &ResolvedDeny, local: impl Fn(&str) -> bool) -> Vec<DenyEntry> {
    let mut out = BTreeSet::new();
    for pod in deny.pods.iter().filter(|p| local(p)) {
        let Ok(pod_ip) = pod.parse::<Ipv4Addr>() else {
            continue;
        };
        for (egress, rules) in [(false, &deny.ingress), (true, &deny.egress)] {
            for r in rules {
                for (remote, prefix) in r.cidrs.iter().filter_map(|c| ipv4_block(c)) {
                    let ports: Vec<(u8, u16)> = if r.ports.is_empty() {
                        vec![(0, 0)]
                    } else {
                        r.ports
                            .iter()
                            .filter_map(|p| {
                                Some((protocol_number(p.protocol), u16::try_from(p.port).ok()?))
                            })
                            .collect()
                    };
                    for (protocol, port) in ports {
                        out.insert(DenyEntry {
                            egress,
                            protocol,
                            port,
                            local: pod_ip,
                            remote,
                            prefix,
                        });
                    }
                }
            }
        }
    }
    out.into_iter().collect()
}

/// The deny policies among `policies` that carry resolved addresses, by `namespace/name`:
/// what a node's collector enforces.
pub fn deny_policies<'a>(
    policies: impl IntoIterator<Item = &'a GryviaFlowPolicy>,
) -> BTreeMap<String, ResolvedDeny> {
    policies
        .into_iter()
        .filter(|p| p.spec.action == FlowAction::Deny)
        .filter_map(|p| {
            let deny = p.status.as_ref()?.deny.clone()?;
            let key = format!(
                "{}/{}",
                p.metadata.namespace.as_deref().unwrap_or_default(),
                p.metadata.name.as_deref().unwrap_or_default()
            );
            Some((key, deny))
        })
        .collect()
}

/// Gives each of `keys` a drop-counter index below `max`, kept in `index` while the key stays:
/// a key that left frees its index, a new key takes the lowest free one. Returns the indexes
/// given out now (their counters must start at zero) and the keys left without one.
pub fn assign_counters<'a>(
    index: &mut BTreeMap<String, u32>,
    keys: impl IntoIterator<Item = &'a String>,
    max: u32,
) -> (Vec<u32>, Vec<String>) {
    let keys: BTreeSet<&String> = keys.into_iter().collect();
    index.retain(|k, _| keys.contains(k));
    let (mut fresh, mut without) = (Vec::new(), Vec::new());
    for key in keys {
        if index.contains_key(key) {
            continue;
        }
        let used: BTreeSet<u32> = index.values().copied().collect();
        match (0..max).find(|i| !used.contains(i)) {
            Some(i) => {
                index.insert(key.clone(), i);
                fresh.push(i);
            }
            None => without.push(key.clone()),
        }
    }
    (fresh, without)
}

/// Whether `selector` (a flow policy's or auto policy's pod selector in `namespace`) selects
/// the pod end `p`.
pub fn selects(namespace: &str, selector: &BTreeMap<String, String>, p: &Peer) -> bool {
    matches!(p, Peer::Pod { workload, labels }
        if workload.namespace == namespace && labels_match(selector, labels))
}

/// The name of a workload's suggested policy: `<auto policy>-<workload>`, cut to 63
/// characters.
pub fn suggestion_name(auto: &str, workload: &str) -> String {
    let mut n = format!("{auto}-{workload}");
    n.truncate(63);
    n.trim_end_matches(['-', '.']).to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::network::learn::allows;
    use gryvia_types::{FlowAction, FlowPort};

    fn addrs() -> Addresses {
        let pod = |ns: &str, w: &str, app: &str, node: &str| PodInfo {
            namespace: ns.into(),
            workload: w.into(),
            labels: BTreeMap::from([
                ("app".to_owned(), app.to_owned()),
                ("pod-template-hash".to_owned(), "abc".to_owned()),
            ]),
            node: node.into(),
        };
        Addresses {
            pods: BTreeMap::from([
                ("10.0.1.5".to_owned(), pod("ml", "trainer", "trainer", "n1")),
                ("10.0.1.6".to_owned(), pod("ml", "trainer", "trainer", "n2")),
                ("10.0.2.7".to_owned(), pod("ml", "store", "store", "n2")),
                ("10.0.3.8".to_owned(), pod("data", "cache", "cache", "n1")),
            ]),
            services: BTreeSet::from(["10.96.0.10".to_owned()]),
        }
    }

    fn record(src: &str, sport: i32, dst: &str, dport: i32) -> FlowRecord {
        serde_json::from_value(serde_json::json!({
            "srcIp": src, "srcPort": sport, "dstIp": dst, "dstPort": dport,
            "protocol": "TCP", "txBytes": 10, "rxBytes": 10
        }))
        .unwrap()
    }

    fn spec(action: FlowAction, egress: Vec<FlowRule>) -> GryviaFlowPolicySpec {
        GryviaFlowPolicySpec {
            pod_selector: BTreeMap::from([("app".to_owned(), "trainer".to_owned())]),
            action,
            ingress: vec![],
            egress,
        }
    }

    fn to_app(app: &str, port: i32) -> FlowRule {
        FlowRule {
            pod_selector: BTreeMap::from([("app".to_owned(), app.to_owned())]),
            ports: vec![FlowPort {
                port,
                protocol: Protocol::TCP,
            }],
            ..FlowRule::default()
        }
    }

    #[test]
    fn a_record_is_a_flow_from_its_client_and_a_service_address_is_left_to_the_backend() {
        let a = addrs();
        let f = flow_of("n1", &record("10.0.1.5", 40000, "10.0.2.7", 9000), &a).unwrap();
        assert!(
            matches!(&f.from, Peer::Pod { workload, .. } if workload.selector["app"] == "trainer")
        );
        assert_eq!(f.port, 9000);
        // The server's side of the same flow gives the same flow.
        let g = flow_of("n2", &record("10.0.2.7", 9000, "10.0.1.5", 40000), &a).unwrap();
        assert_eq!(f, g);
        // The workload selector leaves the revision label out.
        assert!(
            matches!(&g.to, Peer::Pod { workload, .. } if !workload.selector.contains_key("pod-template-hash"))
        );
        assert_eq!(
            flow_of("n1", &record("10.0.1.5", 40000, "10.96.0.10", 53), &a),
            None
        );
        // Another node's pod address as the local end: not this node's record.
        assert_eq!(
            flow_of("n1", &record("10.0.2.7", 9000, "10.0.1.5", 40000), &a),
            None
        );
        let out = flow_of("n1", &record("10.0.1.5", 40001, "203.0.113.9", 443), &a).unwrap();
        assert_eq!(out.to, Peer::Address("203.0.113.9".into()));
    }

    #[test]
    fn an_allow_policy_compiles_to_a_network_policy_with_kubernetes_peer_semantics() {
        let a = addrs();
        let s = spec(FlowAction::Allow, vec![to_app("store", 9000)]);
        let np = compile("p", "ml", &s);
        let ok = flow_of("n1", &record("10.0.1.5", 40000, "10.0.2.7", 9000), &a).unwrap();
        assert!(allows(std::slice::from_ref(&np), &ok));
        let wrong_port = flow_of("n1", &record("10.0.1.5", 40000, "10.0.2.7", 22), &a).unwrap();
        assert!(!allows(std::slice::from_ref(&np), &wrong_port));
        // A pod selector alone names the policy's namespace: the cache in `data` is not "store"
        // anyway, and a cidr rule lets an address through.
        let mut s2 = s.clone();
        s2.egress.push(FlowRule {
            cidrs: vec!["203.0.113.0/24".into()],
            ..FlowRule::default()
        });
        let np2 = compile("p", "ml", &s2);
        let out = flow_of("n1", &record("10.0.1.5", 40001, "203.0.113.9", 443), &a).unwrap();
        assert!(!allows(std::slice::from_ref(&np), &out));
        assert!(allows(std::slice::from_ref(&np2), &out));
        let spec = np.spec.unwrap();
        assert_eq!(
            spec.policy_types.unwrap(),
            ["Ingress".to_owned(), "Egress".to_owned()]
        );
        assert_eq!(spec.ingress.unwrap().len(), 0, "nothing may come in");
    }

    #[test]
    fn a_deny_policy_resolves_to_the_selected_pods_and_its_peers_addresses() {
        let a = addrs();
        let ns = BTreeMap::from([(
            "data".to_owned(),
            BTreeMap::from([("team".to_owned(), "data".to_owned())]),
        )]);
        let rule = FlowRule {
            namespace_selector: BTreeMap::from([("team".to_owned(), "data".to_owned())]),
            ..FlowRule::default()
        };
        let (d, left_out) = resolve_deny("ml", &spec(FlowAction::Deny, vec![rule]), &a, &ns);
        assert_eq!(left_out, 0);
        assert_eq!(d.pods, ["10.0.1.5", "10.0.1.6"]);
        assert_eq!(d.egress[0].cidrs, ["10.0.3.8/32"]);
        // A rule without peers or ports denies everything; by port otherwise.
        let (d, _) = resolve_deny(
            "ml",
            &spec(
                FlowAction::Deny,
                vec![FlowRule::default(), to_app("store", 9000)],
            ),
            &a,
            &ns,
        );
        assert_eq!(d.egress[0].cidrs, ["0.0.0.0/0"]);
        assert_eq!(d.egress[1].cidrs, ["10.0.2.7/32"]);
        // Entries for the pods of n1 only.
        let on_n1 = |ip: &str| a.pods.get(ip).is_some_and(|p| p.node == "n1");
        let e = deny_entries(&d, on_n1);
        assert_eq!(e.len(), 2);
        assert!(
            e.iter()
                .all(|e| e.local == Ipv4Addr::new(10, 0, 1, 5) && e.egress)
        );
        assert!(e.contains(&DenyEntry {
            egress: true,
            protocol: 0,
            port: 0,
            local: Ipv4Addr::new(10, 0, 1, 5),
            remote: Ipv4Addr::UNSPECIFIED,
            prefix: 0,
        }));
        assert!(e.contains(&DenyEntry {
            egress: true,
            protocol: 6,
            port: 9000,
            local: Ipv4Addr::new(10, 0, 1, 5),
            remote: Ipv4Addr::new(10, 0, 2, 7),
            prefix: 32,
        }));
    }

    #[test]
    fn a_policy_keeps_its_drop_counter_and_a_new_one_takes_the_lowest_free() {
        let keys = |ks: &[&str]| ks.iter().map(|k| (*k).to_owned()).collect::<Vec<_>>();
        let mut index = BTreeMap::new();
        let (fresh, without) = assign_counters(&mut index, &keys(&["ml/a", "ml/b", "ml/c"]), 8);
        assert_eq!((index["ml/a"], index["ml/b"], index["ml/c"]), (0, 1, 2));
        assert_eq!((fresh, without.len()), (vec![0, 1, 2], 0));
        // b goes, d comes: a and c keep theirs, d takes b's (to be zeroed before its first load).
        let (fresh, _) = assign_counters(&mut index, &keys(&["ml/a", "ml/c", "ml/d"]), 8);
        assert_eq!((index["ml/a"], index["ml/c"], index["ml/d"]), (0, 2, 1));
        assert_eq!(fresh, [1]);
        assert!(!index.contains_key("ml/b"));
        // No counter left: the new key is named.
        let (_, without) = assign_counters(&mut index, &keys(&["ml/a", "ml/c", "ml/d", "ml/e"]), 3);
        assert_eq!(without, ["ml/e"]);
    }

    #[test]
    fn a_kept_flow_replays_as_the_flow_it_was() {
        let a = addrs();
        let f = flow_of("n1", &record("10.0.1.5", 40000, "10.0.2.7", 9000), &a).unwrap();
        let kept = learned(&f, |_| Some("trainer".into()));
        assert_eq!(kept.from.workload.as_deref(), Some("trainer"));
        let back = replayed(&kept);
        assert_eq!((back.port, back.protocol), (9000, Protocol::TCP));
        assert!(matches!(back.to, Peer::Pod { ref workload, .. } if workload.namespace == "ml"));
        assert_eq!(
            suggestion_name("auto", &"w".repeat(80)).len(),
            63,
            "names fit a label value"
        );
    }
}
