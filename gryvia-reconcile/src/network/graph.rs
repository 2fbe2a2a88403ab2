//! The service graph (GryviaServiceGraph): flows of a window folded into edges between
//! workloads (`namespace/workload`: a pod's owner, a Service in front of it, or `external/<ip>`),
//! one per client, server and server port, with bytes, connections and retransmissions, and
//! the graph as DOT for `gryvia network graph -o dot`. Pure.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;

use gryvia_types::k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use gryvia_types::{GraphBucket, GraphEdge, GryviaServiceGraphStatus};

use crate::Timestamp;

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
            retransmits: t.retransmits,
        })
        .collect();
    GryviaServiceGraphStatus {
        nodes: nodes.into_iter().collect(),
        edge_count: i32::try_from(edges.len()).unwrap_or(i32::MAX),
        edges,
        ..GryviaServiceGraphStatus::default()
    }
}

/// The most edges a bucket and the window's sums keep: the heaviest by bytes. Twelve buckets
/// and the sums of this many edges stay well under etcd's limit on an object (1.5 MiB); a
/// graph of a busy cluster outgrew it (`benches/network/run`).
pub const MAX_EDGES: usize = 250;

type Edges = BTreeMap<(String, String, u16), EdgeTotals>;

/// The heaviest [`MAX_EDGES`] of `edges` by bytes, and the count and bytes of the others.
pub fn heaviest(edges: Edges) -> (Edges, i64, i64) {
    if edges.len() <= MAX_EDGES {
        return (edges, 0, 0);
    }
    let mut all: Vec<_> = edges.into_iter().collect();
    // Heaviest first; equal bytes by key, so the cut is the same every time.
    all.sort_by(|a, b| b.1.bytes.cmp(&a.1.bytes).then_with(|| a.0.cmp(&b.0)));
    let cut = all.split_off(MAX_EDGES);
    let bytes = cut
        .iter()
        .fold(0_i64, |s, (_, t)| s.saturating_add(t.bytes));
    (
        all.into_iter().collect(),
        i64::try_from(cut.len()).unwrap_or(i64::MAX),
        bytes,
    )
}

/// Buckets a graph's window is kept in.
pub const BUCKETS: i64 = 12;

/// Seconds of one bucket of a window of `window_minutes`.
pub fn bucket_seconds(window_minutes: i32) -> i64 {
    (i64::from(window_minutes.max(1)) * 60 / BUCKETS).max(1)
}

/// One node's window of flows, resolved to workloads.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeWindow {
    /// The node whose collector wrote it.
    pub node: String,
    /// The end of the window.
    pub end: Timestamp,
    /// Its flows.
    pub flows: Vec<WorkloadFlow>,
}

fn totals_of(edges: &[GraphEdge]) -> Edges {
    edges
        .iter()
        .map(|e| {
            (
                (
                    e.from.clone(),
                    e.to.clone(),
                    u16::try_from(e.port).unwrap_or(0),
                ),
                EdgeTotals {
                    bytes: e.bytes,
                    connections: e.connections,
                    retransmits: e.retransmits,
                },
            )
        })
        .collect()
}

fn add(
    into: &mut BTreeMap<(String, String, u16), EdgeTotals>,
    key: &(String, String, u16),
    t: &EdgeTotals,
) {
    let e = into.entry(key.clone()).or_default();
    e.bytes = e.bytes.saturating_add(t.bytes);
    e.connections = e.connections.saturating_add(t.connections);
    e.retransmits = e.retransmits.saturating_add(t.retransmits);
}

