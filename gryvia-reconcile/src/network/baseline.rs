//! Streaming baselines of a node's network metrics, and the anomalies a sample far from them
//! raises (GryviaNetworkBaseline -> GryviaNetworkAnomaly). Pure: the operator feeds one sample
//! per collector window.
//!
//! The baseline of a metric is its mean and variance: exact (Welford) over the first
//! `minSamples` samples, then an exponentially weighted moving mean and variance with
//! `alpha = 2 / (minSamples + 1)`, so that the last `minSamples` samples carry most of the
//! weight and the baseline follows a lasting change of level. It is not seasonal: a daily
//! pattern shows as variance, not as a shape.
//!
//! Once `minSamples` samples are in, a sample more than `sensitivitySigma` standard deviations
//! from the mean in the direction that hurts (bytes down; connections, retransmissions and RTT
//! up) is anomalous: `warning`, or `critical` at twice the distance. Every sample is folded in
//! afterwards, anomalous or not. The standard deviation is floored at 1% of the mean (and at
//! [`MIN_DEVIATION`]) so that a metric that never moved does not call every wiggle an anomaly.

use std::collections::BTreeMap;

use gryvia_types::{
    AnomalyType, GryviaFabricSignalStatus, GryviaFlowAggregateStatus, MetricBaseline, Severity,
};

/// The metrics a node's baseline follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Metric {
    /// Bytes per second through the node's flows.
    Bytes,
    /// Flows (connections) seen in the window.
    Connections,
    /// TCP retransmissions per second.
    RetransmitRate,
    /// Median smoothed round-trip time, microseconds.
    RttMicros,
}

/// Which way a metric goes when something is wrong.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bad {
    /// Lower is worse.
    Low,
    /// Higher is worse.
    High,
}

impl Metric {
    /// Every metric, in the order of their keys.
    pub const ALL: [Metric; 4] = [
        Metric::Bytes,
        Metric::Connections,
        Metric::RetransmitRate,
        Metric::RttMicros,
    ];

    /// The key in `status.metrics` and in an anomaly's `metric`.
    pub fn key(self) -> &'static str {
        match self {
            Metric::Bytes => "bytesPerSecond",
            Metric::Connections => "connections",
            Metric::RetransmitRate => "retransmitsPerSecond",
            Metric::RttMicros => "rttMicros",
        }
    }

    /// The metric of a key.
    pub fn of_key(key: &str) -> Option<Metric> {
        Metric::ALL.into_iter().find(|m| m.key() == key)
    }

    /// The anomaly a bad value of the metric is.
    pub fn anomaly(self) -> AnomalyType {
        match self {
            Metric::Bytes => AnomalyType::BandwidthDrop,
            Metric::Connections => AnomalyType::ConnectionFlood,
            Metric::RetransmitRate => AnomalyType::RetransmitSpike,
            Metric::RttMicros => AnomalyType::LatencySpike,
        }
    }

    /// Which way is bad.
    pub fn bad(self) -> Bad {
        match self {
            Metric::Bytes => Bad::Low,
            _ => Bad::High,
        }
    }
}

/// The smallest standard deviation a baseline is judged with.
pub const MIN_DEVIATION: f64 = 1e-6;

/// The weight of a new sample once the baseline is warm.
pub fn alpha(min_samples: i64) -> f64 {
    2.0 / (min_samples.max(1) as f64 + 1.0)
}

/// `b` with sample `x` folded in, `n` samples having been folded before it.
pub fn fold(b: &MetricBaseline, n: i64, x: f64, min_samples: i64) -> MetricBaseline {
    if !x.is_finite() {
        return b.clone();
    }
    let d = x - b.mean;
    if n < min_samples {
        // Welford, population variance.
        let count = (n.max(0) + 1) as f64;
        let mean = b.mean + d / count;
        let variance = (b.variance * (count - 1.0) + d * (x - mean)) / count;
        MetricBaseline {
            mean,
            variance: variance.max(0.0),
            samples: n.max(0) + 1,
            last: Some(x),
            at: b.at.clone(),
            deviating: b.deviating,
        }
    } else {
        let a = alpha(min_samples);
        MetricBaseline {
            mean: b.mean + a * d,
            variance: ((1.0 - a) * (b.variance + a * d * d)).max(0.0),
            samples: n + 1,
            last: Some(x),
            at: b.at.clone(),
            deviating: b.deviating,
        }
    }
}

