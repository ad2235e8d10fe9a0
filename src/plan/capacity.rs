//! The sustainable-rate search under the SLO (Q4): C_healthy and C_degraded measured
//! at the scenario's request mix, streaming profile and SLO — never derived as
//! (N−1)/N of healthy capacity, which is shown only as the hypothesis it is.
//!
//! `criteria.capacity.search` expands, at validation, into a ladder of constant-rate
//! phases before the scenario's own phases (healthy topology), a settle phase, and the
//! same ladder after them (the topology the scenario's faults left). Each step is
//! judged from its phase's measurements (`check::capacity::search`). The run stays one
//! open-loop schedule with one trace, so `haq check` re-judges the search like any
//! other run; its precision is the ladder's spacing, reported as such.
//!
//! The adaptive search (`haq capacity`, docs/capacity.md) picks each rate from the
//! steps before it ([`Bracket`]: geometric bracketing until the SLO breaks, then
//! geometric bisection to the precision asked or the step budget), so each of its
//! steps is a run of its own.

use crate::scenario::{CapacitySearch, Phase, PhaseKind};
use crate::wire::units::{Dur, Rate};

pub const HEALTHY: &str = "cap-healthy";
pub const DEGRADED: &str = "cap-degraded";
pub const SETTLE: &str = "cap-settle";

/// The ladder's rates: `steps` geometric rates from `from` to `to`, with the protected
/// load added, ascending, rounded to 0.01/s.
pub fn ladder(s: &CapacitySearch, protected: f64) -> Vec<f64> {
    let (a, b) = (s.from.0, s.to.0);
    let n = s.steps.max(2);
    let mut r: Vec<f64> = (0..n)
        .map(|i| a * (b / a).powf(i as f64 / (n - 1) as f64))
        .chain([protected])
        .map(|x| (x * 100.0).round() / 100.0)
        .collect();
    r.sort_by(f64::total_cmp);
    r.dedup();
    r
}

/// The highest rate the scenario's own phases offer, overload phases (and the
/// search's own steps) apart: the normal peak headroom is measured from (Q5).
pub fn normal_peak(plan: &crate::plan::Plan) -> f64 {
    plan.phases
        .iter()
        .filter(|p| {
            !matches!(
                p.kind,
                PhaseKind::Overload | PhaseKind::Capacity | PhaseKind::Settle
            )
        })
        .map(|p| p.rate)
        .fold(0.0, f64::max)
}

fn step_phase(prefix: &str, i: usize, rate: f64, d: Dur) -> Phase {
    Phase {
        name: format!("{prefix}-{}", i + 1),
        kind: Some(PhaseKind::Capacity),
        duration: d,
        rate: Some(Rate(rate)),
        load: None,
    }
}

/// The phases a run executes: the scenario's, wrapped in the search's ladders.
pub fn expand(phases: &[Phase], search: Option<&CapacitySearch>, protected: f64) -> Vec<Phase> {
    let Some(s) = search else {
        return phases.to_vec();
    };
    let rates = ladder(s, protected);
    let mut out: Vec<Phase> = rates
        .iter()
        .enumerate()
        .map(|(i, r)| step_phase(HEALTHY, i, *r, s.step))
        .collect();
    if !s.settle.0.is_zero() {
        out.push(Phase {
            name: SETTLE.into(),
            kind: Some(PhaseKind::Settle),
            duration: s.settle,
            rate: Some(Rate(protected)),
            load: None,
        });
    }
    out.extend(phases.iter().cloned());
    out.extend(
        rates
            .iter()
            .enumerate()
            .map(|(i, r)| step_phase(DEGRADED, i, *r, s.step)),
    );
    out
}

/// How a step of the adaptive search (`haq capacity`) ended, as the search reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// The target served the rate inside the SLO.
    Sustained,
    /// The target broke the SLO at the rate.
    Broken,
    /// haq's own client was the limit: the step says nothing about the target, and
    /// the search goes no higher.
    LoadGenerator,
}

/// The adaptive search's parameters (`haq capacity`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bisect {
    /// The first rate tried (req/s).
    pub start: f64,
    /// Bracketing multiplies (or divides) the rate by this until the SLO breaks
    /// (or holds).
    pub factor: f64,
    /// Done when the bracket [highest sustained, lowest broken] is at most this share
    /// of its lower end wide (0.05: the capacity is known to ±5%).
    pub precision: f64,
    /// Most steps run, whatever the bracket.
    pub max_steps: usize,
    /// No rate below this is tried (the search then says "below the lowest rate").
    pub floor: f64,
}

/// The search's state: every step so far, the bracket they make, and the next rate.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Bracket {
    pub steps: Vec<(f64, Outcome)>,
    /// The highest rate sustained below every broken one.
    pub lo: Option<f64>,
    /// The lowest rate broken (or where the load generator was the limit).
    pub hi: Option<f64>,
    /// `hi` is where haq's client gave out, not the target.
    pub client_limited: bool,
}

/// Why the search stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Stop {
    /// The bracket is within the precision asked.
    Precise,
    /// The step budget was spent first.
    Budget,
    /// Not even the floor rate was sustained.
    Floor,
    /// haq's own client gave out before the target did: the capacity is a lower bound.
    LoadGenerator,
}

