//! A small seeded generator (SplitMix64) with streams per trial, so a study's samples depend
//! only on its seed and the trial's index: the same seed gives the same study, on any machine
//! and after any restart, with no dependency on a crate's algorithm staying the same.

/// SplitMix64 (Steele, Lea, Flood 2014): 64 bits of state, passes BigCrush.
#[derive(Clone, Debug)]
pub struct Rng(u64);

/// What a stream is for, so the draws of one trial for different purposes never coincide.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Purpose {
    /// The parameters of a randomly sampled trial.
    Sample = 1,
    /// The candidates the bayesian search scores.
    Candidates = 2,
    /// Noise of a benchmark objective.
    Noise = 3,
}

impl Rng {
    /// A generator started from `seed`.
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    /// The stream of trial `index` of a study seeded with `seed`, for `purpose`.
    pub fn stream(seed: i64, index: u64, purpose: Purpose) -> Self {
        let mut r = Rng(u64::from_ne_bytes(seed.to_ne_bytes()) ^ 0x9E37_79B9_7F4A_7C15);
        let a = r.next_u64();
        let mut r = Rng(a ^ index.wrapping_mul(0xD1B5_4A32_D192_ED03));
        let b = r.next_u64();
        Rng(b ^ (purpose as u64).wrapping_mul(0x8CB9_2BA7_2F3D_8DD7))
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn uniform(&mut self) -> f64 {
        // 53 random bits as the mantissa.
        #[expect(clippy::cast_precision_loss, reason = "53 bits fit an f64 exactly")]
        let x = (self.next_u64() >> 11) as f64;
        x / (1u64 << 53) as f64
    }

    /// Standard normal (Box-Muller).
    pub fn normal(&mut self) -> f64 {
        let u1 = 1.0 - self.uniform();
        let u2 = self.uniform();
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_are_reproducible_and_distinct() {
        let a: Vec<u64> = (0..4)
            .map(|_| Rng::stream(7, 3, Purpose::Sample).next_u64())
            .collect();
        assert!(a.windows(2).all(|w| w[0] == w[1]));
        let other = Rng::stream(7, 4, Purpose::Sample).next_u64();
        let seed = Rng::stream(8, 3, Purpose::Sample).next_u64();
        let purpose = Rng::stream(7, 3, Purpose::Candidates).next_u64();
        assert!(a[0] != other && a[0] != seed && a[0] != purpose);
    }

    #[test]
    fn uniform_is_in_range_with_the_right_mean() {
        let mut r = Rng::new(1);
        let xs: Vec<f64> = (0..20_000).map(|_| r.uniform()).collect();
        assert!(xs.iter().all(|x| (0.0..1.0).contains(x)));
        let mean = xs.iter().sum::<f64>() / 20_000.0;
        assert!((mean - 0.5).abs() < 0.01, "{mean}");
    }
}
