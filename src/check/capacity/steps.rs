//! One step of the adaptive capacity search (`haq capacity`) judged from its own run:
//! the step phase's measurements against the SLO ([`judge_step_shed`]), how sure the
//! step is, and whether haq's own client was the limit.
//!
//! Confidence, per step (95%): a Wilson interval on the share of requests inside the
//! SLO targets (`PhaseStats::slo_attainment`, over its requests), and the p95 TTFT
//! and E2E's own distribution-free intervals (order statistics of the step's
//! completed requests: ranks nq ± z·√(nq(1−q))). A step is `confident` when its
//! intervals lie on the same side of the SLO bounds as its point estimates; a
//! marginal step is still decided by its point estimates, and says so.
//!
//! Priorities: only protected requests' rejections count against
//! `slo.rejection_rate_max` (shedding best-effort traffic is what it is for);
//! rejecting protected requests breaks the step (Q10).
//!
//! Own limit: a step whose run broke one of haq's validity rules (schedule slip,
//! missing load, trace writer waits, local resource failures: `check::validity`) was
//! limited by the load generator, not by the target: it is marked so and is never a
//! capacity.
//!
//! Degraded topology: a step whose run does not show every fault it declares applied
//! and verified (`check::capacity::faults_not_held`: the injector failed, its verify
//! said no, the target was already gone, or the trace has no record of it) ran in a
//! topology that is not the declared one. It **proves nothing**: whatever it measured
//! is neither a capacity nor a broken rate, the bracket never reads it
//! ([`SearchStep::counts`]) and it ends its topology's search, the fault named.

use serde::Serialize;

use crate::check::facts::Req;
use crate::check::history::FaultRec;
use crate::check::own::PhaseOwn;
use crate::check::validity::ClientHealth;
use crate::metrics::PhaseStats;
use crate::plan::Plan;
use crate::plan::capacity::Outcome as StepOutcome;
use crate::trace::Outcome;

/// One step's phase judged against the SLO (its point estimates).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Step {
    pub phase: String,
    pub rate: f64,
    pub requests: u64,
    pub achieved_rps: f64,
    pub ttft_p95_ms: f64,
    pub itl_p95_ms: f64,
    pub e2e_p95_ms: f64,
    pub error_rate: f64,
    pub rejection_rate: f64,
    pub pass: bool,
    /// Why it failed (empty when it passed).
    pub why: String,
}

/// Fewer requests in a step and it says nothing.
pub const MIN_STEP_REQUESTS: u64 = 5;

/// Judges one step's phase against the SLO; `shed`: the protected requests rejected
/// and the protected requests sent — only they count against
/// `slo.rejection_rate_max` (shedding best-effort traffic is what it is for).
pub fn judge_step_shed(plan: &Plan, p: &PhaseStats, rate: f64, shed: (u64, u64)) -> Step {
    let slo = &plan.scenario.slo;
    // Requests haq's interrupt stopped are neither served nor failed.
    let stopped = p
        .outcomes
        .get(&crate::trace::Outcome::Interrupted)
        .copied()
        .unwrap_or(0);
    let n = p.requests.saturating_sub(stopped).max(1) as f64;
    let rej = shed.0 as f64 / shed.1.max(1) as f64;
    let err = (p.failed + p.cancelled) as f64 / n;
    let mut why = Vec::new();
    if p.requests < MIN_STEP_REQUESTS || p.completed < MIN_STEP_REQUESTS {
        why.push(format!(
            "only {} completed",
            crate::scenario::words::plural(p.completed, "request")
        ));
    }
    for (what, v, lim) in [
        ("TTFT", p.ttft_ms.p95, slo.ttft_p95),
        ("ITL", p.itl_ms.p95, slo.itl_p95),
        ("E2E", p.e2e_ms.p95, slo.e2e_p95),
    ] {
        if v > lim.as_secs_f64() * 1000.0 {
            why.push(format!("p95 {what} {v:.0} ms > {lim}"));
        }
    }
    if err > slo.error_rate_max.0 {
        why.push(format!("{:.1}% failed", err * 100.0));
    }
    if rej > slo.rejection_rate_max.0 {
        why.push(format!(
            "{:.1}% of protected requests rejected",
            rej * 100.0
        ));
    }
    Step {
        phase: p.name.clone(),
        rate,
        requests: p.requests,
        achieved_rps: p.achieved_rps,
        ttft_p95_ms: p.ttft_ms.p95,
        itl_p95_ms: p.itl_ms.p95,
        e2e_p95_ms: p.e2e_ms.p95,
        error_rate: err,
        rejection_rate: rej,
        pass: why.is_empty(),
        why: why.join("; "),
    }
}