impl Bracket {
    /// Records a step's outcome and narrows the bracket. A rate sustained above a
    /// broken one (noise at the knee) does not widen it back: the lowest broken rate
    /// stays the upper end and the sustained rate counts only below it.
    pub fn record(&mut self, rate: f64, o: Outcome) {
        self.steps.push((rate, o));
        match o {
            Outcome::Sustained => {
                if self.hi.is_none_or(|h| rate < h) && self.lo.is_none_or(|l| rate > l) {
                    self.lo = Some(rate);
                }
            }
            Outcome::Broken | Outcome::LoadGenerator => {
                if self.hi.is_none_or(|h| rate <= h) {
                    self.hi = Some(rate);
                    self.client_limited = o == Outcome::LoadGenerator;
                }
                if self.lo.is_some_and(|l| l >= rate) {
                    self.lo = self
                        .steps
                        .iter()
                        .filter(|(r, o)| *o == Outcome::Sustained && *r < rate)
                        .map(|(r, _)| *r)
                        .max_by(f64::total_cmp);
                }
            }
        }
    }

    /// The next rate to try, or why the search is over.
    pub fn next(&self, b: &Bisect) -> Result<f64, Stop> {
        let round = |x: f64| (x * 100.0).round() / 100.0;
        if self.client_limited {
            // No rate at or above where haq gave out is tried again; below it the
            // bracket may still narrow (the target's limit may lie under it).
            if self.lo.is_none() && self.steps.len() >= b.max_steps {
                return Err(Stop::LoadGenerator);
            }
        }
        let next = match (self.lo, self.hi) {
            (None, None) => b.start,
            (Some(l), None) => l * b.factor,
            (None, Some(h)) => {
                let r = h / b.factor;
                if r < b.floor {
                    return Err(if self.client_limited {
                        Stop::LoadGenerator
                    } else {
                        Stop::Floor
                    });
                }
                r
            }
            (Some(l), Some(h)) => {
                if h <= l * (1.0 + b.precision) {
                    return Err(if self.client_limited {
                        Stop::LoadGenerator
                    } else {
                        Stop::Precise
                    });
                }
                (l * h).sqrt()
            }
        };
        if self.steps.len() >= b.max_steps {
            return Err(if self.client_limited {
                Stop::LoadGenerator
            } else {
                Stop::Budget
            });
        }
        Ok(round(next.max(b.floor)))
    }
}

#[cfg(test)]
mod bisect_tests {
    use super::*;

    const B: Bisect = Bisect {
        start: 5.0,
        factor: 2.0,
        precision: 0.05,
        max_steps: 8,
        floor: 0.1,
    };

    /// Runs the search against a target whose capacity is `c` (and a client that
    /// gives out at `client`).
    fn search(c: f64, client: f64, b: &Bisect) -> (Bracket, Stop) {
        let mut s = Bracket::default();
        loop {
            match s.next(b) {
                Ok(r) => s.record(
                    r,
                    if r >= client {
                        Outcome::LoadGenerator
                    } else if r <= c {
                        Outcome::Sustained
                    } else {
                        Outcome::Broken
                    },
                ),
                Err(stop) => return (s, stop),
            }
        }
    }

    #[test]
    fn brackets_then_bisects_to_the_precision_within_the_budget() {
        // Within two doublings of the start: ±5% in at most 8 steps.
        for c in [3.0, 12.5, 18.75, 21.1, 14.07, 19.9] {
            let (s, stop) = search(c, f64::INFINITY, &B);
            let (lo, hi) = (s.lo.expect("lo"), s.hi.expect("hi"));
            assert_eq!(stop, Stop::Precise, "{c}: {s:?}");
            assert!(lo <= c && c < hi, "{c}: {s:?}");
            assert!(hi <= lo * 1.05 + 1e-9, "{c}: {s:?}");
            assert!(s.steps.len() <= 8, "{c}: {} steps", s.steps.len());
        }
        // Farther: the budget runs out first, and the bracket still holds the truth.
        for c in [42.0, 97.0] {
            let (s, stop) = search(c, f64::INFINITY, &B);
            assert_eq!(stop, Stop::Budget, "{c}: {s:?}");
            assert!(s.lo.is_some_and(|l| l <= c) && s.hi.is_some_and(|h| c < h));
        }
    }

    #[test]
    fn a_tight_budget_stops_with_the_bracket_it_has() {
        let b = Bisect { max_steps: 3, ..B };
        let (s, stop) = search(18.75, f64::INFINITY, &b);
        assert_eq!(stop, Stop::Budget);
        assert_eq!((s.lo, s.hi), (Some(10.0), Some(20.0)));
    }

    #[test]
    fn nothing_sustained_down_to_the_floor_says_so() {
        let b = Bisect { floor: 1.0, ..B };
        let (s, stop) = search(0.5, f64::INFINITY, &b);
        assert_eq!(stop, Stop::Floor);
        assert_eq!(s.lo, None);
    }

    #[test]
    fn the_load_generator_limit_ends_the_bracket_and_is_never_the_capacity() {
        // The target would hold 100/s; haq gives out at 30/s.
        let (s, stop) = search(100.0, 30.0, &B);
        assert_eq!(stop, Stop::LoadGenerator, "{s:?}");
        assert!(s.client_limited);
        let lo = s.lo.expect("lo");
        assert!(lo < 30.0 && s.hi.is_some_and(|h| h >= 30.0), "{s:?}");
        assert!(
            s.steps
                .iter()
                .all(|(r, o)| *o != Outcome::Broken || *r > 100.0),
            "{s:?}"
        );
    }

    #[test]
    fn a_sustained_rate_above_a_broken_one_does_not_widen_the_bracket() {
        let mut s = Bracket::default();
        s.record(10.0, Outcome::Sustained);
        s.record(20.0, Outcome::Broken);
        s.record(14.0, Outcome::Broken);
        s.record(22.0, Outcome::Sustained);
        assert_eq!((s.lo, s.hi), (Some(10.0), Some(14.0)));
        s.record(9.0, Outcome::Broken);
        assert_eq!((s.lo, s.hi), (None, Some(9.0)));
    }
}
