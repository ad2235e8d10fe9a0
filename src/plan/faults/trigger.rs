//! The fault's trigger (`when`): a time, a probe reaching its point or a number of
//! requests in flight — and whether the target can observe it (haq's proxy, the
//! sim's worker hooks).

use super::context::Ctx;
use super::types::Trigger;
use crate::scenario::{
    FailureDomain, Fault, FaultAction, FaultBackend, Issue, MixRef, PROBE_OUTPUT_FALLBACK,
    PROBE_PROMPT_FALLBACK, ProbePoint, Via, When,
};

/// The trigger `when` declares (`Time` without one).
pub(super) fn trigger(cx: &Ctx, field: &str, f: &Fault) -> Result<Trigger, Issue> {
    let Some(w) = &f.when else {
        return Ok(Trigger::Time);
    };
    let within = w.within.0;
    if within.is_zero() {
        return Err(Issue::new(
            format!("{field}.when.within"),
            w.within,
            "must be greater than 0",
        ));
    }
    match (w.probe, w.in_flight) {
        (Some(_), Some(_)) | (None, None) => Err(Issue::missing(
            format!("{field}.when"),
            "needs exactly one of `probe` or `in_flight`",
        )),
        (Some(point), None) => {
            if let ProbePoint::ComputedNotSent(0) | ProbePoint::AfterDeltas(0) = point {
                return Err(Issue::new(
                    format!("{field}.when.probe"),
                    point.describe(),
                    "k counts from 1",
                ));
            }
            let k = match point {
                ProbePoint::ComputedNotSent(k) | ProbePoint::AfterDeltas(k) => k,
                _ => 1,
            };
            let (prompt_tokens, max_tokens) = probe_lengths(cx, w, k);
            if max_tokens < k || prompt_tokens == 0 {
                return Err(Issue::new(
                    format!("{field}.when.max_tokens"),
                    max_tokens,
                    format!(
                        "the probe must ask for at least {k} tokens (and a prompt of at least 1)"
                    ),
                ));
            }
            Ok(Trigger::Probe {
                point,
                within,
                prompt_tokens,
                max_tokens,
                via: w.via,
            })
        }
        (None, Some(n)) => {
            if n == 0 {
                return Err(Issue::new(
                    format!("{field}.when.in_flight"),
                    0,
                    "must be at least 1",
                ));
            }
            Ok(Trigger::InFlight { n, within })
        }
    }
}

/// The trigger can be observed on the fault's targets (`replicas`; empty = the
/// replica serving the probe): hooks in the sim, proxies for probes and counts.
pub(super) fn trigger_fits(
    cx: &Ctx,
    field: &str,
    f: &Fault,
    action: FaultAction,
    trigger: &Trigger,
    replicas: &[String],
) -> Result<(), Issue> {
    if let Trigger::Probe {
        via: Via::Hook,
        point,
        ..
    } = *trigger
    {
        hook_fits(cx, field, f.backend, action, point)?;
    }
    if matches!(trigger, Trigger::Probe { .. }) {
        probe_fits(cx, field, f.domain, replicas)?;
    }
    if let Trigger::InFlight { .. } = trigger {
        in_flight_fits(cx, field, replicas)?;
    }
    Ok(())
}

/// A worker hook (`via: hook`): the sim's, at a point it has, crashing the worker.
fn hook_fits(
    cx: &Ctx,
    field: &str,
    backend: FaultBackend,
    action: FaultAction,
    point: ProbePoint,
) -> Result<(), Issue> {
    if !cx.sim() {
        return Err(Issue::new(
            format!("{field}.when.via"),
            "hook",
            "worker hooks exist in the sim's workers only; use `via: proxy` for other engines",
        ));
    }
    if !matches!(
        point,
        ProbePoint::Prefill | ProbePoint::ComputedNotSent(_) | ProbePoint::ToolCall
    ) {
        return Err(Issue::new(
            format!("{field}.when.via"),
            "hook",
            format!(
                "the worker has no hook at {} (hooks: prefill, computed_not_sent, tool_call)",
                point.describe()
            ),
        ));
    }
    if action != FaultAction::Kill || backend != FaultBackend::Process {
        return Err(Issue::new(
            format!("{field}.action"),
            action.as_str(),
            "a worker hook crashes the worker: the fault is `action: kill` (process backend)",
        ));
    }
    Ok(())
}

/// A probe: haq's proxy in front of every replica; a node to fault for domain `node`.
fn probe_fits(
    cx: &Ctx,
    field: &str,
    domain: FailureDomain,
    replicas: &[String],
) -> Result<(), Issue> {
    // The proxy tells which replica serves the probe and holds it at its point.
    if let Some(d) = cx.decls.iter().find(|d| !cx.has_proxy(d)) {
        let how = if cx.kube() {
            "no address in target.kubernetes.proxies (docs/kubernetes.md, haq's proxy in the cluster)"
        } else {
            "no `listen`"
        };
        return Err(Issue::missing(
            format!("{field}.when.probe"),
            format!(
                "needs haq's proxy in front of every replica; replica `{}` has {how}",
                d.name
            ),
        ));
    }
    if replicas.is_empty() && domain == FailureDomain::Node {
        return Err(Issue::missing(
            format!("{field}.target.node"),
            "is required for domain `node`",
        ));
    }
    Ok(())
}

/// `when.in_flight`: one target replica, with haq's proxy in front to count.
fn in_flight_fits(cx: &Ctx, field: &str, replicas: &[String]) -> Result<(), Issue> {
    if replicas.len() != 1 {
        return Err(Issue::missing(
            format!("{field}.target.replica"),
            "`when.in_flight` counts the requests of one target replica: name it",
        ));
    }
    let d = cx.decl(&replicas[0]);
    if !d.is_some_and(|d| cx.has_proxy(d)) {
        return Err(Issue::missing(
            format!("{field}.when.in_flight"),
            format!(
                "is counted by haq's proxy; replica `{}` has no `listen`",
                replicas[0]
            ),
        ));
    }
    Ok(())
}

/// The probe's prompt and output lengths: as declared, else the typical ones of the
/// workload's first class (a probe the engine serves as it serves the load), the output
/// at least the `k` deltas the point needs.
fn probe_lengths(cx: &Ctx, w: &When, k: u32) -> (u32, u32) {
    let class = match &cx.s.workload.mix {
        MixRef::Inline(m) => m.classes.first(),
        MixRef::File(_) => None,
    };
    let prompt = w.prompt_tokens.unwrap_or_else(|| {
        class
            .and_then(|c| c.prompt_tokens.typical())
            .unwrap_or(PROBE_PROMPT_FALLBACK)
    });
    let output = w.max_tokens.unwrap_or_else(|| {
        class
            .and_then(|c| c.output_tokens.typical())
            .unwrap_or(PROBE_OUTPUT_FALLBACK)
            .max(k + 1)
    });
    (prompt, output)
}
