//! Arrival times: an arrival process drawn on the plan's rate profile
//! ([`crate::plan::rate`]: constant, ramp, stages, piecewise linear in time) by time
//! rescaling. Each gap is drawn with unit mean
//! (constant: 1, Poisson: Exp(1), gamma: Gamma(k, 1/k)) in "operational time" — the
//! integral of the rate — and mapped back to wall time, so a varying rate keeps the
//! process's shape.

use rand::RngExt;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Exp1, Gamma};

pub use crate::plan::rate::{Piece, RateProfile};
use crate::scenario::{Arrival, ArrivalProcess, Issue};

/// Draws unit-mean gaps for a process.
pub struct Gaps {
    process: ArrivalProcess,
    gamma: Option<Gamma<f64>>,
}

impl Gaps {
    pub fn new(a: &Arrival) -> Result<Self, Issue> {
        let gamma = match crate::plan::rate::burstiness(a)? {
            Some(k) => Some(
                Gamma::new(k, 1.0 / k)
                    .map_err(|e| Issue::new("workload.arrival.burstiness", k, e.to_string()))?,
            ),
            None => None,
        };
        Ok(Gaps {
            process: a.process,
            gamma,
        })
    }

    pub fn draw(&self, rng: &mut ChaCha8Rng) -> f64 {
        match (self.process, &self.gamma) {
            (ArrivalProcess::Constant | ArrivalProcess::Trace, _) => 1.0,
            (ArrivalProcess::Gamma, Some(g)) => g.sample(rng),
            _ => {
                let e: f64 = Exp1.sample(rng);
                // guard the open interval: never a zero gap from a zero draw
                if e > 0.0 {
                    e
                } else {
                    rng.random::<f64>().max(1e-12)
                }
            }
        }
    }
}
