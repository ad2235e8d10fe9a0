//! A parsed [`Scenario`] becomes a [`Plan`] — resolved, checked, ready to run — or the
//! first [`Issue`] found. Pure: the same scenario gives the same plan, so `haq check`
//! rebuilds the plan of a stored run exactly. The workload's checks are in
//! [`super::workload`], the faults' in [`super::faults`].

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use super::checks::{pos_finite, positive};
use super::rate::RateProfile;
use super::types::{MAX_RATE, MAX_TOTAL, MAX_WARM_CONNECTIONS, PhasePlan, Plan};
use super::workload::{overlay_phase_rates, validate_arrival, validate_cache_truth, validate_mix};
use crate::scenario::{Issue, *};

/// Checks a scenario and resolves it into its plan; the first issue in the fixed order
/// of [`validate_all`].
pub fn validate(s: Scenario) -> Result<Plan, Issue> {
    validate_all(s).map_err(|mut all| all.swap_remove(0))
}

/// Collects the issues of a scenario.
#[derive(Default)]
struct Issues(Vec<Issue>);

impl Issues {
    fn check(&mut self, r: Result<(), Issue>) {
        if let Err(i) = r {
            self.0.push(i);
        }
    }
    fn take<T>(&mut self, r: Result<T, Issue>) -> Option<T> {
        r.map_err(|i| self.0.push(i)).ok()
    }
}

/// Checks a scenario, every section that can be checked on its own, and resolves it
/// into its plan — or every issue found, in a fixed order (`haq validate` prints them
/// all). What needs an earlier part valid is checked only when it is: the faults need
/// the phases and the replicas.
pub fn validate_all(s: Scenario) -> Result<Plan, Vec<Issue>> {
    let mut k = Issues::default();
    k.check(validate_name(&s.name));
    k.check(super::target::validate_target(&s.target));
    k.check(validate_readiness_watch(&s.evidence));
    let replica_decls = k.take(super::faults::validate_replicas(&s.target));
    let mix = k.take(inline_mix(&s.workload.mix));
    if let Some(m) = &mix {
        k.0.extend(validate_mix(m));
    }
    k.check(validate_cache_truth(&s.workload));
    let load = match plan_load(&s) {
        Ok(l) => Some(l),
        Err(all) => {
            k.0.extend(all);
            None
        }
    };
    k.0.extend(validate_slo(&s.slo));
    k.check(validate_policy(&s.policy));
    k.check(validate_evidence(&s.evidence));
    if let Some(l) = &load
        && l.total > MAX_TOTAL
    {
        k.0.push(Issue::new(
            "phases",
            crate::wire::units::format_duration(l.total),
            "the run would last more than 24h",
        ));
    }
    let faults = match (&load, &replica_decls) {
        (Some(l), Some(d)) => match super::faults::validate_faults(&s, &l.phases, d) {
            Ok(f) => Some(f),
            Err(all) => {
                k.0.extend(all);
                None
            }
        },
        // With broken phases, the faults at the phases that are fine are still checked.
        (None, Some(d)) => {
            let (phases, broken) = lenient_phases(&s.phases);
            if let Err(all) = super::faults::validate_faults(&s, &phases, d) {
                k.0.extend(all.into_iter().filter(|i| {
                    let at = fault_index(&i.field).and_then(|f| s.faults.get(f));
                    !at.is_some_and(|f| broken.contains(&f.at.phase.as_str()))
                }));
            }
            None
        }
        _ => None,
    };
    k.check(validate_criteria(&s.criteria));
    k.check(validate_client(&s.client));
    k.check(super::agents::validate(&s));
    match (k.0.is_empty(), load, faults, replica_decls, mix) {
        (true, Some(l), Some(faults), Some(replica_decls), Some(mix)) => Ok(Plan {
            seed: s.workload.seed,
            mix,
            rate: l.rate,
            profile: l.profile,
            inputs: Arc::default(),
            phases: l.phases,
            faults,
            total: l.total,
            replicas: replica_decls.iter().map(|d| d.name.clone()).collect(),
            replica_decls,
            scenario: s,
        }),
        _ => Err(k.0),
    }
}

