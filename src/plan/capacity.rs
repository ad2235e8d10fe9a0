//! The sustainable-rate search under the SLO (Q4): C_healthy and C_degraded measured
//! at the scenario's request mix, streaming profile and SLO — never derived as
//! (N−1)/N of healthy capacity, which is shown only as the hypothesis it is.
//!
//! One search for `haq capacity` and for `criteria.capacity.search` in `haq run`
//! (docs/capacity.md): each step is a run of its own ([`step_plan`]: the scenario at
//! one constant rate, a discarded warm-up, the judged step; in the degraded topology
//! its faults applied at the start and held), and [`Bracket`] picks each rate from
//! the steps before it: geometric bracketing until the SLO breaks, then geometric
//! bisection to the precision asked or the step budget. Past C_degraded, the
//! [`overload_plan`] steps offer multiples of it and are judged by the Overload rules
//! (Q10). The engine runs the steps (`engine::search`), the checks judge them from
//! their run directories (`check::capacity`).

use std::time::Duration;

use crate::scenario::{At, Phase, PhaseKind, Scenario};
use crate::wire::units::{Dur, Rate};

/// The step phase's name in every step run; the warm-up's; an overload step's excess
/// and what follows it.
pub const STEP: &str = "step";
pub const WARMUP: &str = "warmup";
pub const OVERLOAD: &str = "overload";
pub const SETTLE: &str = "settle";
pub const AFTER: &str = "after";

/// The search's directory inside a run directory (`haq run` with
/// `criteria.capacity.search`).
pub const DIR: &str = "capacity";

/// Why a search stopped before its end (a step that could not run, an interrupt), in
/// its directory.
pub const STOPPED: &str = "stopped.txt";

/// How `stopped.txt` begins when SIGINT/SIGTERM stopped the search.
pub const INTERRUPTED: &str = "interrupted";

/// Which topology a search ran in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Topology {
    /// Every replica up.
    Healthy,
    /// The scenario's faults applied and held for every step.
    Degraded,
}

impl Topology {
    pub fn as_str(self) -> &'static str {
        match self {
            Topology::Healthy => "healthy",
            Topology::Degraded => "degraded",
        }
    }
}

/// What a search runs: its topologies, how it brackets and bisects, how long each
/// step lasts, and the overload steps past C_degraded.
#[derive(Debug, Clone, PartialEq)]
pub struct Params {
    pub topologies: Vec<Topology>,
    pub bisect: Bisect,
    pub step: Duration,
    pub warmup: Duration,
    /// Multiples of C_degraded, one overload step each (Q10).
    pub overload: Vec<f64>,
}

impl Params {
    /// `criteria.capacity.search` of a plan: both topologies (the degraded one when
    /// the scenario has faults).
    pub fn of(plan: &crate::plan::Plan) -> Option<Params> {
        let s = &plan.scenario.criteria.capacity.as_ref()?.search;
        let start = s.from.map_or(plan.scenario.protected_load.0, |r| r.0);
        let mut topologies = vec![Topology::Healthy];
        if !plan.scenario.faults.is_empty() {
            topologies.push(Topology::Degraded);
        }
        Some(Params {
            topologies,
            bisect: Bisect {
                start,
                factor: s.factor,
                precision: s.precision.0,
                max_steps: s.max_steps as usize,
                floor: floor(start),
            },
            step: s.step.0,
            warmup: s.warmup.0,
            overload: s.overload.clone(),
        })
    }
}

/// No rate below this is tried: the first one over 64.
pub fn floor(start: f64) -> f64 {
    (start / 64.0).max(0.01)
}

/// The directory name of a search step: `healthy-03-33.94`, `overload-01-42.00`.
pub fn step_dir(kind: &str, k: usize, rate: f64) -> String {
    format!("{kind}-{:02}-{rate:.2}", k + 1)
}

