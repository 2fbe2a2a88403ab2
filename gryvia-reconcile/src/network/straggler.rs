//! Stragglers of a distributed training job from its ranks' traffic (GryviaTrainingInsight):
//! in a collective, every rank moves about as much as the others, so a rank whose throughput
//! is below `stragglerThresholdPercent` of the median is holding the job back. Pure.

use std::collections::BTreeMap;

use gryvia_types::k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use gryvia_types::{
    CachedPod, FlowRecord, GryviaFlowAggregateStatus, GryviaTrainingInsightStatus, RankPair,
    WorkerTraffic,
};

/// What one rank's pod sent and received in a window.
#[derive(Clone, Debug, PartialEq)]
pub struct RankTraffic {
    /// The rank.
    pub rank: i32,
    /// Its pod, `namespace/name`.
    pub pod: String,
    /// The node it runs on.
    pub node: String,
    /// Bytes sent in the window.
    pub tx_bytes: i64,
    /// Bytes received in the window.
    pub rx_bytes: i64,
    /// TCP retransmissions in the window.
    pub retransmits: i64,
}

/// A rank of a job: its pod (`namespace/name`), node and address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rank {
    /// The rank.
    pub rank: i32,
    /// Its pod, `namespace/name`.
    pub pod: String,
    /// Its node.
    pub node: String,
    /// Its pod's address (none for a host-network pod).
    pub ip: Option<String>,
}

/// The ranks of a job among its `pods`: the running ones, each its rank from the Job
/// controller's `batch.kubernetes.io/job-completion-index` label (0 for a job of one pod),
/// sorted by rank.
pub fn ranks<'a>(pods: impl IntoIterator<Item = &'a CachedPod>) -> Vec<Rank> {
    let running: Vec<&CachedPod> = pods
        .into_iter()
        .filter(|p| p.phase.as_deref() == Some("Running"))
        .collect();
    let single = running.len() == 1;
    let mut out: Vec<Rank> = running
        .into_iter()
        .filter_map(|p| {
            let label = p
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(gryvia_types::labels::JOB_COMPLETION_INDEX));
            let rank = match label {
                Some(i) => i.parse().ok()?,
                None if single => 0,
                None => return None,
            };
            Some(Rank {
                rank,
                pod: format!(
                    "{}/{}",
                    p.metadata.namespace.as_deref().unwrap_or_default(),
                    p.metadata.name.as_deref().unwrap_or_default()
                ),
                node: p.node_name.clone()?,
                ip: p.pod_ip.clone(),
            })
        })
        .collect();
    out.sort_by(|a, b| a.rank.cmp(&b.rank).then_with(|| a.pod.cmp(&b.pod)));
    out
}

/// Each rank's traffic from the flows of a window (those whose local pod is the rank's pod, as
/// the collectors joined them), ranks without flows at zero.
pub fn rank_traffic(ranks: &[Rank], flows: &[FlowRecord]) -> Vec<RankTraffic> {
    let mut by_pod: BTreeMap<&str, (i64, i64, i64)> = BTreeMap::new();
    for f in flows {
        if let Some(pod) = f.pod.as_deref() {
            let e = by_pod.entry(pod).or_default();
            e.0 = e.0.saturating_add(f.tx_bytes.max(0));
            e.1 = e.1.saturating_add(f.rx_bytes.max(0));
            e.2 = e.2.saturating_add(f.retransmits.max(0));
        }
    }
    ranks
        .iter()
        .map(|r| {
            let (tx, rx, re) = by_pod.get(r.pod.as_str()).copied().unwrap_or_default();
            RankTraffic {
                rank: r.rank,
                pod: r.pod.clone(),
                node: r.node.clone(),
                tx_bytes: tx,
                rx_bytes: rx,
                retransmits: re,
            }
        })
        .collect()
}

/// The median of `values` (the mean of the middle two for an even count); 0 when empty.
pub fn median(values: &mut [f64]) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    if values.len().is_multiple_of(2) {
        (values[mid - 1] + values[mid]) / 2.0
    } else {
        values[mid]
    }
}

