//! The search space of a study: its parameters as typed dimensions, checked once, with the
//! maps between a point of the unit cube, the parameter values (strings, as trials get them)
//! and the features the bayesian model sees.

use std::collections::BTreeMap;

use gryvia_types::{GryviaAutoTunerSpec, SearchParameter, SearchParameterType, TunerAlgorithm};

use super::rng::Rng;

/// Parameter values of one trial, by name, as the trial gets them.
pub type Params = BTreeMap<String, String>;

/// Most points a grid may have (a larger one is refused, naming its size).
pub const MAX_GRID: u64 = 1_000_000;

/// One dimension of the space.
#[derive(Clone, Debug, PartialEq)]
pub enum Dim {
    /// A real number in `[min, max]`.
    Double {
        /// Lower bound.
        min: f64,
        /// Upper bound.
        max: f64,
        /// Sampled uniformly in the logarithm.
        log: bool,
    },
    /// An integer in `[min, max]`.
    Int {
        /// Lower bound.
        min: i64,
        /// Upper bound.
        max: i64,
        /// Sampled uniformly in the logarithm.
        log: bool,
    },
    /// One of the values.
    Categorical(Vec<String>),
}

/// A parameter: its name, its dimension, and its grid points.
#[derive(Clone, Debug, PartialEq)]
pub struct Param {
    /// Name.
    pub name: String,
    /// Dimension.
    pub dim: Dim,
    /// Points of the grid (only under `grid`).
    pub grid: Vec<String>,
}

/// The checked search space.
#[derive(Clone, Debug, PartialEq)]
pub struct Space {
    /// The parameters, in spec order.
    pub params: Vec<Param>,
}

/// `x` rounded to 6 significant digits, so values read well in commands.
pub fn round6(x: f64) -> f64 {
    format!("{x:.5e}").parse().unwrap_or(x)
}

/// Shortest text of `x` rounded to 6 significant digits and kept within `[min, max]`.
pub fn format_double(x: f64, min: f64, max: f64) -> String {
    format!("{}", round6(x).clamp(min, max))
}

#[expect(
    clippy::cast_possible_truncation,
    reason = "bounds are checked to be integral and within 2^53"
)]
fn int_bounds(p: &SearchParameter, field: &str) -> Result<(i64, i64), String> {
    let (min, max) = (p.min.unwrap_or_default(), p.max.unwrap_or_default());
    if min.fract() != 0.0
        || max.fract() != 0.0
        || min.abs() > 2f64.powi(53)
        || max.abs() > 2f64.powi(53)
    {
        return Err(format!(
            "{field}: an int parameter needs whole min and max, not {min} and {max}"
        ));
    }
    Ok((min as i64, max as i64))
}

impl Dim {
    /// The dimension of `p` (`field`: its path, for errors).
    fn of(p: &SearchParameter, field: &str) -> Result<Dim, String> {
        let numeric = |p: &SearchParameter| -> Result<(f64, f64), String> {
            match (p.min, p.max) {
                (Some(min), Some(max)) if min.is_finite() && max.is_finite() && min < max => {
                    if p.log_scale && min <= 0.0 {
                        Err(format!(
                            "{field}.min: logScale needs min above 0, not {min}"
                        ))
                    } else {
                        Ok((min, max))
                    }
                }
                _ => Err(format!(
                    "{field}: a numeric parameter needs finite min < max"
                )),
            }
        };
        Ok(match p.type_ {
            SearchParameterType::Double => {
                let (min, max) = numeric(p)?;
                Dim::Double {
                    min,
                    max,
                    log: p.log_scale,
                }
            }
            SearchParameterType::Int => {
                numeric(p)?;
                let (min, max) = int_bounds(p, field)?;
                Dim::Int {
                    min,
                    max,
                    log: p.log_scale,
                }
            }
            SearchParameterType::Categorical => {
                if p.values.is_empty() {
                    return Err(format!(
                        "{field}.values: a categorical parameter needs values"
                    ));
                }
                Dim::Categorical(p.values.clone())
            }
        })
    }

    /// The value at `u` in [0, 1).
    #[expect(
        clippy::cast_possible_truncation,
        clippy::cast_precision_loss,
        clippy::cast_sign_loss,
        reason = "values are clamped into the parameter's bounds"
    )]
    pub fn value(&self, u: f64) -> String {
        let u = u.clamp(0.0, 1.0);
        match self {
            Dim::Double { min, max, log } => {
                let x = if *log {
                    (min.ln() + u * (max.ln() - min.ln())).exp()
                } else {
                    min + u * (max - min)
                };
                format_double(x, *min, *max)
            }
            Dim::Int { min, max, log } => {
                let x = if *log {
                    let (lo, hi) = ((*min as f64).ln(), ((*max + 1) as f64).ln());
                    (lo + u * (hi - lo)).exp().floor()
                } else {
                    (*min as f64 + u * ((max - min + 1) as f64)).floor()
                };
                ((x as i64).clamp(*min, *max)).to_string()
            }
            Dim::Categorical(values) => {
                let i = ((u * values.len() as f64) as usize).min(values.len() - 1);
                values[i].clone()
            }
        }
    }

    /// The features of `value` for the model: one number in [0, 1] (numeric, on the log scale
    /// with `logScale`), or one-hot over the values (categorical). `None` when `value` is not
    /// a value of this dimension.
    #[expect(clippy::cast_precision_loss, reason = "integers within 2^53")]
    pub fn features(&self, value: &str, out: &mut Vec<f64>) -> Option<()> {
        match self {
            Dim::Double { min, max, log } => {
                let x: f64 = value.parse().ok()?;
                out.push(if *log {
                    (x.ln() - min.ln()) / (max.ln() - min.ln())
                } else {
                    (x - min) / (max - min)
                });
            }
            Dim::Int { min, max, log } => {
                let x: i64 = value.parse().ok()?;
                let x = x as f64 + 0.5;
                let (lo, hi) = (*min as f64, (*max + 1) as f64);
                out.push(if *log {
                    (x.ln() - lo.ln()) / (hi.ln() - lo.ln())
                } else {
                    (x - lo) / (hi - lo)
                });
            }
            Dim::Categorical(values) => {
                let at = values.iter().position(|v| v == value)?;
                out.extend((0..values.len()).map(|i| if i == at { 1.0 } else { 0.0 }));
            }
        }
        Some(())
    }
}

