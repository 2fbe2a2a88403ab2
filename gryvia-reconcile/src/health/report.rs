//! What `gryvia health` and `gryvia get node` show, as plain data computed from the objects:
//! the CLI (and the gateway) read the objects, call these, and print.

use gryvia_types::{GryviaGpuNode, GryviaHealthCheck, Verdict, VerdictSummary};
use k8s_openapi::api::core::v1::Node;
use serde::{Deserialize, Serialize};

use crate::{Timestamp, facts};

/// One health check, as a row of `gryvia health`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CheckRow {
    /// The check's name.
    pub name: String,
    /// How many nodes it covers.
    pub nodes: usize,
    /// Its verdicts and quarantines.
    pub summary: VerdictSummary,
    /// When it last ran.
    pub last_run: Option<Timestamp>,
}

/// The health checks as rows, sorted by name.
pub fn check_rows(checks: &[GryviaHealthCheck]) -> Vec<CheckRow> {
    let mut rows: Vec<CheckRow> = checks
        .iter()
        .map(|c| {
            let s = c.status.clone().unwrap_or_default();
            CheckRow {
                name: c.metadata.name.clone().unwrap_or_default(),
                nodes: s.nodes.len(),
                summary: s.summary,
                last_run: s.last_run.map(|t| t.0),
            }
        })
        .collect();
    rows.sort_by(|a, b| a.name.cmp(&b.name));
    rows
}

/// The worst verdict any health check gives `node` (`None` when no check covers it).
pub fn worst_verdict(checks: &[GryviaHealthCheck], node: &str) -> Option<Verdict> {
    checks
        .iter()
        .filter_map(|c| c.status.as_ref())
        .flat_map(|s| s.nodes.iter())
        .filter(|r| r.node == node)
        .map(|r| r.verdict)
        .reduce(super::worst)
}

/// One GPU node, as a row of `gryvia health`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GpuNodeRow {
    /// The node's name.
    pub node: String,
    /// GPUs the agent counts.
    pub gpus: i32,
    /// The worst verdict of the checks that cover it.
    pub verdict: Option<Verdict>,
    /// Where the agent reads the GPUs from.
    pub source: Option<String>,
    /// When the agent last observed them.
    pub observed_at: Option<Timestamp>,
}

/// The GryviaGpuNodes as rows with their worst verdicts, sorted by node name.
pub fn gpu_node_rows(checks: &[GryviaHealthCheck], gpu_nodes: &[GryviaGpuNode]) -> Vec<GpuNodeRow> {
    let mut rows: Vec<GpuNodeRow> = gpu_nodes
        .iter()
        .map(|n| {
            let st = n.status.clone().unwrap_or_default();
            GpuNodeRow {
                node: n.spec.node_name.clone(),
                gpus: st.gpu_count.unwrap_or(0),
                verdict: worst_verdict(checks, &n.spec.node_name),
                source: st.source,
                observed_at: st.observed_at.map(|t| t.0),
            }
        })
        .collect();
    rows.sort_by(|a, b| a.node.cmp(&b.node));
    rows
}

/// A node's state, as `gryvia get node` shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeState {
    /// The node's name.
    pub name: String,
    /// Not cordoned.
    pub schedulable: bool,
    /// The health check that quarantined it.
    pub quarantined_by: Option<String>,
    /// Why it is in manual maintenance, when it is.
    pub maintenance: Option<String>,
}

/// The state of `node`.
pub fn node_state(node: &Node) -> NodeState {
    NodeState {
        name: node.metadata.name.clone().unwrap_or_default(),
        schedulable: !facts::cordoned(node),
        quarantined_by: facts::quarantined_by(node),
        maintenance: facts::maintenance_reason(node).map(str::to_owned),
    }
}

/// How long ago `then` was, in the CLI's short form (`42s`, `7m`, `3h`); `-` for never.
pub fn age(then: Option<Timestamp>, now: Timestamp) -> String {
    then.map_or_else(
        || "-".to_owned(),
        |t| {
            let s = now.as_second() - t.as_second();
            if s < 120 {
                format!("{s}s")
            } else if s < 7200 {
                format!("{}m", s / 60)
            } else {
                format!("{}h", s / 3600)
            }
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use gryvia_types::testing::{gpu_node, health_check};
    use gryvia_types::{CheckType, GryviaHealthCheckStatus, NodeHealthResult};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn now() -> Timestamp {
        Timestamp::from_second(1_800_000_000).unwrap()
    }

    fn result(node: &str, verdict: Verdict) -> NodeHealthResult {
        NodeHealthResult {
            verdict,
            ..crate::health::healthy_result(node)
        }
    }

    fn check(name: &str, results: Vec<NodeHealthResult>) -> GryviaHealthCheck {
        let mut c = health_check(name, CheckType::GpuTemperature, 90.0);
        c.status = Some(GryviaHealthCheckStatus {
            nodes: results,
            last_run: Some(Time(now())),
            ..GryviaHealthCheckStatus::default()
        });
        c
    }

    #[test]
    fn check_rows_are_sorted_by_name_with_their_counts() {
        let rows = check_rows(&[
            check("b", vec![result("n1", Verdict::Healthy)]),
            check("a", Vec::new()),
        ]);
        assert_eq!(rows[0].name, "a");
        assert_eq!((rows[1].nodes, rows[1].last_run), (1, Some(now())));
    }

    #[test]
    fn a_nodes_verdict_is_the_worst_any_check_gives_it() {
        let checks = [
            check("a", vec![result("n1", Verdict::Warning)]),
            check(
                "b",
                vec![
                    result("n1", Verdict::Unknown),
                    result("n2", Verdict::Healthy),
                ],
            ),
        ];
        assert_eq!(worst_verdict(&checks, "n1"), Some(Verdict::Unknown));
        assert_eq!(worst_verdict(&checks, "n3"), None);
    }

    #[test]
    fn gpu_node_rows_are_sorted_with_the_agents_counts() {
        let checks = [check("a", vec![result("n1", Verdict::Failed)])];
        let rows = gpu_node_rows(
            &checks,
            &[gpu_node("n2", 4, now()), gpu_node("n1", 8, now())],
        );
        assert_eq!(rows[0].node, "n1");
        assert_eq!((rows[0].gpus, rows[0].verdict), (8, Some(Verdict::Failed)));
        assert_eq!(rows[1].verdict, None);
        assert_eq!(rows[1].observed_at, Some(now()));
    }

    #[test]
    fn a_node_state_says_cordoned_quarantined_and_maintenance() {
        let n: Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "n", "annotations": {"gryvia.io/maintenance": "psu"}},
            "spec": {"unschedulable": true, "taints": [
                {"key": "gryvia.io/gpu-unhealthy", "value": "hc", "effect": "NoSchedule"}]}
        }))
        .unwrap();
        assert_eq!(
            node_state(&n),
            NodeState {
                name: "n".into(),
                schedulable: false,
                quarantined_by: Some("hc".into()),
                maintenance: Some("psu".into())
            }
        );
    }

    #[test]
    fn ages_are_seconds_minutes_or_hours() {
        let ago = |s: i64| age(Some(now() - jiff::SignedDuration::from_secs(s)), now());
        assert_eq!(ago(42), "42s");
        assert_eq!(ago(600), "10m");
        assert_eq!(ago(7200), "2h");
        assert_eq!(age(None, now()), "-");
    }
}
