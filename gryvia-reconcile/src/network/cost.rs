//! Network cost (GryviaNetworkCost): bytes that cross zones (`topology.kubernetes.io/zone` of
//! the two ends' nodes) and bytes that leave the cluster, priced per GiB and attributed to the
//! group (tenant, job or service) of the pod that sent or received them inside the cluster.
//! Pure, in integer micro-units of the currency: a sum of prices never drifts.
//!
//! Who pays: each pod end of a cross-zone transfer pays for the bytes both ways, as clouds bill
//! both sides of an inter-zone transfer; a pod pays egress for the bytes it sent out of the
//! cluster (what comes in is free). A node's own traffic (host network) is counted by zone but
//! charged to no group.
//!
//! Which record counts ([`transfer`]): both nodes' collectors see a flow between two pods, and
//! the client's collector sees a Service's cluster IP, not the pod behind it. So a flow counts
//! from the server's node (which sees both pods' addresses) when it reports, and from the
//! client's only when its peer is outside the cluster, a node, or a pod whose node does not
//! report. Traffic through a Service whose backend's node runs no collector is not counted.

use std::collections::{BTreeMap, BTreeSet};

use gryvia_types::k8s_openapi::api::core::v1::{Node, Service};
use gryvia_types::k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use gryvia_types::money::{Decimal, MICROS};
use gryvia_types::{
    CachedPod, CostGrouping, FlowRecord, GryviaFlowAggregateStatus, GryviaNetworkCost,
    GryviaNetworkCostSpec, GryviaNetworkCostStatus, GryviaUsageRecord, GryviaUsageRecordSpec,
    NamespaceTransfer, NetworkCostEntry, NetworkHour, NetworkUsage, WorkloadRef, ZoneBytes,
    ZonePairBytes,
};

use super::flows::{JOB_LABEL, local_is_client};
use crate::Timestamp;

/// Bytes in a GiB.
pub const GIB: i128 = 1 << 30;

/// The node label that names its zone.
pub const ZONE_LABEL: &str = "topology.kubernetes.io/zone";

/// How long after its end an hour's usage records are final: a window that ends in it and
/// comes later is counted in the hour it came in.
pub const CLOSE_AFTER: i64 = 120;

/// How long a closed hour stays in the status (its final records are written again from it
/// until then, which changes nothing).
pub const KEEP_CLOSED: i64 = 2 * 3600;

/// The group of traffic that no pod group claims.
pub const UNATTRIBUTED: &str = "unattributed";

/// The groups a pod's traffic is attributed to (those it has).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Groups {
    /// Its namespace.
    pub namespace: String,
    /// Its tenant: its namespace's `gryvia.io/tenant` label, else the namespace's own name
    /// (as metering books it).
    pub team: Option<String>,
    /// Its job (GryviaAIJob), `namespace/name`.
    pub job: Option<String>,
    /// A Service that selects it (the first by name), `namespace/name`.
    pub service: Option<String>,
}

impl Groups {
    /// The group of `grouping`.
    pub fn of(&self, grouping: CostGrouping) -> Option<&str> {
        match grouping {
            CostGrouping::Team => self.team.as_deref(),
            CostGrouping::Job => self.job.as_deref(),
            CostGrouping::Service => self.service.as_deref(),
        }
    }
}

/// Where one end of a flow is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum End {
    /// A pod of the cluster: its groups and its node's zone (empty when the node has none).
    Pod {
        /// The pod's groups.
        groups: Groups,
        /// Its node's zone.
        zone: String,
    },
    /// A node's own address (host network): its zone.
    Node {
        /// The node's zone.
        zone: String,
    },
    /// Outside the cluster.
    External,
}

/// One flow's bytes between two ends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transfer {
    /// The end whose collector saw it.
    pub local: End,
    /// The other end.
    pub remote: End,
    /// Bytes the local end sent.
    pub sent: i64,
    /// Bytes the local end received.
    pub received: i64,
}

impl Transfer {
    fn both_ways(&self) -> i64 {
        self.sent.max(0).saturating_add(self.received.max(0))
    }
}

/// What a transfer counts as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Crossing {
    /// Within one zone (or an end without a zone): free.
    Local,
    /// Between two zones.
    CrossZone,
    /// Between the cluster and outside.
    Egress,
}

fn zone(e: &End) -> Option<&str> {
    match e {
        End::Pod { zone, .. } | End::Node { zone } if !zone.is_empty() => Some(zone),
        _ => None,
    }
}

/// What `t` crosses.
pub fn crossing(t: &Transfer) -> Crossing {
    match (&t.local, &t.remote) {
        (End::External, End::External) => Crossing::Local,
        (End::External, _) | (_, End::External) => Crossing::Egress,
        (a, b) => match (zone(a), zone(b)) {
            (Some(x), Some(y)) if x != y => Crossing::CrossZone,
            _ => Crossing::Local,
        },
    }
}

