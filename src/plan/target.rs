//! The target's checks: a sim (its engine and gateway knobs, docs/sim.md) or a URL
//! (its address), and the request headers either sends.

use std::time::Duration;

use super::checks::{at_least, pos_finite, positive};
use super::types::MAX_SIM_REPLICAS;
use crate::scenario::{Issue, *};

/// `target`: the URL given with its kind only, a sim's replica count and knobs.
pub(super) fn validate_target(t: &Target) -> Result<(), Issue> {
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

/// The range of `target.engine.speed`.
const MIN_SPEED: f64 = 0.001;
const MAX_SPEED: f64 = 1000.0;

/// The sim engine's knobs (docs/sim.md).
fn validate_engine(e: &EngineCfg) -> Result<(), Issue> {
    if !pos_finite(e.prefill_tokens_per_s) {
        return Err(Issue::new(
            "target.engine.prefill_tokens_per_s",
            e.prefill_tokens_per_s,
            "must be greater than 0",
        ));
    }
    if !(pos_finite(e.speed) && (MIN_SPEED..=MAX_SPEED).contains(&e.speed)) {
        return Err(Issue::new(
            "target.engine.speed",
            e.speed,
            format!(
                "must be between {MIN_SPEED} and {MAX_SPEED} (a factor on the engine's step times: 1 as configured, 2 twice as fast)"
            ),
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
