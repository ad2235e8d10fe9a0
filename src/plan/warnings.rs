//! Plans that are valid but cannot pass, found before anything runs (`haq validate`,
//! `haq run`): every replica removed at once, phases too short for the percentiles
//! the SLO asks at the rate they offer, a degraded interval whose drawn schedule is
//! likely to offer less than the protected load, a required verdict the plan never
//! exercises. Each is an [`Issue`] placed like an error, printed as a warning.

use std::time::Duration;

use super::Plan;

use crate::scenario::words::{and_list, plural};
use crate::scenario::{ArrivalProcess, FaultAction, Issue, PhaseKind};
use crate::wire::units::format_duration;

/// Completed requests below which a phase's p95 is not judged (the Latency verdict's
/// `MIN_SAMPLES`).
pub const MIN_SAMPLES: u64 = 5;

/// Requests a p95 needs to be more than the phase's largest value.
pub const P95_SAMPLES: u64 = 20;

/// A likelier shortfall of the drawn load than this is warned about.
const SHORTFALL_RISK: f64 = 0.01;

/// The warnings of a valid plan, in the order of the fields they name.
pub fn warnings(plan: &Plan) -> Vec<Issue> {
    let mut out = Vec::new();
    every_replica_removed(plan, &mut out);
    short_phases(plan, &mut out);
    load_shortfall(plan, &mut out);
    required_not_exercised(plan, &mut out);
    out
}

/// The degraded interval's phases of the plan's first fault that removes capacity
/// (the phases the Capacity verdict holds to the protected load).
pub fn capacity_window(plan: &Plan) -> Vec<String> {
    plan.faults
        .iter()
        .filter(|f| !matches!(f.action, FaultAction::Delay | FaultAction::Throttle))
        .min_by_key(|f| f.at)
        .map(|f| super::implied::degraded_phases(plan, &f.phase))
        .unwrap_or_default()
}

/// When each fault's replicas are out of service: from its time until its heal
/// (`duration`), its replacement is up (`restart`: after + cold start) or the end of
/// the load. `None` for faults that only slow a replica.
fn out_of_service(plan: &Plan, f: &super::FaultPlan) -> Option<(Duration, Duration)> {
    let end = plan.total + Duration::from_secs(1);
    let until = match f.action {
        FaultAction::Delay | FaultAction::Throttle => return None,
        FaultAction::Kill | FaultAction::Drain => f.restart.as_ref().map_or(end, |r| {
            let cold = r
                .cold_start
                .map_or(plan.scenario.target.engine.startup.0, |d| d.0);
            f.at + r.after.0 + cold
        }),
        _ => f.duration.map_or(end, |d| f.at + d),
    };
    Some((f.at, until))
}

/// At some time every declared replica is out of service: nothing serves the load.
fn every_replica_removed(plan: &Plan, out: &mut Vec<Issue>) {
    let n = plan.replicas.len();
    if n == 0 {
        return;
    }
    let spans: Vec<(usize, (Duration, Duration))> = plan
        .faults
        .iter()
        .enumerate()
        .filter_map(|(i, f)| out_of_service(plan, f).map(|s| (i, s)))
        .collect();
    for &(i, (t, _)) in &spans {
        let mut named: Vec<&str> = Vec::new();
        let mut anonymous = 0;
        let mut by = Vec::new();
        for &(k, (a, b)) in &spans {
            if a <= t && t < b {
                let f = &plan.faults[k];
                by.push(f.name.as_str());
                if f.replicas.is_empty() {
                    anonymous += 1;
                }
                for r in &f.replicas {
                    if !named.contains(&r.as_str()) {
                        named.push(r);
                    }
                }
            }
        }
        if named.len() + anonymous >= n {
            let f = &plan.faults[i];
            out.push(Issue::new(
                format!("faults[{i}]"),
                &f.name,
                format!(
                    "cannot pass: at +{} ({}) every replica is out of service ({} by {}); nothing is left to serve the protected load, so Capacity and Latency fail — keep one replica, or heal or replace one first",
                    format_duration(t),
                    f.phase,
                    and_list(&plan.replicas),
                    and_list(&by)
                ),
            ));
            return;
        }
    }
}

/// Share of the mix's requests that stream (they alone have a TTFT and an ITL).
fn streamed_share(plan: &Plan) -> f64 {
    let total: f64 = plan.mix.classes.iter().map(|c| c.weight).sum();
    if total <= 0.0 {
        return 0.0;
    }
    plan.mix
        .classes
        .iter()
        .map(|c| c.weight * c.stream.0)
        .sum::<f64>()
        / total
}