/// The price of `bytes` at `per_gib` micro-units per GiB, in micro-units (rounded half up).
pub fn price(bytes: i64, per_gib_micros: i64) -> i64 {
    let p = (i128::from(bytes.max(0)) * i128::from(per_gib_micros.max(0)) + GIB / 2) / GIB;
    i64::try_from(p).unwrap_or(i64::MAX)
}

/// Bytes one pod end of a transfer pays for: (egress, cross-zone).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Billed {
    /// Bytes it sent out of the cluster.
    pub egress: i64,
    /// Bytes it exchanged with another zone, both ways.
    pub cross_zone: i64,
}

impl Billed {
    fn add(&mut self, o: Billed) {
        self.egress = self.egress.saturating_add(o.egress);
        self.cross_zone = self.cross_zone.saturating_add(o.cross_zone);
    }

    fn micros(self, egress_price: i64, cross_price: i64) -> i64 {
        price(self.egress, egress_price).saturating_add(price(self.cross_zone, cross_price))
    }
}

/// The pod ends of `t` with what each pays.
pub fn payers(t: &Transfer) -> Vec<(&Groups, Billed)> {
    let crossing = crossing(t);
    let mut out = Vec::new();
    for (end, sent) in [(&t.local, t.sent), (&t.remote, t.received)] {
        let End::Pod { groups, .. } = end else {
            continue;
        };
        let billed = match crossing {
            Crossing::Local => continue,
            Crossing::Egress => Billed {
                egress: sent.max(0),
                cross_zone: 0,
            },
            Crossing::CrossZone => Billed {
                egress: 0,
                cross_zone: t.both_ways(),
            },
        };
        out.push((groups, billed));
    }
    out
}

/// The cost entries of `transfers`, one per group of `grouping`, sorted by name (bytes of
/// pods without such a group go to `unattributed`).
pub fn entries(
    transfers: &[Transfer],
    grouping: CostGrouping,
    egress_per_gib: &Decimal,
    cross_zone_per_gib: &Decimal,
) -> Vec<NetworkCostEntry> {
    let mut by: BTreeMap<String, Billed> = BTreeMap::new();
    for t in transfers {
        for (groups, billed) in payers(t) {
            charge(&mut by, grouping, groups, billed);
        }
    }
    priced(&by, egress_per_gib, cross_zone_per_gib)
}

/// Adds `billed` to the group of `groups` under `grouping` (`unattributed` without one).
fn charge(
    by: &mut BTreeMap<String, Billed>,
    grouping: CostGrouping,
    groups: &Groups,
    billed: Billed,
) {
    by.entry(groups.of(grouping).unwrap_or(UNATTRIBUTED).to_owned())
        .or_default()
        .add(billed);
}

/// The GryviaNetworkCost that writes the usage records: the first by name with
/// `spec.usageRecords`, those being deleted left out.
pub fn metering<'a>(costs: impl IntoIterator<Item = &'a GryviaNetworkCost>) -> Option<String> {
    costs
        .into_iter()
        .filter(|c| c.spec.usage_records && c.metadata.deletion_timestamp.is_none())
        .filter_map(|c| c.metadata.name.clone())
        .min()
}

fn priced(
    by: &BTreeMap<String, Billed>,
    egress_per_gib: &Decimal,
    cross_zone_per_gib: &Decimal,
) -> Vec<NetworkCostEntry> {
    let egress_price = egress_per_gib.micros().unwrap_or(0);
    let cross_price = cross_zone_per_gib.micros().unwrap_or(0);
    by.iter()
        .map(|(name, b)| NetworkCostEntry {
            name: name.clone(),
            egress_bytes: b.egress,
            cross_zone_bytes: b.cross_zone,
            cost: Decimal::from_micros(b.micros(egress_price, cross_price)),
        })
        .collect()
}

/// A cost in micro-units as a whole amount and cents, for one line of text.
pub fn describe(micros: i64) -> String {
    format!("{}.{:06}", micros / MICROS, micros % MICROS)
}

/// What the cost directory knows of a pod.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CostPod {
    /// Its groups.
    pub groups: Groups,
    /// Its node.
    pub node: String,
}

/// The cluster's addresses as network cost sees them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CostDirectory {
    /// Pods by IP (host-network pods left out: their IP is the node's).
    pub pods: BTreeMap<String, CostPod>,
    /// Services' cluster IPs.
    pub services: BTreeSet<String>,
    /// Nodes by address.
    pub nodes: BTreeMap<String, String>,
    /// Zones by node (nodes without the label left out).
    pub zones: BTreeMap<String, String>,
    /// Nodes with a GryviaFlowAggregate.
    pub reporting: BTreeSet<String>,
}

impl CostDirectory {
    fn zone_of(&self, node: &str) -> String {
        self.zones.get(node).cloned().unwrap_or_default()
    }

    fn pod_end(&self, p: &CostPod) -> End {
        End::Pod {
            groups: p.groups.clone(),
            zone: self.zone_of(&p.node),
        }
    }
}

