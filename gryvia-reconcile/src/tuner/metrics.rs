//! The metrics a trial reports, as Katib's stdout collector reads them: lines holding
//! `gryvia-metric NAME=VALUE [NAME=VALUE ...] [step=N]` in the main container's log, or in its
//! termination message (the file at `terminationMessagePath`, `/dev/termination-log` by
//! default, which the kubelet copies into the pod's status when the container ends).
//!
//! Text before the marker (a timestamp, a logger's prefix) is ignored; a line may carry
//! several metrics. A report without `step=` gets the step after the trial's previous report
//! of that metric (the first is step 1). Values that are not finite numbers are skipped.

use serde::{Deserialize, Serialize};

/// The marker that starts a metrics line.
pub const MARKER: &str = "gryvia-metric";

/// One value of the objective a trial reported.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// The step it was reported at.
    pub step: i64,
    /// The value.
    pub value: f64,
}

/// The reports of `metric` in `text`, in the order written.
pub fn parse(text: &str, metric: &str) -> Vec<Report> {
    let mut out: Vec<Report> = Vec::new();
    for line in text.lines() {
        let Some(at) = line.find(MARKER) else {
            continue;
        };
        let rest = &line[at + MARKER.len()..];
        if !rest.starts_with(char::is_whitespace) {
            continue;
        }
        let mut value = None;
        let mut step = None;
        for token in rest.split_whitespace() {
            let Some((k, v)) = token.split_once('=') else {
                continue;
            };
            if k == metric {
                value = v.parse::<f64>().ok().filter(|x| x.is_finite());
            } else if k == "step" {
                step = v.parse::<i64>().ok();
            }
        }
        if let Some(value) = value {
            let step = step.unwrap_or_else(|| out.last().map_or(1, |r| r.step + 1));
            out.push(Report { step, value });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_with_the_marker_give_reports_of_the_metric() {
        let log = "2026-01-01T00:00:00Z starting\n\
                   gryvia-metric loss=0.9 step=1\n\
                   [info] gryvia-metric accuracy=0.5 loss=0.5 step=3\n\
                   gryvia-metric accuracy=0.7\n\
                   gryvia-metric loss=nan step=4\n\
                   gryvia-metrics loss=0.1 step=5\n\
                   gryvia-metric loss=0.25\n";
        assert_eq!(
            parse(log, "loss"),
            vec![
                Report {
                    step: 1,
                    value: 0.9
                },
                Report {
                    step: 3,
                    value: 0.5
                },
                Report {
                    step: 4,
                    value: 0.25
                },
            ]
        );
        assert_eq!(parse(log, "accuracy").len(), 2);
        assert!(parse(log, "f1").is_empty());
    }
}
