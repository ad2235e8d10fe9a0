//! The workload's checks: length distributions, the arrival process and its rate
//! profile, the request mix, and the phase rates laid over the profile.

use super::checks::{at_least, pos_finite};
use std::collections::BTreeSet;
use std::time::Duration;

use super::rate::RateProfile;
use super::types::{MAX_OUTPUT_TOKENS, MAX_PROMPT_TOKENS, MAX_RATE, PhasePlan};
use crate::scenario::{Issue, *};

/// The field of the arrival process.
const ARRIVAL: &str = "workload.arrival";

fn validate_dist(field: &str, d: &Dist, max: u32) -> Result<(), Issue> {
    let (lo, hi) = match d {
        Dist::Fixed(n) => (*n, *n),
        Dist::Uniform([a, b]) => (*a, *b),
        Dist::Normal(sh) | Dist::Lognormal(sh) => {
            let kind = if matches!(d, Dist::Normal(_)) {
                "normal"
            } else {
                "lognormal"
            };
            let f = format!("{field}.{kind}");
            if !(sh.mean.is_finite() && sh.mean > 0.0) {
                return Err(Issue::new(
                    format!("{f}.mean"),
                    sh.mean,
                    "must be greater than 0",
                ));
            }
            if !(sh.stddev.is_finite() && sh.stddev >= 0.0) {
                return Err(Issue::new(
                    format!("{f}.stddev"),
                    sh.stddev,
                    "must be 0 or more",
                ));
            }
            (sh.min.unwrap_or(1), sh.max.unwrap_or(max))
        }
        Dist::Empirical(e) => {
            if e.file.trim().is_empty() {
                return Err(Issue::missing(
                    format!("{field}.empirical.file"),
                    "names the CSV file",
                ));
            }
            return Ok(());
        }
    };
    if lo == 0 {
        return Err(Issue::new(field, lo, "token counts must be at least 1"));
    }
    if lo > hi {
        return Err(Issue::new(
            field,
            format!("[{lo}, {hi}]"),
            "min is greater than max",
        ));
    }
    if hi > max {
        return Err(Issue::new(field, hi, format!("must be at most {max}")));
    }
    Ok(())
}

/// The arrival process and the rate it offers: the mean rate over the run and the
/// rate over time (a replayed trace's nominal rate until the trace is read).
pub(super) fn validate_arrival(
    s: &Scenario,
    phases: &[PhasePlan],
    total: Duration,
) -> Result<(f64, RateProfile), Issue> {
    let a = &s.workload.arrival;
    arrival_fields(a)?;
    let total_s = total.as_secs_f64();
    if let Some(t) = &a.trace {
        replay_fields(a, t)?;
        // The real rate is known once the trace is read (scenario::load).
        let nominal = s.protected_load.0;
        return Ok((nominal, RateProfile::constant(nominal)));
    }
    let profile = RateProfile::from_arrival(a, s.protected_load.0, total_s)?;
    rates_in_range(a, &profile)?;
    let rate = if total_s > 0.0 {
        profile.area(0.0, total_s) / total_s
    } else {
        0.0
    };
    if !pos_finite(rate) {
        return Err(Issue::new(
            format!("{ARRIVAL}.rate"),
            format!("{rate}/s"),
            format!("must be in (0, {MAX_RATE}] req/s"),
        ));
    }
    protected_load_held(s, phases, &profile)?;
    Ok((rate, profile))
}

/// Each field of the arrival process read with the process that reads it.
fn arrival_fields(a: &Arrival) -> Result<(), Issue> {
    let f = ARRIVAL;
    match (a.process, &a.trace) {
        (ArrivalProcess::Trace, None) => {
            return Err(Issue::missing(
                format!("{f}.trace"),
                "`process: trace` needs `trace: {file, format}`",
            ));
        }
        (p, Some(_)) if p != ArrivalProcess::Trace => {
            return Err(Issue::new(
                format!("{f}.trace"),
                "...",
                "is only read with `process: trace`",
            ));
        }
        _ => {}
    }
    if a.burstiness.is_some() && a.process != ArrivalProcess::Gamma {
        return Err(Issue::new(
            format!("{f}.burstiness"),
            a.burstiness.unwrap_or(0.0),
            "is only read with `process: gamma`",
        ));
    }
    super::rate::burstiness(a)?;
    if a.max_concurrency == Some(0) {
        return Err(Issue::new(
            format!("{f}.max_concurrency"),
            0,
            "must be at least 1",
        ));
    }
    Ok(())
}