/// The cost directory of `pods` (with an address of their own), `services` (cluster IPs, and
/// their selectors for the pods' service group), `nodes` (addresses and zones), the labels of
/// each namespace (for its tenant), and the `reporting` nodes.
pub fn cost_directory<'a>(
    pods: impl IntoIterator<Item = &'a CachedPod>,
    services: &[&Service],
    nodes: impl IntoIterator<Item = &'a Node>,
    namespace_labels: &BTreeMap<String, BTreeMap<String, String>>,
    reporting: impl IntoIterator<Item = String>,
) -> CostDirectory {
    let mut d = CostDirectory::default();
    let mut selecting: Vec<(&str, &str, &BTreeMap<String, String>)> = Vec::new();
    for s in services {
        let ns = s.metadata.namespace.as_deref().unwrap_or_default();
        let name = s.metadata.name.as_deref().unwrap_or_default();
        let spec = s.spec.as_ref();
        if let Some(ip) = spec.and_then(|s| s.cluster_ip.as_deref())
            && !ip.is_empty()
            && ip != "None"
        {
            d.services.insert(ip.to_owned());
        }
        if let Some(sel) = spec.and_then(|s| s.selector.as_ref())
            && !sel.is_empty()
        {
            selecting.push((ns, name, sel));
        }
    }
    selecting.sort_by_key(|(ns, name, _)| (*ns, *name));
    let empty = BTreeMap::new();
    for p in pods {
        let Some(ip) = p.pod_ip.clone() else {
            continue;
        };
        let ns = p.metadata.namespace.clone().unwrap_or_default();
        let labels = p.metadata.labels.as_ref().unwrap_or(&empty);
        let team = namespace_labels
            .get(&ns)
            .and_then(crate::facts::tenant_of_namespace)
            .unwrap_or_else(|| ns.clone());
        let service = selecting
            .iter()
            .find(|(sns, _, sel)| *sns == ns && crate::facts::labels_match(sel, labels))
            .map(|(sns, name, _)| format!("{sns}/{name}"));
        let groups = Groups {
            team: Some(team),
            job: labels.get(JOB_LABEL).map(|j| format!("{ns}/{j}")),
            service,
            namespace: ns,
        };
        let node = p.node_name.clone().unwrap_or_default();
        d.pods.insert(ip, CostPod { groups, node });
    }
    for n in nodes {
        let name = n.metadata.name.clone().unwrap_or_default();
        if let Some(z) = n.metadata.labels.as_ref().and_then(|l| l.get(ZONE_LABEL)) {
            d.zones.insert(name.clone(), z.clone());
        }
        for a in n
            .status
            .as_ref()
            .and_then(|s| s.addresses.as_ref())
            .into_iter()
            .flatten()
            .filter(|a| a.type_ == "InternalIP" || a.type_ == "ExternalIP")
        {
            d.nodes.insert(a.address.clone(), name.clone());
        }
    }
    d.reporting = reporting.into_iter().collect();
    d
}

/// `record`, seen by the collector of `node`, as a transfer; `None` when another collector
/// counts it (see the module's rule) or the local address is another node's pod's.
pub fn transfer(node: &str, record: &FlowRecord, dir: &CostDirectory) -> Option<Transfer> {
    let local = match dir.pods.get(&record.src_ip) {
        Some(p) if p.node != node => return None,
        Some(p) => dir.pod_end(p),
        None => End::Node {
            zone: dir.zone_of(node),
        },
    };
    let service = dir.services.contains(&record.dst_ip);
    let (remote, remote_node) = if let Some(p) = dir.pods.get(&record.dst_ip) {
        (dir.pod_end(p), Some(p.node.as_str()))
    } else if let Some(n) = dir.nodes.get(&record.dst_ip) {
        (
            End::Node {
                zone: dir.zone_of(n),
            },
            Some(n.as_str()),
        )
    } else if service {
        // Inside the cluster, behind a Service: the backend's node counts it.
        (
            End::Node {
                zone: String::new(),
            },
            None,
        )
    } else {
        (End::External, None)
    };
    if local_is_client(record.src_port, record.dst_port, service)
        && (service || remote_node.is_some_and(|n| dir.reporting.contains(n)))
    {
        return None;
    }
    Some(Transfer {
        local,
        remote,
        sent: record.tx_bytes.max(0),
        received: record.rx_bytes.max(0),
    })
}

/// The transfers of `aggregate`, written by `node`'s collector.
pub fn transfers(
    node: &str,
    aggregate: &GryviaFlowAggregateStatus,
    dir: &CostDirectory,
) -> Vec<Transfer> {
    aggregate
        .flows
        .iter()
        .filter_map(|r| transfer(node, r, dir))
        .collect()
}

