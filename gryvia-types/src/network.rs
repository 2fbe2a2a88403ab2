//! Network intelligence: what the eBPF collector observes per node and per flow, and the
//! kinds the network-intelligence operator derives from it (policies, anomalies, service
//! graphs, cost, training insights).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::money::Decimal;

// ---------------------------------------------------------------------------------------------
// GryviaFlowPolicy
// ---------------------------------------------------------------------------------------------

/// Allowed, denied or audited traffic between pods; the operator renders it as a
/// NetworkPolicy and the collector reports flows that violate an `audit` rule.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "gryvia.io",
    version = "v1alpha1",
    kind = "GryviaFlowPolicy",
    namespaced,
    status = "GryviaFlowPolicyStatus",
    shortname = "gfp",
    category = "gryvia",
    printcolumn(name = "Action", type_ = "string", json_path = ".spec.action"),
    printcolumn(
        name = "Violations",
        type_ = "integer",
        json_path = ".status.violations"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct GryviaFlowPolicySpec {
    /// Pods the policy applies to (all pods of the namespace when empty).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub pod_selector: BTreeMap<String, String>,
    /// What happens to matching traffic.
    pub action: FlowAction,
    /// Traffic into the selected pods.
    #[serde(default)]
    #[schemars(length(max = 64))]
    pub ingress: Vec<FlowRule>,
    /// Traffic out of the selected pods.
    #[serde(default)]
    #[schemars(length(max = 64))]
    pub egress: Vec<FlowRule>,
}

/// Action of a flow policy.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum FlowAction {
    /// Only the listed peers are allowed.
    Allow,
    /// The listed peers are denied (everything else allowed).
    Deny,
    /// Nothing is blocked; flows outside the listed peers are reported.
    Audit,
}

/// A peer and ports.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FlowRule {
    /// Peer namespaces by label.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub namespace_selector: BTreeMap<String, String>,
    /// Peer pods by label.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub pod_selector: BTreeMap<String, String>,
    /// Peer address blocks.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cidrs: Vec<String>,
    /// Ports (all when empty).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ports: Vec<FlowPort>,
}

/// A port and protocol.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FlowPort {
    /// Port number.
    #[schemars(range(min = 1, max = 65535))]
    pub port: i32,
    /// Protocol.
    #[serde(default)]
    pub protocol: Protocol,
}

/// Transport protocol.
#[derive(
    Serialize,
    Deserialize,
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    JsonSchema,
)]
pub enum Protocol {
    /// TCP.
    #[default]
    TCP,
    /// UDP.
    UDP,
    /// SCTP.
    SCTP,
}

/// Observed state of a flow policy.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GryviaFlowPolicyStatus {
    /// NetworkPolicy rendered from it (`allow`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_policy: Option<String>,
    /// Distinct flows seen outside the policy's rules (`audit`), since `since`.
    #[serde(default)]
    pub violations: i64,
    /// The latest flows outside the rules (`audit`), at most 20.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub recent_violations: Vec<String>,
    /// What the collectors drop (`deny`): the selected pods' addresses and the rules with their
    /// peers resolved to address blocks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deny: Option<ResolvedDeny>,
    /// Packets dropped (`deny`), summed over the nodes.
    #[serde(default)]
    pub drops: i64,
    /// Packets dropped per node, as each node's collector reports it (since it started).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub drops_by_node: BTreeMap<String, i64>,
    /// When audit counting started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<Time>,
    /// Per node, the end of the last GryviaFlowAggregate window audited.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub folded: BTreeMap<String, Time>,
    /// Generation of the spec the status reflects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Conditions (`Ready`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// A deny policy resolved to addresses, which every node's collector turns into entries of
/// its eBPF deny map for the pods it runs.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResolvedDeny {
    /// IPv4 addresses of the pods the policy selects.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pods: Vec<String>,
    /// Denied traffic into them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ingress: Vec<ResolvedRule>,
    /// Denied traffic out of them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub egress: Vec<ResolvedRule>,
}

/// A rule's peers as IPv4 address blocks, and its ports (every port and protocol when empty).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResolvedRule {
    /// Peer address blocks (`a.b.c.d/n`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cidrs: Vec<String>,
    /// Ports.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ports: Vec<FlowPort>,
}