/// The standard deviation a value is judged against.
pub fn deviation(b: &MetricBaseline) -> f64 {
    b.variance
        .max(0.0)
        .sqrt()
        .max(b.mean.abs() * 0.01)
        .max(MIN_DEVIATION)
}

/// How far off a value is.
#[derive(Clone, Debug, PartialEq)]
pub struct Deviation {
    /// The metric.
    pub metric: Metric,
    /// What was observed.
    pub observed: f64,
    /// The baseline mean it was judged against.
    pub baseline: f64,
    /// Standard deviations from the mean, in the bad direction.
    pub sigmas: f64,
    /// `warning` beyond `sensitivitySigma`, `critical` beyond twice that.
    pub severity: Severity,
}

/// The deviation of `x` from `b` when it is an anomaly (`sigma` standard deviations the bad
/// way), `None` otherwise.
pub fn judge(metric: Metric, b: &MetricBaseline, x: f64, sigma: f64) -> Option<Deviation> {
    if !x.is_finite() {
        return None;
    }
    let off = match metric.bad() {
        Bad::Low => b.mean - x,
        Bad::High => x - b.mean,
    } / deviation(b);
    if off <= sigma {
        return None;
    }
    Some(Deviation {
        metric,
        observed: x,
        baseline: b.mean,
        sigmas: off,
        severity: if off > 2.0 * sigma {
            Severity::Critical
        } else {
            Severity::Warning
        },
    })
}

/// A baseline after a sample: what changed and what was found.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Step {
    /// Samples folded in, this one included.
    pub samples: i64,
    /// Every metric's baseline with the sample folded in.
    pub metrics: BTreeMap<String, MetricBaseline>,
    /// The metrics the sample was anomalous in (judged before it was folded in), by metric.
    pub anomalies: BTreeMap<Metric, Deviation>,
}

/// Folds one sample (values by metric; a metric missing from it is left alone) into baselines
/// folded `samples` times, judging each metric first once `min_samples` of it are in (each
/// metric counts its own samples: a sample may lack some). Each metric it had records whether
/// it was deviating; a deviating value moves the mean but leaves the variance as it was.
pub fn step(
    samples: i64,
    metrics: &BTreeMap<String, MetricBaseline>,
    sample: &BTreeMap<Metric, f64>,
    min_samples: i64,
    sigma: f64,
) -> Step {
    let mut out = Step {
        samples: samples + 1,
        metrics: metrics.clone(),
        anomalies: BTreeMap::new(),
    };
    for (&metric, &x) in sample {
        let b = metrics.get(metric.key()).cloned().unwrap_or_default();
        let found = if b.samples >= min_samples {
            judge(metric, &b, x, sigma)
        } else {
            None
        };
        let mut folded = fold(&b, b.samples, x, min_samples);
        if found.is_some() {
            // A deviating value moves the mean (a lasting change of level becomes the new
            // normal) but does not widen the variance: otherwise the spread it causes would
            // hide the same deviation two or three samples later, while it still lasts.
            folded.variance = b.variance;
        }
        folded.deviating = found.is_some();
        if let Some(d) = found {
            out.anomalies.insert(metric, d);
        }
        out.metrics.insert(metric.key().to_owned(), folded);
    }
    out
}