/// A replayed trace: a positive time scale, and no rate of its own.
fn replay_fields(a: &Arrival, t: &TraceReplay) -> Result<(), Issue> {
    let f = ARRIVAL;
    if !(t.time_scale.is_finite() && t.time_scale > 0.0) {
        return Err(Issue::new(
            format!("{f}.trace.time_scale"),
            t.time_scale,
            "must be greater than 0",
        ));
    }
    if a.rate.is_some() || a.ramp.is_some() || !a.stages.is_empty() {
        return Err(Issue::new(
            f,
            "trace",
            "a replayed trace sets its own rate: drop `rate`, `ramp` and `stages`",
        ));
    }
    Ok(())
}

/// Every rate of the profile is in [0, MAX_RATE].
fn rates_in_range(a: &Arrival, profile: &RateProfile) -> Result<(), Issue> {
    let f = ARRIVAL;
    for (i, p) in profile.pieces.iter().enumerate() {
        for r in [p.r0, p.r1] {
            if !(r.is_finite() && (0.0..=MAX_RATE).contains(&r)) {
                let field = if a.stages.is_empty() {
                    f.to_string()
                } else {
                    format!("{f}.stages[{i}]")
                };
                return Err(Issue::new(
                    field,
                    format!("{r}/s"),
                    format!("rates must be in [0, {MAX_RATE}] req/s"),
                ));
            }
        }
    }
    Ok(())
}

/// Q12: the protected offered load is never lowered while the failure is in force
/// (over the whole run for a constant rate).
fn protected_load_held(
    s: &Scenario,
    phases: &[PhasePlan],
    profile: &RateProfile,
) -> Result<(), Issue> {
    let a = &s.workload.arrival;
    let f = ARRIVAL;
    let constant = a.ramp.is_none() && a.stages.is_empty();
    for p in phases {
        if !constant && !matches!(p.kind, PhaseKind::Fault | PhaseKind::Degraded) {
            continue;
        }
        let (x, y) = (p.start.as_secs_f64(), p.end().as_secs_f64());
        let min = profile.min_over(x, y);
        if min + 1e-9 < s.protected_load.0 {
            let field = if constant {
                format!("{f}.rate")
            } else {
                f.to_string()
            };
            let what = if constant {
                format!("{min}/s")
            } else {
                format!("{min}/s in phase `{}`", p.name)
            };
            return Err(Issue::new(
                field,
                what,
                format!(
                    "is below protected_load ({}): the run would not offer the load it must qualify (Q12)",
                    s.protected_load
                ),
            ));
        }
    }
    Ok(())
}

/// The mix's issues: each class's first (`haq validate` lists every class's).
pub(super) fn validate_mix(m: &Mix) -> Vec<Issue> {
    if m.classes.is_empty() {
        return vec![Issue::missing(
            "workload.mix.classes",
            "needs at least one class",
        )];
    }
    let mut names = BTreeSet::new();
    m.classes
        .iter()
        .enumerate()
        .filter_map(|(i, c)| {
            let dup = !names.insert(c.name.as_str());
            validate_class(&format!("workload.mix.classes[{i}]"), c, dup).err()
        })
        .collect()
}

/// One class of the mix (`dup`: an earlier class has its name).
fn validate_class(f: &str, c: &RequestClass, dup: bool) -> Result<(), Issue> {
    if dup {
        return Err(Issue::new(
            format!("{f}.name"),
            &c.name,
            "is used by two classes",
        ));
    }
    if !pos_finite(c.weight) {
        return Err(Issue::new(
            format!("{f}.weight"),
            c.weight,
            "must be greater than 0",
        ));
    }
    validate_dist(
        &format!("{f}.prompt_tokens"),
        &c.prompt_tokens,
        MAX_PROMPT_TOKENS,
    )?;
    validate_dist(
        &format!("{f}.output_tokens"),
        &c.output_tokens,
        MAX_OUTPUT_TOKENS,
    )?;
    if let Some(p) = &c.shared_prefix {
        if p.groups == 0 || p.groups > 100_000 {
            return Err(Issue::new(
                format!("{f}.shared_prefix.groups"),
                p.groups,
                "must be between 1 and 100000",
            ));
        }
        validate_dist(
            &format!("{f}.shared_prefix.tokens"),
            &p.tokens,
            MAX_PROMPT_TOKENS,
        )?;
    }
    if let Some(se) = &c.session {
        validate_dist(&format!("{f}.session.turns"), &se.turns, 10_000)?;
        if se.parallel == 0 || se.parallel > 100_000 {
            return Err(Issue::new(
                format!("{f}.session.parallel"),
                se.parallel,
                "must be between 1 and 100000",
            ));
        }
    }
    if let Some(t) = &c.tools
        && (t.count == 0 || t.count > 8)
    {
        return Err(Issue::new(
            format!("{f}.tools.count"),
            t.count,
            "must be between 1 and 8",
        ));
    }
    if let Some(a) = &c.abandon {
        validate_abandon(&format!("{f}.abandon"), a)?;
    }
    Ok(())
}