/// A step directory's kind and index (`degraded-03-33.94` → (`degraded`, 2)).
pub fn parse_step_dir(name: &str) -> Option<(&str, usize)> {
    let mut it = name.splitn(3, '-');
    let kind = it.next()?;
    let k: usize = it.next()?.parse().ok()?;
    it.next()?.parse::<f64>().ok()?;
    Some((kind, k.checked_sub(1)?))
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

/// Replicas the scenario's faults take out (k of the (N−k)/N hypothesis).
pub fn lost(plan: &crate::plan::Plan) -> usize {
    plan.faults.iter().map(|f| f.replicas.len().max(1)).sum()
}

fn phase(name: &str, kind: PhaseKind, d: Duration, rate: f64) -> Phase {
    Phase {
        name: name.into(),
        kind: Some(kind),
        duration: Dur(d),
        rate: Some(Rate(rate)),
        load: None,
    }
}

/// The scenario as a search step runs it: `phases`, no search, no gates; in the
/// degraded topology its faults at the start of the first phase and held (no
/// trigger condition, no replacement, no duration).
fn step_scenario(
    plan: &crate::plan::Plan,
    topo: Topology,
    phases: Vec<Phase>,
) -> Result<Scenario, String> {
    let mut s: Scenario = plan.scenario.clone();
    s.phases = phases;
    s.criteria.capacity = None;
    s.criteria.require.clear();
    if topo == Topology::Healthy {
        s.faults.clear();
    }
    for f in &mut s.faults {
        if f.target.is_none() {
            return Err(format!(
                "fault {}: the degraded search needs a named target (a probe picks its replica only in a run)",
                f.name.as_deref().unwrap_or("(unnamed)")
            ));
        }
        f.at = At {
            phase: WARMUP.into(),
            offset: Dur::default(),
        };
        f.when = None;
        f.restart = None;
        f.duration = None;
    }
    Ok(s)
}

fn validated(
    plan: &crate::plan::Plan,
    s: Scenario,
    what: &str,
) -> Result<crate::plan::Plan, String> {
    let mut p =
        crate::plan::validate(s).map_err(|i| format!("{what}: `{}`: {}", i.field, i.reason))?;
    p.inputs = plan.inputs.clone();
    Ok(p)
}

/// The plan of one search step: the scenario at `rate` through a warm-up and the
/// judged step.
pub fn step_plan(
    plan: &crate::plan::Plan,
    rate: f64,
    topo: Topology,
    p: &Params,
) -> Result<crate::plan::Plan, String> {
    let phases = vec![
        phase(WARMUP, PhaseKind::Capacity, p.warmup, rate),
        phase(STEP, PhaseKind::Capacity, p.step, rate),
    ];
    let s = step_scenario(plan, topo, phases)?;
    validated(plan, s, &format!("step plan at {rate:.2}/s"))
}

/// The plan of one overload step in the degraded topology: a warm-up at `after`
/// (the sustainable protected rate), the excess at `rate` (an overload phase), one
/// `slo.ttft_p95` at `after` for the queue the excess left to drain (its requests
/// must reach their first token within it: judged by no envelope), then `after`
/// again — where the SLO must be back.
pub fn overload_plan(
    plan: &crate::plan::Plan,
    rate: f64,
    after: f64,
    p: &Params,
) -> Result<crate::plan::Plan, String> {
    let settle = plan.scenario.slo.ttft_p95.0;
    let phases = vec![
        phase(WARMUP, PhaseKind::Capacity, p.warmup, after),
        phase(OVERLOAD, PhaseKind::Overload, p.step, rate),
        phase(SETTLE, PhaseKind::Settle, settle, after),
        phase(AFTER, PhaseKind::Capacity, p.step, after),
    ];
    let s = step_scenario(plan, Topology::Degraded, phases)?;
    validated(plan, s, &format!("overload step at {rate:.2}/s"))
}

/// The overload steps past a degraded capacity `c`: (multiple, rate) for each
/// multiple that offers more than the protected load, and the rate the cluster
/// returns to after each (the protected load, or `c` when below it).
pub fn overload_rates(p: &Params, c: f64, protected: f64) -> (Vec<(f64, f64)>, f64) {
    let rates = p
        .overload
        .iter()
        .map(|m| (*m, (m * c * 100.0).round() / 100.0))
        .filter(|(_, r)| *r > protected + 1e-9)
        .collect();
    (rates, protected.min(c))
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
    /// The search ended before it stopped (interrupted, or a step could not run).
    Unfinished,
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

    /// The capacity: the highest rate sustained below every broken one, when the
    /// target (not haq's client) set the upper end.
    pub fn capacity(&self) -> Option<f64> {
        self.lo
            .filter(|_| !self.client_limited && self.hi.is_some())
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

#[cfg(test)]
mod plan_tests {
    use super::*;

    fn plan(sets: &[&str]) -> crate::plan::Plan {
        let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
        crate::plan::load_str(
            crate::plan::tests::GOOD,
            "s.yaml",
            std::path::Path::new("."),
            &sets,
            None,
        )
        .expect("plan")
    }

    /// A step runs the scenario at one rate through a warm-up and the step; in the
    /// degraded topology its faults fire at the warm-up's start and are held; an
    /// overload step drains for one slo.ttft_p95 between the excess and `after`.
    #[test]
    fn step_plans_hold_the_faults_and_overload_steps_let_the_queue_drain() {
        let p = plan(&["criteria.capacity.search={warmup: 1s, step: 2s}"]);
        let params = Params::of(&p).expect("search");
        let h = step_plan(&p, 12.5, Topology::Healthy, &params).expect("healthy");
        let names: Vec<(&str, f64)> = h.phases.iter().map(|x| (x.name.as_str(), x.rate)).collect();
        assert_eq!(names, [(WARMUP, 12.5), (STEP, 12.5)]);
        assert!(h.faults.is_empty() && h.scenario.criteria.capacity.is_none());
        let d = step_plan(&p, 12.5, Topology::Degraded, &params).expect("degraded");
        assert_eq!(d.faults.len(), 1);
        assert_eq!(d.faults[0].at, Duration::ZERO);
        assert!(d.faults[0].restart.is_none());
        // 1.5× and 2× of 6/s past a protected load of 4/s; back to 4/s after.
        let (rates, after) = overload_rates(&params, 6.0, 4.0);
        assert_eq!((rates, after), (vec![(1.5, 9.0), (2.0, 12.0)], 4.0));
        // Below the protected load (C_degraded 2/s): only 2× is an excess; after at 2/s.
        assert_eq!(overload_rates(&params, 2.5, 4.0), (vec![(2.0, 5.0)], 2.5));
        let o = overload_plan(&p, 9.0, 4.0, &params).expect("overload");
        let kinds: Vec<(&str, PhaseKind, f64)> = o
            .phases
            .iter()
            .map(|x| (x.name.as_str(), x.kind, x.rate))
            .collect();
        assert_eq!(
            kinds,
            [
                (WARMUP, PhaseKind::Capacity, 4.0),
                (OVERLOAD, PhaseKind::Overload, 9.0),
                (SETTLE, PhaseKind::Settle, 4.0),
                (AFTER, PhaseKind::Capacity, 4.0)
            ]
        );
        assert_eq!(o.phases[2].duration, Duration::from_secs(1));
        assert_eq!(step_dir("overload", 0, 9.0), "overload-01-9.00");
        assert_eq!(parse_step_dir("degraded-12-33.94"), Some(("degraded", 11)));
        assert_eq!(parse_step_dir("capacity.md"), None);
    }
}
