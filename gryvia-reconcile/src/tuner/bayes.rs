//! Bayesian optimisation: a Gaussian process with expected improvement.
//!
//! Why a GP and not TPE: studies here are small (tens to a few hundred trials of GPU jobs),
//! where a GP's sample efficiency on smooth objectives is what saves GPU-hours, and its cost
//! (Cholesky factorisations of at most [`MAX_MODEL`] points) is small next to a GPU job: about
//! 11 ms per suggestion with 50 trials, 240 ms with 300 (`benches/README.md`). Integers are
//! modelled on their (log) scale and rounded, categorical values one-hot.
//!
//! The model: a Matérn 5/2 kernel on the features (each in [0, 1]), one length scale and the
//! noise picked from a small grid by the marginal likelihood, values standardised. Trials
//! still running enter as "constant liars" at the best value so far, so parallel trials spread
//! out. The next point maximises expected improvement over [`CANDIDATES`] random points and
//! [`LOCAL`] perturbations of the best five (at three scales: 0.1, 0.02 and 0.004 of each
//! range), all drawn from the trial's own seeded stream.

use super::rng::Rng;
use super::space::{Dim, Params, Space};

/// Random candidates scored per suggestion.
pub const CANDIDATES: usize = 2000;
/// Candidates near the best trials scored per suggestion.
pub const LOCAL: usize = 500;
/// Most trials the model is fitted on: the best half and the most recent half.
pub const MAX_MODEL: usize = 300;

const LENGTH_SCALES: [f64; 6] = [0.05, 0.1, 0.2, 0.4, 0.8, 1.6];
const NOISES: [f64; 4] = [1e-6, 1e-4, 1e-2, 1e-1];

fn matern52(d2: f64, ls: f64) -> f64 {
    let r = (d2.max(0.0)).sqrt() / ls;
    let s5 = 5f64.sqrt() * r;
    (1.0 + s5 + 5.0 / 3.0 * r * r) * (-s5).exp()
}

fn dist2(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum()
}

/// The lower Cholesky factor of `k` (n x n, row-major), `None` when not positive definite.
fn cholesky(k: &[f64], n: usize) -> Option<Vec<f64>> {
    let mut l = vec![0.0; n * n];
    for i in 0..n {
        for j in 0..=i {
            let s: f64 = (0..j).map(|p| l[i * n + p] * l[j * n + p]).sum();
            if i == j {
                let d = k[i * n + i] - s;
                if d <= 0.0 || !d.is_finite() {
                    return None;
                }
                l[i * n + i] = d.sqrt();
            } else {
                l[i * n + j] = (k[i * n + j] - s) / l[j * n + j];
            }
        }
    }
    Some(l)
}

/// Solves L x = b.
fn forward(l: &[f64], n: usize, b: &[f64]) -> Vec<f64> {
    let mut x = vec![0.0; n];
    for i in 0..n {
        let s: f64 = (0..i).map(|p| l[i * n + p] * x[p]).sum();
        x[i] = (b[i] - s) / l[i * n + i];
    }
    x
}

/// Solves Lᵀ x = b.
fn backward(l: &[f64], n: usize, b: &[f64]) -> Vec<f64> {
    let mut x = vec![0.0; n];
    for i in (0..n).rev() {
        let s: f64 = (i + 1..n).map(|p| l[p * n + i] * x[p]).sum();
        x[i] = (b[i] - s) / l[i * n + i];
    }
    x
}

/// A fitted Gaussian process.
struct Gp {
    x: Vec<Vec<f64>>,
    l: Vec<f64>,
    alpha: Vec<f64>,
    ls: f64,
}