// ---------------------------------------------------------------------------------------------
// GryviaAutoPolicy
// ---------------------------------------------------------------------------------------------

/// Learns the flows of a namespace for a while and suggests (or applies) a flow policy.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "gryvia.io",
    version = "v1alpha1",
    kind = "GryviaAutoPolicy",
    namespaced,
    status = "GryviaAutoPolicyStatus",
    shortname = "gap",
    category = "gryvia",
    printcolumn(name = "Mode", type_ = "string", json_path = ".spec.mode"),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct GryviaAutoPolicySpec {
    /// Pods observed (all pods of the namespace when empty).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub pod_selector: BTreeMap<String, String>,
    /// Minutes of observation before a suggestion is made.
    #[serde(default = "default_learning")]
    #[schemars(range(min = 5, max = 43200))]
    pub learning_period_minutes: i32,
    /// `suggest` writes the policy into the status; `enforce` creates a GryviaFlowPolicy.
    #[serde(default)]
    pub mode: AutoPolicyMode,
}

fn default_learning() -> i32 {
    1440
}

/// Mode of an auto policy.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum AutoPolicyMode {
    /// Only suggest.
    #[default]
    Suggest,
    /// Create and keep a GryviaFlowPolicy.
    Enforce,
}

/// Observed state of an auto policy.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GryviaAutoPolicyStatus {
    /// `Learning` or `Ready`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// When learning started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub learning_since: Option<Time>,
    /// Distinct flows observed.
    #[serde(default)]
    pub observed_flows: i64,
    /// The flows learned so far (client, server, port, protocol), at most 2,000.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub flows: Vec<LearnedFlow>,
    /// Per node, the end of the last GryviaFlowAggregate window learned from.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub folded: BTreeMap<String, Time>,
    /// Once learning is over: one allow policy per workload the flows reach, allowing exactly
    /// the flows seen into and out of it (`enforce` applies each as a GryviaFlowPolicy of the
    /// same name).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub suggestions: Vec<SuggestedPolicy>,
    /// The GryviaFlowPolicies applied (`enforce`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub applied: Vec<String>,
    /// Conditions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// A flow an auto policy saw. A pod end is `pod:<namespace>/<workload>` with the labels that
/// select the workload's pods; any other end is `ip:<address>`.
#[derive(
    Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub struct LearnedFlow {
    /// The client.
    pub from: FlowEnd,
    /// The server.
    pub to: FlowEnd,
    /// The server's port.
    pub port: i32,
    /// Protocol.
    #[serde(default)]
    pub protocol: Protocol,
}

/// One end of a learned flow.
#[derive(
    Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub struct FlowEnd {
    /// The namespace of a pod end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// The workload of a pod end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workload: Option<String>,
    /// The labels that select the workload's pods.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub selector: BTreeMap<String, String>,
    /// The address of an end that is no pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
}

/// A policy an auto policy suggests.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SuggestedPolicy {
    /// Its name (`<auto policy>-<workload>`).
    pub name: String,
    /// The workload it is for, `namespace/name`.
    pub workload: String,
    /// The rules.
    pub spec: GryviaFlowPolicySpec,
}

// ---------------------------------------------------------------------------------------------
// GryviaNetworkAnomaly
// ---------------------------------------------------------------------------------------------

/// A deviation from a node's or flow's baseline, raised by the network-intelligence operator.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "gryvia.io",
    version = "v1alpha1",
    kind = "GryviaNetworkAnomaly",
    status = "GryviaNetworkAnomalyStatus",
    shortname = "gna",
    category = "gryvia",
    printcolumn(name = "Node", type_ = "string", json_path = ".spec.node"),
    printcolumn(name = "Type", type_ = "string", json_path = ".spec.type"),
    printcolumn(name = "Severity", type_ = "string", json_path = ".spec.severity"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct GryviaNetworkAnomalySpec {
    /// Node where it was seen.
    pub node: String,
    /// What deviated.
    #[serde(rename = "type")]
    pub type_: AnomalyType,
    /// How bad.
    pub severity: Severity,
    /// When it was detected.
    pub detected_at: Time,
    /// The metric.
    pub metric: String,
    /// Baseline mean of the metric.
    pub baseline: f64,
    /// Observed value.
    pub observed: f64,
    /// Flow or pod involved, if any (`namespace/pod` or a 5-tuple).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
}

/// Kind of anomaly.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum AnomalyType {
    /// Throughput far below baseline.
    BandwidthDrop,
    /// Retransmissions far above baseline.
    RetransmitSpike,
    /// Round-trip time far above baseline.
    LatencySpike,
    /// New connections far above baseline.
    ConnectionFlood,
    /// Traffic to a peer never seen before.
    NewPeer,
}

