//! The adaptive capacity search concluded (`haq capacity`, Q4, Q5): each topology's
//! bracket from its judged steps, then C_healthy and C_degraded with their brackets,
//! L_protected, the (N−k)/N hypothesis next to the measurement (shown, never used),
//! headroom (C_healthy − normal peak) against failover reserve (C_degraded −
//! L_protected), and the Capacity verdict: PASS when the degraded topology sustained
//! at least L_protected, FAIL when its capacity lies below it, UNKNOWN when it was
//! not measured or haq's own client gave out first below L_protected.
//!
//! A degraded step whose faults did not all hold proves nothing
//! (`super::steps::SearchStep::counts`) and ends its topology's search: the topology
//! then has no capacity, and only the steps before it — in the declared topology —
//! can still decide the gate (PASS when one sustained L_protected, FAIL when one broke
//! at or below it); otherwise it is UNKNOWN, the fault named.

use serde::Serialize;

use super::excess::OverloadStep;
use super::steps::SearchStep;
use crate::check::Status;
use crate::plan::capacity::{Bracket, Stop};

pub use crate::plan::capacity::Topology;

/// One step as the search ran it: where its run directory is, and its judgement.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct RanStep {
    /// The step's run directory, relative to the search's (re-judge with `haq check`).
    pub dir: String,
    #[serde(flatten)]
    pub judged: SearchStep,
}

impl RanStep {
    /// `12.40/s: sustained — 74 requests, achieved …, in SLO …, p95 TTFT 40 ms [38,
    /// 45], E2E … (degraded-03-12.40)`.
    pub fn describe(&self) -> String {
        use super::steps::P95;
        let j = &self.judged;
        format!(
            "{:.2}/s: {} — {}, achieved {:.2}/s, in SLO {}, p95 TTFT {}, E2E {}{} ({})",
            j.step.rate,
            j.outcome_text(),
            crate::scenario::words::plural(j.step.requests, "request"),
            j.step.achieved_rps,
            j.attainment_text(),
            P95::describe(&j.ttft_p95),
            P95::describe(&j.e2e_p95),
            if j.confident { "" } else { ", marginal" },
            self.dir
        )
    }
}

/// One topology's search.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct TopologyResult {
    pub topology: Topology,
    /// The highest rate sustained below every broken one: the capacity, when the
    /// target (not haq) set the upper end; `None` otherwise.
    pub capacity: Option<f64>,
    /// The bracket the capacity lies in: [highest sustained, lowest broken).
    pub bracket: (Option<f64>, Option<f64>),
    /// The bracket's width as a share of its lower end.
    pub precision: Option<f64>,
    pub stop: Stop,
    /// The upper end is where haq's own client gave out: `capacity` is `None` and the
    /// target sustains at least `bracket.0`.
    pub load_generator_limited: bool,
    pub steps: Vec<RanStep>,
}

impl TopologyResult {
    /// `b`: the bracket of the steps that count (never one that proves nothing);
    /// `steps`: every step run, the one that proved nothing (last) included.
    pub fn new(topology: Topology, b: &Bracket, stop: Stop, steps: Vec<RanStep>) -> Self {
        let limited = b.client_limited;
        let unproven = steps.iter().any(|s| s.judged.counts().is_none());
        TopologyResult {
            topology,
            // The bracket was cut short in a topology that was not the declared one.
            capacity: b.capacity().filter(|_| !unproven),
            bracket: (b.lo, b.hi),
            precision: b.lo.zip(b.hi).map(|(l, h)| (h - l) / l),
            stop,
            load_generator_limited: limited,
            steps,
        }
    }

    /// The step that proved nothing (its faults did not all hold) and ended the
    /// search, if one did.
    pub fn proves_nothing(&self) -> Option<&RanStep> {
        self.steps.iter().find(|s| s.judged.counts().is_none())
    }

