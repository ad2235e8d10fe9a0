//! Second stage: a parsed [`Scenario`] becomes a [`Plan`] — resolved, checked, ready to
//! run — or the first [`Issue`] found. Pure: the same scenario gives the same plan, so
//! `haq check` rebuilds the plan of a stored run exactly.

use std::collections::BTreeSet;
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
    /// Offered arrival rate (req/s).
    pub rate: f64,
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

    validate_target(&s.target)?;
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

    let phases = validate_phases(&s.phases)?;
    let total = phases.last().map(|p| p.end()).unwrap_or_default();
    if total > MAX_TOTAL {
        return Err(Issue::new(
            "phases",
            crate::scenario::units::format_duration(total),
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

fn validate_phases(phases: &[Phase]) -> Result<Vec<PhasePlan>, Issue> {
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
                            "is required: the name `{}` is not a phase kind (baseline, fault, degraded, recovery)",
                            p.name
                        ),
                    )
                })?,
        };
        positive(&format!("{f}.duration"), p.duration)?;
        out.push(PhasePlan {
            name: p.name.clone(),
            kind,
            start,
            duration: p.duration.0,
        });
        start += p.duration.0;
    }
    Ok(out)
}
