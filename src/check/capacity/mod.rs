//! Capacity (Q1, Q4, Q10, Q13). In a plain run: the protected offered load was served
//! within the SLO through the degraded interval — protected requests sent after the
//! fault, until the first phase that is not a fault or degraded phase; their errors
//! and rejections count against it (rejecting protected traffic is a Capacity FAIL,
//! not a pass by load shedding). Requests a later fault caught in flight are judged
//! by Request-Fate, as the first fault's are, and not counted here. With a capacity search the gate is the measured
//! C_degraded ≥ L_protected (`search`, docs/capacity.md).
//!
//! The protected load is an offered rate of the whole mix (best-effort classes
//! included: the target may shed them first). Each phase's offered load is checked
//! against it ([`ProtectedLoad`]: planned, and offered as drawn — a Poisson schedule
//! at exactly the protected rate falls short in about half its phases): a phase of
//! the degraded interval that offered less than the protected load, beyond
//! `client.max_load_error`, leaves Capacity unproven (UNKNOWN, or FAIL when it failed
//! even so): the degraded topology was never offered the load it must carry (Q12).

pub mod adaptive;
pub mod excess;
pub mod held;
pub mod search;
pub mod steps;

use serde::Serialize;

use super::history::{FaultRec, RequestRecord};
use super::latency::{MIN_SAMPLES, Pcts, pcts};
use super::timeline::{FaultTimeline, Timeline, ms};
use super::{Status, Verdict, VerdictName};
use crate::metrics::{Measured, PhaseAcc};
use crate::plan::Plan;
use crate::scenario::PhaseKind;
use adaptive::Search;
pub use held::{faults_not_held, not_held};

pub const NAME: VerdictName = VerdictName::Capacity;

/// Protected requests sent in the degraded interval.
pub struct WindowAcc {
    from: Option<u64>,
    phases: Vec<String>,
    /// Of them, caught in flight by a later fault (a second kill): not counted.
    caught: u64,
    /// The phase table's accumulator (one definition of every figure), over the
    /// window's requests.
    acc: PhaseAcc,
}

pub use crate::plan::implied::degraded_phases;

impl WindowAcc {
    pub fn new(plan: &Plan, faults: &[FaultRec]) -> Self {
        let first = faults
            .iter()
            .filter(|f| super::facts::removes_endpoint(f))
            .min_by_key(|f| f.t);
        let phases = first
            .and_then(|f| plan.faults.iter().find(|d| d.name == f.name))
            .map(|d| degraded_phases(plan, &d.phase))
            .unwrap_or_default();
        WindowAcc {
            from: first.map(|f| f.t),
            phases,
            caught: 0,
            acc: PhaseAcc::new("degraded interval", PhaseKind::Degraded),
        }
    }

    /// `m`: the request's figures as the phase table has them (metrics::Measured);
    /// `caught`: a fault caught it in flight. The first fault's catch was sent before
    /// the interval; a later fault's (a second kill inside it) is what that fault did
    /// to the streams it cut, judged by Request-Fate against the declared policy, not
    /// what the degraded topology failed to serve: not counted, as the first's.
    pub fn add(&mut self, r: &RequestRecord, m: &Measured, caught: bool) {
        let Some(from) = self.from else { return };
        if r.end.is_none() || !r.protected || r.intended < from || !self.phases.contains(&r.phase) {
            return;
        }
        if caught {
            self.caught += 1;
            return;
        }
        self.acc.add_measured(r, m);
    }

    pub fn finish(&self) -> Window {
        let a = &self.acc;
        Window {
            phases: self.phases.clone(),
            // Requests haq's interrupt stopped are neither served nor failed.
            requests: a.requests.saturating_sub(a.interrupted),
            completed: a.completed,
            // Stopped by haq at the drain timeout: not served either.
            failed: a.failed + a.cancelled,
            rejected: a.rejected,
            caught: self.caught,
            ttft_ms: pcts(&a.ttft),
            itl_ms: pcts(&a.itl),
            e2e_ms: pcts(&a.e2e),
        }
    }
}

/// The protected traffic of the degraded interval, as reported.
#[derive(Debug, Clone, Serialize)]
pub struct Window {
    pub phases: Vec<String>,
    pub requests: u64,
    pub completed: u64,
    pub failed: u64,
    pub rejected: u64,
    /// Caught in flight by a later fault: left to Request-Fate, not in the figures.
    pub caught: u64,
    pub ttft_ms: Pcts,
    pub itl_ms: Pcts,
    pub e2e_ms: Pcts,
}

