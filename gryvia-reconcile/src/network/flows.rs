//! A collector's flow records resolved to the cluster's workloads: which end is the client,
//! which workload (or Service, or outside address) each end is, and whether this record is the
//! one to count. Pure: the operator builds the [`Directory`] from its caches.
//!
//! Both ends' collectors see a flow between two pods. It counts once, from the client's node
//! when that node reports (has a GryviaFlowAggregate), else from the server's. The collector
//! records a flow from its own side (`src` is the local socket) without saying who connected,
//! so the server is told by its port: the peer is the server when its address is a Service's;
//! otherwise the end whose port is below Linux's ephemeral range (32768) when only one is,
//! and the lower port when both or neither are.

use std::collections::{BTreeMap, BTreeSet};

use gryvia_types::k8s_openapi::api::core::v1::Service;
use gryvia_types::{CachedPod, FlowRecord};

/// First port of Linux's default ephemeral range (`net.ipv4.ip_local_port_range`).
pub const EPHEMERAL: i32 = 32768;

/// Label of a Gryvia job's pods: their workload is the job.
pub const JOB_LABEL: &str = "gryvia.io/job-name";

/// What the directory knows of a pod.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodEntry {
    /// Its workload, `namespace/name`.
    pub workload: String,
    /// Its node.
    pub node: String,
}

/// The cluster's addresses: pods by IP, Services by cluster IP, and the nodes whose collectors
/// report.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Directory {
    /// Pods by IP (host-network pods left out: their IP is the node's).
    pub pods: BTreeMap<String, PodEntry>,
    /// Services by cluster IP, `namespace/name`.
    pub services: BTreeMap<String, String>,
    /// Nodes with a GryviaFlowAggregate.
    pub reporting: BTreeSet<String>,
}

/// One end of a resolved flow.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum End {
    /// A pod, by workload.
    Workload(String),
    /// A Service's cluster IP, `namespace/name`.
    Service(String),
    /// An address no pod or Service has: `external/<ip>`.
    External(String),
}

impl End {
    /// The end as a graph node: `namespace/name` or `external/<ip>`.
    pub fn name(&self) -> &str {
        match self {
            End::Workload(w) | End::Service(w) | End::External(w) => w,
        }
    }
}

/// A flow record resolved: client, server, the server's port, bytes both ways and
/// retransmissions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resolved {
    /// The end that connected.
    pub client: End,
    /// The end that was connected to.
    pub server: End,
    /// The server's port.
    pub port: u16,
    /// Bytes both ways.
    pub bytes: i64,
    /// Retransmitted segments.
    pub retransmits: i64,
}

/// The workload of a pod: its Gryvia job (label `gryvia.io/job-name`), else its controller's
/// name (a ReplicaSet's without the `pod-template-hash` suffix, which is its Deployment's), else
/// the pod's own name; in its namespace.
pub fn workload_of(
    namespace: &str,
    name: &str,
    labels: &BTreeMap<String, String>,
    controller: Option<(&str, &str)>,
) -> String {
    if let Some(job) = labels.get(JOB_LABEL) {
        return format!("{namespace}/{job}");
    }
    let owner = match controller {
        Some(("ReplicaSet", rs)) => labels
            .get("pod-template-hash")
            .and_then(|h| rs.strip_suffix(&format!("-{h}")))
            .unwrap_or(rs),
        Some((_, owner)) => owner,
        None => name,
    };
    format!("{namespace}/{owner}")
}

/// A pod's controller, kind and name.
pub fn controller_of(p: &CachedPod) -> Option<(&str, &str)> {
    p.metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))
        .map(|o| (o.kind.as_str(), o.name.as_str()))
}

/// The directory of `pods` (those with an address of their own), the cluster IPs of
/// `services`, and the `reporting` nodes.
pub fn directory<'a>(
    pods: impl IntoIterator<Item = &'a CachedPod>,
    services: impl IntoIterator<Item = &'a Service>,
    reporting: impl IntoIterator<Item = String>,
) -> Directory {
    let mut d = Directory::default();
    for p in pods {
        let Some(ip) = p.pod_ip.clone() else {
            continue;
        };
        let ns = p.metadata.namespace.as_deref().unwrap_or_default();
        let name = p.metadata.name.as_deref().unwrap_or_default();
        let labels = p.metadata.labels.clone().unwrap_or_default();
        d.pods.insert(
            ip,
            PodEntry {
                workload: workload_of(ns, name, &labels, controller_of(p)),
                node: p.node_name.clone().unwrap_or_default(),
            },
        );
    }
    for s in services {
        let Some(ip) = s.spec.as_ref().and_then(|s| s.cluster_ip.clone()) else {
            continue;
        };
        if ip.is_empty() || ip == "None" {
            continue;
        }
        let ns = s.metadata.namespace.as_deref().unwrap_or_default();
        let name = s.metadata.name.as_deref().unwrap_or_default();
        d.services.insert(ip, format!("{ns}/{name}"));
    }
    d.reporting = reporting.into_iter().collect();
    d
}