/// The normal quantile of a two-sided 95% interval.
pub const Z95: f64 = 1.959_964;

/// Wilson score interval of `k` successes in `n` trials.
pub fn wilson(k: u64, n: u64, z: f64) -> (f64, f64) {
    if n == 0 {
        return (0.0, 1.0);
    }
    let (n, p) = (n as f64, k as f64 / n as f64);
    let z2 = z * z;
    let mid = (p + z2 / (2.0 * n)) / (1.0 + z2 / n);
    let half = z / (1.0 + z2 / n) * (p * (1.0 - p) / n + z2 / (4.0 * n * n)).sqrt();
    ((mid - half).max(0.0), (mid + half).min(1.0))
}

/// Distribution-free interval of the `q` quantile from sorted samples: the order
/// statistics at ranks nq ∓ z·√(nq(1−q)). `None` for the upper end when there are
/// too few samples to bound it (the rank lies past the largest).
pub fn quantile_ci(sorted: &[f64], q: f64, z: f64) -> Option<(f64, Option<f64>)> {
    let n = sorted.len();
    if n == 0 {
        return None;
    }
    let nq = n as f64 * q;
    let half = z * (nq * (1.0 - q)).sqrt();
    let lo = ((nq - half).floor() as usize).clamp(1, n);
    let hi = (nq + half).ceil() as usize;
    Some((sorted[lo - 1], (hi <= n).then(|| sorted[hi.max(1) - 1])))
}

/// A p95 and its interval (ms); `hi: None`: not bounded by so few samples.
#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
pub struct P95 {
    pub p95_ms: f64,
    pub lo_ms: f64,
    pub hi_ms: Option<f64>,
    pub limit_ms: f64,
}

impl P95 {
    fn of(mut v: Vec<f64>, p95_ms: f64, limit_ms: f64) -> Option<P95> {
        v.sort_by(f64::total_cmp);
        let (lo_ms, hi_ms) = quantile_ci(&v, 0.95, Z95)?;
        Some(P95 {
            p95_ms,
            lo_ms,
            hi_ms,
            limit_ms,
        })
    }

    /// `117 ms [108, 126]` (`—`: no upper bound from so few samples).
    pub fn describe(p: &Option<P95>) -> String {
        p.map_or("—".into(), |p| {
            format!(
                "{:.0} ms [{:.0}, {}]",
                p.p95_ms,
                p.lo_ms,
                p.hi_ms.map_or("—".into(), |h| format!("{h:.0}"))
            )
        })
    }

    /// The interval lies on one side of the limit.
    fn clear(&self) -> bool {
        self.lo_ms > self.limit_ms || self.hi_ms.is_some_and(|h| h <= self.limit_ms)
    }
}

/// Why haq's own machine was the limit of phase `phase` (item 4 of issue 19): haq's
/// CPU in it ([`PhaseOwn::client_limits`]), and — when the phase did not hold — the
/// sim's stalls in it or in the warm-up before it ([`PhaseOwn::machine_limits`]: a
/// rate the sim sustained though it fell behind its model was sustained all the same).
pub fn own_limits(own: &[PhaseOwn], phase: &str, held: bool) -> Vec<String> {
    let mut out: Vec<String> = own
        .iter()
        .filter(|o| o.phase == phase)
        .flat_map(PhaseOwn::client_limits)
        .collect();
    if !held {
        out.extend(
            own.iter()
                .filter(|o| o.phase == phase || o.phase == crate::plan::capacity::WARMUP)
                .flat_map(PhaseOwn::machine_limits),
        );
    }
    out
}

/// One step of the adaptive search, judged.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct SearchStep {
    /// The step phase against the SLO (rates, p95s, pass and why).
    #[serde(flatten)]
    pub step: Step,
    pub outcome: StepOutcome,
    /// Share of the step's requests inside every SLO target, with its 95% Wilson
    /// interval.
    pub attainment: f64,
    pub attainment_ci: (f64, f64),
    pub ttft_p95: Option<P95>,
    pub e2e_p95: Option<P95>,
    /// Every interval lies on the side of the SLO its point estimate is on.
    pub confident: bool,
    pub protected_requests: u64,
    pub protected_rejected: u64,
    /// Best-effort requests shed: allowed, counted.
    pub best_effort_rejected: u64,
    /// Why haq's own client was the limit (empty when it was not).
    pub load_generator: Vec<String>,
    /// Why the step proves nothing: a fault of its degraded topology not applied or
    /// not verified, named (empty when every fault it declares held, and in the
    /// healthy topology). `outcome` is then only what it measured, never read.
    pub proves_nothing: Vec<String>,
}