/// Each phase's offered load against the protected load (Q12).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ProtectedLoad {
    /// `protected_load` (req/s, every class of the mix).
    pub rps: f64,
    /// A phase is short when it offered less than the protected load by more than this
    /// share of it (`client.max_load_error`) and by more than one request.
    pub tolerance: f64,
    /// Every phase but the capacity search's steps and settle phase (they offer their
    /// own rates).
    pub phases: Vec<PhaseLoad>,
}

/// One phase's offered load.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct PhaseLoad {
    pub phase: String,
    /// The rate the plan offers in the phase (req/s).
    pub planned_rps: f64,
    /// The rate the drawn schedule offered: the phase's requests (by intended send
    /// time, probes excluded) per second of phase.
    pub offered_rps: f64,
    pub requests: u64,
    pub duration_s: f64,
    /// Offered less than the protected load, beyond the tolerance.
    pub short: bool,
}

impl PhaseLoad {
    /// `fault: offered 2.86/s (43 requests in 15.0s, planned 4.00/s)`.
    pub fn describe(&self) -> String {
        format!(
            "{}: offered {:.2}/s ({} in {:.1}s, planned {:.2}/s)",
            self.phase,
            self.offered_rps,
            crate::scenario::words::plural(self.requests, "request"),
            self.duration_s,
            self.planned_rps
        )
    }
}

/// The offered load of every phase against the protected load.
pub fn protected_load(plan: &Plan, phases: &[super::latency::PhaseStats]) -> ProtectedLoad {
    let rps = plan.scenario.protected_load.0;
    let tolerance = plan.scenario.client.max_load_error.0;
    let phases = plan
        .phases
        .iter()
        .filter(|p| !matches!(p.kind, PhaseKind::Capacity | PhaseKind::Settle))
        .map(|p| {
            let requests = phases
                .iter()
                .find(|s| s.name == p.name)
                .map_or(0, |s| s.requests);
            let secs = p.duration.as_secs_f64();
            let due = rps * secs;
            let allowed = (tolerance * due).max(1.0);
            PhaseLoad {
                phase: p.name.clone(),
                planned_rps: p.rate,
                offered_rps: if secs > 0.0 {
                    requests as f64 / secs
                } else {
                    0.0
                },
                requests,
                duration_s: secs,
                short: (requests as f64) + allowed < due,
            }
        })
        .collect();
    ProtectedLoad {
        rps,
        tolerance,
        phases,
    }
}

/// The Capacity verdict: with a capacity search, the measured gate C_degraded ≥
/// L_protected (and the plain check of the fault's degraded interval, when there is
/// one); without, the plain check alone.
pub fn verdict(
    plan: &Plan,
    tl: &Timeline,
    w: &Window,
    load: &ProtectedLoad,
    search: Option<&Search>,
) -> Verdict {
    let plain = plain_verdict(plan, tl, w, load);
    let Some(s) = search else { return plain };
    let mut evidence = Vec::new();
    for t in [&s.healthy, &s.degraded].into_iter().flatten() {
        for st in &t.steps {
            evidence.push(format!("{} {}", t.topology.as_str(), st.describe()));
        }
    }
    evidence.extend(plain.evidence.iter().cloned());
    let mut summary = s.summary.clone();
    let status = super::verdict::worst(
        [s.status, plain.status]
            .into_iter()
            .filter(|s| *s != Status::NotEvaluated),
    );
    if plain.status != Status::NotEvaluated {
        summary = format!("{summary}; fault window: {}", plain.summary);
    }
    Verdict::new(NAME, status, summary, evidence)
}

