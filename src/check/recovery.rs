//! Recovery (Q6, Q11, Q13): replacement capacity becomes usable within the required
//! interval — ready *and receiving traffic* (readiness alone recovers nothing) — and
//! the healthy latency envelope comes back.

use super::facts::Evidence;
use super::latency::{MIN_SAMPLES, PhaseStats};
use super::timeline::{FaultTimeline, Timeline, ms};
use super::verdict::{VerdictName, conclude};
use super::{Status, Verdict};
use crate::plan::Plan;
use crate::scenario::PhaseKind;

pub const NAME: VerdictName = VerdictName::Recovery;

fn exercised(plan: &Plan, tl: &Timeline) -> bool {
    plan.phases
        .iter()
        .any(|p| matches!(p.kind, PhaseKind::Recovery | PhaseKind::Recovered))
        || plan.scenario.criteria.recovery.is_some()
        || tl.faults.iter().any(|f| {
            let r = &f.replacement;
            // A healed fault's endpoint coming back is the heal, not a replacement
            // step the scenario asked to judge.
            r.requested.is_some()
                || r.started.is_some()
                || r.failed.is_some()
                || (r.ready.is_some() && f.healed.is_none())
        })
}

fn stages(f: &FaultTimeline) -> String {
    let r = &f.replacement;
    let s: Vec<String> = [
        ("requested", &r.requested),
        ("started", &r.started),
        ("ready", &r.ready),
        ("receiving traffic", &r.serving),
        ("failed", &r.failed),
    ]
    .iter()
    .filter(|(label, m)| *label != "failed" || m.is_some())
    .map(|(label, m)| match m {
        Some(m) => format!("{label} +{:.0} ms ({})", ms(f.injected, m.t), m.source),
        None => format!("{label} —"),
    })
    .collect();
    s.join(", ")
}

/// What came back: a replacement, or the healed endpoint itself.
fn back(f: &FaultTimeline) -> String {
    if f.healed.is_some() && f.replacement.requested.is_none() {
        format!("{} (healed)", f.replica)
    } else {
        format!("replacement for {}", f.replica)
    }
}

pub fn verdict(plan: &Plan, ev: &Evidence, tl: &Timeline, phases: &[PhaseStats]) -> Verdict {
    if !exercised(plan, tl) {
        return Verdict::new(
            NAME,
            Status::NotEvaluated,
            "the scenario has no replacement step (no restart, no recovery phase, no criteria.recovery)",
            Vec::new(),
        );
    }
    let bound = plan
        .scenario
        .criteria
        .recovery
        .as_ref()
        .map(|r| r.ready_and_serving_max.as_secs_f64() * 1000.0);
    let complete_run = ev.last_t >= ev.load_end();
    let mut parts = Vec::new();
    let mut evidence = Vec::new();
    for f in tl.faults.iter().filter(|f| f.removes) {
        evidence.push(format!("{} on {}: {}", f.fault, f.replica, stages(f)));
        if !f.verified {
            parts.push((
                Status::Unknown,
                format!("{}: the fault was not verified", f.fault),
            ));
            continue;
        }
        let r = &f.replacement;
        match (&r.ready, &r.serving) {
            (None, _) if r.failed.is_some() => parts.push((
                Status::Fail,
                format!(
                    "{}: the replacement for {} failed: {}",
                    f.fault,
                    f.replica,
                    r.failed.as_ref().map(|m| m.detail.as_str()).unwrap_or_default()
                ),
            )),
            (None, _) => parts.push((
                if complete_run {
                    Status::Fail
                } else {
                    Status::Unknown
                },
                if f.healed.is_some() && r.requested.is_none() {
                    format!(
                        "{}: {} was healed but neither ready nor serving again by the end of the run",
                        f.fault, f.replica
                    )
                } else {
                    format!(
                        "{}: no replacement for {} became ready by the end of the run",
                        f.fault, f.replica
                    )
                },
            )),
            (Some(ready), None) => parts.push((
                Status::Fail,
                format!(
                    "{}: {} was ready {:.0} ms after the fault but never received traffic (readiness is not recovery, Q6)",
                    f.fault,
                    f.replica,
                    ms(f.injected, ready.t)
                ),
            )),
            (Some(_), Some(s)) => {
                let took = ms(f.injected, s.t);
                match bound {
                    Some(b) if took > b => parts.push((
                        Status::Fail,
                        format!(
                            "{}: {} ready and serving after {took:.0} ms (bound {b:.0} ms)",
                            f.fault,
                            back(f)
                        ),
                    )),
                    _ => parts.push((
                        Status::Pass,
                        format!(
                            "{}: {} ready and serving after {took:.0} ms{}",
                            f.fault,
                            back(f),
                            bound.map(|b| format!(" (bound {b:.0} ms)")).unwrap_or_default()
                        ),
                    )),
                }
            }
        }
    }
    parts.push(envelope(plan, tl, phases, &mut evidence));
    conclude(NAME, &parts, evidence)
}