/// One node's new window, as transfers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CostWindow {
    /// The node whose collector wrote it.
    pub node: String,
    /// The end of the window.
    pub end: Timestamp,
    /// Its transfers.
    pub transfers: Vec<Transfer>,
}

fn zone_key(a: &str, b: &str) -> (String, String) {
    if a <= b {
        (a.to_owned(), b.to_owned())
    } else {
        (b.to_owned(), a.to_owned())
    }
}

/// The start of the UTC hour `t` falls in.
pub fn hour_of(t: Timestamp) -> i64 {
    t.as_second().div_euclid(3600) * 3600
}

fn time(second: i64, or: Timestamp) -> Time {
    Time(Timestamp::from_second(second).unwrap_or(or))
}

/// The status after folding in each window newer than the last folded from its node: entries
/// per group (re-priced at the spec's prices), bytes by zone pair and egress by zone, and, when
/// `metering`, each namespace's billed bytes in the hour the window ended (or, when that
/// hour's records are final, the current hour), hours closed [`CLOSE_AFTER`] their end with
/// their amounts frozen. `updatedAt` moves only when something changed.
pub fn fold(
    current: &GryviaNetworkCostStatus,
    spec: &GryviaNetworkCostSpec,
    windows: &[CostWindow],
    metering: bool,
    now: Timestamp,
) -> GryviaNetworkCostStatus {
    let mut by: BTreeMap<String, Billed> = current
        .entries
        .iter()
        .map(|e| {
            let b = Billed {
                egress: e.egress_bytes,
                cross_zone: e.cross_zone_bytes,
            };
            (e.name.clone(), b)
        })
        .collect();
    let mut pairs: BTreeMap<(String, String), i64> = current
        .zone_pairs
        .iter()
        .map(|p| (zone_key(&p.from, &p.to), p.bytes))
        .collect();
    let mut egress: BTreeMap<String, i64> = current
        .egress_by_zone
        .iter()
        .map(|z| (z.zone.clone(), z.bytes))
        .collect();
    let mut hours = Hours::of(current, metering);
    let mut out = current.clone();
    for w in windows {
        if !super::newer(out.folded.get(&w.node), Some(&Time(w.end))) {
            continue;
        }
        out.folded.insert(w.node.clone(), Time(w.end));
        out.since.get_or_insert(Time(w.end));
        let hour = hours.target(hour_of(w.end), now);
        for t in &w.transfers {
            match crossing(t) {
                Crossing::Local => continue,
                Crossing::CrossZone => {
                    let key = zone_key(zone(&t.local).unwrap_or(""), zone(&t.remote).unwrap_or(""));
                    let e = pairs.entry(key).or_default();
                    *e = e.saturating_add(t.both_ways());
                }
                Crossing::Egress => {
                    let (inside, sent) = if t.remote == End::External {
                        (&t.local, t.sent)
                    } else {
                        (&t.remote, t.received)
                    };
                    let e = egress
                        .entry(zone(inside).unwrap_or("").to_owned())
                        .or_default();
                    *e = e.saturating_add(sent.max(0));
                }
            }
            for (groups, billed) in payers(t) {
                charge(&mut by, spec.group_by, groups, billed);
                hours.add(hour, groups, billed);
            }
        }
    }
    out.entries = priced(&capped(by), &spec.egress_per_gib, &spec.cross_zone_per_gib);
    out.total = (!out.entries.is_empty()).then(|| {
        Decimal::from_micros(
            out.entries
                .iter()
                .map(|e| e.cost.micros().unwrap_or(0))
                .fold(0_i64, i64::saturating_add),
        )
    });
    out.zone_pairs = pairs
        .into_iter()
        .map(|((from, to), bytes)| ZonePairBytes { from, to, bytes })
        .collect();
    out.egress_by_zone = egress
        .into_iter()
        .map(|(zone, bytes)| ZoneBytes { zone, bytes })
        .collect();
    out.hours = hours.finish(spec, now);
    out.updated_at.clone_from(&current.updated_at);
    if out != *current {
        out.updated_at = Some(Time(now));
    }
    out
}

/// The most entries a cost keeps: the groups with the most bytes, the others summed into
/// [`OTHERS`], so the status stays well under etcd's limit on an object however many jobs or
/// services there are.
pub const MAX_ENTRIES: usize = 500;

/// The entry of the groups left out of the [`MAX_ENTRIES`] (no tenant, job or Service can be
/// named so).
pub const OTHERS: &str = "(others)";