/// The plain check: the protected traffic of the first removing fault's degraded
/// interval against the SLO, at the protected load in each of its phases.
fn plain_verdict(plan: &Plan, tl: &Timeline, w: &Window, load: &ProtectedLoad) -> Verdict {
    let Some(f) = tl
        .faults
        .iter()
        .filter(|f| f.removes)
        .min_by_key(|f| f.injected)
    else {
        return Verdict::new(
            NAME,
            Status::NotEvaluated,
            "no fault removes capacity, so there is no degraded topology to measure (add a fault, or a capacity search)",
            Vec::new(),
        );
    };
    if let Some(why) = not_held(&f.fault, f.verified, None, None) {
        return Verdict::new(NAME, Status::Unknown, why, Vec::new());
    }
    let m = Served::measure(plan, f, w);
    let window: Vec<&PhaseLoad> = load
        .phases
        .iter()
        .filter(|p| w.phases.contains(&p.phase))
        .collect();
    let mut evidence = m.evidence(plan, f, w);
    for p in &window {
        evidence.push(format!(
            "{} — {} the protected load {}",
            p.describe(),
            if p.short { "SHORT of" } else { "holds" },
            plan.scenario.protected_load
        ));
    }
    let short: Vec<String> = window
        .iter()
        .filter(|p| p.short)
        .map(|p| p.describe())
        .collect();
    let short_why = (!short.is_empty()).then(|| {
        format!(
            "the protected load {} was not offered in {} ({}): Capacity cannot pass on a load that was never reached (Q12) — offer more than protected_load (workload.arrival.rate), lengthen the phase or use `process: constant`",
            plan.scenario.protected_load,
            if short.len() == 1 { "phase" } else { "phases" },
            short.join("; ")
        )
    });
    if w.requests < MIN_SAMPLES {
        return Verdict::new(
            NAME,
            Status::Unknown,
            format!(
                "only {} protected requests were sent in the degraded interval (need {MIN_SAMPLES})",
                w.requests
            ),
            evidence,
        );
    }
    let over = m.over_slo(plan, w);
    if !over.is_empty() {
        let at = match &short_why {
            Some(_) => " even at the lower load it was offered",
            None => "",
        };
        return Verdict::new(
            NAME,
            Status::Fail,
            format!(
                "the degraded topology did not serve the protected load {} within the SLO{at}: {}",
                plan.scenario.protected_load,
                over.join("; ")
            ),
            evidence,
        );
    }
    if let Some(why) = short_why {
        return Verdict::new(NAME, Status::Unknown, why, evidence);
    }
    Verdict::new(
        NAME,
        Status::Pass,
        format!(
            "protected load {} served within the SLO for {secs:.1}s after {}: {}, p95 TTFT {:.0} ms, {:.1}% failed, {:.1}% rejected (plain run: C_degraded ≥ L_protected shown at the offered rate, not searched)",
            plan.scenario.protected_load,
            f.fault,
            crate::scenario::words::plural(w.requests, "request"),
            w.ttft_ms.p95,
            m.err * 100.0,
            m.rej * 100.0,
            secs = m.secs,
        ),
        evidence,
    )
}

