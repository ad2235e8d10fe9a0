//! The capacity search judged (Q4): each step of the healthy and the degraded ladder
//! (`plan::capacity` lays them out) from its phase's measurements; the capacity is the
//! highest rate whose step and every lower one met the SLO — never derived as
//! (N−1)/N of healthy capacity, which is shown only as the hypothesis it is.

use serde::Serialize;

use crate::metrics::PhaseStats;
use crate::plan::Plan;
use crate::plan::capacity::{DEGRADED, HEALTHY};

/// One step of a ladder as judged.
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

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Ladder {
    pub steps: Vec<Step>,
    /// The highest rate whose step and every lower one passed; `None`: not even the
    /// lowest rate was sustained.
    pub capacity: Option<f64>,
    /// The ladder ran to its end (an interrupted run leaves steps unmeasured).
    pub complete: bool,
    /// The first rate above the capacity that did not hold: the capacity lies in
    /// [capacity, next); the ladder's spacing is its precision.
    pub next: Option<f64>,
    /// (next − capacity) / capacity: how well the ladder knows the capacity.
    pub precision: Option<f64>,
}

/// The search's result (report.json `capacity`).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Search {
    pub protected_load: f64,
    pub healthy: Ladder,
    pub degraded: Ladder,
    /// (N−k)/N × C_healthy: a hypothesis to compare with the measurement, never the
    /// measurement (Q4).
    pub hypothesis: Option<f64>,
    /// C_degraded ≥ L_protected, measured.
    pub gate: bool,
    /// The highest rate of the scenario's own phases, overload phases apart.
    pub normal_peak: f64,
    /// C_healthy − normal peak (Q5: headroom is not failover reserve).
    pub headroom: Option<f64>,
    /// C_degraded − L_protected.
    pub failover_reserve: Option<f64>,
}

/// Fewer requests in a step and it says nothing.
pub const MIN_STEP_REQUESTS: u64 = 5;

/// Judges one step from its phase's measurements, every rejection counted.
pub fn judge_step(plan: &Plan, p: &PhaseStats, rate: f64) -> Step {
    judge_step_shed(plan, p, rate, None)
}