/// Severity.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Informational.
    Info,
    /// Worth a look.
    Warning,
    /// Needs action.
    Critical,
}

/// Handling of an anomaly.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GryviaNetworkAnomalyStatus {
    /// Whether a person acknowledged it.
    #[serde(default)]
    pub acknowledged: bool,
    /// When the metric returned to baseline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolved_at: Option<Time>,
}

// ---------------------------------------------------------------------------------------------
// GryviaServiceGraph
// ---------------------------------------------------------------------------------------------

/// Who talks to whom in a set of namespaces, from observed flows.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "gryvia.io",
    version = "v1alpha1",
    kind = "GryviaServiceGraph",
    namespaced,
    status = "GryviaServiceGraphStatus",
    shortname = "gsg",
    category = "gryvia",
    printcolumn(name = "Edges", type_ = "integer", json_path = ".status.edgeCount"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct GryviaServiceGraphSpec {
    /// Namespaces included (this one when empty).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub namespaces: Vec<String>,
    /// Window of flows considered, minutes.
    #[serde(default = "default_window")]
    #[schemars(range(min = 1, max = 10080))]
    pub window_minutes: i32,
}

fn default_window() -> i32 {
    60
}

/// The graph.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GryviaServiceGraphStatus {
    /// Workloads (`namespace/workload`), sorted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nodes: Vec<String>,
    /// Edges, sorted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub edges: Vec<GraphEdge>,
    /// Number of edges.
    #[serde(default)]
    pub edge_count: i32,
    /// Edges cut for being lighter than the heaviest 250 by bytes (of the window, or of a
    /// bucket: counted once per bucket they were cut from): the graph keeps its status well
    /// under etcd's limit on an object's size.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub edges_left_out: i64,
    /// The bytes of the edges left out.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub bytes_left_out: i64,
    /// When it was computed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_at: Option<Time>,
    /// The window's edges in twelve buckets of `windowMinutes / 12` each, oldest first (a
    /// bucket leaves the window whole); the edges above are their sums.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub buckets: Vec<GraphBucket>,
    /// Per node, the end of the last GryviaFlowAggregate window folded in (each is folded
    /// once).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub folded: BTreeMap<String, Time>,
}

/// The edges of the flow windows that ended in one bucket of time.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GraphBucket {
    /// Start of the bucket.
    pub start: Time,
    /// Its edges, sorted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub edges: Vec<GraphEdge>,
    /// Edges cut from it for being lighter than its heaviest 250 by bytes.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub edges_left_out: i64,
    /// Their bytes.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub bytes_left_out: i64,
}

fn is_zero(n: &i64) -> bool {
    *n == 0
}

/// An edge of the service graph.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GraphEdge {
    /// Client workload (`namespace/name`, or `external/<ip>`).
    pub from: String,
    /// Server workload, Service or `external/<ip>`.
    pub to: String,
    /// Server port.
    pub port: i32,
    /// Bytes in the window, both ways.
    pub bytes: i64,
    /// Connections in the window.
    pub connections: i64,
    /// Retransmitted segments in the window.
    #[serde(default)]
    pub retransmits: i64,
}

// ---------------------------------------------------------------------------------------------
// GryviaNetworkCost
// ---------------------------------------------------------------------------------------------