/// The healthy latency envelope is back: in every `recovered` phase, or (without one)
/// on the per-second series after the replacement served.
fn envelope(
    plan: &Plan,
    tl: &Timeline,
    phases: &[PhaseStats],
    evidence: &mut Vec<String>,
) -> (Status, String) {
    let slo = &plan.scenario.slo;
    let lim = [
        slo.ttft_p95.as_secs_f64() * 1000.0,
        slo.itl_p95.as_secs_f64() * 1000.0,
        slo.e2e_p95.as_secs_f64() * 1000.0,
    ];
    let recovered: Vec<&PhaseStats> = phases
        .iter()
        .filter(|p| p.kind == PhaseKind::Recovered)
        .collect();
    if recovered.is_empty() {
        return match &tl.full_recovery {
            Some(m) => (
                Status::Pass,
                format!("full recovery: {}", m.detail),
            ),
            None => (
                Status::Unknown,
                "the healthy latency envelope was not seen back after the replacement served (add a `recovered` phase to judge it)".into(),
            ),
        };
    }
    let mut bad = Vec::new();
    for p in recovered {
        let got = [p.ttft_ms.p95, p.itl_ms.p95, p.e2e_ms.p95];
        evidence.push(format!(
            "{}: p95 TTFT {:.1} ms, ITL {:.1} ms, E2E {:.1} ms ({} completed)",
            p.name, got[0], got[1], got[2], p.completed
        ));
        if p.completed < MIN_SAMPLES {
            return (
                Status::Unknown,
                format!(
                    "{}: only {} completed requests (need {MIN_SAMPLES})",
                    p.name, p.completed
                ),
            );
        }
        for ((what, v), l) in ["TTFT", "ITL", "E2E"].iter().zip(got).zip(lim) {
            if v > l {
                bad.push(format!("{}: p95 {what} {v:.0} ms > {l:.0} ms", p.name));
            }
        }
    }
    if bad.is_empty() {
        (
            Status::Pass,
            "healthy latency envelope restored in the recovered phase".into(),
        )
    } else {
        (
            Status::Fail,
            format!("healthy latency envelope not restored: {}", bad.join("; ")),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::testkit::*;

    fn rplan() -> Plan {
        plan(&[
            "phases=[{name: baseline, duration: 10s}, {name: fault, duration: 10s}, {name: degraded, duration: 10s}, {name: recovered, duration: 10s}]",
            "criteria.recovery.ready_and_serving_max=5s",
        ])
    }

    /// w2 killed at 13 s, ready again at `ready` s, served from `serve` s.
    fn run(ready: Option<f64>, serve: Option<f64>, ttft_after: f64) -> Tb {
        let p = rplan();
        let mut tb = Tb::new();
        tb.phases(&p);
        tb.steady("baseline", 1.0, 11.0, 10.0, rr(&["w1", "w2", "w3"]));
        tb.inject("kill-w2", "w2", us(13.0), true);
        tb.removed(us(13.05), "w2", "connection failed");
        tb.steady("fault", 13.1, 21.0, 10.0, rr(&["w1", "w3"]));
        if let Some(r) = ready {
            tb.ready(us(r), "w2");
        }
        let s = serve.unwrap_or(41.0);
        tb.steady("degraded", 21.0, s.min(31.0), 10.0, rr(&["w1", "w3"]));
        let ws: &'static [&'static str] = if serve.is_some() {
            &["w1", "w2", "w3"]
        } else {
            &["w1", "w3"]
        };
        if s < 31.0 {
            tb.steady("degraded", s, 31.0, 10.0, rr(ws));
        }
        for k in 0..100 {
            let t = 31.0 + k as f64 * 0.1;
            tb.request(R::ok(format!("rec{k}"), "recovered", t, ws[k % ws.len()]).ttft(ttft_after));
        }
        tb.run_end(us(42.0));
        tb
    }

    #[test]
    fn replacement_ready_and_serving_within_the_bound_passes() {
        let p = rplan();
        let j = run(Some(16.0), Some(16.5), 100.0).judge(&p);
        let v = pick(&j, NAME);
        assert_eq!(v.status, Status::Pass, "{v:?}");
        assert!(
            v.summary.contains("ready and serving after 3600 ms"),
            "{}",
            v.summary
        );
        let f = j.timeline.fault("kill-w2").expect("fault");
        assert_eq!(f.replacement.ready.as_ref().map(|m| m.t), Some(us(16.0)));
    }

    #[test]
    fn ready_but_never_receiving_traffic_fails() {
        let p = rplan();
        let v = pick(&run(Some(16.0), None, 100.0).judge(&p), NAME);
        assert_eq!(v.status, Status::Fail, "{v:?}");
        assert!(
            v.summary.contains("never received traffic"),
            "{}",
            v.summary
        );
    }

    #[test]
    fn a_replacement_slower_than_the_bound_fails() {
        let p = rplan();
        let v = pick(&run(Some(24.0), Some(24.5), 100.0).judge(&p), NAME);
        assert_eq!(v.status, Status::Fail, "{v:?}");
        assert!(
            v.summary.contains("after 11600 ms (bound 5000 ms)"),
            "{}",
            v.summary
        );
    }

    #[test]
    fn no_replacement_at_all_fails() {
        let p = rplan();
        let v = pick(&run(None, None, 100.0).judge(&p), NAME);
        assert_eq!(v.status, Status::Fail, "{v:?}");
        assert!(
            v.summary.contains("no replacement for w2 became ready"),
            "{}",
            v.summary
        );
    }

    #[test]
    fn latency_not_back_in_the_recovered_phase_fails() {
        let p = rplan();
        let v = pick(&run(Some(16.0), Some(16.5), 900.0).judge(&p), NAME);
        assert_eq!(v.status, Status::Fail, "{v:?}");
        assert!(v.summary.contains("envelope not restored"), "{}", v.summary);
    }

    #[test]
    fn a_scenario_without_replacement_is_not_evaluated() {
        let p = plan(&[]);
        let v = pick(&standard(&p).judge(&p), NAME);
        assert_eq!(v.status, Status::NotEvaluated);
        assert!(v.summary.contains("no replacement step"));
    }

    #[test]
    fn a_healed_freeze_recovers_when_its_endpoint_serves_again_within_the_bound() {
        let p = plan(&[
            "faults[0]={name: freeze-w2, domain: worker, action: freeze, target: {replica: w2}, at: {phase: fault, offset: 2s}, duration: 2s}",
            "criteria.recovery.ready_and_serving_max=5s",
        ]);
        let (mut ok, mut never) = (Tb::new().without_journal(), Tb::new().without_journal());
        for (tb, back) in [(&mut ok, true), (&mut never, false)] {
            tb.phases(&p);
            tb.steady("baseline", 1.0, 11.0, 10.0, rr(&["w1", "w2", "w3"]));
            tb.inject_as("freeze-w2", "worker", "freeze", "w2", us(13.0), true);
            tb.steady("fault", 13.05, 15.0, 10.0, rr(&["w1", "w3"]));
            tb.heal("freeze-w2", "w2", us(15.0));
            let ws: &'static [&'static str] = if back {
                &["w1", "w2", "w3"]
            } else {
                &["w1", "w3"]
            };
            tb.steady("fault", 15.05, 21.0, 10.0, rr(ws));
            tb.steady("degraded", 21.0, 31.0, 10.0, rr(ws));
            tb.run_end(us(32.0));
        }
        let j = ok.judge(&p);
        let v = pick(&j, NAME);
        assert_eq!(v.status, Status::Pass, "{v:?}");
        assert!(
            v.summary.contains("w2 (healed) ready and serving after 2"),
            "{}",
            v.summary
        );
        // Healed, but the gateway never sends it traffic again: not recovered.
        let v = pick(&never.judge(&p), NAME);
        assert_eq!(v.status, Status::Fail, "{v:?}");
        assert!(
            v.summary
                .contains("w2 was healed but neither ready nor serving again"),
            "{}",
            v.summary
        );
    }
}
