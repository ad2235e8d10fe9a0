//! Second stage: a parsed [`Scenario`] becomes a [`Plan`] — resolved, checked, ready to
//! run — or the first [`Issue`] found. Pure: the same scenario gives the same plan, so
//! `haq check` rebuilds the plan of a stored run exactly.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use super::error::Issue;
pub use super::fault_plan::{FaultPlan, Trigger};
use super::model::*;

/// Hard upper bounds that keep every load loop bounded.
pub const MAX_RATE: f64 = 10_000.0;
pub const MAX_TOTAL: Duration = Duration::from_secs(24 * 3600);
pub const MAX_SIM_REPLICAS: u32 = 64;

/// A validated, resolved scenario.
#[derive(Debug, Clone, Serialize)]
pub struct Plan {
    /// The effective scenario (overrides applied, workload file inlined).
    pub scenario: Scenario,
    pub mix: Mix,
    pub seed: u64,
    /// Mean offered arrival rate over the run (req/s).
    pub rate: f64,
    /// The offered rate over time (constant, ramp or stages).
    pub profile: crate::workload::RateProfile,
    /// Data read from the workload's files (empirical lengths, replayed traces); empty
    /// for a plan rebuilt from a recorded scenario (checking needs none of it).
    #[serde(skip)]
    pub inputs: Arc<crate::workload::inputs::Inputs>,
    pub phases: Vec<PhasePlan>,
    pub faults: Vec<FaultPlan>,
    /// Sum of phase durations: how long load is offered.
    pub total: Duration,
    /// Replica names faults may target (`w1`..`wN` for the sim).
    pub replicas: Vec<String>,
    /// Every declared replica (name, node, and for `url` targets upstream, proxy
    /// listen address and process).
    pub replica_decls: Vec<ReplicaDecl>,
}

#[derive(Debug, Clone, Serialize)]
pub struct PhasePlan {
    pub name: String,
    pub kind: PhaseKind,
    /// Offset from the start of load.
    pub start: Duration,
    pub duration: Duration,
    /// Offered rate in this phase (req/s).
    pub rate: f64,
}

impl PhasePlan {
    pub fn end(&self) -> Duration {
        self.start + self.duration
    }
}

impl Plan {
    /// The phase an offset (from the start of load) falls in.
    pub fn phase_at(&self, t: Duration) -> Option<&PhasePlan> {
        self.phases
            .iter()
            .find(|p| t >= p.start && t < p.end())
            .or_else(|| self.phases.last().filter(|p| t >= p.end()))
    }
}

pub fn sim_replica_names(n: u32) -> Vec<String> {
    (1..=n).map(|i| format!("w{i}")).collect()
}

fn pos_finite(x: f64) -> bool {
    x.is_finite() && x > 0.0
}

/// Most connections `client.warm_connections` may open before load.
pub const MAX_WARM_CONNECTIONS: u32 = 10_000;

fn positive(field: &str, d: crate::wire::units::Dur) -> Result<(), Issue> {
    if d.0.is_zero() {
        Err(Issue::new(field, d, "must be greater than 0"))
    } else {
        Ok(())
    }
}