/// A node's sample from its collector's window: bytes per second and connections from its
/// GryviaFlowAggregate (the flows it kept, bytes both ways, over the window's length; every
/// flow seen, kept or not, as connections), retransmissions per second and the median RTT
/// from its GryviaFabricSignal. A metric without data (no aggregate, a window of no length,
/// no RTT sample) is left out.
pub fn sample(
    aggregate: Option<&GryviaFlowAggregateStatus>,
    signal: Option<&GryviaFabricSignalStatus>,
) -> BTreeMap<Metric, f64> {
    let mut out = BTreeMap::new();
    if let Some(a) = aggregate
        && let (Some(start), Some(end)) = (&a.window_start, &a.window_end)
    {
        let secs = end.0.duration_since(start.0).as_secs_f64();
        if secs > 0.0 {
            let bytes: i64 = a
                .flows
                .iter()
                .map(|f| f.tx_bytes.max(0).saturating_add(f.rx_bytes.max(0)))
                .fold(0, i64::saturating_add);
            out.insert(Metric::Bytes, bytes as f64 / secs);
            out.insert(Metric::Connections, a.flow_count.max(0) as f64);
        }
    }
    if let Some(s) = signal {
        if s.window_seconds > 0 {
            out.insert(
                Metric::RetransmitRate,
                s.tcp_retransmits.max(0) as f64 / f64::from(s.window_seconds),
            );
        }
        if let Some(rtt) = s.median_srtt_micros {
            out.insert(Metric::RttMicros, rtt as f64);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn run(xs: &[f64], min: i64) -> MetricBaseline {
        let mut b = MetricBaseline::default();
        for (n, &x) in xs.iter().enumerate() {
            b = fold(&b, n as i64, x, min);
        }
        b
    }

    #[test]
    fn the_first_samples_give_the_exact_mean_and_variance() {
        let b = run(&[2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0], 30);
        assert!((b.mean - 5.0).abs() < 1e-12);
        assert!((b.variance - 4.0).abs() < 1e-12);
    }

    #[test]
    fn a_warm_baseline_follows_a_lasting_change_of_level() {
        let mut xs = vec![100.0; 30];
        xs.extend(std::iter::repeat_n(200.0, 60));
        let b = run(&xs, 30);
        // After twice minSamples at the new level, the mean is within 2% of it.
        assert!((b.mean - 200.0).abs() < 4.0, "{b:?}");
    }

    #[test]
    fn a_drop_in_bytes_and_a_rise_in_rtt_are_anomalies_the_other_ways_are_not() {
        let b = MetricBaseline {
            mean: 1000.0,
            variance: 100.0,
            ..MetricBaseline::default()
        };
        // sd 10: 3 sigma is 30 away.
        assert!(judge(Metric::Bytes, &b, 960.0, 3.0).is_some());
        assert!(judge(Metric::Bytes, &b, 1040.0, 3.0).is_none());
        assert!(judge(Metric::RttMicros, &b, 1040.0, 3.0).is_some());
        assert!(judge(Metric::RttMicros, &b, 960.0, 3.0).is_none());
        assert!(judge(Metric::RttMicros, &b, 1030.0, 3.0).is_none());
        let d = judge(Metric::RetransmitRate, &b, 1100.0, 3.0).unwrap();
        assert_eq!(d.severity, Severity::Critical);
        assert!((d.sigmas - 10.0).abs() < 1e-9);
        let d = judge(Metric::Connections, &b, 1050.0, 3.0).unwrap();
        assert_eq!(d.severity, Severity::Warning);
        assert_eq!(d.metric.anomaly(), AnomalyType::ConnectionFlood);
    }

    #[test]
    fn a_metric_that_never_moved_is_judged_against_one_percent_of_its_mean() {
        let b = run(&[500.0; 40], 30);
        assert_eq!(b.variance, 0.0);
        // 1% of 500 is 5: 3 sigma is 15.
        assert!(judge(Metric::RttMicros, &b, 514.0, 3.0).is_none());
        assert!(judge(Metric::RttMicros, &b, 516.0, 3.0).is_some());
    }

    #[test]
    fn nothing_is_judged_before_min_samples_and_every_sample_is_folded() {
        let none = BTreeMap::new();
        let sample = BTreeMap::from([(Metric::Bytes, 0.0), (Metric::RttMicros, 1e9)]);
        let s = step(2, &none, &sample, 3, 3.0);
        assert!(s.anomalies.is_empty());
        assert_eq!(s.samples, 3);
        assert_eq!(s.metrics.len(), 2);

        let mut metrics = BTreeMap::new();
        let mut samples = 0;
        for _ in 0..30 {
            let s = step(
                samples,
                &metrics,
                &BTreeMap::from([(Metric::Bytes, 1000.0)]),
                30,
                3.0,
            );
            assert!(s.anomalies.is_empty());
            (samples, metrics) = (s.samples, s.metrics);
        }
        let s = step(
            samples,
            &metrics,
            &BTreeMap::from([(Metric::Bytes, 10.0)]),
            30,
            3.0,
        );
        let d = &s.anomalies[&Metric::Bytes];
        assert_eq!((d.observed, d.baseline), (10.0, 1000.0));
        assert!(s.metrics["bytesPerSecond"].mean < 1000.0);
    }

    #[test]
    fn a_lasting_drop_stays_an_anomaly_for_dozens_of_samples_then_becomes_the_new_normal() {
        let mut metrics = BTreeMap::new();
        let mut samples = 0;
        let mut deviating = Vec::new();
        for i in 0..300 {
            let x = if i < 30 { 10_000.0 } else { 10.0 };
            let s = step(
                samples,
                &metrics,
                &BTreeMap::from([(Metric::Bytes, x)]),
                30,
                3.0,
            );
            deviating.push(s.metrics["bytesPerSecond"].deviating);
            (samples, metrics) = (s.samples, s.metrics);
        }
        let first_normal = deviating.iter().skip(30).position(|d| !d).unwrap();
        assert!(deviating[30..30 + first_normal].iter().all(|&d| d));
        // The level never moved before, so sigma is 1% of the mean: the mean, 10 + 9990 (1 -
        // 2/31)^k, is within 3% of itself after about 156 samples.
        assert!((150..165).contains(&first_normal), "{first_normal}");
        assert!(deviating[30 + first_normal..].iter().all(|d| !d));
    }

    #[test]
    fn each_metric_counts_its_own_samples_and_records_whether_it_deviated() {
        let mut metrics = BTreeMap::new();
        let mut samples = 0;
        // Bytes in every sample, RTT in every other: RTT is judged only after its own 30.
        for i in 0..60 {
            let mut sample = BTreeMap::from([(Metric::Bytes, 1000.0)]);
            if i % 2 == 0 {
                sample.insert(Metric::RttMicros, 500.0);
            }
            let s = step(samples, &metrics, &sample, 30, 3.0);
            (samples, metrics) = (s.samples, s.metrics);
        }
        assert_eq!(samples, 60);
        assert_eq!(metrics["bytesPerSecond"].samples, 60);
        assert_eq!(metrics["rttMicros"].samples, 30);
        let s = step(
            samples,
            &metrics,
            &BTreeMap::from([(Metric::Bytes, 1000.0), (Metric::RttMicros, 5000.0)]),
            30,
            3.0,
        );
        assert_eq!(s.anomalies.keys().collect::<Vec<_>>(), [&Metric::RttMicros]);
        assert!(s.metrics["rttMicros"].deviating);
        assert!(!s.metrics["bytesPerSecond"].deviating);
        assert_eq!(s.metrics["rttMicros"].last, Some(5000.0));
    }

    #[test]
    fn a_sample_is_read_from_the_aggregate_and_the_signal() {
        use gryvia_types::k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
        use gryvia_types::{FlowRecord, Protocol};
        let t = |s: i64| Time(crate::Timestamp::from_second(s).unwrap());
        let flow = |tx, rx| FlowRecord {
            src_ip: "10.0.0.1".into(),
            src_port: 4000,
            dst_ip: "10.0.0.2".into(),
            dst_port: 80,
            protocol: Protocol::TCP,
            tx_bytes: tx,
            rx_bytes: rx,
            retransmits: 0,
            pod: None,
        };
        let aggregate = GryviaFlowAggregateStatus {
            window_start: Some(t(100)),
            window_end: Some(t(110)),
            flows: vec![flow(600, 400), flow(50, 50)],
            flow_count: 7,
        };
        let signal = GryviaFabricSignalStatus {
            tcp_retransmits: 30,
            median_srtt_micros: Some(250),
            window_seconds: 10,
            ..Default::default()
        };
        let s = sample(Some(&aggregate), Some(&signal));
        assert_eq!(s[&Metric::Bytes], 110.0);
        assert_eq!(s[&Metric::Connections], 7.0);
        assert_eq!(s[&Metric::RetransmitRate], 3.0);
        assert_eq!(s[&Metric::RttMicros], 250.0);
        let no_rtt = GryviaFabricSignalStatus {
            window_seconds: 0,
            ..Default::default()
        };
        assert!(sample(None, Some(&no_rtt)).is_empty());
    }

    #[test]
    fn keys_name_their_metrics() {
        for m in Metric::ALL {
            assert_eq!(Metric::of_key(m.key()), Some(m));
        }
        assert_eq!(Metric::of_key("nope"), None);
    }

    proptest! {
        #[test]
        fn the_mean_stays_within_the_samples_and_the_variance_is_never_negative(
            xs in proptest::collection::vec(-1e9f64..1e9, 1..200),
            min in 1i64..50,
        ) {
            let b = run(&xs, min);
            let lo = xs.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = xs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let slack = 1e-6 * (hi.abs().max(lo.abs()) + 1.0);
            prop_assert!(b.mean >= lo - slack && b.mean <= hi + slack, "{b:?} {lo} {hi}");
            prop_assert!(b.variance >= 0.0);
        }

        #[test]
        fn a_constant_series_is_never_anomalous(x in 0.0f64..1e9, n in 1usize..100) {
            let b = run(&vec![x; n], 10);
            for m in Metric::ALL {
                prop_assert!(judge(m, &b, x, 1.0).is_none());
            }
        }
    }
}
