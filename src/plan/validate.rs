//! A parsed [`Scenario`] becomes a [`Plan`] — resolved, checked, ready to run — or the
//! first [`Issue`] found. Pure: the same scenario gives the same plan, so `haq check`
//! rebuilds the plan of a stored run exactly. The workload's checks are in
//! [`super::workload`], the faults' in [`super::faults`].

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use super::checks::{at_least, pos_finite, positive};
use super::rate::RateProfile;
use super::types::{MAX_RATE, MAX_SIM_REPLICAS, MAX_TOTAL, MAX_WARM_CONNECTIONS, PhasePlan, Plan};
use super::workload::{overlay_phase_rates, validate_arrival, validate_cache_truth, validate_mix};
use crate::scenario::{Issue, *};

/// Checks a scenario in a fixed order (the first issue found is the one reported)
/// and resolves it into its plan.
pub fn validate(s: Scenario) -> Result<Plan, Issue> {
    validate_name(&s.name)?;
    validate_target(&s.target)?;
    validate_readiness_watch(&s.evidence)?;
    let replica_decls = super::faults::validate_replicas(&s.target)?;
    let replicas: Vec<String> = replica_decls.iter().map(|d| d.name.clone()).collect();
    let mix = inline_mix(&s.workload.mix)?;
    validate_mix(&mix)?;
    validate_cache_truth(&s.workload)?;
    let Load {
        phases,
        total,
        rate,
        profile,
    } = plan_load(&s)?;
    validate_slo(&s.slo)?;
    validate_policy(&s.policy)?;
    validate_evidence(&s.evidence)?;
    if total > MAX_TOTAL {
        return Err(Issue::new(
            "phases",
            crate::wire::units::format_duration(total),
            "the run would last more than 24h",
        ));
    }
    let faults = super::faults::validate_faults(&s, &phases, &replica_decls)?;
    validate_criteria(&s.criteria)?;
    validate_client(&s.client)?;
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

/// The protected load, the phases, the capacity search's ladders around them (Q4)
/// and the arrival profile with the phases' own rates laid over it.
fn plan_load(s: &Scenario) -> Result<Load, Issue> {
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
    let expanded = super::capacity::expand(&s.phases, search, s.protected_load.0);
    let (mut phases, explicit) = validate_phases(&expanded, s.protected_load.0)?;
    let total = phases.last().map(|p| p.end()).unwrap_or_default();
    let (rate, profile) = validate_arrival(s, &phases, total)?;
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
fn validate_slo(slo: &Slo) -> Result<(), Issue> {
    positive("slo.ttft_p95", slo.ttft_p95)?;
    positive("slo.itl_p95", slo.itl_p95)?;
    positive("slo.e2e_p95", slo.e2e_p95)?;
    if slo.e2e_p95 < slo.ttft_p95 {
        return Err(Issue::new(
            "slo.e2e_p95",
            slo.e2e_p95,
            format!("is shorter than slo.ttft_p95 ({})", slo.ttft_p95),
        ));
    }
    Ok(())
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

fn validate_target(t: &Target) -> Result<(), Issue> {
    validate_headers(&t.headers)?;
    if t.kind != TargetKind::Kubernetes && t.kubernetes.is_some() {
        return Err(Issue::missing(
            "target.kubernetes",
            "is only used with `kind: kubernetes`",
        ));
    }
    match t.kind {
        TargetKind::Kubernetes => super::kubernetes::validate(t),
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

/// `target.headers`: names and values an HTTP request can carry (no CR, LF or NUL: a
/// header that would split the request is refused here, not after the target started).
fn validate_headers(h: &std::collections::BTreeMap<String, HeaderSource>) -> Result<(), Issue> {
    for (k, src) in h {
        if reqwest::header::HeaderName::from_bytes(k.as_bytes()).is_err() {
            return Err(Issue::new(
                format!("target.headers.{k}"),
                format!("{k:?}"),
                "is not a valid header name (letters, digits and !#$%&'*+-.^_`|~ only)",
            ));
        }
        let v = match src {
            HeaderSource::Value(v) => v.as_str(),
            HeaderSource::Env { env, .. } if env.is_empty() => {
                return Err(Issue::new(
                    format!("target.headers.{k}.env"),
                    "\"\"",
                    "names no environment variable",
                ));
            }
            HeaderSource::File { file, .. } if file.is_empty() => {
                return Err(Issue::new(
                    format!("target.headers.{k}.file"),
                    "\"\"",
                    "names no file",
                ));
            }
            // Read when the run starts (a CI job validates without its secrets).
            HeaderSource::Env { prefix, .. } | HeaderSource::File { prefix, .. } => {
                prefix.as_deref().unwrap_or("")
            }
        };
        if reqwest::header::HeaderValue::from_str(v).is_err() {
            return Err(Issue::new(
                format!("target.headers.{k}"),
                "(not shown)",
                "is not a valid header value (no CR, LF, NUL or other control characters)",
            ));
        }
    }
    Ok(())
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
    at_least(
        "target.engine.tensor_parallel_size",
        e.tensor_parallel_size,
        1,
    )?;
    Ok(())
}

/// The sim gateway's knobs (docs/sim.md).
fn validate_gateway(g: &GatewayCfg) -> Result<(), Issue> {
    positive("target.gateway.health_interval", g.health_interval)?;
    positive("target.gateway.stall_timeout", g.stall_timeout)?;
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