impl SearchStep {
    /// The outcome the search's bracket reads: `None` for a step that proves nothing.
    pub fn counts(&self) -> Option<StepOutcome> {
        self.proves_nothing.is_empty().then_some(self.outcome)
    }

    /// `sustained`, `not sustained: why`, `limit is the load generator: why`,
    /// `proves nothing: why (measured: …)`.
    pub fn outcome_text(&self) -> String {
        if !self.proves_nothing.is_empty() {
            let measured = match self.outcome {
                StepOutcome::Sustained => "sustained",
                StepOutcome::Broken => "not sustained",
                StepOutcome::LoadGenerator => "the load generator's limit",
            };
            return format!(
                "proves nothing: {} (it measured: {measured}, in another topology)",
                self.proves_nothing.join("; ")
            );
        }
        match self.outcome {
            StepOutcome::Sustained => "sustained".to_string(),
            StepOutcome::Broken => format!("not sustained: {}", self.step.why),
            StepOutcome::LoadGenerator => format!(
                "limit is the load generator: {}",
                self.load_generator.join("; ")
            ),
        }
    }

    /// `in SLO 99.0% [94.6, 99.8]`.
    pub fn attainment_text(&self) -> String {
        format!(
            "{:.1}% [{:.1}, {:.1}]",
            self.attainment * 100.0,
            self.attainment_ci.0 * 100.0,
            self.attainment_ci.1 * 100.0
        )
    }
}

/// The step phase (`stats`) of a step run, judged with the run's finished requests,
/// its fault records (a degraded step's faults must all have held) and haq's own
/// health (`client`: its sends; `own`: its CPU, the sim's stalls) in it.
pub fn judge(
    plan: &Plan,
    stats: &PhaseStats,
    (requests, faults): (&[Req], &[FaultRec]),
    (client, own): (&ClientHealth, &[PhaseOwn]),
    rate: f64,
) -> SearchStep {
    let slo = &plan.scenario.slo;
    let mine: Vec<&Req> = requests
        .iter()
        .filter(|r| r.phase == stats.name && r.probe.is_none())
        .collect();
    let protected: Vec<&Req> = mine.iter().copied().filter(|r| r.protected).collect();
    let rejected = |v: &[&Req]| v.iter().filter(|r| r.outcome == Outcome::Rejected).count() as u64;
    let (p_rej, all_rej) = (rejected(&protected), rejected(&mine));
    let step = judge_step_shed(plan, stats, rate, (p_rej, protected.len() as u64));
    let done: Vec<&&Req> = mine
        .iter()
        .filter(|r| r.outcome == Outcome::Completed)
        .collect();
    let ms = |us: u64| us as f64 / 1000.0;
    let ttft_p95 = P95::of(
        done.iter().filter_map(|r| r.ttft()).map(ms).collect(),
        stats.ttft_ms.p95,
        slo.ttft_p95.as_secs_f64() * 1000.0,
    );
    let e2e_p95 = P95::of(
        done.iter().map(|r| ms(r.e2e())).collect(),
        stats.e2e_ms.p95,
        slo.e2e_p95.as_secs_f64() * 1000.0,
    );
    let left_out = [Outcome::Interrupted, Outcome::Abandoned]
        .iter()
        .map(|o| stats.outcomes.get(o).copied().unwrap_or(0))
        .sum::<u64>();
    let n = stats.requests.saturating_sub(left_out);
    let k = (stats.slo_attainment * n as f64).round() as u64;
    // Breaches of the warm-up say nothing of the step; run-wide ones (trace writer,
    // local resources) do.
    let mut load_generator: Vec<String> = client
        .breaches
        .iter()
        .filter(|b| b.phase.as_deref().is_none_or(|p| p == stats.name))
        .map(|b| b.message.clone())
        .collect();
    load_generator.extend(own_limits(own, &stats.name, step.pass));
    let outcome = if !load_generator.is_empty() {
        StepOutcome::LoadGenerator
    } else if step.pass {
        StepOutcome::Sustained
    } else {
        StepOutcome::Broken
    };
    let latency_clear = [ttft_p95, e2e_p95].iter().flatten().all(|p| p.clear());
    SearchStep {
        confident: latency_clear && step.requests >= MIN_STEP_REQUESTS,
        step,
        outcome,
        attainment: stats.slo_attainment,
        attainment_ci: wilson(k, n, Z95),
        ttft_p95,
        e2e_p95,
        protected_requests: protected.len() as u64,
        protected_rejected: p_rej,
        best_effort_rejected: all_rej - p_rej,
        load_generator,
        proves_nothing: super::held::faults_not_held(plan, faults),
    }
}