/// How the degraded interval served its protected traffic.
struct Served {
    /// Length of the interval (s).
    secs: f64,
    /// Protected-class requests sent per second in it.
    offered: f64,
    /// Shares of the requests that failed and that were rejected.
    err: f64,
    rej: f64,
    /// p95 TTFT, ITL, E2E (ms) with their SLO bound (ms).
    lat: [(&'static str, f64, f64); 3],
}

impl Served {
    fn measure(plan: &Plan, f: &FaultTimeline, w: &Window) -> Served {
        let slo = &plan.scenario.slo;
        let secs = ms(f.injected, f.degraded_until) / 1000.0;
        let offered = if secs > 0.0 {
            w.requests as f64 / secs
        } else {
            0.0
        };
        let n = w.requests.max(1) as f64;
        Served {
            secs,
            offered,
            err: (w.failed as f64) / n,
            rej: (w.rejected as f64) / n,
            lat: [
                ("TTFT", w.ttft_ms.p95, slo.ttft_p95.as_secs_f64() * 1000.0),
                ("ITL", w.itl_ms.p95, slo.itl_p95.as_secs_f64() * 1000.0),
                ("E2E", w.e2e_ms.p95, slo.e2e_p95.as_secs_f64() * 1000.0),
            ],
        }
    }

    fn evidence(&self, plan: &Plan, f: &FaultTimeline, w: &Window) -> Vec<String> {
        let slo = &plan.scenario.slo;
        let Served {
            secs,
            offered,
            err,
            rej,
            ..
        } = *self;
        let mut evidence = vec![
            format!(
                "degraded interval: {secs:.1}s after {} (phases {}); {offered:.2}/s of protected-class requests sent in it (the protected load {} counts every class)",
                f.fault,
                w.phases.join(", "),
                plan.scenario.protected_load
            ),
            format!(
                "{} protected requests: {} completed, {} failed ({:.1}%, SLO ≤ {:.1}%), {} rejected ({:.1}%, SLO ≤ {:.1}%)",
                w.requests,
                w.completed,
                w.failed,
                err * 100.0,
                slo.error_rate_max.0 * 100.0,
                w.rejected,
                rej * 100.0,
                slo.rejection_rate_max.0 * 100.0
            ),
        ];
        if w.caught > 0 {
            evidence.push(format!(
                "{} sent in it caught in flight by a later fault: judged by Request-Fate, not counted here",
                crate::scenario::words::plural(w.caught, "protected request")
            ));
        }
        for (what, v, lim) in self.lat {
            evidence.push(format!("p95 {what} {v:.1} ms (SLO {lim:.0} ms)"));
        }
        evidence
    }

    /// Every SLO the protected traffic broke (latency only with enough completions).
    fn over_slo(&self, plan: &Plan, w: &Window) -> Vec<String> {
        let slo = &plan.scenario.slo;
        let mut over = Vec::new();
        if self.err > slo.error_rate_max.0 {
            over.push(format!(
                "{:.1}% of protected requests failed (SLO ≤ {:.1}%)",
                self.err * 100.0,
                slo.error_rate_max.0 * 100.0
            ));
        }
        if self.rej > slo.rejection_rate_max.0 {
            over.push(format!(
                "{:.1}% of protected requests were rejected (SLO ≤ {:.1}%): shedding protected traffic is a capacity failure (Q10)",
                self.rej * 100.0,
                slo.rejection_rate_max.0 * 100.0
            ));
        }
        if w.completed >= MIN_SAMPLES {
            for (what, v, lim) in self.lat {
                if v > lim {
                    over.push(format!("p95 {what} {v:.1} ms > {lim:.0} ms"));
                }
            }
        }
        over
    }
}

#[cfg(test)]
mod caught_tests;
#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::testkit::*;

    #[test]
    fn passes_when_the_degraded_topology_serves_the_protected_load_in_slo() {
        let p = plan(&[]);
        let j = standard(&p).judge(&p);
        let v = pick(&j, NAME);
        assert_eq!(v.status, Status::Pass, "{v:?}");
        assert!(v.summary.contains("not searched"), "{}", v.summary);
        let w = j.degraded.as_ref().expect("window");
        assert_eq!(w.phases, ["fault", "degraded"]);
        // Sent from the fault (13 s) to the end of degraded (31 s) at 10/s.
        assert!((175..=181).contains(&w.requests), "{}", w.requests);
        assert!(
            v.evidence[0].contains("18.0s after kill-w2"),
            "{:?}",
            v.evidence
        );
    }

    #[test]
    fn degraded_latency_outside_the_slo_fails() {
        let p = plan(&[]);
        let mut tb = Tb::new();
        tb.phases(&p);
        tb.steady("baseline", 1.0, 11.0, 10.0, rr(&["w1", "w2", "w3"]));
        tb.inject("kill-w2", "w2", us(13.0), true);
        for k in 0..100 {
            let t = 21.0 + k as f64 * 0.1;
            tb.request(R::ok(format!("slow{k}"), "degraded", t, "w1").ttft(1500.0));
        }
        tb.run_end(us(33.0));
        let v = pick(&tb.judge(&p), NAME);
        assert_eq!(v.status, Status::Fail, "{v:?}");
        assert!(v.summary.contains("p95 TTFT 1500"), "{}", v.summary);
    }

    #[test]
    fn a_non_streamed_answer_counts_in_e2e_not_in_ttft() {
        let p = plan(&[]);
        let mut tb = Tb::new();
        tb.phases(&p);
        tb.steady("baseline", 1.0, 11.0, 10.0, rr(&["w1", "w2", "w3"]));
        tb.steady("fault", 11.0, 21.0, 10.0, rr(&["w1", "w3"]));
        tb.inject("kill-w2", "w2", us(13.0), true);
        tb.steady("degraded", 21.0, 26.0, 10.0, rr(&["w1", "w3"]));
        // Whole answers in 1.5 s: over the TTFT SLO as a first token, inside it as E2E.
        for k in 0..50 {
            let t = 26.0 + k as f64 * 0.1;
            tb.request(
                R::ok(format!("whole{k}"), "degraded", t, "w1")
                    .ttft(1500.0)
                    .whole(),
            );
        }
        tb.run_end(us(33.0));
        let v = pick(&tb.judge(&p), NAME);
        assert_eq!(v.status, Status::Pass, "{v:?}");
    }

    #[test]
    fn rejecting_protected_traffic_in_the_degraded_interval_fails() {
        let p = plan(&[]);
        let mut tb = Tb::new();
        tb.phases(&p);
        tb.steady("baseline", 1.0, 11.0, 10.0, rr(&["w1", "w2", "w3"]));
        tb.inject("kill-w2", "w2", us(13.0), true);
        tb.steady("degraded", 21.0, 31.0, 10.0, |i, _| {
            (i % 5 != 0).then_some(if i % 2 == 0 { "w1" } else { "w3" })
        });
        tb.run_end(us(32.0));
        let v = pick(&tb.judge(&p), NAME);
        assert_eq!(v.status, Status::Fail, "{v:?}");
        assert!(v.summary.contains("were rejected"), "{}", v.summary);
        assert!(v.summary.contains("Q10"), "{}", v.summary);
    }

    /// The standard run with the fault phase offering `n` requests instead of 100.
    fn with_fault_phase_requests(n: u32, ttft_ms: f64) -> crate::check::Judgement {
        let p = plan(&[]);
        let mut tb = Tb::new();
        tb.phases(&p);
        tb.steady("baseline", 1.0, 11.0, 10.0, rr(&["w1", "w2", "w3"]));
        tb.inject("kill-w2", "w2", us(13.0), true);
        for k in 0..n {
            let t = 11.0 + f64::from(k) * 10.0 / f64::from(n);
            let w = if k % 2 == 0 { "w1" } else { "w3" };
            tb.request(R::ok(format!("f{k}"), "fault", t, w).ttft(ttft_ms));
        }
        tb.steady("degraded", 21.0, 31.0, 10.0, rr(&["w1", "w3"]));
        tb.run_end(us(32.0));
        tb.judge(&p)
    }

    #[test]
    fn a_degraded_phase_that_offered_less_than_the_protected_load_cannot_pass() {
        // 10/s protected, 10 s of fault phase: 72 requests is 7.2/s, short by more than
        // the 5% tolerance (the "protected load 4/s, offered 2.86/s").
        let j = with_fault_phase_requests(72, 100.0);
        let v = pick(&j, NAME);
        assert_eq!(v.status, Status::Unknown, "{v:?}");
        assert!(
            v.summary.contains("the protected load 10/s was not offered in phase (fault: offered 7.20/s (72 requests in 10.0s, planned 10.00/s))"),
            "{}",
            v.summary
        );
        let fault = j.protected_load.phases.iter().find(|p| p.phase == "fault");
        assert!(fault.is_some_and(|p| p.short), "{:?}", j.protected_load);
        assert!(
            v.evidence
                .iter()
                .any(|e| e.starts_with("degraded: offered 10.00/s") && e.contains("holds")),
            "{:?}",
            v.evidence
        );
        // Within the tolerance (96 of 100 due): the same run passes.
        let v = pick(&with_fault_phase_requests(96, 100.0), NAME);
        assert_eq!(v.status, Status::Pass, "{v:?}");
        // Short and outside the SLO even so: FAIL, saying at what load.
        let v = pick(&with_fault_phase_requests(72, 1500.0), NAME);
        assert_eq!(v.status, Status::Fail, "{v:?}");
        assert!(
            v.summary.contains("even at the lower load it was offered"),
            "{}",
            v.summary
        );
    }

    #[test]
    fn unverified_fault_is_unknown_and_no_fault_is_not_evaluated() {
        let p = plan(&[]);
        let mut tb = Tb::new();
        tb.phases(&p);
        tb.inject("kill-w2", "w2", us(13.0), false);
        tb.steady("degraded", 21.0, 31.0, 10.0, rr(&["w1", "w3"]));
        tb.run_end(us(32.0));
        assert_eq!(pick(&tb.judge(&p), NAME).status, Status::Unknown);
        let p = plan(&["faults=[]"]);
        let mut tb = Tb::new();
        tb.phases(&p);
        tb.steady("baseline", 1.0, 11.0, 10.0, rr(&["w1"]));
        tb.run_end(us(32.0));
        assert_eq!(pick(&tb.judge(&p), NAME).status, Status::NotEvaluated);
    }
}