/// A class's abandonment: a share above 0 and exactly one way of leaving.
fn validate_abandon(f: &str, a: &Abandon) -> Result<(), Issue> {
    if a.share.0 <= 0.0 {
        return Err(Issue::new(
            format!("{f}.share"),
            a.share,
            "must be greater than 0% (drop `abandon` for none)",
        ));
    }
    let ways = usize::from(a.before_first_token)
        + usize::from(a.after_deltas.is_some())
        + usize::from(a.after.is_some());
    if ways != 1 {
        return Err(Issue::new(
            f,
            format!("{ways} ways of leaving"),
            "needs exactly one of `before_first_token: true`, `after_deltas: N`, `after: DURATION`",
        ));
    }
    if a.after_deltas == Some(0) {
        return Err(Issue::new(
            format!("{f}.after_deltas"),
            0,
            "must be at least 1 (use `before_first_token: true` to leave before any output)",
        ));
    }
    if a.after.is_some_and(|d| d.0.is_zero()) {
        return Err(Issue::new(
            format!("{f}.after"),
            "0s",
            "must be greater than 0",
        ));
    }
    Ok(())
}

/// The arrival profile with the phases that set their own rate (`explicit`: `rate`
/// or `load`) replaced by it (the arrival process keeps its shape: the schedule
/// draws on the profile).
pub(super) fn overlay_phase_rates(
    profile: RateProfile,
    phases: &[PhasePlan],
    explicit: &[Option<f64>],
) -> RateProfile {
    use super::rate::Piece;
    if explicit.iter().all(Option::is_none) {
        return profile;
    }
    let mut pieces = Vec::new();
    for (p, r) in phases.iter().zip(explicit) {
        let (a, b) = (p.start.as_secs_f64(), p.end().as_secs_f64());
        if let Some(r) = *r {
            pieces.push(Piece {
                start: a,
                end: b,
                r0: r,
                r1: r,
            });
            continue;
        }
        let mut cuts = vec![a, b];
        cuts.extend(
            profile
                .pieces
                .iter()
                .flat_map(|q| [q.start, q.end])
                .filter(|t| *t > a && *t < b),
        );
        cuts.sort_by(f64::total_cmp);
        cuts.dedup();
        for w in cuts.windows(2) {
            // Linear inside each cut: the rate at the start and the middle fix it.
            let r0 = profile.rate_at(w[0]);
            let mid = profile.rate_at((w[0] + w[1]) / 2.0);
            pieces.push(Piece {
                start: w[0],
                end: w[1],
                r0,
                r1: 2.0 * mid - r0,
            });
        }
    }
    RateProfile { pieces }
}

/// `workload.cache_truth` (M6): a period of at least 2, at least one prompt, lengths
/// at least 1 and within the limits of a request.
pub fn validate_cache_truth(w: &Workload) -> Result<(), Issue> {
    let Some(c) = &w.cache_truth else {
        return Ok(());
    };
    let f = "workload.cache_truth";
    at_least(&format!("{f}.every"), c.every, 2)?;
    at_least(&format!("{f}.prompts"), c.prompts, 1)?;
    at_least(&format!("{f}.prompt_tokens"), c.prompt_tokens, 1)?;
    at_least(&format!("{f}.output_tokens"), c.output_tokens, 1)?;
    if c.prompt_tokens > MAX_PROMPT_TOKENS || c.output_tokens > MAX_OUTPUT_TOKENS {
        return Err(Issue::new(
            format!("{f}.prompt_tokens"),
            c.prompt_tokens,
            format!(
                "planted prompts and answers stay within {MAX_PROMPT_TOKENS} prompt and {MAX_OUTPUT_TOKENS} output tokens"
            ),
        ));
    }
    Ok(())
}