/// A phase the Latency verdict judges expects too few requests for its p95.
fn short_phases(plan: &Plan, out: &mut Vec<Issue>) {
    let streamed = streamed_share(plan);
    for (i, p) in plan.phases.iter().enumerate() {
        if matches!(
            p.kind,
            PhaseKind::Overload | PhaseKind::Capacity | PhaseKind::Settle
        ) {
            continue;
        }
        let Some(field) = phase_field(plan, i) else {
            continue;
        };
        let secs = p.duration.as_secs_f64();
        let share = if streamed > 0.0 { streamed } else { 1.0 };
        let n = (p.rate * secs * share).round() as u64;
        let what = if streamed > 0.0 && streamed < 1.0 {
            "streamed request"
        } else {
            "request"
        };
        let need = |k: u64| format_duration(Duration::from_secs_f64(k as f64 / (p.rate * share)));
        if n < MIN_SAMPLES {
            out.push(Issue::new(
                format!("{field}.duration"),
                format_duration(p.duration),
                format!(
                    "cannot pass: phase `{}` expects about {} ({:.2}/s × {}), fewer than the {MIN_SAMPLES} the Latency verdict needs, so it is UNKNOWN — lengthen the phase to at least {} or raise its rate",
                    p.name,
                    plural(n, what),
                    p.rate * share,
                    format_duration(p.duration),
                    need(P95_SAMPLES)
                ),
            ));
        } else if n < P95_SAMPLES {
            out.push(Issue::new(
                format!("{field}.duration"),
                format_duration(p.duration),
                format!(
                    "phase `{}` expects about {n} {what}s: its p95 over {n} requests is their maximum, one slow request decides Latency — lengthen it to at least {} for {P95_SAMPLES}",
                    p.name,
                    need(P95_SAMPLES)
                ),
            ));
        }
    }
}

/// The scenario's own index of plan phase `i` (none for a generated phase).
fn phase_field(plan: &Plan, i: usize) -> Option<String> {
    let name = &plan.phases[i].name;
    plan.scenario
        .phases
        .iter()
        .position(|p| &p.name == name)
        .map(|k| format!("phases[{k}]"))
}

/// Φ(x), the standard normal distribution function (Abramowitz–Stegun 7.1.26 for erf;
/// an error below 1.5e-7, plenty for a warning threshold).
fn normal_cdf(x: f64) -> f64 {
    let z = x.abs() / std::f64::consts::SQRT_2;
    let t = 1.0 / (1.0 + 0.327_591_1 * z);
    let poly = t
        * (0.254_829_592
            + t * (-0.284_496_736
                + t * (1.421_413_741 + t * (-1.453_152_027 + t * 1.061_405_429))));
    let erf = 1.0 - poly * (-z * z).exp();
    if x >= 0.0 {
        0.5 * (1.0 + erf)
    } else {
        0.5 * (1.0 - erf)
    }
}

/// The chance that a phase drawn at `rate` over `secs` offers fewer than `need`
/// requests: normal approximation of the count (variance `rate·secs / k`: Poisson
/// k = 1, gamma k = burstiness; a constant process has none).
fn shortfall_risk(plan: &Plan, rate: f64, secs: f64, need: f64) -> f64 {
    let a = &plan.scenario.workload.arrival;
    let k = match a.process {
        ArrivalProcess::Constant | ArrivalProcess::Trace => return 0.0,
        ArrivalProcess::Poisson => 1.0,
        ArrivalProcess::Gamma => a.burstiness.unwrap_or(1.0),
    };
    let mean = rate * secs;
    let sd = (mean / k).sqrt();
    if sd <= 0.0 {
        return if mean < need { 1.0 } else { 0.0 };
    }
    normal_cdf((need - 0.5 - mean) / sd)
}

/// A phase of the degraded interval whose drawn schedule is likely to offer less than
/// the protected load (beyond `client.max_load_error`): Capacity is then UNKNOWN.
fn load_shortfall(plan: &Plan, out: &mut Vec<Issue>) {
    let l = plan.scenario.protected_load.0;
    let tol = plan.scenario.client.max_load_error.0;
    for name in capacity_window(plan) {
        let Some((i, p)) = plan.phases.iter().enumerate().find(|(_, p)| p.name == name) else {
            continue;
        };
        let secs = p.duration.as_secs_f64();
        let due = l * secs;
        let need = due - (tol * due).max(1.0);
        let risk = shortfall_risk(plan, p.rate, secs, need);
        if risk <= SHORTFALL_RISK {
            continue;
        }
        // The lowest rate (in steps of 5% of the protected load) that keeps the risk
        // under the threshold.
        let mut r = p.rate;
        while shortfall_risk(plan, r, secs, need) > SHORTFALL_RISK && r < 10.0 * l {
            r += 0.05 * l;
        }
        let field = phase_field(plan, i).unwrap_or_else(|| "workload.arrival".into());
        out.push(Issue::new(
            field,
            format!("{:.2}/s for {}", p.rate, format_duration(p.duration)),
            format!(
                "phase `{}` is drawn at {:.2}/s: the schedule offers less than the protected load {} (fewer than {:.0} requests) in about {:.0}% of seeds, and Capacity cannot pass then — offer about {:.1}/s (workload.arrival.rate or the phase's rate), lengthen the phase or use `process: constant`",
                p.name,
                p.rate,
                plan.scenario.protected_load,
                need.ceil(),
                risk * 100.0,
                r
            ),
        ));
    }
}