/// Network transfer attributed to teams, jobs or services, priced per GiB.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "gryvia.io",
    version = "v1alpha1",
    kind = "GryviaNetworkCost",
    status = "GryviaNetworkCostStatus",
    shortname = "gnc",
    category = "gryvia",
    printcolumn(name = "Group By", type_ = "string", json_path = ".spec.groupBy"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct GryviaNetworkCostSpec {
    /// How transfer is attributed.
    pub group_by: CostGrouping,
    /// Price per GiB leaving the cluster.
    pub egress_per_gib: Decimal,
    /// Price per GiB crossing zones.
    pub cross_zone_per_gib: Decimal,
    /// Currency (ISO 4217).
    #[serde(default = "default_usd")]
    #[schemars(regex(pattern = r"^[A-Z]{3}$"))]
    pub currency: String,
    /// Write each namespace's priced transfer as hourly GryviaUsageRecords (booked to the
    /// namespace's tenant), which invoices list as network lines. Only the first
    /// GryviaNetworkCost by name with this set writes records: two would bill the same bytes
    /// twice.
    #[serde(default)]
    pub usage_records: bool,
}

fn default_usd() -> String {
    "USD".to_owned()
}

/// Attribution of network cost.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum CostGrouping {
    /// Per tenant.
    Team,
    /// Per job.
    Job,
    /// Per service.
    Service,
}

/// Attributed network cost: every window folded in since `since`, priced at the spec's
/// current prices.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GryviaNetworkCostStatus {
    /// One entry per group, sorted by name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub entries: Vec<NetworkCostEntry>,
    /// Bytes between each two zones, both ways, sorted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub zone_pairs: Vec<ZonePairBytes>,
    /// Bytes that left the cluster, per zone they left from (empty: a node without a zone).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub egress_by_zone: Vec<ZoneBytes>,
    /// Sum of the entries' costs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total: Option<Decimal>,
    /// When the first window was folded in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<Time>,
    /// The end of the last window folded in, per node (each window counts once).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub folded: BTreeMap<String, Time>,
    /// With `spec.usageRecords`: the transfer of each hour whose usage records are not yet
    /// final, per namespace (the records are written from it).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hours: Vec<NetworkHour>,
    /// `Metering`, with `spec.usageRecords`: whether this object writes the usage records.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// When it last changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_at: Option<Time>,
}

/// Bytes between two zones.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ZonePairBytes {
    /// One zone (the smaller name).
    pub from: String,
    /// The other.
    pub to: String,
    /// Bytes both ways.
    pub bytes: i64,
}

/// Bytes of a zone.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ZoneBytes {
    /// The zone.
    pub zone: String,
    /// Bytes.
    pub bytes: i64,
}

/// One hour's transfer, per namespace, for its usage records.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NetworkHour {
    /// Start of the hour (UTC).
    pub start: Time,
    /// Whether the hour is over and its records are final.
    #[serde(default)]
    pub closed: bool,
    /// Per namespace, sorted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub namespaces: Vec<NamespaceTransfer>,
}

/// A namespace's priced transfer.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NamespaceTransfer {
    /// The namespace.
    pub namespace: String,
    /// Its tenant (its `gryvia.io/tenant` label, else its own name).
    pub tenant: String,
    /// Bytes its pods sent out of the cluster.
    pub egress_bytes: i64,
    /// Bytes its pods exchanged with other zones.
    pub cross_zone_bytes: i64,
    /// What they cost at the spec's prices (frozen once the hour is closed).
    pub amount: Decimal,
}

/// Cost of one group.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NetworkCostEntry {
    /// Group name.
    pub name: String,
    /// Bytes leaving the cluster.
    pub egress_bytes: i64,
    /// Bytes crossing zones.
    pub cross_zone_bytes: i64,
    /// Cost.
    pub cost: Decimal,
}

// ---------------------------------------------------------------------------------------------
// GryviaTrainingInsight
// ---------------------------------------------------------------------------------------------