pub fn validate(s: Scenario) -> Result<Plan, Issue> {
    if s.name.is_empty()
        || !s
            .name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    {
        return Err(Issue::new(
            "name",
            format!("{:?}", s.name),
            "must be non-empty and use only letters, digits, `-`, `_` and `.` (it names the run directory)",
        ));
    }

    validate_target(&s.target)?;
    if let Some(d) = s.evidence.readiness_watch
        && d.0 < std::time::Duration::from_millis(10)
    {
        return Err(Issue::new(
            "evidence.readiness_watch",
            d,
            "must be at least 10ms (one poll per replica per interval)",
        ));
    }
    let replica_decls = super::fault_plan::validate_replicas(&s.target)?;
    let replicas: Vec<String> = replica_decls.iter().map(|d| d.name.clone()).collect();

    let mix = match &s.workload.mix {
        MixRef::Inline(m) => m.clone(),
        MixRef::File(p) => {
            return Err(Issue::new(
                "workload.mix",
                p,
                "workload file was not loaded (use scenario::load)",
            ));
        }
    };
    validate_mix(&mix)?;

    if !pos_finite(s.protected_load.0) {
        return Err(Issue::new(
            "protected_load",
            s.protected_load,
            "must be greater than 0",
        ));
    }
    // The scenario's phases first (errors name their own index), then with the
    // capacity search's ladders around them (Q4).
    validate_phases(&s.phases, s.protected_load.0)?;
    let search = s.criteria.capacity.as_ref().map(|c| &c.search);
    if let Some(cs) = search {
        validate_search(cs)?;
    }
    let expanded = crate::capacity::expand(&s.phases, search, s.protected_load.0);
    let (mut phases, explicit) = validate_phases(&expanded, s.protected_load.0)?;
    let total = phases.last().map(|p| p.end()).unwrap_or_default();
    let (rate, profile) = validate_arrival(&s, &phases, total)?;
    let profile = overlay_phase_rates(profile, &phases, &explicit);
    for p in &mut phases {
        let (a, b) = (p.start.as_secs_f64(), p.end().as_secs_f64());
        p.rate = profile.area(a, b) / (b - a);
    }

    positive("slo.ttft_p95", s.slo.ttft_p95)?;
    positive("slo.itl_p95", s.slo.itl_p95)?;
    positive("slo.e2e_p95", s.slo.e2e_p95)?;
    if s.slo.e2e_p95 < s.slo.ttft_p95 {
        return Err(Issue::new(
            "slo.e2e_p95",
            s.slo.e2e_p95,
            format!("is shorter than slo.ttft_p95 ({})", s.slo.ttft_p95),
        ));
    }

    if s.policy.streaming == Fate::Retry {
        return Err(Issue::new(
            "policy.streaming",
            "retry",
            "a retry after the first delivered delta is never legal (M2/M3): the client would see two answers; use `fail` (explicit error) or `migrate` (token-continuous)",
        ));
    }

    validate_policy(&s.policy)?;
    validate_evidence(&s.evidence)?;

    if total > MAX_TOTAL {
        return Err(Issue::new(
            "phases",
            crate::wire::units::format_duration(total),
            "the run would last more than 24h",
        ));
    }
    let faults = super::fault_plan::validate_faults(&s, &phases, &replica_decls)?;

    if let Some(r) = &s.criteria.routing {
        positive(
            "criteria.routing.traffic_removal_max",
            r.traffic_removal_max,
        )?;
    }
    if let Some(r) = &s.criteria.recovery {
        positive(
            "criteria.recovery.ready_and_serving_max",
            r.ready_and_serving_max,
        )?;
    }
    if let Some(o) = &s.criteria.overload {
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
    if let Some(m) = &s.criteria.maintenance {
        positive("criteria.maintenance.removal_max", m.removal_max)?;
    }
    positive("client.connect_timeout", s.client.connect_timeout)?;
    positive("client.first_token_timeout", s.client.first_token_timeout)?;
    positive("client.idle_timeout", s.client.idle_timeout)?;
    positive("client.drain_timeout", s.client.drain_timeout)?;
    if s.client.warm_connections > MAX_WARM_CONNECTIONS {
        return Err(Issue::new(
            "client.warm_connections",
            s.client.warm_connections,
            format!("must be at most {MAX_WARM_CONNECTIONS} (one socket each)"),
        ));
    }

    Ok(Plan {
        seed: s.workload.seed,
        mix,
        rate,
        profile,
        inputs: Arc::default(),
        phases,
        faults,
        total,
        replicas,
        replica_decls,
        scenario: s,
    })
}

fn validate_target(t: &Target) -> Result<(), Issue> {
    match t.kind {
        TargetKind::Sim => {
            if let Some(u) = &t.url {
                return Err(Issue::new(
                    "target.url",
                    u,
                    "is only used with `kind: url`; the sim target starts its own gateway",
                ));
            }
            let n = t.replica_set().count();
            if n == 0 || n > MAX_SIM_REPLICAS {
                return Err(Issue::new(
                    "target.replicas",
                    n,
                    format!("must be between 1 and {MAX_SIM_REPLICAS}"),
                ));
            }
            validate_engine(&t.engine)?;
            validate_gateway(&t.gateway)?;
            Ok(())
        }
        TargetKind::Url => {
            let u = t
                .url
                .as_deref()
                .ok_or_else(|| Issue::missing("target.url", "is required with `kind: url`"))?;
            let parsed = reqwest::Url::parse(u)
                .map_err(|e| Issue::new("target.url", u, format!("is not a URL: {e}")))?;
            if !matches!(parsed.scheme(), "http" | "https") {
                return Err(Issue::new("target.url", u, "must be http:// or https://"));
            }
            if let Some(Replicas::Count(n)) = t.replicas {
                return Err(Issue::new(
                    "target.replicas",
                    n,
                    "a `url` target lists its replicas (name, upstream, listen, process, node); a count only starts sim workers",
                ));
            }
            Ok(())
        }
    }
}

fn at_least(field: &str, v: u32, min: u32) -> Result<(), Issue> {
    if v < min {
        Err(Issue::new(field, v, format!("must be at least {min}")))
    } else {
        Ok(())
    }
}

/// The sim engine's knobs (docs/sim.md).
fn validate_engine(e: &EngineCfg) -> Result<(), Issue> {
    if !pos_finite(e.prefill_tokens_per_s) {
        return Err(Issue::new(
            "target.engine.prefill_tokens_per_s",
            e.prefill_tokens_per_s,
            "must be greater than 0",
        ));
    }
    positive("target.engine.decode_step", e.decode_step)?;
    at_least("target.engine.max_num_seqs", e.max_num_seqs, 1)?;
    at_least("target.engine.block_size", e.block_size, 1)?;
    at_least(
        "target.engine.max_num_batched_tokens",
        e.max_num_batched_tokens,
        e.max_num_seqs.min(e.block_size),
    )?;
    if e.kv_cache_tokens / e.block_size < 2 {
        return Err(Issue::new(
            "target.engine.kv_cache_tokens",
            e.kv_cache_tokens,
            format!("must hold at least 2 blocks of {} tokens", e.block_size),
        ));
    }
    at_least("target.engine.max_model_len", e.max_model_len, 2)?;
    if e.revision.trim().is_empty() || !e.revision.is_ascii() {
        return Err(Issue::new(
            "target.engine.revision",
            format!("{:?}", e.revision),
            "must be a non-empty ASCII name",
        ));
    }
    at_least("target.engine.tool_call_tokens", e.tool_call_tokens, 1)?;
    Ok(())
}

/// The sim gateway's knobs (docs/sim.md).
fn validate_gateway(g: &GatewayCfg) -> Result<(), Issue> {
    positive("target.gateway.health_interval", g.health_interval)?;
    at_least("target.gateway.health_failures", g.health_failures, 1)?;
    if let Some(t) = g.health_timeout {
        positive("target.gateway.health_timeout", t)?;
    }
    if !(g.retry_ratio.is_finite() && g.retry_ratio >= 0.0) {
        return Err(Issue::new(
            "target.gateway.retry_ratio",
            g.retry_ratio,
            "must be a number >= 0",
        ));
    }
    positive("target.gateway.lease_ttl", g.lease_ttl)?;
    if g.lease_ttl.0 < Duration::from_millis(30) {
        return Err(Issue::new(
            "target.gateway.lease_ttl",
            g.lease_ttl,
            "must be at least 30ms (it is renewed every third of it)",
        ));
    }
    positive("target.gateway.soft_timeout", g.soft_timeout)?;
    positive("target.gateway.upstream_timeout", g.upstream_timeout)?;
    positive("target.gateway.connect_timeout", g.connect_timeout)?;
    positive("target.gateway.queue_timeout", g.queue_timeout)?;
    at_least(
        "target.gateway.max_inflight_per_worker",
        g.max_inflight_per_worker,
        1,
    )?;
    if g.best_effort_queue_limit > g.queue_limit {
        return Err(Issue::new(
            "target.gateway.best_effort_queue_limit",
            g.best_effort_queue_limit,
            format!(
                "must not exceed target.gateway.queue_limit ({}): best-effort traffic is shed first",
                g.queue_limit
            ),
        ));
    }
    Ok(())
}

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

fn validate_arrival(
    s: &Scenario,
    phases: &[PhasePlan],
    total: Duration,
) -> Result<(f64, crate::workload::RateProfile), Issue> {
    let a = &s.workload.arrival;
    let f = "workload.arrival";
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
    crate::workload::arrival::Gaps::new(a)?;
    if a.max_concurrency == Some(0) {
        return Err(Issue::new(
            format!("{f}.max_concurrency"),
            0,
            "must be at least 1",
        ));
    }
    let total_s = total.as_secs_f64();
    if let Some(t) = &a.trace {
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
        // The real rate is known once the trace is read (scenario::load).
        let nominal = s.protected_load.0;
        return Ok((nominal, crate::workload::RateProfile::constant(nominal)));
    }
    let profile = crate::workload::RateProfile::from_arrival(a, s.protected_load.0, total_s)?;
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
    let rate = if total_s > 0.0 {
        profile.area(0.0, total_s) / total_s
    } else {
        0.0
    };
    if !pos_finite(rate) {
        return Err(Issue::new(
            format!("{f}.rate"),
            format!("{rate}/s"),
            format!("must be in (0, {MAX_RATE}] req/s"),
        ));
    }
    // Q12: the protected offered load is never lowered while the failure is in force.
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
    Ok((rate, profile))
}

fn validate_mix(m: &Mix) -> Result<(), Issue> {
    if m.classes.is_empty() {
        return Err(Issue::missing(
            "workload.mix.classes",
            "needs at least one class",
        ));
    }
    let mut names = BTreeSet::new();
    for (i, c) in m.classes.iter().enumerate() {
        let f = format!("workload.mix.classes[{i}]");
        if !names.insert(c.name.as_str()) {
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
        use crate::workload::{MAX_OUTPUT_TOKENS, MAX_PROMPT_TOKENS};
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
    }
    Ok(())
}

/// The phases, and the rate each one sets explicitly (`rate` or `load`).
fn validate_phases(
    phases: &[Phase],
    protected: f64,
) -> Result<(Vec<PhasePlan>, Vec<Option<f64>>), Issue> {
    let mut explicit = Vec::new();
    if phases.is_empty() {
        return Err(Issue::missing("phases", "needs at least one phase"));
    }
    let mut names = BTreeSet::new();
    let mut start = Duration::ZERO;
    let mut out = Vec::new();
    for (i, p) in phases.iter().enumerate() {
        let f = format!("phases[{i}]");
        if p.name.is_empty() || !names.insert(p.name.as_str()) {
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
        explicit.push(phase_rate(&f, p, kind, protected)?);
        out.push(PhasePlan {
            name: p.name.clone(),
            kind,
            start,
            duration: p.duration.0,
            rate: 0.0,
        });
        start += p.duration.0;
    }
    Ok((out, explicit))
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
    if r + 1e-9 < protected && kind != PhaseKind::Capacity {
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

fn validate_search(c: &CapacitySearch) -> Result<(), Issue> {
    let f = "criteria.capacity.search";
    if !pos_finite(c.from.0) || c.from.0 > MAX_RATE {
        return Err(Issue::new(
            format!("{f}.from"),
            c.from,
            format!("must be in (0, {MAX_RATE}] req/s"),
        ));
    }
    if c.to.0.partial_cmp(&c.from.0) != Some(std::cmp::Ordering::Greater) || c.to.0 > MAX_RATE {
        return Err(Issue::new(
            format!("{f}.to"),
            c.to,
            format!("must be above `from` ({}) and at most {MAX_RATE}/s", c.from),
        ));
    }
    if !(2..=20).contains(&c.steps) {
        return Err(Issue::new(
            format!("{f}.steps"),
            c.steps,
            "must be between 2 and 20",
        ));
    }
    positive(&format!("{f}.step"), c.step)
}

/// The arrival profile with the phases that set their own rate replaced by it (the
/// arrival process keeps its shape: the schedule draws on the profile).
fn overlay_phase_rates(
    profile: crate::workload::RateProfile,
    phases: &[PhasePlan],
    explicit: &[Option<f64>],
) -> crate::workload::RateProfile {
    use crate::workload::arrival::Piece;
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
    crate::workload::RateProfile { pieces }
}

/// Q8: a fate must make sense for its stage.
fn validate_policy(p: &crate::scenario::FatePolicy) -> Result<(), Issue> {
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

fn validate_evidence(e: &crate::scenario::EvidenceCfg) -> Result<(), Issue> {
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