/// `criteria.require` names a verdict the plan does not exercise: that run always
/// fails.
fn required_not_exercised(plan: &Plan, out: &mut Vec<Issue>) {
    for (k, v) in plan.scenario.criteria.require.iter().enumerate() {
        if super::implied::why(plan, *v).is_none() {
            out.push(Issue::new(
                format!("criteria.require[{k}]"),
                v,
                format!(
                    "cannot pass: the scenario gives {v} nothing to judge (see docs/requirements.md), so it is NOT_EVALUATED and the run always fails"
                ),
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_normal_distribution_function_is_right_where_it_matters() {
        for (x, want) in [
            (0.0, 0.5),
            (-1.0, 0.158_655),
            (-2.326, 0.010_009),
            (1.0, 0.841_345),
        ] {
            assert!(
                (normal_cdf(x) - want).abs() < 1e-5,
                "{x}: {}",
                normal_cdf(x)
            );
        }
    }
}

#[cfg(test)]
mod plan_tests {
    use std::path::Path;

    use super::*;

    /// 3 sim workers, constant 10/s = protected, 10 s phases, w2 killed in `fault`.
    const PLAN: &str = r#"name: w
target: {kind: sim, replicas: 3}
workload:
  mix: {classes: [{name: chat, prompt_tokens: 100, output_tokens: 10}]}
  arrival: {process: constant, rate: 10/s}
protected_load: 10/s
slo: {ttft_p95: 1s, itl_p95: 50ms, e2e_p95: 10s}
phases:
  - {name: baseline, duration: 10s}
  - {name: fault, duration: 10s}
  - {name: degraded, duration: 10s}
faults:
  - {name: kill-w2, target: {replica: w2}, at: {phase: fault, offset: 1s}}
"#;

    /// Two more kills, in the degraded phase.
    const KILL_W1_W3: &str = "{name: kill-w1, target: {replica: w1}, at: {phase: degraded, offset: 1s}}, {name: kill-w3, target: {replica: w3}, at: {phase: degraded, offset: 2s}}";

    fn warned(sets: &[&str]) -> Vec<String> {
        let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
        let plan = crate::plan::load_str(PLAN, "w.yaml", Path::new("."), &sets, None)
            .unwrap_or_else(|e| panic!("{e}"));
        warnings(&plan)
            .into_iter()
            .map(|i| format!("{}: {}", i.field, i.reason))
            .collect()
    }

    #[test]
    fn a_plan_that_can_pass_has_no_warning() {
        assert_eq!(warned(&[]), Vec::<String>::new());
        // A replacement up before the next kill: never all three out at once.
        let w = warned(&[&format!(
            "faults=[{{name: kill-w2, target: {{replica: w2}}, at: {{phase: fault, offset: 1s}}, restart: {{after: 0s, cold_start: 1s}}}}, {KILL_W1_W3}]"
        )]);
        assert_eq!(w, Vec::<String>::new());
    }

    #[test]
    fn killing_every_replica_cannot_pass() {
        let w = warned(&[&format!(
            "faults=[{{name: kill-w2, target: {{replica: w2}}, at: {{phase: fault, offset: 1s}}}}, {KILL_W1_W3}]"
        )]);
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(
            w[0].starts_with("faults[2]: cannot pass: at +22s (degraded) every replica is out of service (w1, w2 and w3 by kill-w2, kill-w1 and kill-w3)"),
            "{w:?}"
        );
    }

    #[test]
    fn a_phase_too_short_for_its_p95_is_named_with_its_count() {
        // 7 requests in 0.7 s at 10/s: "p95 over 7 requests".
        let w = warned(&["phases[0].duration=700ms"]);
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(
            w[0].starts_with("phases[0].duration: phase `baseline` expects about 7 requests: its p95 over 7 requests is their maximum"),
            "{w:?}"
        );
        let w = warned(&["phases[0].duration=300ms"]);
        assert!(
            w[0].contains("cannot pass: phase `baseline` expects about 3 requests (10.00/s × 300ms), fewer than the 5"),
            "{w:?}"
        );
    }

    #[test]
    fn a_poisson_degraded_interval_at_the_protected_rate_is_likely_short() {
        let w = warned(&["workload.arrival.process=poisson"]);
        assert_eq!(w.len(), 2, "fault and degraded: {w:?}");
        assert!(
            w[0].starts_with("phases[1]: phase `fault` is drawn at 10.00/s: the schedule offers less than the protected load 10/s (fewer than 95 requests) in about 29% of seeds"),
            "{w:?}"
        );
        // With enough headroom the risk is below 1%.
        assert_eq!(
            warned(&[
                "workload.arrival.process=poisson",
                "workload.arrival.rate=13/s"
            ]),
            Vec::<String>::new()
        );
    }

    #[test]
    fn a_required_verdict_the_plan_never_exercises_always_fails() {
        let w = warned(&["criteria.require=[Routing, Maintenance]"]);
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(
            w[0].starts_with(
                "criteria.require[1]: cannot pass: the scenario gives Maintenance nothing to judge"
            ),
            "{w:?}"
        );
    }
}