/// Network behaviour of one distributed training job: per-worker traffic, stragglers and
/// collective-communication throughput.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "gryvia.io",
    version = "v1alpha1",
    kind = "GryviaTrainingInsight",
    namespaced,
    status = "GryviaTrainingInsightStatus",
    shortname = "gti",
    category = "gryvia",
    printcolumn(name = "Job", type_ = "string", json_path = ".spec.jobName"),
    printcolumn(
        name = "Stragglers",
        type_ = "integer",
        json_path = ".status.stragglerCount"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct GryviaTrainingInsightSpec {
    /// The GryviaAIJob observed.
    #[schemars(length(min = 1, max = 253))]
    pub job_name: String,
    /// A worker whose throughput is below this share of the median is a straggler, percent.
    #[serde(default = "default_straggler")]
    #[schemars(range(min = 1, max = 100))]
    pub straggler_threshold_percent: i32,
}

fn default_straggler() -> i32 {
    70
}

/// Insight into a training job.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GryviaTrainingInsightStatus {
    /// Per-worker traffic, by rank.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub workers: Vec<WorkerTraffic>,
    /// Workers below the straggler threshold.
    #[serde(default)]
    pub straggler_count: i32,
    /// Recommendations, one line each.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub recommendations: Vec<String>,
    /// The median rank's throughput, bytes per second both ways.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub median_bytes_per_second: Option<f64>,
    /// Bytes between ranks in the last windows, as the collector of each rank's node saw them
    /// (`from` is the rank whose flows they are; both ways), sorted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub matrix: Vec<RankPair>,
    /// The end of the window the figures are from, per node of the job's ranks.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub windows: BTreeMap<String, Time>,
    /// `Ready`: whether the job has running ranks whose nodes' collectors report.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// When it last changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_at: Option<Time>,
}

/// Bytes between two ranks of a job.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RankPair {
    /// The rank whose flows they are.
    pub from: i32,
    /// The rank at the other end.
    pub to: i32,
    /// Bytes both ways.
    pub bytes: i64,
}

/// Traffic of one worker.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkerTraffic {
    /// Rank.
    pub rank: i32,
    /// Pod.
    pub pod: String,
    /// Node.
    pub node: String,
    /// Bytes sent per second.
    pub tx_bytes_per_second: f64,
    /// Bytes received per second.
    pub rx_bytes_per_second: f64,
    /// TCP retransmissions in the window.
    pub retransmits: i64,
    /// Whether it is a straggler.
    pub straggler: bool,
}

// ---------------------------------------------------------------------------------------------
// GryviaFabricSignal
// ---------------------------------------------------------------------------------------------

/// Per-node fabric health from the collector: interface counters, retransmissions and RTT.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "gryvia.io",
    version = "v1alpha1",
    kind = "GryviaFabricSignal",
    status = "GryviaFabricSignalStatus",
    shortname = "gfs",
    category = "gryvia",
    printcolumn(name = "Node", type_ = "string", json_path = ".spec.nodeName"),
    printcolumn(
        name = "Retransmits",
        type_ = "integer",
        json_path = ".status.tcpRetransmits"
    ),
    printcolumn(name = "Updated", type_ = "date", json_path = ".status.updatedAt")
)]
#[serde(rename_all = "camelCase")]
pub struct GryviaFabricSignalSpec {
    /// Node the signal describes; `*` for the signal that merges every node's
    /// (`--merge-fabric-signals`).
    #[schemars(length(min = 1, max = 253))]
    pub node_name: String,
}

/// A node's fabric signal as the merged signal lists it.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FabricNodeEntry {
    /// Node.
    pub node: String,
    /// TCP retransmissions in its last window.
    #[serde(default)]
    pub tcp_retransmits: i64,
    /// Median smoothed RTT of its last window, microseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub median_srtt_micros: Option<i64>,
    /// Frames received on its fabric interfaces in its last window.
    #[serde(default)]
    pub rx_packets: i64,
    /// Drops and errors on its fabric interfaces in its last window.
    #[serde(default)]
    pub drops_and_errors: i64,
    /// Its fabric interfaces whose operational state is not `up`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub interfaces_down: Vec<String>,
    /// Its window, seconds.
    #[serde(default)]
    pub window_seconds: i32,
    /// When its collector last wrote it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_at: Option<Time>,
    /// Whether it was updated within three of its windows.
    #[serde(default)]
    pub fresh: bool,
}