impl Gp {
    /// Fits `y` (standardised) at `x`, choosing the length scale and noise by the marginal
    /// likelihood.
    #[expect(clippy::cast_precision_loss, reason = "n is at most a few hundred")]
    fn fit(x: Vec<Vec<f64>>, y: &[f64]) -> Option<Gp> {
        let n = x.len();
        let mut best: Option<(f64, Gp)> = None;
        for ls in LENGTH_SCALES {
            let mut k = vec![0.0; n * n];
            for i in 0..n {
                for j in 0..=i {
                    let v = matern52(dist2(&x[i], &x[j]), ls);
                    k[i * n + j] = v;
                    k[j * n + i] = v;
                }
            }
            for noise in NOISES {
                let mut kn = k.clone();
                for i in 0..n {
                    kn[i * n + i] += noise;
                }
                let Some(l) = cholesky(&kn, n) else {
                    continue;
                };
                let alpha = backward(&l, n, &forward(&l, n, y));
                let fit: f64 = y.iter().zip(&alpha).map(|(a, b)| a * b).sum();
                let logdet: f64 = (0..n).map(|i| l[i * n + i].ln()).sum();
                let ml = -0.5 * fit - logdet - 0.5 * n as f64 * std::f64::consts::TAU.ln();
                if best.as_ref().is_none_or(|(m, _)| ml > *m) {
                    best = Some((
                        ml,
                        Gp {
                            x: x.clone(),
                            l,
                            alpha,
                            ls,
                        },
                    ));
                }
            }
        }
        best.map(|(_, gp)| gp)
    }

    /// Mean and standard deviation at `p`.
    fn predict(&self, p: &[f64]) -> (f64, f64) {
        let n = self.x.len();
        let ks: Vec<f64> = self
            .x
            .iter()
            .map(|x| matern52(dist2(x, p), self.ls))
            .collect();
        let mu: f64 = ks.iter().zip(&self.alpha).map(|(a, b)| a * b).sum();
        let v = forward(&self.l, n, &ks);
        let var = 1.0 - v.iter().map(|x| x * x).sum::<f64>();
        (mu, var.max(1e-12).sqrt())
    }
}

/// The standard normal density.
fn pdf(z: f64) -> f64 {
    (-0.5 * z * z).exp() / (std::f64::consts::TAU).sqrt()
}

/// The standard normal distribution function (erfc by W. J. Cody's rational approximation as
/// in Numerical Recipes' `erfcc`, relative error below 1.2e-7).
fn cdf(z: f64) -> f64 {
    let x = -z / std::f64::consts::SQRT_2;
    let t = 1.0 / (1.0 + 0.5 * x.abs());
    let y = t
        * (-x * x - 1.265_512_23
            + t * (1.000_023_68
                + t * (0.374_091_96
                    + t * (0.096_784_18
                        + t * (-0.186_288_06
                            + t * (0.278_868_07
                                + t * (-1.135_203_98
                                    + t * (1.488_515_87
                                        + t * (-0.822_152_23 + t * 0.170_872_77)))))))))
            .exp();
    let erfc = if x >= 0.0 { y } else { 2.0 - y };
    0.5 * erfc
}

/// Expected improvement below `best` of a prediction (`mu`, `sigma`).
pub fn expected_improvement(mu: f64, sigma: f64, best: f64) -> f64 {
    let gain = best - mu;
    let z = gain / sigma;
    gain * cdf(z) + sigma * pdf(z)
}

/// The coordinates of `params` in the unit cube, one per parameter (the middle of an
/// integer's or a value's cell).
#[expect(clippy::cast_precision_loss, reason = "value counts are small")]
fn unit(space: &Space, params: &Params) -> Option<Vec<f64>> {
    let mut out = Vec::with_capacity(space.params.len());
    for p in &space.params {
        let v = params.get(&p.name)?;
        match &p.dim {
            Dim::Categorical(values) => {
                let at = values.iter().position(|x| x == v)?;
                out.push((at as f64 + 0.5) / values.len() as f64);
            }
            dim => {
                let mut f = Vec::new();
                dim.features(v, &mut f)?;
                out.push(f[0].clamp(0.0, 1.0));
            }
        }
    }
    Some(out)
}

/// Which trials the model is fitted on: all when few, else the best and the most recent.
fn model_points(observed: &[(Params, f64)]) -> Vec<usize> {
    if observed.len() <= MAX_MODEL {
        return (0..observed.len()).collect();
    }
    let mut by_value: Vec<usize> = (0..observed.len()).collect();
    by_value.sort_by(|a, b| observed[*a].1.total_cmp(&observed[*b].1).then(a.cmp(b)));
    let mut keep: Vec<usize> = by_value[..MAX_MODEL / 2].to_vec();
    for i in (0..observed.len()).rev() {
        if keep.len() >= MAX_MODEL {
            break;
        }
        if !keep.contains(&i) {
            keep.push(i);
        }
    }
    keep.sort_unstable();
    keep
}