/// The phases that are fine on their own, laid end to end (their rates unresolved),
/// and the names of the others: what faults are checked against when some phase is not.
fn lenient_phases(phases: &[Phase]) -> (Vec<PhasePlan>, Vec<&str>) {
    let mut out = Vec::new();
    let mut broken = Vec::new();
    let mut start = Duration::ZERO;
    for (i, p) in phases.iter().enumerate() {
        match validate_phase(&format!("phases[{i}]"), p, true, 0.0) {
            Ok((kind, _)) => out.push(PhasePlan {
                name: p.name.clone(),
                kind,
                start,
                duration: p.duration.0,
                rate: 0.0,
            }),
            Err(_) => broken.push(p.name.as_str()),
        }
        start += p.duration.0;
    }
    (out, broken)
}

/// `i` of a `faults[i]…` field.
fn fault_index(field: &str) -> Option<usize> {
    field
        .strip_prefix("faults[")?
        .split(']')
        .next()?
        .parse()
        .ok()
}

/// The scenario's name names the run directory.
fn validate_name(name: &str) -> Result<(), Issue> {
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    {
        return Err(Issue::new(
            "name",
            format!("{name:?}"),
            "must be non-empty and use only letters, digits, `-`, `_` and `.` (it names the run directory)",
        ));
    }
    Ok(())
}

/// The readiness watch polls every replica once per interval.
fn validate_readiness_watch(e: &EvidenceCfg) -> Result<(), Issue> {
    if let Some(d) = e.readiness_watch
        && d.0 < std::time::Duration::from_millis(10)
    {
        return Err(Issue::new(
            "evidence.readiness_watch",
            d,
            "must be at least 10ms (one poll per replica per interval)",
        ));
    }
    Ok(())
}

/// The request mix, inlined (a workload file is read by `scenario::load`).
fn inline_mix(mix: &MixRef) -> Result<Mix, Issue> {
    match mix {
        MixRef::Inline(m) => Ok(m.clone()),
        MixRef::File(p) => Err(Issue::new(
            "workload.mix",
            p,
            "workload file was not loaded (use scenario::load)",
        )),
    }
}

/// The load the run offers: its phases laid end to end with their rates, how long
/// they last, the mean rate and the rate over time.
struct Load {
    phases: Vec<PhasePlan>,
    total: Duration,
    rate: f64,
    profile: RateProfile,
}

/// The protected load, the phases, the capacity search (Q4) and the arrival profile
/// with the phases' own rates laid over it.
fn plan_load(s: &Scenario) -> Result<Load, Vec<Issue>> {
    if !pos_finite(s.protected_load.0) {
        return Err(vec![Issue::new(
            "protected_load",
            s.protected_load,
            "must be greater than 0",
        )]);
    }
    let (mut phases, explicit) = validate_phases(&s.phases, s.protected_load.0)?;
    if let Some(c) = &s.criteria.capacity {
        validate_search(&c.search, s).map_err(|e| vec![e])?;
    }
    let total = phases.last().map(|p| p.end()).unwrap_or_default();
    let (rate, profile) = validate_arrival(s, &phases, total).map_err(|e| vec![e])?;
    let profile = overlay_phase_rates(profile, &phases, &explicit);
    for p in &mut phases {
        let (a, b) = (p.start.as_secs_f64(), p.end().as_secs_f64());
        p.rate = profile.area(a, b) / (b - a);
    }
    Ok(Load {
        phases,
        total,
        rate,
        profile,
    })
}