/// `by` with at most [`MAX_ENTRIES`] groups: those with the most bytes (egress and cross-zone
/// together), the rest summed into [`OTHERS`]; bytes are never lost.
fn capped(by: BTreeMap<String, Billed>) -> BTreeMap<String, Billed> {
    if by.len() <= MAX_ENTRIES {
        return by;
    }
    let mut all: Vec<(String, Billed)> = by.into_iter().collect();
    let weight = |b: &Billed| b.egress.saturating_add(b.cross_zone);
    // Heaviest first; (others) always goes to the rest; equal weights by name.
    all.sort_by(|a, b| {
        (a.0 == OTHERS)
            .cmp(&(b.0 == OTHERS))
            .then_with(|| weight(&b.1).cmp(&weight(&a.1)))
            .then_with(|| a.0.cmp(&b.0))
    });
    let rest = all.split_off(MAX_ENTRIES - 1);
    let mut out: BTreeMap<String, Billed> = all.into_iter().collect();
    let others = out.entry(OTHERS.to_owned()).or_default();
    for (_, b) in rest {
        others.add(b);
    }
    out
}

/// The hours of a status being folded: billed bytes per hour start and namespace.
struct Hours {
    open: BTreeMap<i64, BTreeMap<String, (String, Billed)>>,
    closed: Vec<NetworkHour>,
    on: bool,
}

impl Hours {
    fn of(status: &GryviaNetworkCostStatus, on: bool) -> Hours {
        let mut open = BTreeMap::new();
        let mut closed = Vec::new();
        for h in &status.hours {
            if h.closed {
                closed.push(h.clone());
                continue;
            }
            let ns = h
                .namespaces
                .iter()
                .map(|n| {
                    let b = Billed {
                        egress: n.egress_bytes,
                        cross_zone: n.cross_zone_bytes,
                    };
                    (n.namespace.clone(), (n.tenant.clone(), b))
                })
                .collect();
            open.insert(h.start.0.as_second(), ns);
        }
        Hours { open, closed, on }
    }

    /// The hour a window that ended in `hour` is booked to: its own, unless its records are
    /// final (or due to be), then the current one.
    fn target(&self, hour: i64, now: Timestamp) -> i64 {
        let final_ = self.closed.iter().any(|h| h.start.0.as_second() == hour)
            || now.as_second() >= hour + 3600 + CLOSE_AFTER;
        if final_ { hour_of(now) } else { hour }
    }

    fn add(&mut self, hour: i64, groups: &Groups, billed: Billed) {
        if !self.on || groups.namespace.is_empty() {
            return;
        }
        let tenant = groups
            .team
            .clone()
            .unwrap_or_else(|| groups.namespace.clone());
        self.open
            .entry(hour)
            .or_default()
            .entry(groups.namespace.clone())
            .or_insert_with(|| (tenant, Billed::default()))
            .1
            .add(billed);
    }

    fn finish(self, spec: &GryviaNetworkCostSpec, now: Timestamp) -> Vec<NetworkHour> {
        let egress_price = spec.egress_per_gib.micros().unwrap_or(0);
        let cross_price = spec.cross_zone_per_gib.micros().unwrap_or(0);
        let mut out: Vec<NetworkHour> = self
            .closed
            .into_iter()
            .filter(|h| now.as_second() < h.start.0.as_second() + 3600 + KEEP_CLOSED)
            .collect();
        for (start, namespaces) in self.open {
            out.push(NetworkHour {
                start: time(start, now),
                closed: now.as_second() >= start + 3600 + CLOSE_AFTER,
                namespaces: namespaces
                    .into_iter()
                    .map(|(namespace, (tenant, b))| NamespaceTransfer {
                        namespace,
                        tenant,
                        egress_bytes: b.egress,
                        cross_zone_bytes: b.cross_zone,
                        amount: Decimal::from_micros(b.micros(egress_price, cross_price)),
                    })
                    .collect(),
            });
        }
        out.sort_by_key(|h| h.start.0);
        out
    }
}

/// Label of a network usage record: the GryviaNetworkCost that wrote it.
pub const COST_LABEL: &str = "gryvia.io/network-cost";

/// The name of `cost`'s usage record of `namespace` for the hour starting at `hour`:
/// `net-<cost>-<namespace>-<yyyymmddhh>` (the cost's name cut to fit 253 characters; one
/// GryviaNetworkCost writes records, so a cut name meets no other).
pub fn record_name(cost: &str, namespace: &str, hour: i64) -> String {
    let stamp = Timestamp::from_second(hour)
        .map(|t| t.strftime("%Y%m%d%H").to_string())
        .unwrap_or_default();
    let room = 253 - "net---".len() - namespace.len() - stamp.len();
    let cost: String = cost.chars().take(room).collect();
    format!(
        "net-{}-{namespace}-{stamp}",
        cost.trim_end_matches(['-', '.'])
    )
}

