//! ASHA, asynchronous successive halving (Li et al., "A System for Massively Parallel
//! Hyperparameter Tuning", MLSys 2020), as early stopping of running trials.
//!
//! Rung k is at step `minStep` x `reductionFactor`^k. A trial reaches rung k with the first
//! value it reports at or after that step. When it does, it is compared with every trial that
//! reached rung k before (running, finished or stopped): of the n values at the rung, the best
//! n / `reductionFactor` (rounded down) go on, the others are stopped; while n is below
//! `reductionFactor` the rung is too thin to judge and the trial goes on. Nothing is stopped
//! before `minTrials` trials have succeeded. A decision is made once, when the rung is
//! reached, and recorded with the rung's value, so it survives a restart.

use gryvia_types::{EarlyStopping, Goal, RungValue};

use super::metrics::Report;

/// The step of rung `k` (saturating).
pub fn rung_step(es: &EarlyStopping, k: u32) -> i64 {
    let eta = i64::from(es.reduction_factor.max(2));
    eta.checked_pow(k)
        .and_then(|p| p.checked_mul(es.min_step.max(1)))
        .unwrap_or(i64::MAX)
}

/// The rungs `reports` reach: for each rung, the first report at or after its step.
pub fn rungs(reports: &[Report], es: &EarlyStopping) -> Vec<RungValue> {
    let last = reports.iter().map(|r| r.step).max().unwrap_or(0);
    let mut out = Vec::new();
    for k in 0..63u32 {
        let step = rung_step(es, k);
        if step > last {
            break;
        }
        if let Some(r) = reports.iter().find(|r| r.step >= step) {
            out.push(RungValue {
                rung: i32::try_from(k).unwrap_or(i32::MAX),
                step: r.step,
                value: r.value,
            });
        }
    }
    out
}

/// Whether `a` is better than `b` under `goal`.
pub fn better(goal: Goal, a: f64, b: f64) -> bool {
    match goal {
        Goal::Minimize => a < b,
        Goal::Maximize => a > b,
    }
}

/// How many of `n` values at a rung go on: n / `eta`, rounded down.
pub fn kept(n: usize, eta: i32) -> usize {
    n / usize::try_from(eta.max(2)).unwrap_or(2)
}

/// Whether a trial with `value` at a rung goes on, given the `others` values there: it does
/// when fewer than n / `eta` of the n values (its own included) are better, or when the rung
/// holds fewer than `eta` values.
pub fn goes_on(value: f64, others: &[f64], goal: Goal, eta: i32) -> bool {
    let n = others.len() + 1;
    let keep = kept(n, eta);
    if keep == 0 {
        return true;
    }
    others.iter().filter(|o| better(goal, **o, value)).count() < keep
}

#[cfg(test)]
mod tests {
    use super::*;

    fn es(min_step: i64, eta: i32) -> EarlyStopping {
        EarlyStopping {
            min_trials: 1,
            reduction_factor: eta,
            min_step,
        }
    }

    #[test]
    fn rungs_take_the_first_report_at_or_after_each_step() {
        let reports: Vec<Report> = [(1, 0.9), (2, 0.8), (4, 0.5), (9, 0.3), (10, 0.2)]
            .iter()
            .map(|&(step, value)| Report { step, value })
            .collect();
        let r = rungs(&reports, &es(1, 3));
        assert_eq!(
            r.iter().map(|r| (r.rung, r.step)).collect::<Vec<_>>(),
            vec![(0, 1), (1, 4), (2, 9)]
        );
        assert_eq!(rung_step(&es(2, 3), 2), 18);
        assert_eq!(rung_step(&es(2, 10), 40), i64::MAX);
    }

    #[test]
    fn a_trial_goes_on_only_in_the_top_part_of_a_rung() {
        // Six values at the rung with eta 3: the best two go on.
        let all = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6];
        let on: Vec<f64> = all
            .iter()
            .copied()
            .filter(|v| {
                let others: Vec<f64> = all.iter().copied().filter(|o| o != v).collect();
                goes_on(*v, &others, Goal::Minimize, 3)
            })
            .collect();
        assert_eq!(on, vec![0.1, 0.2]);
        // Too thin to judge.
        assert!(goes_on(9.0, &[0.1], Goal::Minimize, 3));
        // Maximize.
        assert!(goes_on(0.9, &[0.1, 0.2], Goal::Maximize, 3));
        assert!(!goes_on(0.0, &[0.1, 0.2], Goal::Maximize, 3));
    }
}