/// The latency objectives: positive, and end-to-end no shorter than the first token.
fn validate_slo(slo: &Slo) -> Vec<Issue> {
    let mut out: Vec<Issue> = [
        positive("slo.ttft_p95", slo.ttft_p95),
        positive("slo.itl_p95", slo.itl_p95),
        positive("slo.e2e_p95", slo.e2e_p95),
    ]
    .into_iter()
    .filter_map(Result::err)
    .collect();
    if out.is_empty() && slo.e2e_p95 < slo.ttft_p95 {
        out.push(Issue::new(
            "slo.e2e_p95",
            slo.e2e_p95,
            format!("is shorter than slo.ttft_p95 ({})", slo.ttft_p95),
        ));
    }
    out
}

/// The criteria's bounds: positive durations, a retry amplification of at least 1.
fn validate_criteria(c: &Criteria) -> Result<(), Issue> {
    if let Some(r) = &c.routing {
        positive(
            "criteria.routing.traffic_removal_max",
            r.traffic_removal_max,
        )?;
    }
    if let Some(r) = &c.recovery {
        positive(
            "criteria.recovery.ready_and_serving_max",
            r.ready_and_serving_max,
        )?;
    }
    if let Some(o) = &c.overload {
        if !(o.retry_amplification_max.is_finite() && o.retry_amplification_max >= 1.0) {
            return Err(Issue::new(
                "criteria.overload.retry_amplification_max",
                o.retry_amplification_max,
                "must be at least 1 (one attempt per request)",
            ));
        }
        if let Some(d) = o.rejection_p95_max {
            positive("criteria.overload.rejection_p95_max", d)?;
        }
    }
    if let Some(m) = &c.maintenance {
        positive("criteria.maintenance.removal_max", m.removal_max)?;
    }
    Ok(())
}

/// The client's timeouts, and the warm connections it may open.
fn validate_client(c: &ClientCfg) -> Result<(), Issue> {
    positive("client.connect_timeout", c.connect_timeout)?;
    positive("client.first_token_timeout", c.first_token_timeout)?;
    positive("client.idle_timeout", c.idle_timeout)?;
    positive("client.drain_timeout", c.drain_timeout)?;
    if c.max_slip_p99.is_some() {
        return Err(Issue {
            field: "client.max_slip_p99".into(),
            value: None,
            reason: "was removed (issue 21): a p99 of schedule slip over ~100 sends is one \
                     scheduler hiccup. A run is now INVALID only when haq's own lateness could \
                     change a verdict: a send later than `client.max_late` (the tightest \
                     latency objective, at most 1s), a phase p95 moved by more than `client.max_p95_shift` (10%) of the objective, or \
                     a phase's load off by more than `client.max_load_error` (5%); delete the \
                     line"
                .into(),
        });
    }
    if let Some(d) = c.max_late {
        positive("client.max_late", d)?;
    }
    if c.warm_connections > MAX_WARM_CONNECTIONS {
        return Err(Issue::new(
            "client.warm_connections",
            c.warm_connections,
            format!("must be at most {MAX_WARM_CONNECTIONS} (one socket each)"),
        ));
    }
    Ok(())
}

/// Phases laid end to end, and the rate each sets itself (`None`: the arrival's).
type LaidOut = (Vec<PhasePlan>, Vec<Option<f64>>);

/// The phases laid end to end, each with the rate it sets itself — or each phase's
/// first issue.
fn validate_phases(phases: &[Phase], protected: f64) -> Result<LaidOut, Vec<Issue>> {
    let mut explicit = Vec::new();
    if phases.is_empty() {
        return Err(vec![Issue::missing("phases", "needs at least one phase")]);
    }
    let mut names = BTreeSet::new();
    let mut start = Duration::ZERO;
    let mut out = Vec::new();
    let mut issues = Vec::new();
    for (i, p) in phases.iter().enumerate() {
        let unique = !p.name.is_empty() && names.insert(p.name.as_str());
        match validate_phase(&format!("phases[{i}]"), p, unique, protected) {
            Ok((kind, rate)) => {
                explicit.push(rate);
                out.push(PhasePlan {
                    name: p.name.clone(),
                    kind,
                    start,
                    duration: p.duration.0,
                    rate: 0.0,
                });
            }
            Err(e) => issues.push(e),
        }
        start += p.duration.0;
    }
    if issues.is_empty() {
        Ok((out, explicit))
    } else {
        Err(issues)
    }
}