/// The graph after folding in each window newer than the last one folded from its node (into
/// the bucket its end falls in) and dropping the buckets that left the window of
/// `window_minutes` before `now`; its edges are the sums of the buckets. `updatedAt` moves only
/// when something changed.
pub fn fold(
    current: &GryviaServiceGraphStatus,
    window_minutes: i32,
    namespaces: &[String],
    windows: &[NodeWindow],
    now: Timestamp,
) -> GryviaServiceGraphStatus {
    let width = bucket_seconds(window_minutes);
    let mut buckets: BTreeMap<i64, (Edges, i64, i64)> = current
        .buckets
        .iter()
        .map(|b| {
            (
                b.start.0.as_second(),
                (totals_of(&b.edges), b.edges_left_out, b.bytes_left_out),
            )
        })
        .collect();
    let mut folded = current.folded.clone();
    for w in windows {
        if !super::newer(folded.get(&w.node), Some(&Time(w.end))) {
            continue;
        }
        folded.insert(w.node.clone(), Time(w.end));
        let start = w.end.as_second().div_euclid(width) * width;
        let bucket = buckets.entry(start).or_default();
        for (key, t) in edges(&w.flows, namespaces) {
            add(&mut bucket.0, &key, &t);
        }
        let (kept, count, bytes) = heaviest(std::mem::take(&mut bucket.0));
        bucket.0 = kept;
        bucket.1 = bucket.1.saturating_add(count);
        bucket.2 = bucket.2.saturating_add(bytes);
    }
    let oldest = now.as_second() - i64::from(window_minutes.max(1)) * 60;
    buckets.retain(|start, _| start + width > oldest);
    folded.retain(|_, t| t.0.as_second() > oldest - width);
    let mut sum = BTreeMap::new();
    let (mut left_out, mut bytes_left_out) = (0_i64, 0_i64);
    for (b, count, bytes) in buckets.values() {
        for (key, t) in b {
            add(&mut sum, key, t);
        }
        left_out = left_out.saturating_add(*count);
        bytes_left_out = bytes_left_out.saturating_add(*bytes);
    }
    let (sum, count, bytes) = heaviest(sum);
    let mut out = status(&sum);
    out.edges_left_out = left_out.saturating_add(count);
    out.bytes_left_out = bytes_left_out.saturating_add(bytes);
    out.buckets = buckets
        .into_iter()
        .filter(|(_, (b, count, _))| !b.is_empty() || *count > 0)
        .map(|(start, (b, count, bytes))| GraphBucket {
            start: Time(Timestamp::from_second(start).unwrap_or(now)),
            edges: status(&b).edges,
            edges_left_out: count,
            bytes_left_out: bytes,
        })
        .collect();
    out.folded = folded;
    out.updated_at.clone_from(&current.updated_at);
    if out != *current {
        out.updated_at = Some(Time(now));
    }
    out
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

    fn at(s: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + s).unwrap()
    }

    fn window(node: &str, end: i64, flows: Vec<WorkloadFlow>) -> NodeWindow {
        NodeWindow {
            node: node.into(),
            end: at(end),
            flows,
        }
    }

    #[test]
    fn windows_fold_once_into_buckets_that_leave_the_window_whole() {
        // 60 minutes: buckets of 300 s.
        let empty = GryviaServiceGraphStatus::default();
        let w1 = window("a", 100, vec![f("ml/t", "ml/s", 9000, 100)]);
        let w2 = window(
            "b",
            110,
            vec![f("ml/t", "ml/s", 9000, 50), f("ml/t", "x/y", 80, 1)],
        );
        let s = fold(
            &empty,
            60,
            &["ml".to_owned()],
            &[w1.clone(), w2.clone()],
            at(120),
        );
        assert_eq!(s.edges[0].bytes, 150);
        assert_eq!(s.edges[0].connections, 2);
        assert_eq!(s.edges[0].retransmits, 2);
        assert_eq!(s.edge_count, 2);
        assert_eq!(s.buckets.len(), 1);
        assert_eq!(s.folded["a"], Time(at(100)));
        assert_eq!(s.updated_at, Some(Time(at(120))));
        // The same windows again change nothing, not even updatedAt.
        let again = fold(&s, 60, &["ml".to_owned()], &[w1, w2], at(130));
        assert_eq!(again, s);
        // A later window of a: a new bucket 400 s on.
        let w3 = window("a", 500, vec![f("ml/t", "ml/s", 9000, 7)]);
        let s = fold(&s, 60, &["ml".to_owned()], &[w3], at(500));
        assert_eq!(s.buckets.len(), 2);
        assert_eq!(s.edges[0].bytes, 157);
        // An hour after the first bucket ended, it has left the window.
        let later = fold(&s, 60, &["ml".to_owned()], &[], at(3600 + 301));
        assert_eq!(later.buckets.len(), 1);
        assert_eq!(later.edges[0].bytes, 7);
        assert_eq!(later.edge_count, 1);
        let gone = fold(&later, 60, &["ml".to_owned()], &[], at(7200));
        assert!(gone.edges.is_empty() && gone.buckets.is_empty() && gone.folded.is_empty());
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

    #[test]
    fn a_bucket_and_the_sums_keep_the_heaviest_edges_and_count_the_rest() {
        let flows: Vec<WorkloadFlow> = (0..MAX_EDGES + 10)
            .map(|i| WorkloadFlow {
                from: "ml/a".into(),
                to: format!("ml/b-{i:04}"),
                port: 80,
                bytes: i64::try_from(i).unwrap() + 1,
                retransmits: 0,
            })
            .collect();
        let w = NodeWindow {
            node: "n".into(),
            end: Timestamp::from_second(1_800_000_000).unwrap(),
            flows,
        };
        let st = fold(
            &GryviaServiceGraphStatus::default(),
            60,
            &[],
            &[w],
            Timestamp::from_second(1_800_000_001).unwrap(),
        );
        assert_eq!(st.edges.len(), MAX_EDGES);
        assert_eq!(st.buckets[0].edges.len(), MAX_EDGES);
        // The ten lightest (1 to 10 bytes) are left out, once, in their bucket.
        assert_eq!(
            (st.buckets[0].edges_left_out, st.buckets[0].bytes_left_out),
            (10, 55)
        );
        assert_eq!((st.edges_left_out, st.bytes_left_out), (10, 55));
        assert!(st.edges.iter().all(|e| e.bytes > 10));
    }
}