/// The grid points of `p` (`field`: its path, for errors).
#[expect(
    clippy::cast_precision_loss,
    clippy::cast_sign_loss,
    reason = "point counts are at most 1000 and ranges are checked"
)]
fn grid_points(p: &SearchParameter, dim: &Dim, field: &str) -> Result<Vec<String>, String> {
    if !p.values.is_empty() {
        let mut out: Vec<String> = Vec::new();
        for v in &p.values {
            let mut f = Vec::new();
            let inside =
                dim.features(v, &mut f).is_some() && f.iter().all(|x| (0.0..=1.0).contains(x));
            if !inside {
                return Err(format!(
                    "{field}.values: {v:?} is not a value of this parameter"
                ));
            }
            if !out.contains(v) {
                out.push(v.clone());
            }
        }
        return Ok(out);
    }
    match (dim, p.grid_points.map(|n| n.max(2) as usize)) {
        (Dim::Categorical(values), _) => Ok(values.clone()),
        (Dim::Double { .. }, None) => Err(format!(
            "{field}: a double parameter under grid needs gridPoints or values"
        )),
        // Evenly spaced over the parameter's own scale: the values sampling gives at 0, 1/(n-1) .. 1.
        (Dim::Double { .. } | Dim::Int { .. }, Some(n)) => {
            let mut out: Vec<String> = Vec::new();
            for i in 0..n {
                let v = dim.value(i as f64 / (n - 1) as f64);
                if !out.contains(&v) {
                    out.push(v);
                }
            }
            Ok(out)
        }
        (Dim::Int { min, max, .. }, None) => {
            let count = max.abs_diff(*min) + 1;
            if count > 1000 {
                return Err(format!(
                    "{field}: {count} integers from {min} to {max} under grid; set gridPoints (at most 1000)"
                ));
            }
            Ok((*min..=*max).map(|x| x.to_string()).collect())
        }
    }
}

impl Space {
    /// The space of `spec`, checked: the error names the field and the reason.
    ///
    /// # Errors
    /// A duplicate name, bounds that are not a range, `logScale` from 0 or below, an int with
    /// fractional bounds, a categorical parameter without values, a grid that cannot be made
    /// or is larger than [`MAX_GRID`].
    pub fn of(spec: &GryviaAutoTunerSpec) -> Result<Space, String> {
        let grid = spec.algorithm == TunerAlgorithm::Grid;
        let mut params: Vec<Param> = Vec::new();
        for p in &spec.parameters {
            let field = format!("spec.parameters[{}]", p.name);
            if params.iter().any(|q| q.name == p.name) {
                return Err(format!("{field}: the name is used twice"));
            }
            let dim = Dim::of(p, &field)?;
            let points = if grid {
                grid_points(p, &dim, &field)?
            } else {
                Vec::new()
            };
            params.push(Param {
                name: p.name.clone(),
                dim,
                grid: points,
            });
        }
        let space = Space { params };
        if grid && space.grid_size() > MAX_GRID {
            return Err(format!(
                "spec.parameters: the grid has {} points, more than {MAX_GRID}",
                space.grid_size()
            ));
        }
        Ok(space)
    }

    /// Points of the grid (saturating).
    pub fn grid_size(&self) -> u64 {
        self.params
            .iter()
            .fold(1u64, |n, p| n.saturating_mul(p.grid.len() as u64))
    }

    /// The grid point at `index` (the last parameter varies fastest), `None` past the end.
    pub fn grid_point(&self, index: u64) -> Option<Params> {
        if index >= self.grid_size() {
            return None;
        }
        let mut rest = index;
        let mut out = Params::new();
        for p in self.params.iter().rev() {
            let n = p.grid.len() as u64;
            let at = usize::try_from(rest % n).ok()?;
            out.insert(p.name.clone(), p.grid[at].clone());
            rest /= n;
        }
        Some(out)
    }

    /// A point drawn uniformly (log-uniformly with `logScale`) from `rng`.
    pub fn sample(&self, rng: &mut Rng) -> Params {
        self.params
            .iter()
            .map(|p| (p.name.clone(), p.dim.value(rng.uniform())))
            .collect()
    }

    /// The point whose coordinates in the unit cube are `u` (one per parameter).
    pub fn at(&self, u: &[f64]) -> Params {
        self.params
            .iter()
            .zip(u)
            .map(|(p, x)| (p.name.clone(), p.dim.value(*x)))
            .collect()
    }

    /// The model's features of `params`, `None` when a value is missing or not of the space.
    pub fn features(&self, params: &Params) -> Option<Vec<f64>> {
        let mut out = Vec::new();
        for p in &self.params {
            p.dim.features(params.get(&p.name)?, &mut out)?;
        }
        Some(out)
    }

    /// Whether `params` lie in the space: every parameter present, of its type, in bounds.
    pub fn contains(&self, params: &Params) -> bool {
        params.len() == self.params.len()
            && self
                .features(params)
                .is_some_and(|f| f.iter().all(|x| (0.0..=1.0).contains(x)))
    }
}