/// A step judged `outcome` at `rate`, every figure inside the SLO (unit tests).
#[cfg(test)]
pub fn fake(rate: f64, outcome: StepOutcome) -> SearchStep {
    SearchStep {
        step: Step {
            phase: "step".into(),
            rate,
            requests: 100,
            achieved_rps: rate,
            ttft_p95_ms: 100.0,
            itl_p95_ms: 10.0,
            e2e_p95_ms: 500.0,
            error_rate: 0.0,
            rejection_rate: 0.0,
            pass: outcome == StepOutcome::Sustained,
            why: String::new(),
        },
        outcome,
        attainment: 1.0,
        attainment_ci: (0.96, 1.0),
        ttft_p95: None,
        e2e_p95: None,
        confident: true,
        protected_requests: 100,
        protected_rejected: 0,
        best_effort_rejected: 0,
        load_generator: Vec::new(),
        proves_nothing: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 10 s of baseline at 10/s in the SLO, plus 10 rejected requests of the class
    /// asked (protected or best-effort), judged as a search step at 10/s.
    fn step_with_rejections(protected: bool) -> SearchStep {
        use crate::check::testkit::*;
        let p = plan(&["faults=[]"]);
        let mut tb = Tb::new();
        tb.phases(&p);
        tb.steady("baseline", 1.0, 11.0, 10.0, rr(&["w1", "w2", "w3"]));
        for k in 0..10 {
            let mut r = R::ok(format!("shed{k}"), "baseline", 1.05 + k as f64, "w1").rejected();
            r.protected = protected;
            tb.request(r);
        }
        tb.run_end(us(12.0));
        let j = tb.judge(&p);
        let stats = j
            .phases
            .iter()
            .find(|s| s.name == "baseline")
            .expect("baseline");
        judge(
            &p,
            stats,
            (&j.facts.requests, &j.faults),
            (&j.client, &j.own),
            10.0,
        )
    }

    /// How a degraded step's fault was recorded.
    enum Rec {
        Verified,
        Unverified,
        NotApplied,
        Absent,
    }

    /// A degraded step in the SLO (the base plan's `kill-w2` held from the start),
    /// with the fault's record as asked.
    fn degraded_step(rec: Rec) -> SearchStep {
        use crate::check::testkit::*;
        let p = plan(&[
            "phases=[{name: baseline, duration: 10s}]",
            "faults[0].at.phase=baseline",
        ]);
        let mut tb = Tb::new();
        tb.phases(&p);
        match rec {
            Rec::Verified => {
                tb.inject("kill-w2", "w2", us(1.0), true);
            }
            Rec::Unverified => {
                tb.inject("kill-w2", "w2", us(1.0), false);
            }
            Rec::NotApplied => {
                tb.fault_as(crate::trace::FaultLine {
                    t: us(1.0),
                    name: "kill-w2".into(),
                    domain: crate::scenario::FailureDomain::Worker,
                    action: crate::scenario::FaultAction::Kill,
                    replica: "w2".into(),
                    pid: None,
                    verified: false,
                    detail: format!("{}replica w2 is not running", crate::trace::NOT_APPLIED),
                    backend: None,
                    node: None,
                    trigger: None,
                    triggered: None,
                    probe: None,
                });
            }
            Rec::Absent => {}
        }
        tb.steady("baseline", 1.0, 11.0, 10.0, rr(&["w1", "w3"]));
        tb.run_end(us(12.0));
        let j = tb.judge(&p);
        let stats = j
            .phases
            .iter()
            .find(|s| s.name == "baseline")
            .expect("baseline");
        judge(
            &p,
            stats,
            (&j.facts.requests, &j.faults),
            (&j.client, &j.own),
            10.0,
        )
    }

    #[test]
    fn a_degraded_step_whose_fault_did_not_hold_proves_nothing_and_names_it() {
        // Verified: the step counts, as it measured.
        let held = degraded_step(Rec::Verified);
        assert!(held.proves_nothing.is_empty(), "{held:?}");
        assert_eq!(held.counts(), Some(StepOutcome::Sustained));
        // Not verified: inside the SLO all the same, and never a sustained rate.
        let unverified = degraded_step(Rec::Unverified);
        assert_eq!(unverified.outcome, StepOutcome::Sustained, "{unverified:?}");
        assert_eq!(unverified.counts(), None);
        let why = unverified.outcome_text();
        assert!(
            why.starts_with("proves nothing: kill-w2 on w2 was not verified (SIGKILL sent; process still alive after 5s)"),
            "{why}"
        );
        // Not applied (the injector's why), or no record of the fault at all.
        let missed = degraded_step(Rec::NotApplied);
        assert_eq!(missed.counts(), None);
        assert_eq!(
            missed.proves_nothing,
            [
                "kill-w2 on w2 was not applied (replica w2 is not running): the degraded topology is not the declared one"
            ]
        );
        let absent = degraded_step(Rec::Absent);
        assert_eq!(absent.counts(), None);
        assert_eq!(
            absent.proves_nothing,
            [
                "kill-w2 was never applied (the trace has no record of it): the degraded topology is not the declared one"
            ]
        );
        // The healthy topology declares no fault: nothing to hold.
        let healthy = step_with_rejections(false);
        assert!(healthy.proves_nothing.is_empty() && healthy.counts().is_some());
    }

    #[test]
    fn shedding_best_effort_holds_the_step_and_shedding_protected_breaks_it() {
        let be = step_with_rejections(false);
        assert_eq!(be.outcome, StepOutcome::Sustained, "{be:?}");
        assert_eq!((be.best_effort_rejected, be.protected_rejected), (10, 0));
        assert!(be.load_generator.is_empty(), "{be:?}");
        let pr = step_with_rejections(true);
        assert_eq!(pr.outcome, StepOutcome::Broken, "{pr:?}");
        assert_eq!(pr.protected_rejected, 10);
        assert!(
            pr.step.why.contains("of protected requests rejected"),
            "{}",
            pr.step.why
        );
        // 100 requests inside the SLO of 110: the attainment and its interval.
        assert!(pr.attainment_ci.0 < pr.attainment && pr.attainment < pr.attainment_ci.1);
    }

    #[test]
    fn wilson_matches_the_textbook_values() {
        // 81 of 263 (Wilson 1927 / Newcombe 1998 example 1): 0.2553–0.3662.
        let (lo, hi) = wilson(81, 263, Z95);
        assert!(
            (lo - 0.2553).abs() < 5e-4 && (hi - 0.3662).abs() < 5e-4,
            "{lo} {hi}"
        );
        // Every request inside: the upper end is 1, the lower one below it.
        let (lo, hi) = wilson(40, 40, Z95);
        assert!(hi == 1.0 && lo < 0.92 && lo > 0.9, "{lo} {hi}");
        assert_eq!(wilson(0, 0, Z95), (0.0, 1.0));
    }

    #[test]
    fn the_p95_interval_comes_from_order_statistics() {
        let v: Vec<f64> = (1..=1000).map(f64::from).collect();
        // nq = 950, half-width 1.96·√47.5 = 13.5: ranks 936 and 964.
        let (lo, hi) = quantile_ci(&v, 0.95, Z95).expect("ci");
        assert_eq!((lo, hi), (936.0, Some(964.0)));
        // 20 samples cannot bound a p95 from above.
        let v: Vec<f64> = (1..=20).map(f64::from).collect();
        let (lo, hi) = quantile_ci(&v, 0.95, Z95).expect("ci");
        assert_eq!((lo, hi), (17.0, None));
        assert!(quantile_ci(&[], 0.95, Z95).is_none());
        let p = P95 {
            p95_ms: 100.0,
            lo_ms: 90.0,
            hi_ms: Some(110.0),
            limit_ms: 105.0,
        };
        assert!(!p.clear());
        assert!(
            P95 {
                limit_ms: 120.0,
                ..p
            }
            .clear()
        );
        assert!(
            P95 {
                limit_ms: 80.0,
                ..p
            }
            .clear()
        );
        assert!(
            !P95 {
                hi_ms: None,
                limit_ms: 120.0,
                ..p
            }
            .clear()
        );
    }
}