/// Judges one step; `shed`: the rejections that count against
/// `slo.rejection_rate_max` and the requests they are a share of (the adaptive search
/// counts protected traffic only: shedding best-effort requests is allowed), `None`:
/// every rejection of the phase.
pub fn judge_step_shed(plan: &Plan, p: &PhaseStats, rate: f64, shed: Option<(u64, u64)>) -> Step {
    let slo = &plan.scenario.slo;
    // Requests haq's interrupt stopped are neither served nor failed.
    let stopped = p
        .outcomes
        .get(&crate::trace::Outcome::Interrupted)
        .copied()
        .unwrap_or(0);
    let n = p.requests.saturating_sub(stopped).max(1) as f64;
    let rej = match shed {
        Some((k, of)) => k as f64 / of.max(1) as f64,
        None => p.rejected as f64 / n,
    };
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
        why.push(match shed {
            Some(_) => format!("{:.1}% of protected requests rejected", rej * 100.0),
            None => format!("{:.1}% rejected", rej * 100.0),
        });
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

fn ladder_of(plan: &Plan, phases: &[PhaseStats], prefix: &str) -> Ladder {
    let mut steps = Vec::new();
    let mut complete = true;
    for pp in plan
        .phases
        .iter()
        .filter(|p| p.name.starts_with(&format!("{prefix}-")))
    {
        match phases.iter().find(|s| s.name == pp.name && s.requests > 0) {
            Some(s) => steps.push(judge_step(plan, s, pp.rate)),
            None => complete = false,
        }
    }
    let capacity = steps.iter().take_while(|s| s.pass).last().map(|s| s.rate);
    let next = steps.iter().find(|s| !s.pass).map(|s| s.rate);
    Ladder {
        capacity,
        complete,
        next,
        precision: capacity.zip(next).map(|(c, n)| (n - c) / c),
        steps,
    }
}

/// Judges the search of a run, if the scenario has one.
pub fn judge(plan: &Plan, phases: &[PhaseStats]) -> Option<Search> {
    plan.scenario.criteria.capacity.as_ref()?;
    let protected = plan.scenario.protected_load.0;
    let healthy = ladder_of(plan, phases, HEALTHY);
    let degraded = ladder_of(plan, phases, DEGRADED);
    let n = plan.replicas.len() as f64;
    let lost: usize = plan.faults.iter().map(|f| f.replicas.len().max(1)).sum();
    let hypothesis = healthy
        .capacity
        .filter(|_| n > lost as f64 && lost > 0)
        .map(|c| c * (n - lost as f64) / n);
    let gate = degraded.capacity.is_some_and(|c| c + 1e-9 >= protected);
    let normal_peak = crate::plan::capacity::normal_peak(plan);
    Some(Search {
        protected_load: protected,
        hypothesis,
        gate,
        normal_peak,
        headroom: healthy.capacity.map(|c| c - normal_peak),
        failover_reserve: degraded.capacity.map(|c| c - protected),
        healthy,
        degraded,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::testkit::*;
    use crate::check::{Status, capacity::NAME};

    const SEARCH: &str =
        "criteria.capacity.search={from: 5/s, to: 20/s, steps: 2, step: 2s, settle: 1s}";

    #[test]
    fn the_ladder_holds_the_protected_load_and_wraps_the_scenario() {
        let p = plan(&[SEARCH]);
        let names: Vec<&str> = p.phases.iter().map(|x| x.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "cap-healthy-1",
                "cap-healthy-2",
                "cap-healthy-3",
                "cap-settle",
                "baseline",
                "fault",
                "degraded",
                "cap-degraded-1",
                "cap-degraded-2",
                "cap-degraded-3"
            ]
        );
        let rates: Vec<f64> = p.phases.iter().map(|x| x.rate).collect();
        assert_eq!(
            rates,
            [5.0, 10.0, 20.0, 10.0, 10.0, 10.0, 10.0, 5.0, 10.0, 20.0]
        );
        // The faults still fire where the scenario put them: 2 s into `fault`.
        let fault = p.phases.iter().find(|x| x.name == "fault").expect("fault");
        assert_eq!(
            p.faults[0].at,
            fault.start + std::time::Duration::from_secs(2)
        );
        // A bad search is one clear error, before anything runs.
        let e = crate::plan::load_str(
            BASE,
            "hand.yaml",
            std::path::Path::new("."),
            &["criteria.capacity.search={from: 5/s, to: 4/s}".into()],
            None,
        )
        .expect_err("invalid");
        assert!(e.to_string().contains("criteria.capacity.search.to"), "{e}");
    }

    /// Every phase at its rate on w1/w3 (w2 killed 2 s into `fault`); the degraded
    /// steps at or above `slow_from` req/s answer in 1.5 s.
    fn searched(slow_from: f64) -> crate::check::Judgement {
        let p = plan(&[SEARCH]);
        let mut tb = Tb::new();
        tb.phases(&p);
        for ph in &p.phases {
            let (a, b) = (1.0 + ph.start.as_secs_f64(), 1.0 + ph.end().as_secs_f64());
            let slow = ph.name.starts_with(DEGRADED) && ph.rate >= slow_from;
            let n = ((b - a) * ph.rate).round() as usize;
            for k in 0..n {
                let t = a + k as f64 / ph.rate;
                let w = ["w1", "w3"][k % 2];
                let r = R::ok(format!("{}-{k}", ph.name), &ph.name, t, w);
                tb.request(if slow { r.ttft(1500.0) } else { r });
            }
            if ph.name == "fault" {
                tb.inject("kill-w2", "w2", us(a + 2.0), true);
            }
        }
        tb.run_end(us(1.0 + p.total.as_secs_f64() + 1.0));
        tb.judge(&p)
    }

    #[test]
    fn c_degraded_at_or_above_the_protected_load_passes() {
        let j = searched(20.0);
        let v = pick(&j, NAME);
        assert_eq!(v.status, Status::Pass, "{v:?}");
        let s = j.capacity.as_ref().expect("search");
        assert_eq!(
            (s.healthy.capacity, s.degraded.capacity),
            (Some(20.0), Some(10.0))
        );
        assert!(s.gate);
        // Headroom from the normal peak (10/s), reserve above L_protected (10/s); the
        // ladder knows C_degraded to the next rung (20/s: +100%).
        assert_eq!((s.headroom, s.failover_reserve), (Some(10.0), Some(0.0)));
        assert_eq!(
            (s.degraded.next, s.degraded.precision),
            (Some(20.0), Some(1.0))
        );
        assert_eq!((s.healthy.next, s.healthy.precision), (None, None));
        // (3−1)/3 × 20/s: the hypothesis is shown, and is not what was measured.
        assert!(
            v.summary.contains("C_degraded 10.00/s ≥ L_protected 10/s"),
            "{}",
            v.summary
        );
        assert!(
            v.summary.contains("hypothesis would say 13.33/s"),
            "{}",
            v.summary
        );
        // The search's steps are not held to the Latency envelope.
        assert_eq!(pick(&j, "Latency").status, Status::Pass);
    }

    #[test]
    fn c_degraded_below_the_protected_load_fails() {
        let j = searched(10.0);
        let v = pick(&j, NAME);
        assert_eq!(v.status, Status::Fail, "{v:?}");
        assert!(
            v.summary.contains("C_degraded 5.00/s < L_protected 10/s"),
            "{}",
            v.summary
        );
        assert!(
            v.evidence.iter().any(|e| e.contains(
                "degraded 10.00/s (cap-degraded-2): not sustained: p95 TTFT 1500 ms > 500ms"
            )),
            "{:?}",
            v.evidence
        );
    }
}