/// The next point to try given `observed` trials (their parameters and values, smaller is
/// better) and `pending` ones (running), or `None` when the model cannot be fitted (fewer
/// than two observations); `rng`: the trial's own stream.
pub fn suggest(
    space: &Space,
    observed: &[(Params, f64)],
    pending: &[Params],
    rng: &mut Rng,
) -> Option<Params> {
    let model = model_points(observed);
    if model.len() < 2 {
        return None;
    }
    let mut x: Vec<Vec<f64>> = Vec::new();
    let mut y: Vec<f64> = Vec::new();
    for i in &model {
        let (p, v) = &observed[*i];
        if let Some(f) = space.features(p) {
            x.push(f);
            y.push(*v);
        }
    }
    if x.len() < 2 {
        return None;
    }
    #[expect(clippy::cast_precision_loss, reason = "a few hundred values")]
    let n = y.len() as f64;
    let mean = y.iter().sum::<f64>() / n;
    let sd = (y.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / n)
        .sqrt()
        .max(1e-12);
    let mut ys: Vec<f64> = y.iter().map(|v| (v - mean) / sd).collect();
    let best = ys.iter().copied().fold(f64::INFINITY, f64::min);
    for p in pending {
        if let Some(f) = space.features(p) {
            x.push(f);
            ys.push(best);
        }
    }
    let gp = Gp::fit(x, &ys)?;
    // Candidates: uniform ones, then perturbations of the five best observed.
    let mut candidates: Vec<Params> = (0..CANDIDATES).map(|_| space.sample(rng)).collect();
    let mut ranked: Vec<&(Params, f64)> = observed.iter().collect();
    ranked.sort_by(|a, b| a.1.total_cmp(&b.1));
    let anchors: Vec<Vec<f64>> = ranked
        .iter()
        .take(5)
        .filter_map(|(p, _)| unit(space, p))
        .collect();
    if !anchors.is_empty() {
        for i in 0..LOCAL {
            let a = &anchors[i % anchors.len()];
            // Three scales, so the search both moves between basins and closes in on one.
            let sigma = [0.1, 0.02, 0.004][(i / anchors.len()) % 3];
            let u: Vec<f64> = a
                .iter()
                .zip(&space.params)
                .map(|(c, p)| match p.dim {
                    Dim::Categorical(_) if rng.uniform() < 0.2 => rng.uniform(),
                    Dim::Categorical(_) => *c,
                    _ => (c + sigma * rng.normal()).clamp(0.0, 1.0 - 1e-12),
                })
                .collect();
            candidates.push(space.at(&u));
        }
    }
    let tried: Vec<&Params> = observed.iter().map(|(p, _)| p).chain(pending).collect();
    let mut pick: Option<(f64, Params)> = None;
    for c in candidates {
        if tried.contains(&&c) {
            continue;
        }
        let Some(f) = space.features(&c) else {
            continue;
        };
        let (mu, sigma) = gp.predict(&f);
        let ei = expected_improvement(mu, sigma, best);
        if pick.as_ref().is_none_or(|(b, _)| ei > *b) {
            pick = Some((ei, c));
        }
    }
    pick.map(|(_, p)| p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_normal_distribution_function_is_accurate() {
        for (z, want) in [
            (0.0, 0.5),
            (1.0, 0.841_344_746),
            (-1.96, 0.024_997_895),
            (3.0, 0.998_650_102),
        ] {
            assert!((cdf(z) - want).abs() < 1e-6, "{z}: {}", cdf(z));
        }
    }

    #[test]
    fn the_model_interpolates_what_it_saw() {
        let x: Vec<Vec<f64>> = [0.0, 0.25, 0.5, 0.75, 1.0]
            .iter()
            .map(|v| vec![*v])
            .collect();
        let y: Vec<f64> = x.iter().map(|v| (v[0] * 6.0).sin()).collect();
        let gp = Gp::fit(x, &y).unwrap();
        let (mu, sigma) = gp.predict(&[0.5]);
        assert!((mu - 3f64.sin()).abs() < 0.05, "{mu}");
        assert!(sigma < 0.1);
        let (_, far) = gp.predict(&[0.125]);
        assert!(far > sigma);
    }
}
