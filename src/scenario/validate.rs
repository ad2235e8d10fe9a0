//! Second stage: a parsed [`Scenario`] becomes a [`Plan`] — resolved, checked, ready to
//! run — or the first [`Issue`] found. Pure: the same scenario gives the same plan, so
//! `haq check` rebuilds the plan of a stored run exactly.

use std::collections::BTreeSet;
use std::time::Duration;

use serde::Serialize;

use super::error::Issue;
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
    /// Offered arrival rate (req/s).
    pub rate: f64,
    pub phases: Vec<PhasePlan>,
    pub faults: Vec<FaultPlan>,
    /// Sum of phase durations: how long load is offered.
    pub total: Duration,
    /// Replica names faults may target (`w1`..`wN` for the sim).
    pub replicas: Vec<String>,
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

#[derive(Debug, Clone, Serialize)]
pub struct FaultPlan {
    pub name: String,
    pub domain: FailureDomain,
    pub backend: FaultBackend,
    pub action: FaultAction,
    pub replica: String,
    pub phase: String,
    /// Offset from the start of load.
    pub at: Duration,
    pub verify: bool,
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

fn positive(field: &str, d: crate::scenario::units::Dur) -> Result<(), Issue> {
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

    let replicas = validate_target(&s.target)?;

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
    let rate = s.workload.arrival.rate.unwrap_or(s.protected_load).0;
    if !pos_finite(rate) || rate > MAX_RATE {
        return Err(Issue::new(
            "workload.arrival.rate",
            format!("{rate}/s"),
            format!("must be in (0, {MAX_RATE}] req/s"),
        ));
    }
    if rate + 1e-9 < s.protected_load.0 {
        return Err(Issue::new(
            "workload.arrival.rate",
            format!("{rate}/s"),
            format!(
                "is below protected_load ({}): the run would never offer the load it must qualify (Q12)",
                s.protected_load
            ),
        ));
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

    let phases = validate_phases(&s.phases, rate, s.protected_load.0)?;
    let total = phases.last().map(|p| p.end()).unwrap_or_default();
    if total > MAX_TOTAL {
        return Err(Issue::new(
            "phases",
            crate::scenario::units::format_duration(total),
            "the run would last more than 24h",
        ));
    }
    let faults = validate_faults(&s, &phases, &replicas)?;

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

    Ok(Plan {
        seed: s.workload.seed,
        mix,
        rate,
        phases,
        faults,
        total,
        replicas,
        scenario: s,
    })
}

fn validate_target(t: &Target) -> Result<Vec<String>, Issue> {
    match t.kind {
        TargetKind::Sim => {
            if let Some(u) = &t.url {
                return Err(Issue::new(
                    "target.url",
                    u,
                    "is only used with `kind: url`; the sim target starts its own gateway",
                ));
            }
            if t.replicas == 0 || t.replicas > MAX_SIM_REPLICAS {
                return Err(Issue::new(
                    "target.replicas",
                    t.replicas,
                    format!("must be between 1 and {MAX_SIM_REPLICAS}"),
                ));
            }
            let e = &t.engine;
            if !pos_finite(e.prefill_tokens_per_s) {
                return Err(Issue::new(
                    "target.engine.prefill_tokens_per_s",
                    e.prefill_tokens_per_s,
                    "must be greater than 0",
                ));
            }
            positive("target.engine.decode_step", e.decode_step)?;
            if e.max_num_seqs == 0 {
                return Err(Issue::new(
                    "target.engine.max_num_seqs",
                    0,
                    "must be at least 1",
                ));
            }
            positive("target.gateway.health_interval", t.gateway.health_interval)?;
            if t.gateway.health_failures == 0 {
                return Err(Issue::new(
                    "target.gateway.health_failures",
                    0,
                    "must be at least 1",
                ));
            }
            Ok(sim_replica_names(t.replicas))
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
            Ok(Vec::new())
        }
    }
}

fn validate_dist(field: &str, d: &Dist, max: u32) -> Result<(), Issue> {
    let (lo, hi) = match d {
        Dist::Fixed(n) => (*n, *n),
        Dist::Uniform([a, b]) => (*a, *b),
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
        validate_dist(&format!("{f}.prompt_tokens"), &c.prompt_tokens, 1_000_000)?;
        validate_dist(&format!("{f}.output_tokens"), &c.output_tokens, 100_000)?;
    }
    Ok(())
}

fn validate_phases(phases: &[Phase], rate: f64, protected: f64) -> Result<Vec<PhasePlan>, Issue> {
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
        let phase_rate = phase_rate(&f, p, kind, rate, protected)?;
        out.push(PhasePlan {
            name: p.name.clone(),
            kind,
            start,
            duration: p.duration.0,
            rate: phase_rate,
        });
        start += p.duration.0;
    }
    Ok(out)
}

/// The offered rate of one phase: `rate`, `load` × protected, or the workload's rate.
/// Never below the protected load (Q12); above it only in an overload phase (Q10).
fn phase_rate(
    f: &str,
    p: &Phase,
    kind: PhaseKind,
    rate: f64,
    protected: f64,
) -> Result<f64, Issue> {
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
        (None, None) => return Ok(rate),
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
    if r + 1e-9 < protected {
        return Err(Issue::new(
            field,
            format!("{r}/s"),
            format!(
                "is below protected_load ({protected}/s): the run would never offer the load it must qualify (Q12)"
            ),
        ));
    }
    Ok(r)
}

fn validate_faults(
    s: &Scenario,
    phases: &[PhasePlan],
    replicas: &[String],
) -> Result<Vec<FaultPlan>, Issue> {
    let mut out = Vec::new();
    let mut killed = BTreeSet::new();
    for (i, f) in s.faults.iter().enumerate() {
        let field = format!("faults[{i}]");
        if s.target.kind != TargetKind::Sim {
            return Err(Issue::new(
                format!("{field}.backend"),
                "process",
                "the process backend can only reach the sim target's workers in this version",
            ));
        }
        let phase = phases
            .iter()
            .find(|p| p.name == f.at.phase)
            .ok_or_else(|| {
                Issue::new(
                    format!("{field}.at.phase"),
                    &f.at.phase,
                    format!(
                        "no such phase (phases: {})",
                        phases
                            .iter()
                            .map(|p| p.name.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                )
            })?;
        if f.at.offset.0 >= phase.duration {
            return Err(Issue::new(
                format!("{field}.at.offset"),
                f.at.offset,
                format!(
                    "is not inside phase `{}`, which lasts {}",
                    phase.name,
                    crate::scenario::units::format_duration(phase.duration)
                ),
            ));
        }
        if !replicas.contains(&f.target.replica) {
            return Err(Issue::new(
                format!("{field}.target.replica"),
                &f.target.replica,
                format!("no such replica (the target has {})", replicas.join(", ")),
            ));
        }
        if !killed.insert(f.target.replica.clone()) {
            return Err(Issue::new(
                format!("{field}.target.replica"),
                &f.target.replica,
                "is already killed by an earlier fault",
            ));
        }
        out.push(FaultPlan {
            name: f
                .name
                .clone()
                .unwrap_or_else(|| format!("kill-{}", f.target.replica)),
            domain: f.domain,
            backend: f.backend,
            action: f.action,
            replica: f.target.replica.clone(),
            phase: phase.name.clone(),
            at: phase.start + f.at.offset.0,
            verify: f.verify,
        });
    }
    Ok(out)
}
