//! The service graph (GryviaServiceGraph): flows of a window folded into edges between
//! workloads (`namespace/workload`: a pod's owner, a Service in front of it, or `external/<ip>`),
//! one per client, server and server port, with bytes, connections and retransmissions, and
//! the graph as DOT for `gryvia network graph -o dot`. Pure.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;

use gryvia_types::{GraphEdge, GryviaServiceGraphStatus};

/// One flow of the window between two workloads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkloadFlow {
    /// The client's workload.
    pub from: String,
    /// The server's workload.
    pub to: String,
    /// The server's port.
    pub port: u16,
    /// Bytes both ways.
    pub bytes: i64,
    /// Retransmitted segments.
    pub retransmits: i64,
}

/// Totals of one edge.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EdgeTotals {
    /// Bytes.
    pub bytes: i64,
    /// Flows (connections).
    pub connections: i64,
    /// Retransmitted segments.
    pub retransmits: i64,
}

/// The edges of `flows` in `namespaces` (an edge counts when either end is in one of them; all
/// when empty), keyed by (from, to, port), sorted.
pub fn edges(
    flows: &[WorkloadFlow],
    namespaces: &[String],
) -> BTreeMap<(String, String, u16), EdgeTotals> {
    let inside = |w: &str| {
        namespaces.is_empty()
            || w.split_once('/')
                .is_some_and(|(ns, _)| namespaces.iter().any(|n| n == ns))
    };
    let mut out: BTreeMap<(String, String, u16), EdgeTotals> = BTreeMap::new();
    for f in flows {
        if !(inside(&f.from) || inside(&f.to)) {
            continue;
        }
        let e = out
            .entry((f.from.clone(), f.to.clone(), f.port))
            .or_default();
        e.bytes = e.bytes.saturating_add(f.bytes.max(0));
        e.connections += 1;
        e.retransmits = e.retransmits.saturating_add(f.retransmits.max(0));
    }
    out
}

/// The graph's status: its workloads and edges, sorted.
pub fn status(edges: &BTreeMap<(String, String, u16), EdgeTotals>) -> GryviaServiceGraphStatus {
    let nodes: BTreeSet<String> = edges
        .keys()
        .flat_map(|(a, b, _)| [a.clone(), b.clone()])
        .collect();
    let edges: Vec<GraphEdge> = edges
        .iter()
        .map(|((from, to, port), t)| GraphEdge {
            from: from.clone(),
            to: to.clone(),
            port: i32::from(*port),
            bytes: t.bytes,
            connections: t.connections,
        })
        .collect();
    GryviaServiceGraphStatus {
        nodes: nodes.into_iter().collect(),
        edge_count: i32::try_from(edges.len()).unwrap_or(i32::MAX),
        edges,
        updated_at: None,
    }
}

fn quote(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

/// The graph in Graphviz DOT: a node per workload, an edge per (client, server, port) labelled
/// with the port and bytes.
pub fn dot(status: &GryviaServiceGraphStatus) -> String {
    let mut out = String::from("digraph services {\n  rankdir=LR;\n");
    for n in &status.nodes {
        let _ = writeln!(out, "  {};", quote(n));
    }
    for e in &status.edges {
        let _ = writeln!(
            out,
            "  {} -> {} [label={}];",
            quote(&e.from),
            quote(&e.to),
            quote(&format!(
                ":{} {} B, {} conn",
                e.port, e.bytes, e.connections
            ))
        );
    }
    out.push_str("}\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(from: &str, to: &str, port: u16, bytes: i64) -> WorkloadFlow {
        WorkloadFlow {
            from: from.into(),
            to: to.into(),
            port,
            bytes,
            retransmits: 1,
        }
    }

    #[test]
    fn flows_fold_into_edges_with_exact_totals() {
        let flows = [
            f("ml/trainer", "ml/store", 9000, 100),
            f("ml/trainer", "ml/store", 9000, 250),
            f("ml/trainer", "ml/store", 9001, 7),
            f("ml/eval", "data/cache", 6379, 40),
            f("other/x", "other/y", 80, 1),
        ];
        let e = edges(&flows, &["ml".to_owned()]);
        assert_eq!(e.len(), 3, "other/ is outside the namespaces");
        let t = &e[&("ml/trainer".into(), "ml/store".into(), 9000)];
        assert_eq!((t.bytes, t.connections, t.retransmits), (350, 2, 2));
        let s = status(&e);
        assert_eq!(s.edge_count, 3);
        assert_eq!(s.nodes, ["data/cache", "ml/eval", "ml/store", "ml/trainer"]);
        assert_eq!(s.edges[0].from, "ml/eval");
        assert_eq!(edges(&flows, &[]).len(), 4);
    }

    #[test]
    fn the_dot_has_every_node_and_edge() {
        let s = status(&edges(&[f("a/x", "b/\"y\"", 80, 5)], &[]));
        let d = dot(&s);
        assert!(d.starts_with("digraph services {"));
        assert!(
            d.contains(r#""a/x" -> "b/\"y\"" [label=":80 5 B, 1 conn"];"#),
            "{d}"
        );
        assert!(d.trim_end().ends_with('}'));
    }
}
