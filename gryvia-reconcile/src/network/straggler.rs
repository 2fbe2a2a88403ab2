//! Stragglers of a distributed training job from its ranks' traffic (GryviaTrainingInsight):
//! in a collective, every rank moves about as much as the others, so a rank whose throughput
//! is below `stragglerThresholdPercent` of the median is holding the job back. Pure.

use std::collections::BTreeMap;

use gryvia_types::{FlowRecord, WorkerTraffic};

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

/// A rank of a job: its pod (`namespace/name`) and node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rank {
    /// The rank.
    pub rank: i32,
    /// Its pod, `namespace/name`.
    pub pod: String,
    /// Its node.
    pub node: String,
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
            },
            Rank {
                rank: 1,
                pod: "ml/t-1".into(),
                node: "b".into(),
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
}