    /// `18.90/s [18.90, 19.70)` or why there is none.
    pub fn describe(&self) -> String {
        let r = |x: Option<f64>| x.map_or("—".into(), |v| format!("{v:.2}"));
        if let Some(s) = self.proves_nothing() {
            let before: Vec<String> = [
                self.bracket.0.map(|v| format!("sustained up to {v:.2}/s")),
                self.bracket.1.map(|v| format!("broken at {v:.2}/s")),
            ]
            .into_iter()
            .flatten()
            .collect();
            let before = match before.is_empty() {
                true => String::new(),
                false => format!(
                    " (the steps before it, in the declared topology: {})",
                    before.join(", ")
                ),
            };
            return format!(
                "not measured: step {} proves nothing — {}{before}",
                s.dir,
                s.judged.proves_nothing.join("; ")
            );
        }
        match (self.capacity, self.load_generator_limited) {
            (Some(c), _) => format!(
                "{c:.2}/s, in [{}, {})/s",
                r(self.bracket.0),
                r(self.bracket.1)
            ),
            (None, true) => format!(
                "not measured: the limit is the load generator at {}/s (the target sustained {}/s)",
                r(self.bracket.1),
                r(self.bracket.0)
            ),
            (None, false) if self.bracket.0.is_none() && self.bracket.1.is_some() => {
                format!("below the lowest rate tried ({}/s)", r(self.bracket.1))
            }
            (None, false) if self.stop == Stop::Unfinished => format!(
                "not measured: the search ended after {} (the SLO held up to {}/s)",
                crate::scenario::words::plural(self.steps.len() as u64, "step"),
                r(self.bracket.0)
            ),
            (None, false) => format!(
                "not bracketed: the SLO held up to {}/s (more steps or a higher `from`)",
                r(self.bracket.0)
            ),
        }
    }
}

/// The search's result: `capacity.json` of `haq capacity`, report.json `capacity` of
/// a run with `criteria.capacity.search`.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Search {
    pub scenario: String,
    pub precision: f64,
    pub max_steps: usize,
    pub step_s: f64,
    pub warmup_s: f64,
    pub protected_load: f64,
    /// The highest rate the scenario's own phases offer outside overload phases.
    pub normal_peak: f64,
    pub replicas: usize,
    /// Replicas the degraded topology's faults take out.
    pub lost: usize,
    pub healthy: Option<TopologyResult>,
    pub degraded: Option<TopologyResult>,
    /// (N−k)/N × C_healthy: the hypothesis, never the measurement.
    pub hypothesis: Option<f64>,
    /// C_healthy − normal peak (Q5: headroom is not failover reserve).
    pub headroom: Option<f64>,
    /// C_degraded − L_protected: what is left once the failure happened.
    pub failover_reserve: Option<f64>,
    /// C_degraded ≥ L_protected, measured.
    pub gate: bool,
    /// The Capacity verdict of the search.
    pub status: Status,
    pub summary: String,
    /// The steps past C_degraded judged by the Overload rules (Q10), and their
    /// verdict (NOT_EVALUATED: none ran, with why).
    pub overload: Vec<OverloadStep>,
    pub overload_status: Status,
    pub overload_summary: String,
    /// The sim's engine model computed for the mix (`kind: sim` only): the truth the
    /// measurement is compared with.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model_per_replica: Option<f64>,
}

/// What the search's conclusion reads besides the two topologies.
pub struct Context {
    pub protected_load: f64,
    pub normal_peak: f64,
    pub replicas: usize,
    pub lost: usize,
}