/// One phase (`unique`: its name is non-empty and no earlier phase's): its kind and
/// the rate it sets itself.
fn validate_phase(
    f: &str,
    p: &Phase,
    unique: bool,
    protected: f64,
) -> Result<(PhaseKind, Option<f64>), Issue> {
    if !unique {
        return Err(Issue::new(
            format!("{f}.name"),
            format!("{:?}", p.name),
            "phase names must be non-empty and unique",
        ));
    }
    let kind = match p.kind {
        Some(k) => k,
        None => serde_json::from_value::<PhaseKind>(serde_json::Value::String(p.name.clone()))
            .map_err(|_| {
                Issue::missing(
                    format!("{f}.kind"),
                    format!(
                        "is required: the name `{}` is not a phase kind (baseline, fault, degraded, recovery, overload, drain, recovered)",
                        p.name
                    ),
                )
            })?,
    };
    positive(&format!("{f}.duration"), p.duration)?;
    Ok((kind, phase_rate(f, p, kind, protected)?))
}

/// The rate a phase sets itself: `rate`, or `load` × protected; `None` when the
/// workload's arrival profile applies. Never below the protected load (Q12); above
/// it in an overload phase (Q10).
fn phase_rate(f: &str, p: &Phase, kind: PhaseKind, protected: f64) -> Result<Option<f64>, Issue> {
    let (field, r) = match (p.rate, p.load) {
        (Some(_), Some(_)) => {
            return Err(Issue::new(
                format!("{f}.load"),
                p.load.unwrap_or_default(),
                "give either `rate` or `load`, not both",
            ));
        }
        (Some(r), None) => (format!("{f}.rate"), r.0),
        (None, Some(l)) => {
            if !pos_finite(l) {
                return Err(Issue::new(
                    format!("{f}.load"),
                    l,
                    "must be a positive multiple of protected_load",
                ));
            }
            (format!("{f}.load"), l * protected)
        }
        (None, None) if kind == PhaseKind::Overload => {
            return Err(Issue::missing(
                format!("{f}.load"),
                "is required in an overload phase: `load: 2` (× protected_load) or `rate: N/s` above protected_load",
            ));
        }
        (None, None) => return Ok(None),
    };
    if !pos_finite(r) || r > MAX_RATE {
        return Err(Issue::new(
            field,
            format!("{r}/s"),
            format!("must be in (0, {MAX_RATE}] req/s"),
        ));
    }
    if kind == PhaseKind::Overload && r <= protected + 1e-9 {
        return Err(Issue::new(
            field,
            format!("{r}/s"),
            format!("an overload phase must offer more than protected_load ({protected}/s)"),
        ));
    }
    if r + 1e-9 < protected && !matches!(kind, PhaseKind::Capacity | PhaseKind::Settle) {
        return Err(Issue::new(
            field,
            format!("{r}/s"),
            format!(
                "is below protected_load ({protected}/s): the run would never offer the load it must qualify (Q12)"
            ),
        ));
    }
    Ok(Some(r))
}