/// Fabric counters of a node.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GryviaFabricSignalStatus {
    /// Per-interface counters, sorted by name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub interfaces: Vec<InterfaceCounters>,
    /// TCP retransmissions in the last window.
    #[serde(default)]
    pub tcp_retransmits: i64,
    /// Median smoothed RTT over flows, microseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub median_srtt_micros: Option<i64>,
    /// Window the counters cover, seconds.
    #[serde(default)]
    pub window_seconds: i32,
    /// The GryviaCollectorConfig the collector follows (none: its command-line settings).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<AppliedCollectorConfig>,
    /// The programs the collector runs, sorted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub programs: Vec<CollectorProgram>,
    /// Packets the node's deny entries dropped since the collector started, per
    /// GryviaFlowPolicy (`namespace/name`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub policy_drops: BTreeMap<String, i64>,
    /// The merged signal (`spec.nodeName: "*"`, kept by the network-operator with
    /// `--merge-fabric-signals`): one entry per node's signal, by node name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nodes: Vec<FabricNodeEntry>,
    /// The merged signal: nodes whose signal is fresh (updated within three of its windows).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodes_reporting: Option<i32>,
    /// When the collector wrote it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_at: Option<Time>,
}

/// Counters of one interface.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InterfaceCounters {
    /// Interface name.
    pub name: String,
    /// Packets received.
    pub rx_packets: i64,
    /// Bytes received.
    pub rx_bytes: i64,
    /// Packets dropped.
    #[serde(default)]
    pub drops: i64,
    /// Link state as the kernel reports it (`up`, `down`, `lowerlayerdown`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oper_state: Option<String>,
    /// Link speed, Mbit/s (absent where the driver does not say).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speed_mbps: Option<i64>,
    /// Receive errors in the window.
    #[serde(default)]
    pub rx_errors: i64,
    /// Transmit errors in the window.
    #[serde(default)]
    pub tx_errors: i64,
}

// ---------------------------------------------------------------------------------------------
// GryviaFlowAggregate
// ---------------------------------------------------------------------------------------------

/// Flows one node's collector saw in a window, joined to pods, for the operator to consume.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "gryvia.io",
    version = "v1alpha1",
    kind = "GryviaFlowAggregate",
    status = "GryviaFlowAggregateStatus",
    shortname = "gfa",
    category = "gryvia",
    printcolumn(name = "Node", type_ = "string", json_path = ".spec.nodeName"),
    printcolumn(name = "Flows", type_ = "integer", json_path = ".status.flowCount"),
    printcolumn(name = "Updated", type_ = "date", json_path = ".status.windowEnd")
)]
#[serde(rename_all = "camelCase")]
pub struct GryviaFlowAggregateSpec {
    /// Node whose flows these are.
    #[schemars(length(min = 1, max = 253))]
    pub node_name: String,
}

/// The flows of a window.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GryviaFlowAggregateStatus {
    /// Start of the window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window_start: Option<Time>,
    /// End of the window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window_end: Option<Time>,
    /// Flows in the window (the largest by bytes when over the cap), sorted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 2000))]
    pub flows: Vec<FlowRecord>,
    /// Flows seen in the window, including those cut by the cap.
    #[serde(default)]
    pub flow_count: i64,
}

/// One flow.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FlowRecord {
    /// Source address.
    pub src_ip: String,
    /// Source port.
    pub src_port: i32,
    /// Destination address.
    pub dst_ip: String,
    /// Destination port.
    pub dst_port: i32,
    /// Protocol.
    pub protocol: Protocol,
    /// Bytes sent by the source.
    pub tx_bytes: i64,
    /// Bytes received by the source.
    pub rx_bytes: i64,
    /// Retransmitted segments.
    #[serde(default)]
    pub retransmits: i64,
    /// Local pod, `namespace/name`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<String>,
}

// ---------------------------------------------------------------------------------------------
// GryviaNetworkBaseline
// ---------------------------------------------------------------------------------------------

/// Learned normal values of network metrics for a node, against which anomalies are raised.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "gryvia.io",
    version = "v1alpha1",
    kind = "GryviaNetworkBaseline",
    status = "GryviaNetworkBaselineStatus",
    shortname = "gnb",
    category = "gryvia",
    printcolumn(name = "Node", type_ = "string", json_path = ".spec.nodeName"),
    printcolumn(name = "Samples", type_ = "integer", json_path = ".status.samples")
)]
#[serde(rename_all = "camelCase")]
pub struct GryviaNetworkBaselineSpec {
    /// Node the baseline describes.
    #[schemars(length(min = 1, max = 253))]
    pub node_name: String,
    /// Standard deviations from the mean that count as an anomaly.
    #[serde(default = "default_sigma")]
    #[schemars(range(min = 1.0, max = 10.0))]
    pub sensitivity_sigma: f64,
    /// Samples needed before anomalies are raised.
    #[serde(default = "default_min_samples")]
    #[schemars(range(min = 1, max = 100000))]
    pub min_samples: i32,
}

