//! Network intelligence from the collectors' data, as pure policies: streaming baselines and
//! the anomalies they raise, the service graph, network cost by zone pair and egress, flow
//! policy learned from traffic (with a NetworkPolicy evaluator to replay flows against it), and
//! stragglers of distributed training jobs. The network-intelligence operator applies what
//! they decide.

pub mod anomaly;
pub mod baseline;
pub mod cost;
pub mod flows;
pub mod graph;
pub mod learn;
pub mod reconcile;
pub mod straggler;
