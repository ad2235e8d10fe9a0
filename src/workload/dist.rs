//! Length distributions, prepared once and drawn from a seeded generator.

use std::sync::Arc;

use rand::RngExt;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, LogNormal, Normal};

use crate::plan::inputs::{Inputs, empirical_key};
use crate::scenario::{Dist, Shape};

/// A distribution ready to draw from, clamped to `[lo, hi]`.
#[derive(Debug, Clone)]
pub enum Sampler {
    Fixed(u32),
    Uniform(u32, u32),
    Normal(Normal<f64>, u32, u32),
    LogNormal(LogNormal<f64>, u32, u32),
    Empirical(Arc<Vec<u32>>),
}

fn bounds(s: &Shape, limit: u32) -> (u32, u32) {
    (s.min.unwrap_or(1).max(1), s.max.unwrap_or(limit).min(limit))
}

impl Sampler {
    /// `limit` is the largest value the field allows.
    pub fn new(d: &Dist, limit: u32, inputs: &Inputs) -> Result<Self, String> {
        Ok(match d {
            Dist::Fixed(n) => Sampler::Fixed(*n),
            Dist::Uniform([a, b]) => Sampler::Uniform(*a, *b),
            Dist::Normal(s) => {
                let (lo, hi) = bounds(s, limit);
                Sampler::Normal(
                    Normal::new(s.mean, s.stddev).map_err(|e| e.to_string())?,
                    lo,
                    hi,
                )
            }
            Dist::Lognormal(s) => {
                let (lo, hi) = bounds(s, limit);
                let ln = LogNormal::from_mean_cv(s.mean, s.stddev / s.mean)
                    .map_err(|e| e.to_string())?;
                Sampler::LogNormal(ln, lo, hi)
            }
            Dist::Empirical(e) => {
                let key = empirical_key(&e.file, e.column.as_deref());
                Sampler::Empirical(inputs.empirical.get(&key).cloned().ok_or_else(|| {
                    format!(
                        "{} was not loaded (scenario::load reads input files)",
                        e.file
                    )
                })?)
            }
        })
    }

    pub fn draw(&self, rng: &mut ChaCha8Rng) -> u32 {
        let clamp = |x: f64, lo: u32, hi: u32| {
            if x.is_finite() {
                (x.round().max(0.0) as u32).clamp(lo, hi)
            } else {
                lo
            }
        };
        match self {
            Sampler::Fixed(n) => *n,
            Sampler::Uniform(a, b) => rng.random_range(*a..=*b),
            Sampler::Normal(n, lo, hi) => clamp(n.sample(rng), *lo, *hi),
            Sampler::LogNormal(n, lo, hi) => clamp(n.sample(rng), *lo, *hi),
            Sampler::Empirical(v) => v[rng.random_range(0..v.len())],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn mean_of(s: &Sampler) -> f64 {
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let n = 20_000;
        (0..n).map(|_| f64::from(s.draw(&mut rng))).sum::<f64>() / n as f64
    }

    #[test]
    fn shapes_have_their_means() {
        let inputs = Inputs::default();
        let shape = |mean, stddev| Shape {
            mean,
            stddev,
            min: None,
            max: None,
        };
        let n = Sampler::new(&Dist::Normal(shape(500.0, 50.0)), 100_000, &inputs).expect("ok");
        assert!((mean_of(&n) - 500.0).abs() < 5.0);
        let l = Sampler::new(&Dist::Lognormal(shape(300.0, 200.0)), 100_000, &inputs).expect("ok");
        assert!((mean_of(&l) - 300.0).abs() < 10.0, "{}", mean_of(&l));
        let clamped = Sampler::new(
            &Dist::Normal(Shape {
                min: Some(10),
                max: Some(20),
                ..shape(0.0, 100.0)
            }),
            100_000,
            &inputs,
        )
        .expect("ok");
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        assert!(
            (0..1000)
                .map(|_| clamped.draw(&mut rng))
                .all(|v| (10..=20).contains(&v))
        );
    }
}