/// Headroom, reserve, hypothesis and the verdict from the topologies searched.
pub fn conclude(
    c: &Context,
    healthy: Option<&TopologyResult>,
    degraded: Option<&TopologyResult>,
) -> (Status, String, [Option<f64>; 3]) {
    let ch = healthy.and_then(|h| h.capacity);
    let hypothesis = ch
        .filter(|_| c.lost > 0 && c.lost < c.replicas)
        .map(|v| v * (c.replicas - c.lost) as f64 / c.replicas as f64);
    let headroom = ch.map(|v| v - c.normal_peak);
    let reserve = degraded
        .and_then(|d| d.capacity)
        .map(|v| v - c.protected_load);
    let lp = c.protected_load;
    let (status, mut summary) = match degraded {
        None => (
            Status::NotEvaluated,
            "the degraded topology was not searched (--topology degraded or both)".to_string(),
        ),
        Some(d) => match (d.capacity, d.bracket.0) {
            (Some(v), _) if v + 1e-9 >= lp => (
                Status::Pass,
                format!("C_degraded {} ≥ L_protected {lp:.2}/s", d.describe()),
            ),
            (Some(_), _) => (
                Status::Fail,
                format!("C_degraded {} < L_protected {lp:.2}/s", d.describe()),
            ),
            (None, Some(lo)) if lo + 1e-9 >= lp => (
                Status::Pass,
                format!(
                    "the degraded topology sustained {lo:.2}/s ≥ L_protected {lp:.2}/s ({})",
                    d.describe()
                ),
            ),
            (None, _)
                if d.proves_nothing().is_some()
                    && d.bracket.1.is_some_and(|h| h <= lp)
                    && !d.load_generator_limited =>
            {
                (
                    Status::Fail,
                    format!(
                        "the degraded topology broke the SLO at {:.2}/s ≤ L_protected {lp:.2}/s (C_degraded {})",
                        d.bracket.1.unwrap_or_default(),
                        d.describe()
                    ),
                )
            }
            (None, _) if d.bracket.1.is_some_and(|h| h <= lp) && !d.load_generator_limited => (
                Status::Fail,
                format!("C_degraded {} < L_protected {lp:.2}/s", d.describe()),
            ),
            (None, _) => (Status::Unknown, format!("C_degraded {}", d.describe())),
        },
    };
    if let Some(h) = healthy {
        summary.push_str(&format!("; C_healthy {}", h.describe()));
    }
    if let Some(h) = hypothesis {
        summary.push_str(&format!(
            "; the (N−k)/N hypothesis would say {h:.2}/s (not used)"
        ));
    }
    (status, summary, [hypothesis, headroom, reserve])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::capacity::Outcome;

    fn topo(t: Topology, steps: &[(f64, Outcome)], stop: Stop) -> TopologyResult {
        let mut b = Bracket::default();
        for (r, o) in steps {
            b.record(*r, *o);
        }
        TopologyResult::new(t, &b, stop, Vec::new())
    }

    const C: Context = Context {
        protected_load: 10.0,
        normal_peak: 12.0,
        replicas: 3,
        lost: 1,
    };

    #[test]
    fn c_degraded_against_l_protected_with_headroom_and_reserve() {
        use Outcome::*;
        let h = topo(
            Topology::Healthy,
            &[(10.0, Sustained), (20.0, Broken), (19.5, Sustained)],
            Stop::Precise,
        );
        let d = topo(
            Topology::Degraded,
            &[
                (10.0, Sustained),
                (20.0, Broken),
                (13.0, Sustained),
                (13.5, Broken),
            ],
            Stop::Precise,
        );
        let (s, summary, [hyp, head, reserve]) = conclude(&C, Some(&h), Some(&d));
        assert_eq!(s, Status::Pass, "{summary}");
        assert_eq!(hyp, Some(13.0));
        assert_eq!(head, Some(7.5));
        assert_eq!(reserve, Some(3.0));
        assert!(
            summary.contains("C_degraded 13.00/s, in [13.00, 13.50)/s ≥ L_protected 10.00/s"),
            "{summary}"
        );
        assert!(
            summary.contains("hypothesis would say 13.00/s (not used)"),
            "{summary}"
        );
        // Below L_protected: FAIL; nothing sustained at all: FAIL too.
        let low = topo(
            Topology::Degraded,
            &[(10.0, Broken), (5.0, Sustained), (7.0, Broken)],
            Stop::Precise,
        );
        assert_eq!(conclude(&C, Some(&h), Some(&low)).0, Status::Fail);
        let none = topo(
            Topology::Degraded,
            &[(10.0, Broken), (5.0, Broken)],
            Stop::Floor,
        );
        assert_eq!(conclude(&C, None, Some(&none)).0, Status::Fail);
        assert_eq!(conclude(&C, Some(&h), None).0, Status::NotEvaluated);
    }

    #[test]
    fn a_load_generator_limit_is_never_the_capacity() {
        use Outcome::*;
        let d = topo(
            Topology::Degraded,
            &[(5.0, Sustained), (8.0, LoadGenerator)],
            Stop::LoadGenerator,
        );
        assert_eq!(d.capacity, None);
        assert!(
            d.describe()
                .contains("the limit is the load generator at 8.00/s"),
            "{}",
            d.describe()
        );
        // Sustained below L_protected and then haq gave out: unknown, not a FAIL.
        let (s, summary, [.., reserve]) = conclude(&C, None, Some(&d));
        assert_eq!(s, Status::Unknown, "{summary}");
        assert_eq!(reserve, None);
        // Sustained at L_protected before haq gave out: the gate is measured.
        let d = topo(
            Topology::Degraded,
            &[(10.0, Sustained), (20.0, LoadGenerator)],
            Stop::LoadGenerator,
        );
        assert_eq!(conclude(&C, None, Some(&d)).0, Status::Pass);
    }
}