/// Each rank's traffic per second over `window_seconds`, sorted by rank, with the stragglers
/// marked, and one recommendation per straggler. A job with fewer than two ranks, or whose
/// ranks moved nothing, has none.
pub fn stragglers(
    ranks: &[RankTraffic],
    window_seconds: f64,
    threshold_percent: i32,
) -> (Vec<WorkerTraffic>, Vec<String>) {
    let secs = window_seconds.max(1e-9);
    let mut workers: Vec<WorkerTraffic> = ranks
        .iter()
        .map(|r| WorkerTraffic {
            rank: r.rank,
            pod: r.pod.clone(),
            node: r.node.clone(),
            tx_bytes_per_second: r.tx_bytes.max(0) as f64 / secs,
            rx_bytes_per_second: r.rx_bytes.max(0) as f64 / secs,
            retransmits: r.retransmits,
            straggler: false,
        })
        .collect();
    workers.sort_by(|a, b| a.rank.cmp(&b.rank).then_with(|| a.pod.cmp(&b.pod)));
    let throughput = |w: &WorkerTraffic| w.tx_bytes_per_second + w.rx_bytes_per_second;
    let mut all: Vec<f64> = workers.iter().map(throughput).collect();
    let med = median(&mut all);
    let mut advice = Vec::new();
    if workers.len() < 2 || med <= 0.0 {
        return (workers, advice);
    }
    let limit = med * f64::from(threshold_percent.clamp(1, 100)) / 100.0;
    for w in &mut workers {
        let t = throughput(w);
        if t < limit {
            w.straggler = true;
            advice.push(format!(
                "rank {} ({}) on node {} moves {:.0}% of the median rank's traffic ({} retransmits): check {}'s links and its GPU health before the job's code",
                w.rank,
                w.pod,
                w.node,
                100.0 * t / med,
                w.retransmits,
                w.node
            ));
        }
    }
    (workers, advice)
}

/// The insight of a job's `ranks` from the last window of each rank's node (`windows`, the
/// nodes' GryviaFlowAggregate statuses): each measured rank's traffic per second over its
/// window (the collectors share an interval: the median window length is the job's), the
/// stragglers below `threshold_percent` of the median rank, the rank-to-rank matrix (a flow of
/// rank i's pod whose peer is rank j's address), and a line for each rank whose node has no
/// window (its traffic is not known, so it is neither measured nor a straggler).
pub fn insight(
    ranks: &[Rank],
    windows: &BTreeMap<String, GryviaFlowAggregateStatus>,
    threshold_percent: i32,
) -> GryviaTrainingInsightStatus {
    let window_of = |node: &str| {
        windows
            .get(node)
            .filter(|w| w.window_start.is_some() && w.window_end.is_some())
    };
    let (measured, missing): (Vec<&Rank>, Vec<&Rank>) =
        ranks.iter().partition(|r| window_of(&r.node).is_some());
    let mut nodes: Vec<&str> = measured.iter().map(|r| r.node.as_str()).collect();
    nodes.sort_unstable();
    nodes.dedup();
    let mut lengths: Vec<f64> = Vec::new();
    let mut flows: Vec<&FlowRecord> = Vec::new();
    let mut ends = BTreeMap::new();
    for node in &nodes {
        let Some(w) = window_of(node) else { continue };
        let (Some(start), Some(end)) = (&w.window_start, &w.window_end) else {
            continue;
        };
        lengths.push((end.0.as_millisecond() - start.0.as_millisecond()) as f64 / 1000.0);
        flows.extend(w.flows.iter());
        ends.insert((*node).to_owned(), Time(end.0));
    }
    let owned: Vec<Rank> = measured.iter().map(|r| (*r).clone()).collect();
    let all: Vec<FlowRecord> = flows.iter().map(|f| (*f).clone()).collect();
    let traffic = rank_traffic(&owned, &all);
    let (workers, mut recommendations) =
        stragglers(&traffic, median(&mut lengths), threshold_percent);
    for r in &missing {
        recommendations.push(format!(
            "rank {} ({}) on node {}: no collector window for the node, so its traffic is not known",
            r.rank, r.pod, r.node
        ));
    }
    let mut throughputs: Vec<f64> = workers
        .iter()
        .map(|w| w.tx_bytes_per_second + w.rx_bytes_per_second)
        .collect();
    GryviaTrainingInsightStatus {
        straggler_count: i32::try_from(workers.iter().filter(|w| w.straggler).count())
            .unwrap_or(i32::MAX),
        median_bytes_per_second: (!throughputs.is_empty()).then(|| median(&mut throughputs)),
        matrix: matrix(&owned, &all),
        workers,
        recommendations,
        windows: ends,
        ..GryviaTrainingInsightStatus::default()
    }
}