/// The usage records of `status`'s hours: one per namespace and hour, open while the hour is,
/// for the tenant of the namespace, workload the GryviaNetworkCost `cost`.
pub fn usage_records(
    cost: &str,
    currency: &str,
    status: &GryviaNetworkCostStatus,
    now: Timestamp,
) -> Vec<GryviaUsageRecord> {
    let mut out = Vec::new();
    for h in &status.hours {
        let start = h.start.0.as_second();
        for n in &h.namespaces {
            let labels = BTreeMap::from([
                (gryvia_types::labels::TENANT.to_owned(), n.tenant.clone()),
                (COST_LABEL.to_owned(), cost.to_owned()),
            ]);
            out.push(GryviaUsageRecord {
                metadata: ObjectMeta {
                    name: Some(record_name(cost, &n.namespace, start)),
                    labels: Some(labels),
                    ..ObjectMeta::default()
                },
                spec: GryviaUsageRecordSpec {
                    tenant: n.tenant.clone(),
                    namespace: n.namespace.clone(),
                    workload: WorkloadRef {
                        kind: "GryviaNetworkCost".to_owned(),
                        name: cost.to_owned(),
                        uid: None,
                    },
                    sku: String::new(),
                    gpu_count: 0,
                    start_time: h.start.clone(),
                    end_time: h.closed.then(|| time(start + 3600, now)),
                    template: None,
                    discount_percent: None,
                    network: Some(NetworkUsage {
                        egress_bytes: n.egress_bytes,
                        cross_zone_bytes: n.cross_zone_bytes,
                        amount: n.amount.clone(),
                        currency: currency.to_owned(),
                    }),
                },
                status: None,
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use gryvia_types::Protocol;

    fn pod(team: &str, zone: &str) -> End {
        End::Pod {
            groups: Groups {
                namespace: team.to_owned(),
                team: Some(team.to_owned()),
                ..Groups::default()
            },
            zone: zone.to_owned(),
        }
    }

    fn d(s: &str) -> Decimal {
        Decimal::parse(s).unwrap()
    }

    fn tr(local: End, remote: End, sent: i64, received: i64) -> Transfer {
        Transfer {
            local,
            remote,
            sent,
            received,
        }
    }

    const GIB_BYTES: i64 = 1 << 30;

    #[test]
    fn cross_zone_and_egress_bytes_are_priced_per_gib_by_team() {
        let gib = GIB_BYTES;
        let transfers = [
            // ml-a and ml-b across zones: each side pays for both ways (2 GiB).
            tr(pod("ml-a", "z1"), pod("ml-b", "z2"), gib, gib),
            // ml-a sends 1 GiB out and receives 5 GiB (free).
            tr(pod("ml-a", "z1"), End::External, gib, 5 * gib),
            // Same zone: free.
            tr(pod("ml-a", "z1"), pod("ml-a", "z1"), 50 * gib, 0),
            // A node without a zone: not known to cross.
            tr(
                pod("ml-b", "z2"),
                End::Node {
                    zone: String::new(),
                },
                gib,
                0,
            ),
        ];
        let e = entries(&transfers, CostGrouping::Team, &d("0.09"), &d("0.01"));
        assert_eq!(e.len(), 2);
        assert_eq!(
            (e[0].name.as_str(), e[0].egress_bytes, e[0].cross_zone_bytes),
            ("ml-a", gib, 2 * gib)
        );
        assert_eq!(e[0].cost, d("0.11"));
        assert_eq!(
            (e[1].name.as_str(), e[1].egress_bytes, e[1].cross_zone_bytes),
            ("ml-b", 0, 2 * gib)
        );
        assert_eq!(e[1].cost, d("0.02"));
    }

    #[test]
    fn both_pods_of_one_group_across_zones_pay_each_side() {
        let t = tr(pod("ml", "z1"), pod("ml", "z2"), 100, 20);
        let e = entries(&[t], CostGrouping::Team, &d("0"), &d("1"));
        assert_eq!(e[0].cross_zone_bytes, 240);
    }

    #[test]
    fn pods_without_the_group_are_unattributed() {
        let t = tr(
            End::Pod {
                groups: Groups::default(),
                zone: "z1".into(),
            },
            End::External,
            10,
            0,
        );
        let e = entries(&[t], CostGrouping::Job, &d("1"), &d("1"));
        assert_eq!(e[0].name, "unattributed");
    }

    #[test]
    fn prices_round_half_up_in_micro_units() {
        assert_eq!(price(1 << 30, 90_000), 90_000);
        assert_eq!(price(1, 1_000_000), 0);
        assert_eq!(price(1 << 29, 1), 1);
        assert_eq!(price(-5, 10), 0);
        assert_eq!(describe(110_000), "0.110000");
    }

    #[test]
    fn what_crosses_what() {
        let c = |a: End, b: End| crossing(&tr(a, b, 1, 0));
        assert_eq!(c(pod("a", "z1"), pod("b", "z2")), Crossing::CrossZone);
        assert_eq!(
            c(pod("a", "z1"), End::Node { zone: "z2".into() }),
            Crossing::CrossZone
        );
        assert_eq!(c(End::External, pod("a", "z1")), Crossing::Egress);
        assert_eq!(c(pod("a", ""), pod("b", "z2")), Crossing::Local);
    }

    fn record(src: (&str, i32), dst: (&str, i32), tx: i64, rx: i64) -> FlowRecord {
        FlowRecord {
            src_ip: src.0.into(),
            src_port: src.1,
            dst_ip: dst.0.into(),
            dst_port: dst.1,
            protocol: Protocol::TCP,
            tx_bytes: tx,
            rx_bytes: rx,
            retransmits: 0,
            pod: None,
        }
    }

    fn dir() -> CostDirectory {
        let p = |ns: &str, node: &str| CostPod {
            groups: Groups {
                namespace: ns.into(),
                team: Some(ns.into()),
                ..Groups::default()
            },
            node: node.into(),
        };
        CostDirectory {
            pods: BTreeMap::from([
                ("10.0.1.5".into(), p("ml-a", "node-a")),
                ("10.0.2.7".into(), p("ml-b", "node-b")),
                ("10.0.3.9".into(), p("ml-c", "node-c")),
            ]),
            services: BTreeSet::from(["10.96.0.20".into()]),
            nodes: BTreeMap::from([("192.168.0.2".into(), "node-b".into())]),
            zones: BTreeMap::from([
                ("node-a".into(), "z1".into()),
                ("node-b".into(), "z2".into()),
                ("node-c".into(), "z2".into()),
            ]),
            reporting: BTreeSet::from(["node-a".into(), "node-b".into()]),
        }
    }

    #[test]
    fn a_flow_counts_from_the_servers_node_which_sees_past_the_service() {
        let d = dir();
        // The client's side to the server's pod, and to its Service: the server counts both.
        let direct = record(("10.0.1.5", 45000), ("10.0.2.7", 9000), 700, 300);
        assert_eq!(transfer("node-a", &direct, &d), None);
        let via = record(("10.0.1.5", 45001), ("10.96.0.20", 80), 700, 300);
        assert_eq!(transfer("node-a", &via, &d), None);
        // The server's side (it sees the client's pod address, past the Service).
        let server = record(("10.0.2.7", 9000), ("10.0.1.5", 45001), 300, 700);
        let t = transfer("node-b", &server, &d).unwrap();
        assert_eq!((t.sent, t.received), (300, 700));
        assert_eq!(crossing(&t), Crossing::CrossZone);
        // A client whose server's node does not report counts it; so does one talking out.
        let unreported = record(("10.0.1.5", 45002), ("10.0.3.9", 9000), 10, 20);
        assert!(transfer("node-a", &unreported, &d).is_some());
        let out = record(("10.0.1.5", 45003), ("8.8.8.8", 443), 10, 20);
        let t = transfer("node-a", &out, &d).unwrap();
        assert_eq!(
            (t.remote.clone(), crossing(&t)),
            (End::External, Crossing::Egress)
        );
        // A reporting node's own address is counted by that node.
        let to_node = record(("10.0.1.5", 45004), ("192.168.0.2", 10250), 10, 20);
        assert_eq!(transfer("node-a", &to_node, &d), None);
        // Another node's pod's address is not this node's flow.
        assert_eq!(transfer("node-b", &direct, &d), None);
    }

    fn spec(metering: bool) -> GryviaNetworkCostSpec {
        GryviaNetworkCostSpec {
            group_by: CostGrouping::Team,
            egress_per_gib: d("0.09"),
            cross_zone_per_gib: d("0.01"),
            currency: "USD".into(),
            usage_records: metering,
        }
    }

    fn at(s: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 / 3600 * 3600 + s).unwrap()
    }

    fn window(node: &str, end: i64, transfers: Vec<Transfer>) -> CostWindow {
        CostWindow {
            node: node.into(),
            end: at(end),
            transfers,
        }
    }

    #[test]
    fn each_window_folds_once_into_entries_zone_pairs_and_egress() {
        let gib = GIB_BYTES;
        let w1 = window(
            "node-a",
            10,
            vec![
                tr(pod("ml-a", "z1"), pod("ml-b", "z2"), gib, 0),
                tr(pod("ml-a", "z1"), End::External, gib, 0),
            ],
        );
        let s1 = fold(
            &GryviaNetworkCostStatus::default(),
            &spec(false),
            std::slice::from_ref(&w1),
            false,
            at(11),
        );
        // The same window again changes nothing.
        let again = fold(&s1, &spec(false), &[w1], false, at(12));
        assert_eq!(again, s1);
        let w2 = window(
            "node-a",
            20,
            vec![tr(pod("ml-a", "z1"), End::External, gib, 0)],
        );
        let s2 = fold(&s1, &spec(false), &[w2], false, at(21));
        assert_eq!(s2.entries[0].name, "ml-a");
        assert_eq!(
            (s2.entries[0].egress_bytes, s2.entries[0].cross_zone_bytes),
            (2 * gib, gib)
        );
        assert_eq!(s2.entries[0].cost, d("0.19"));
        assert_eq!(s2.entries[1].cost, d("0.01"));
        assert_eq!(s2.total, Some(d("0.2")));
        assert_eq!(
            s2.zone_pairs,
            vec![ZonePairBytes {
                from: "z1".into(),
                to: "z2".into(),
                bytes: gib
            }]
        );
        assert_eq!(
            s2.egress_by_zone,
            vec![ZoneBytes {
                zone: "z1".into(),
                bytes: 2 * gib
            }]
        );
        assert_eq!(s2.since, Some(Time(at(10))));
        assert!(s2.hours.is_empty());
    }

    /// `node`'s window ending `end` in which ml-a sent 1 GiB out.
    fn egress_window(node: &str, end: i64) -> CostWindow {
        window(
            node,
            end,
            vec![tr(pod("ml-a", "z1"), End::External, GIB_BYTES, 0)],
        )
    }

    #[test]
    fn hours_book_each_namespace_close_after_their_end_and_freeze_their_amount() {
        let gib = GIB_BYTES;
        let out = |end: i64| egress_window("node-a", end);
        let s = fold(
            &GryviaNetworkCostStatus::default(),
            &spec(true),
            &[out(3590)],
            true,
            at(3595),
        );
        assert_eq!(s.hours.len(), 1);
        assert!(!s.hours[0].closed);
        assert_eq!(s.hours[0].namespaces[0].amount, d("0.09"));
        // A window of the next hour opens it; the first hour is still open.
        let s = fold(&s, &spec(true), &[out(3610)], true, at(3615));
        assert_eq!(s.hours.len(), 2);
        // Past its end and CLOSE_AFTER, the first hour closes; a late window of it goes to the
        // hour it came in; a new price leaves the closed hour's amount as it was.
        let late = egress_window("node-b", 3599);
        let s = fold(&s, &spec(true), &[late], true, at(3600 + CLOSE_AFTER + 5));
        assert!(s.hours[0].closed);
        let mut dearer = spec(true);
        dearer.egress_per_gib = d("1");
        let s = fold(&s, &dearer, &[], true, at(3600 + CLOSE_AFTER + 6));
        assert_eq!(s.hours[0].namespaces[0].amount, d("0.09"));
        assert_eq!(s.hours[1].namespaces[0].egress_bytes, 2 * gib);
        assert_eq!(s.hours[1].namespaces[0].amount, d("2"));
        // Closed hours leave the status KEEP_CLOSED after their end.
        let s = fold(&s, &dearer, &[], true, at(3600 + KEEP_CLOSED + 1));
        assert!(s.hours.iter().all(|h| h.start.0 != at(0)));
    }

    #[test]
    fn each_hour_and_namespace_is_one_record_closed_with_its_hour() {
        let gib = GIB_BYTES;
        let out = |end: i64| egress_window("node-a", end);
        let s = fold(
            &GryviaNetworkCostStatus::default(),
            &spec(true),
            &[out(10)],
            true,
            at(11),
        );
        let r = usage_records("egress", "USD", &s, at(11));
        assert_eq!(r.len(), 1);
        let stamp = at(0).strftime("%Y%m%d%H").to_string();
        assert_eq!(
            r[0].metadata.name.as_deref(),
            Some(format!("net-egress-ml-a-{stamp}").as_str())
        );
        assert_eq!(
            (r[0].spec.tenant.as_str(), r[0].spec.gpu_count),
            ("ml-a", 0)
        );
        assert_eq!(r[0].spec.end_time, None);
        let n = r[0].spec.network.clone().unwrap();
        assert_eq!(
            (n.egress_bytes, n.amount, n.currency.as_str()),
            (gib, d("0.09"), "USD")
        );
        let s = fold(&s, &spec(true), &[], true, at(3600 + CLOSE_AFTER));
        let r = usage_records("egress", "USD", &s, at(3600 + CLOSE_AFTER));
        assert_eq!(r[0].spec.end_time, Some(Time(at(3600))));
        // A long name is cut to a valid one.
        let long = record_name(&"c".repeat(253), &"n".repeat(63), at(0).as_second());
        assert_eq!(long.len(), 253);
    }

    #[test]
    fn past_the_cap_the_lightest_groups_are_summed_into_others_and_no_byte_is_lost() {
        let by: BTreeMap<String, Billed> = (0..MAX_ENTRIES + 20)
            .map(|i| {
                let b = Billed {
                    egress: i64::try_from(i).unwrap() + 1,
                    cross_zone: 0,
                };
                (format!("ns/job-{i:04}"), b)
            })
            .collect();
        let total: i64 = by.values().map(|b| b.egress).sum();
        let c = capped(by);
        assert_eq!(c.len(), MAX_ENTRIES);
        assert_eq!(c.values().map(|b| b.egress).sum::<i64>(), total);
        // The 21 lightest (1 to 21 bytes) are the others.
        assert_eq!(c[OTHERS].egress, (1..=21).sum::<i64>());
        assert!(!c.contains_key("ns/job-0000"));
        // Folded again (others among the groups), it stays.
        let again = capped(c.clone());
        assert_eq!(again, c);
    }
}
