//! The network-operator (opt-in, like the collector it reads): network intelligence from the
//! collectors' GryviaFlowAggregates and GryviaFabricSignals. Each GryviaNetworkBaseline learns
//! its node's normal traffic and raises GryviaNetworkAnomalies, which resolve themselves when
//! the traffic is back within bounds; each GryviaServiceGraph keeps who talks to whom over its
//! window; each GryviaNetworkCost prices what crosses zones and leaves the cluster, and one of
//! them writes it as usage records for invoices; each GryviaTrainingInsight names the ranks of a
//! distributed job that move less than the others; each GryviaCollectorConfig says how many
//! nodes' collectors run it; each GryviaFlowPolicy becomes a NetworkPolicy (`allow`), addresses
//! for the collectors' eBPF deny maps (`deny`) or an audit of the flows (`audit`); each
//! GryviaAutoPolicy learns its pods' flows and suggests or applies flow policies.

use super::{ControllerSet, OperatorFlags};
use crate::Result;
use crate::controllers::{
    collector_config, fabric_merge, flow_policy, network_baseline, network_cost, service_graph,
    training_insight,
};

/// Name of the operator (its Lease, its logs).
pub const NAME: &str = "gryvia-network-operator";

/// Learns each node's normal traffic from the collectors' data and raises and resolves
/// network anomalies; keeps service graphs.
#[derive(clap::Parser, Debug)]
#[command(name = "gryvia-network-operator", version)]
pub struct Flags {
    /// Keep the GryviaFabricSignal `cluster` (`spec.nodeName: "*"`), whose status lists every
    /// node's fabric signal and sums the fresh ones (opt-in; chart value
    /// networkOperator.mergeFabricSignals).
    #[arg(long, env = "GRYVIA_MERGE_FABRIC_SIGNALS")]
    pub merge_fabric_signals: bool,
    /// Flags every operator takes.
    #[command(flatten)]
    pub operator: OperatorFlags,
}

/// The controllers the network-operator runs.
pub fn controllers(flags: &Flags) -> ControllerSet {
    ControllerSet::new()
        .with(network_baseline::baseline_controller)
        .with(network_baseline::anomaly_controller)
        .with(service_graph::controller)
        .with(network_cost::controller)
        .with(training_insight::controller)
        .with(collector_config::controller)
        .with(flow_policy::flow_policy_controller)
        .with(flow_policy::auto_policy_controller)
        .with_if(flags.merge_fabric_signals, fabric_merge::controller)
}

/// Runs the network-operator until SIGTERM.
///
/// # Errors
/// What [`super::run_blocking`] returns.
pub fn run(flags: &Flags) -> Result<()> {
    tracing::info!(
        "network baselines, anomalies, service graphs, network cost, training insights, collector configs, flow and auto policies on"
    );
    super::run_blocking(NAME, &flags.operator, controllers(flags), None)
}