/// `criteria.capacity.search` (issue 19): the adaptive search's bounds; the fixed
/// ladder's fields refused, naming what replaced them; every fault naming its replica
/// (the degraded topology holds the faults for each step).
fn validate_search(c: &CapacitySearch, s: &Scenario) -> Result<(), Issue> {
    let f = "criteria.capacity.search";
    for (name, v) in [("to", &c.to), ("steps", &c.steps), ("settle", &c.settle)] {
        if let Some(v) = v {
            return Err(Issue::new(
                format!("{f}.{name}"),
                v,
                "the fixed ladder is gone (issue 19): the search brackets from `from` (multiplying by `factor`) until the SLO breaks, then bisects until the bracket is within `precision` or `max_steps` are spent, each step its own run after a `warmup`; remove `to`, `steps` and `settle` (docs/capacity.md)",
            ));
        }
    }
    if let Some(from) = c.from
        && (!pos_finite(from.0) || from.0 > MAX_RATE)
    {
        return Err(Issue::new(
            format!("{f}.from"),
            from,
            format!("must be in (0, {MAX_RATE}] req/s"),
        ));
    }
    if !(c.factor.is_finite() && c.factor > 1.0 && c.factor <= 16.0) {
        return Err(Issue::new(
            format!("{f}.factor"),
            c.factor,
            "must be above 1 and at most 16",
        ));
    }
    if !(c.precision.0 > 0.0 && c.precision.0 <= 1.0) {
        return Err(Issue::new(
            format!("{f}.precision"),
            c.precision,
            "must be above 0% and at most 100%",
        ));
    }
    if !(2..=50).contains(&c.max_steps) {
        return Err(Issue::new(
            format!("{f}.max_steps"),
            c.max_steps,
            "must be between 2 and 50",
        ));
    }
    positive(&format!("{f}.step"), c.step)?;
    if let Some(m) = c
        .overload
        .iter()
        .find(|m| !(m.is_finite() && **m > 1.0 && **m <= 10.0))
    {
        return Err(Issue::new(
            format!("{f}.overload"),
            m,
            "each multiple of C_degraded must be above 1 and at most 10",
        ));
    }
    if let Some((i, _)) = s
        .faults
        .iter()
        .enumerate()
        .find(|(_, x)| x.target.is_none())
    {
        return Err(Issue::new(
            format!("faults[{i}].target"),
            "(a probe picks it)",
            format!(
                "{f} holds the scenario's faults for every step of its degraded topology: name the replica this fault takes (target: {{replica: w2}})"
            ),
        ));
    }
    Ok(())
}

/// Q8: a fate must make sense for its stage (a delivered stream is never retried).
fn validate_policy(p: &FatePolicy) -> Result<(), Issue> {
    if p.streaming == Fate::Retry {
        return Err(Issue::new(
            "policy.streaming",
            "retry",
            "a retry after the first delivered delta is never legal (M2/M3): the client would see two answers; use `fail` (explicit error) or `migrate` (token-continuous)",
        ));
    }
    for (stage, fate) in [
        ("prefill", p.prefill),
        ("decode", p.decode),
        ("streaming", p.streaming),
    ] {
        if fate == Fate::Reroute {
            return Err(Issue::new(
                format!("policy.{stage}"),
                "reroute",
                "reroute means sending a request elsewhere before any work started; it applies to `new` and `queued` only (use retry, migrate, recompute or fail)",
            ));
        }
    }
    if p.new == Fate::Recompute {
        return Err(Issue::new(
            "policy.new",
            "recompute",
            "a new request has nothing to recompute (use reroute, retry or fail)",
        ));
    }
    Ok(())
}

fn validate_evidence(e: &EvidenceCfg) -> Result<(), Issue> {
    for (field, name) in [
        ("evidence.attempt_header", &e.attempt_header),
        ("evidence.worker_header", &e.worker_header),
    ] {
        if reqwest::header::HeaderName::from_bytes(name.as_bytes()).is_err() {
            return Err(Issue::new(
                field,
                name.as_str(),
                "is not a valid HTTP header name",
            ));
        }
    }
    if let Some(t) = &e.tool_log
        && t.trim().is_empty()
    {
        return Err(Issue::new(
            "evidence.tool_log",
            "\"\"",
            "must be a file path or an http(s) URL",
        ));
    }
    Ok(())
}