fn default_sigma() -> f64 {
    3.0
}

fn default_min_samples() -> i32 {
    30
}

/// Learned values.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GryviaNetworkBaselineStatus {
    /// Samples folded in.
    #[serde(default)]
    pub samples: i64,
    /// Per metric (`bytesPerSecond`, `connections`, `retransmitsPerSecond`, `rttMicros`) the
    /// running mean and variance.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub metrics: BTreeMap<String, MetricBaseline>,
    /// End of the node's last GryviaFlowAggregate window folded in (each window is folded
    /// once).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window_end: Option<Time>,
    /// `updatedAt` of the node's last GryviaFabricSignal folded in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal_at: Option<Time>,
}

/// Running statistics of one metric.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MetricBaseline {
    /// Mean: exact over the first `minSamples` samples, then an exponentially weighted moving
    /// average (weight 2 / (minSamples + 1)).
    pub mean: f64,
    /// Variance, the same way.
    pub variance: f64,
    /// Samples of this metric folded in.
    #[serde(default)]
    pub samples: i64,
    /// The last value folded in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last: Option<f64>,
    /// When the last value was folded in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<Time>,
    /// Whether the last value was beyond `sensitivitySigma` of the baseline (judged before it
    /// was folded in).
    #[serde(default)]
    pub deviating: bool,
}

// ---------------------------------------------------------------------------------------------
// GryviaCollectorConfig
// ---------------------------------------------------------------------------------------------

/// Settings of the eBPF collector on a set of nodes: which programs run, on which interfaces,
/// and how often maps are read.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "gryvia.io",
    version = "v1alpha1",
    kind = "GryviaCollectorConfig",
    status = "GryviaCollectorConfigStatus",
    shortname = "gcc",
    category = "gryvia",
    printcolumn(
        name = "Interval",
        type_ = "integer",
        json_path = ".spec.intervalSeconds"
    ),
    printcolumn(
        name = "Nodes",
        type_ = "integer",
        json_path = ".status.nodesReporting"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct GryviaCollectorConfigSpec {
    /// Nodes the settings apply to (all when empty).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,
    /// Programs to load.
    #[schemars(length(min = 1, max = 8))]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    pub programs: Vec<CollectorProgram>,
    /// Fabric-facing interfaces counted by the interface program.
    #[serde(default)]
    #[schemars(length(max = 32))]
    pub interfaces: Vec<String>,
    /// Seconds between map reads.
    #[serde(default = "default_interval")]
    #[schemars(range(min = 1, max = 3600))]
    pub interval_seconds: i32,
}

fn default_interval() -> i32 {
    10
}

/// An eBPF program of the collector.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum CollectorProgram {
    /// Per-cgroup bytes and packets (cgroup_skb).
    CgroupTraffic,
    /// TCP connection lifecycle and per-flow bytes.
    TcpFlows,
    /// TCP retransmissions and RTT samples.
    TcpRetransmits,
    /// Per-interface packet counts (XDP / TC).
    InterfaceCounters,
}

impl CollectorProgram {
    /// The name as the CRD and the collector's `--programs` spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            CollectorProgram::CgroupTraffic => "cgroup-traffic",
            CollectorProgram::TcpFlows => "tcp-flows",
            CollectorProgram::TcpRetransmits => "tcp-retransmits",
            CollectorProgram::InterfaceCounters => "interface-counters",
        }
    }
}

/// Reporting state of the collectors (written by the network-operator).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GryviaCollectorConfigStatus {
    /// Nodes whose collector runs this config's current generation and reported in the last
    /// three intervals.
    #[serde(default)]
    pub nodes_reporting: i32,
    /// Nodes whose collector could not apply this config, with why (`node: reason`), sorted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failing: Vec<String>,
    /// `Ready`: whether every collector that follows the config runs its current generation.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// The GryviaCollectorConfig a collector follows, as it reports it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AppliedCollectorConfig {
    /// The config's name.
    pub name: String,
    /// Its `metadata.generation` the collector read.
    pub generation: i64,
    /// Why the collector could not apply it (it runs its command-line settings then).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}