/// Bytes between ranks: a flow of rank i's pod whose peer is rank j's address counts for
/// (i, j), both ways; sorted.
pub fn matrix(ranks: &[Rank], flows: &[FlowRecord]) -> Vec<RankPair> {
    let by_pod: BTreeMap<&str, i32> = ranks.iter().map(|r| (r.pod.as_str(), r.rank)).collect();
    let by_ip: BTreeMap<&str, i32> = ranks
        .iter()
        .filter_map(|r| Some((r.ip.as_deref()?, r.rank)))
        .collect();
    let mut out: BTreeMap<(i32, i32), i64> = BTreeMap::new();
    for f in flows {
        let (Some(from), Some(to)) = (
            f.pod.as_deref().and_then(|p| by_pod.get(p)),
            by_ip.get(f.dst_ip.as_str()),
        ) else {
            continue;
        };
        let e = out.entry((*from, *to)).or_default();
        *e = e.saturating_add(f.tx_bytes.max(0).saturating_add(f.rx_bytes.max(0)));
    }
    out.into_iter()
        .map(|((from, to), bytes)| RankPair { from, to, bytes })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rank(rank: i32, node: &str, bytes: i64, retransmits: i64) -> RankTraffic {
        RankTraffic {
            rank,
            pod: format!("ml/train-{rank}"),
            node: node.to_owned(),
            tx_bytes: bytes,
            rx_bytes: bytes,
            retransmits,
        }
    }

    #[test]
    fn the_slow_rank_is_named_with_its_node() {
        let ranks = [
            rank(2, "gpu-c", 1000, 0),
            rank(0, "gpu-a", 1000, 0),
            rank(1, "gpu-b", 300, 42),
            rank(3, "gpu-d", 900, 0),
        ];
        let (workers, advice) = stragglers(&ranks, 10.0, 70);
        assert_eq!(
            workers.iter().map(|w| w.rank).collect::<Vec<_>>(),
            [0, 1, 2, 3]
        );
        assert_eq!(
            workers.iter().map(|w| w.straggler).collect::<Vec<_>>(),
            [false, true, false, false]
        );
        assert_eq!(workers[0].tx_bytes_per_second, 100.0);
        assert_eq!(advice.len(), 1);
        // Median of 600, 1800, 2000, 2000 bytes per window is 1900: rank 1 moves 32%.
        assert!(
            advice[0].starts_with("rank 1 (ml/train-1) on node gpu-b moves 32%"),
            "{advice:?}"
        );
        assert!(advice[0].contains("42 retransmits"));
    }

    #[test]
    fn at_the_threshold_a_rank_is_not_a_straggler() {
        let ranks = [
            rank(0, "a", 100, 0),
            rank(1, "b", 70, 0),
            rank(2, "c", 100, 0),
        ];
        let (workers, _) = stragglers(&ranks, 1.0, 70);
        assert!(workers.iter().all(|w| !w.straggler));
        let (workers, _) = stragglers(&ranks, 1.0, 71);
        assert!(workers[1].straggler);
    }

    #[test]
    fn one_rank_or_no_traffic_has_no_stragglers() {
        assert!(stragglers(&[rank(0, "a", 5, 0)], 1.0, 70).1.is_empty());
        let idle = [rank(0, "a", 0, 0), rank(1, "b", 0, 0)];
        assert!(stragglers(&idle, 1.0, 70).0.iter().all(|w| !w.straggler));
    }

    #[test]
    fn a_rank_s_traffic_is_the_sum_of_its_pod_s_flows() {
        use gryvia_types::Protocol;
        let flow = |pod: Option<&str>, tx, rx, re| FlowRecord {
            src_ip: "10.0.0.1".into(),
            src_port: 1,
            dst_ip: "10.0.0.2".into(),
            dst_port: 2,
            protocol: Protocol::TCP,
            tx_bytes: tx,
            rx_bytes: rx,
            retransmits: re,
            pod: pod.map(str::to_owned),
        };
        let ranks = [
            Rank {
                rank: 0,
                pod: "ml/t-0".into(),
                node: "a".into(),
                ip: None,
            },
            Rank {
                rank: 1,
                pod: "ml/t-1".into(),
                node: "b".into(),
                ip: None,
            },
        ];
        let flows = [
            flow(Some("ml/t-0"), 10, 20, 1),
            flow(Some("ml/t-0"), 5, 5, 2),
            flow(Some("other/x"), 99, 99, 9),
            flow(None, 1, 1, 1),
        ];
        let t = rank_traffic(&ranks, &flows);
        assert_eq!(
            (t[0].tx_bytes, t[0].rx_bytes, t[0].retransmits),
            (15, 25, 3)
        );
        assert_eq!((t[1].tx_bytes, t[1].rx_bytes, t[1].retransmits), (0, 0, 0));
    }

    #[test]
    fn medians_of_odd_and_even_counts() {
        assert_eq!(median(&mut []), 0.0);
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 3.0, 2.0]), 2.5);
    }

    #[test]
    fn an_insight_names_the_slow_rank_counts_rank_to_rank_bytes_and_says_which_rank_is_unknown() {
        use gryvia_types::Protocol;
        let t = |s: i64| Time(crate::Timestamp::from_second(1_800_000_000 + s).unwrap());
        let flow = |pod: &str, dst: &str, tx, rx| FlowRecord {
            src_ip: "10.0.0.9".into(),
            src_port: 40000,
            dst_ip: dst.into(),
            dst_port: 29500,
            protocol: Protocol::TCP,
            tx_bytes: tx,
            rx_bytes: rx,
            retransmits: 3,
            pod: Some(pod.into()),
        };
        let rank = |i: i32, node: &str| Rank {
            rank: i,
            pod: format!("ml/t-{i}"),
            node: node.into(),
            ip: Some(format!("10.0.0.{}", i + 1)),
        };
        let window = |flows| GryviaFlowAggregateStatus {
            window_start: Some(t(0)),
            window_end: Some(t(10)),
            flows,
            flow_count: 1,
        };
        let windows = BTreeMap::from([
            (
                "a".to_owned(),
                window(vec![flow("ml/t-0", "10.0.0.2", 6000, 4000)]),
            ),
            (
                "b".to_owned(),
                window(vec![
                    flow("ml/t-1", "10.0.0.1", 1000, 1000),
                    flow("ml/t-1", "10.0.0.3", 0, 0),
                ]),
            ),
            (
                "c".to_owned(),
                window(vec![flow("ml/t-2", "10.0.0.2", 5000, 5000)]),
            ),
        ]);
        let ranks = [rank(0, "a"), rank(1, "b"), rank(2, "c"), rank(3, "d")];
        let st = insight(&ranks, &windows, 70);
        assert_eq!(st.workers.len(), 3);
        assert_eq!(st.straggler_count, 1);
        assert!(st.workers[1].straggler);
        assert_eq!(st.workers[1].node, "b");
        assert_eq!(st.workers[0].tx_bytes_per_second, 600.0);
        assert_eq!(st.median_bytes_per_second, Some(1000.0));
        assert_eq!(
            st.matrix,
            [
                RankPair {
                    from: 0,
                    to: 1,
                    bytes: 10_000
                },
                RankPair {
                    from: 1,
                    to: 0,
                    bytes: 2000
                },
                RankPair {
                    from: 1,
                    to: 2,
                    bytes: 0
                },
                RankPair {
                    from: 2,
                    to: 1,
                    bytes: 10_000
                },
            ]
        );
        assert!(st.recommendations[0].starts_with("rank 1 (ml/t-1) on node b moves 20%"));
        assert!(
            st.recommendations[1].starts_with("rank 3 (ml/t-3) on node d: no collector window")
        );
        assert_eq!(st.windows.len(), 3);
    }
}