fn end(ip: &str, dir: &Directory) -> End {
    if let Some(p) = dir.pods.get(ip) {
        End::Workload(p.workload.clone())
    } else if let Some(s) = dir.services.get(ip) {
        End::Service(s.clone())
    } else {
        End::External(format!("external/{ip}"))
    }
}

/// Whether the local end (port `local`) is the client against a peer on port `peer`.
pub fn local_is_client(local: i32, peer: i32, peer_is_service: bool) -> bool {
    if peer_is_service {
        return true;
    }
    match (local >= EPHEMERAL, peer >= EPHEMERAL) {
        (true, false) => true,
        (false, true) => false,
        _ => local > peer,
    }
}

/// `record`, seen by the collector of `node`, resolved; `None` when the other end's collector
/// counts it (see the module's rule) or the record is not a flow of the local end (a local
/// address the directory gives another node's pod).
pub fn resolve(node: &str, record: &FlowRecord, dir: &Directory) -> Option<Resolved> {
    let local = match (&record.pod, dir.pods.get(&record.src_ip)) {
        (_, Some(p)) if p.node != node => return None,
        (_, Some(p)) => End::Workload(p.workload.clone()),
        (Some(pod), None) => End::Workload(pod.clone()),
        (None, None) => End::External(format!("external/{}", record.src_ip)),
    };
    let peer = end(&record.dst_ip, dir);
    let client_is_local = local_is_client(
        record.src_port,
        record.dst_port,
        matches!(peer, End::Service(_)),
    );
    if !client_is_local {
        // The server's side: counted here only when the client's node does not report.
        if let Some(p) = dir.pods.get(&record.dst_ip)
            && dir.reporting.contains(&p.node)
        {
            return None;
        }
    }
    let (client, server, port) = if client_is_local {
        (local, peer, record.dst_port)
    } else {
        (peer, local, record.src_port)
    };
    Some(Resolved {
        client,
        server,
        port: u16::try_from(port).unwrap_or(0),
        bytes: record
            .tx_bytes
            .max(0)
            .saturating_add(record.rx_bytes.max(0)),
        retransmits: record.retransmits.max(0),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use gryvia_types::Protocol;

    fn record(src: (&str, i32), dst: (&str, i32), tx: i64, rx: i64) -> FlowRecord {
        FlowRecord {
            src_ip: src.0.into(),
            src_port: src.1,
            dst_ip: dst.0.into(),
            dst_port: dst.1,
            protocol: Protocol::TCP,
            tx_bytes: tx,
            rx_bytes: rx,
            retransmits: 2,
            pod: None,
        }
    }

    fn dir() -> Directory {
        let pod = |w: &str, n: &str| PodEntry {
            workload: w.into(),
            node: n.into(),
        };
        Directory {
            pods: BTreeMap::from([
                ("10.0.1.5".into(), pod("ml/trainer", "node-a")),
                ("10.0.2.7".into(), pod("ml/store", "node-b")),
                ("10.0.3.9".into(), pod("ml/cache", "node-c")),
            ]),
            services: BTreeMap::from([("10.96.0.20".into(), "ml/store-svc".into())]),
            reporting: BTreeSet::from(["node-a".into(), "node-b".into()]),
        }
    }

    #[test]
    fn a_flow_between_two_reporting_nodes_counts_once_from_the_client() {
        let d = dir();
        let client = resolve(
            "node-a",
            &record(("10.0.1.5", 45000), ("10.0.2.7", 9000), 1000, 200),
            &d,
        )
        .unwrap();
        assert_eq!(
            client,
            Resolved {
                client: End::Workload("ml/trainer".into()),
                server: End::Workload("ml/store".into()),
                port: 9000,
                bytes: 1200,
                retransmits: 2,
            }
        );
        // The server's collector sees the same connection the other way: not counted again.
        let server_side = record(("10.0.2.7", 9000), ("10.0.1.5", 45000), 200, 1000);
        assert_eq!(resolve("node-b", &server_side, &d), None);
        // Unless the client's node does not report.
        let mut quiet = d.clone();
        quiet.reporting.remove("node-a");
        assert_eq!(resolve("node-b", &server_side, &quiet), Some(client));
    }

    #[test]
    fn services_outside_addresses_and_ports_decide_the_ends() {
        let d = dir();
        let to_service = resolve(
            "node-a",
            &record(("10.0.1.5", 9000), ("10.96.0.20", 8080), 10, 0),
            &d,
        )
        .unwrap();
        assert_eq!(to_service.server, End::Service("ml/store-svc".into()));
        assert_eq!(to_service.port, 8080);
        let outside = resolve(
            "node-a",
            &record(("10.0.1.5", 51000), ("8.8.8.8", 443), 5, 5),
            &d,
        )
        .unwrap();
        assert_eq!(outside.server.name(), "external/8.8.8.8");
        // An outside client of a local server.
        let inbound = resolve(
            "node-b",
            &record(("10.0.2.7", 9000), ("1.2.3.4", 60000), 7, 3),
            &d,
        )
        .unwrap();
        assert_eq!(
            (inbound.client.name(), inbound.server.name(), inbound.port),
            ("external/1.2.3.4", "ml/store", 9000)
        );
        // Both ephemeral (NCCL listens on one): the lower port is the server.
        let nccl = resolve(
            "node-c",
            &record(("10.0.3.9", 45001), ("10.0.1.5", 51234), 1, 1),
            &d,
        );
        // node-a (the client, port 51234) reports: counted there.
        assert_eq!(nccl, None);
        // A record of an address that is another node's pod is not this node's.
        assert_eq!(
            resolve(
                "node-b",
                &record(("10.0.1.5", 45000), ("8.8.8.8", 53), 1, 1),
                &d
            ),
            None
        );
    }

    #[test]
    fn the_directory_holds_pods_with_an_address_and_services_with_a_cluster_ip() {
        let pod = |name: &str, ip: Option<&str>| -> CachedPod {
            let mut p: CachedPod = serde_json::from_value(serde_json::json!({
                "metadata": {"name": name, "namespace": "web", "labels": {"pod-template-hash": "7d9f"},
                             "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                                                  "name": "api-7d9f", "uid": "u", "controller": true}]},
                "spec": {"nodeName": "node-a"}
            }))
            .unwrap();
            p.pod_ip = ip.map(str::to_owned);
            p
        };
        let svc = |name: &str, ip: &str| -> Service {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": name, "namespace": "web"}, "spec": {"clusterIP": ip}
            }))
            .unwrap()
        };
        let (pods, services) = (
            [pod("api-7d9f-x", Some("10.0.0.3")), pod("pending", None)],
            [svc("api", "10.96.0.9"), svc("headless", "None")],
        );
        let d = directory(&pods, &services, ["node-a".to_owned()]);
        assert_eq!(
            d.pods,
            BTreeMap::from([(
                "10.0.0.3".to_owned(),
                PodEntry {
                    workload: "web/api".into(),
                    node: "node-a".into()
                }
            )])
        );
        assert_eq!(
            d.services,
            BTreeMap::from([("10.96.0.9".to_owned(), "web/api".to_owned())])
        );
        assert!(d.reporting.contains("node-a"));
    }

    #[test]
    fn a_pods_workload_is_its_job_its_deployment_or_its_owner() {
        let labels = |kv: &[(&str, &str)]| -> BTreeMap<String, String> {
            kv.iter().map(|(k, v)| ((*k).into(), (*v).into())).collect()
        };
        assert_eq!(
            workload_of(
                "ml",
                "t-0",
                &labels(&[(JOB_LABEL, "train")]),
                Some(("Job", "x"))
            ),
            "ml/train"
        );
        assert_eq!(
            workload_of(
                "web",
                "api-7d9f-abcde",
                &labels(&[("pod-template-hash", "7d9f")]),
                Some(("ReplicaSet", "api-7d9f"))
            ),
            "web/api"
        );
        assert_eq!(
            workload_of("db", "pg-0", &labels(&[]), Some(("StatefulSet", "pg"))),
            "db/pg"
        );
        assert_eq!(workload_of("x", "lonely", &labels(&[]), None), "x/lonely");
    }
}
