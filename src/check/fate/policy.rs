//! The declared request-fate matrix (Q8) against what happened: for each request
//! caught by a fault, the stage it was in when the fault hit, what became of it, and
//! whether the policy for that stage allows it. Fills the stage × outcome table.

use super::model::{Ctx, FindingKind, Observed, Out, RequestFate, Stage};
use super::{View, output};
use crate::check::history::FaultRec;
use crate::scenario::{FailureDomain, Fate, FaultAction};
use crate::trace::Outcome;

/// Per fault that caught the request: stage, observed fate, declared fate, verdict.
pub fn against_policy(ctx: &Ctx, v: &View, faults: &[FaultRec], out: &mut Out) {
    let mut flagged = false;
    for f in faults {
        if is_planned_drain(f) || !f.verified {
            // A drain is judged by Maintenance (in-flight work must finish); a fault
            // that was not applied caught nothing.
            continue;
        }
        let Some(stage) = stage_at(ctx, v, f) else {
            continue;
        };
        let observed = observe(v, f);
        let candidates = candidates(ctx, v, stage);
        let mut fates: Vec<&str> = candidates.iter().map(|c| c.1.as_str()).collect();
        fates.dedup();
        let label = fates.join(" or ");
        let judged: Vec<Option<(FindingKind, String)>> = candidates
            .iter()
            .map(|&(_, fate)| judge(v, stage, fate, observed, &label))
            .collect();
        let declared = (fates.len() == 1).then_some(candidates[0].1);
        let (attempts, workers) = attempts_and_workers(v);
        let mut fate = RequestFate {
            request: v.r.id.clone(),
            fault: f.name.clone(),
            stage,
            declared,
            observed,
            outcome: v.end.outcome,
            attempts: attempts.clone(),
            workers,
            delivered: v.delivered(),
            note: None,
            migration: super::migrate::of(v),
        };
        let kind = |j: &Option<(FindingKind, String)>| j.as_ref().map(|x| x.0);
        if judged.iter().any(|j| kind(j) != kind(&judged[0])) {
            let fates: Vec<String> = candidates
                .iter()
                .map(|(s, x)| format!("{} → {}", s.as_str(), x.as_str()))
                .collect();
            let q = format!(
                "{} was caught by {} before its first delta; its stage is not known (no gateway journal phases) and the policy differs across the stages it could be in ({}); it was {}",
                v.r.id,
                f.name,
                fates.join(", "),
                observed.as_str()
            );
            fate.note = Some(q.clone());
            out.unknown.push(q);
        } else if let Some((kind, why)) = judged[0].clone() {
            fate.note = Some(why.clone());
            if !flagged {
                flagged = true;
                let stage_words = match stage {
                    Stage::BeforeFirstDelta => "before its first delta".to_string(),
                    s => format!("in stage {}", s.as_str()),
                };
                out.find(
                    kind,
                    &v.r.id,
                    format!("caught {stage_words} by {} on {}: {why}", f.name, f.replica),
                )
                .attempts(attempts)
                .chunks(v.r.chunks.last().map(|c| c.n));
            }
        }
        out.fates.push(fate);
    }
}

fn is_planned_drain(f: &FaultRec) -> bool {
    f.action == FaultAction::Drain || f.domain == FailureDomain::Drain
}

/// The stage `v` was in when `f` hit, or None when `f` did not touch it.
pub fn stage_at(_: &Ctx, v: &View, f: &FaultRec) -> Option<Stage> {
    let r = v.r;
    if !(r.dispatch <= f.t && f.t < v.end.t) {
        return None;
    }
    let delivered_before = v.first_delta_t().is_some_and(|t| t <= f.t);
    if !r.attempts.is_empty() {
        if let Some(a) = r.attempts.iter().find(|a| a.live_at(f.t)) {
            if a.worker != f.replica {
                return None;
            }
            // Deltas an attempt delivered before it was cut are before the fault (the
            // client may stamp them a little after it); one that finished may have
            // delivered them all after the fault.
            let cut = a.result.as_deref() != Some("finished");
            let delivered_by_it = a.delivered_at_start > 0
                || a.first_delta.is_some_and(|c| c <= f.t)
                || (cut && a.delivered_at_end.is_some_and(|d| d > a.delivered_at_start));
            if delivered_before || delivered_by_it {
                return Some(Stage::Streaming);
            }
            // The proxy saw the replica send output for it before the fault: computed,
            // not delivered (M9 case 2) — unless the client got it (stamped a little
            // after the fault) from this, the last, attempt.
            if proxy_saw_output_before(v, f, Some(&a.id)) {
                let reached_client = client_got_output_of(v, &a.worker)
                    && r.attempts.last().is_some_and(|l| l.id == a.id);
                return Some(if reached_client {
                    Stage::Streaming
                } else {
                    Stage::Decode
                });
            }
            return Some(match a.phase_at(f.t) {
                Some("queued") => Stage::Queued,
                Some("prefill") => Stage::Prefill,
                Some("decode") => Stage::Decode,
                _ => Stage::BeforeFirstDelta,
            });
        }
        // At the gateway (not sent yet, or between attempts): caught when its next
        // attempt went to the faulted replica.
        let next = r.attempts.iter().find(|a| a.start > f.t)?;
        if next.worker != f.replica {
            return None;
        }
        let queued_at_gateway = r.notes.iter().any(|n| n.ev == "queued" && n.t <= f.t);
        return Some(if delivered_before {
            Stage::Streaming
        } else if queued_at_gateway {
            Stage::Queued
        } else {
            Stage::New
        });
    }
    // Client side only: the attribution header names the replica that committed. Output
    // the client got from the faulted replica left it before the fault when the proxy
    // saw it leave by then, or when the fault killed the replica or its engine (a dead
    // process or engine sends nothing): delivered output, stamped by the client a
    // little after the fault.
    let left_before = client_got_output_of(v, &f.replica)
        && (matches!(f.action, FaultAction::Kill | FaultAction::GpuLost)
            || proxy_saw_output_before(v, f, None));
    let delivered_before = delivered_before || left_before;
    match (&r.worker, delivered_before) {
        (Some(w), true) if *w == f.replica => Some(Stage::Streaming),
        (Some(_), true) => None,
        (None, true) => Some(Stage::Streaming),
        (None, false) => Some(Stage::BeforeFirstDelta),
        (Some(w), false) if *w == f.replica || r.attempt_number().is_some_and(|n| n > 1) => {
            Some(Stage::BeforeFirstDelta)
        }
        (Some(_), false) => None,
    }
}

/// haq's proxy saw `f.replica` send output for `v` (for `attempt`, when the proxy
/// knows attempts) before `f` hit.
fn proxy_saw_output_before(v: &View, f: &FaultRec, attempt: Option<&str>) -> bool {
    v.r.proxy.iter().any(|l| {
        l.replica == f.replica
            && attempt.is_none_or(|a| l.attempt.as_deref().is_none_or(|x| x == a))
            && l.start <= f.t
            && l.first_event.is_some_and(|fe| fe <= f.t)
    })
}

/// The client received output, and the response that committed names `worker`.
fn client_got_output_of(v: &View, worker: &str) -> bool {
    v.delivered() > 0 && v.r.worker.as_deref() == Some(worker)
}

/// What became of `v`, caught by `f`.
pub fn observe(v: &View, f: &FaultRec) -> Observed {
    match v.end.outcome {
        Outcome::Cancelled | Outcome::Abandoned => Observed::ClientGone,
        Outcome::ExplicitError | Outcome::Rejected | Outcome::HttpError => Observed::Failed,
        Outcome::Completed if looks_cut(v) => Observed::Truncated,
        Outcome::Completed => {
            let handover = v
                .handovers()
                .into_iter()
                .find(|s| (s.at as usize) < v.deltas.len());
            if let Some(s) = handover {
                return match output::continuity(v, &s) {
                    Ok(()) => Observed::Migrated,
                    Err(_) => Observed::Stitched,
                };
            }
            let atts = &v.r.attempts;
            if atts.len() > 1 {
                if atts.iter().any(|a| a.worker == f.replica) {
                    Observed::Retried
                } else {
                    Observed::Rerouted
                }
            } else if atts.len() == 1 && atts[0].worker != f.replica {
                Observed::Rerouted
            } else if atts.len() == 1 && atts[0].recomputed {
                Observed::Recomputed
            } else if v.r.attempt_number().is_some_and(|n| n > 1) {
                Observed::Retried
            } else {
                Observed::Completed
            }
        }
        _ => Observed::Interrupted,
    }
}

/// A clean end that is not one: no finish_reason after output, or the journal's last
/// attempt failed with no explicit error.
fn looks_cut(v: &View) -> bool {
    let finished = v.end.finish.is_some() || v.r.chunks.iter().any(|c| c.finish.is_some());
    let failed_last =
        v.r.attempts
            .last()
            .is_some_and(|a| a.result.as_deref() == Some("failed"))
            && !v.r.notes.iter().any(|n| n.ev == "explicit_error");
    (!finished && v.delivered() > 0) || (failed_last && v.delivered() > 0)
}

/// The stages `stage` may stand for, each with its declared fate.
fn candidates(ctx: &Ctx, v: &View, stage: Stage) -> Vec<(Stage, Fate)> {
    let p = &ctx.policy;
    match stage {
        Stage::New => vec![(stage, p.new)],
        Stage::Queued => vec![(stage, p.queued)],
        Stage::Prefill => vec![(stage, p.prefill)],
        Stage::Decode => vec![(stage, p.decode)],
        Stage::Streaming => vec![(stage, p.streaming)],
        // Known to have reached a replica (journal or proxy): not new.
        Stage::BeforeFirstDelta if !v.r.attempts.is_empty() => vec![
            (Stage::Queued, p.queued),
            (Stage::Prefill, p.prefill),
            (Stage::Decode, p.decode),
        ],
        Stage::BeforeFirstDelta => vec![
            (Stage::New, p.new),
            (Stage::Queued, p.queued),
            (Stage::Prefill, p.prefill),
            (Stage::Decode, p.decode),
        ],
    }
}

/// Does `observed` match `declared` for `stage`? A finding when not. Hand-overs
/// after delivery, silent ends and error shapes are the other checkers' findings.
fn judge(
    v: &View,
    stage: Stage,
    declared: Fate,
    observed: Observed,
    label: &str,
) -> Option<(FindingKind, String)> {
    use Observed::*;
    let says = format!("the policy says {label}");
    let was = format!("it was {} ({})", observed.as_str(), v.end.outcome.as_str());
    let mismatch = || Some((FindingKind::FateMismatch, format!("{says}, {was}")));
    match observed {
        // Not cut (a recompute on the same replica is the engine's own recovery, one
        // complete answer); hand-overs and cut ends are the other checkers' findings.
        Completed | Recomputed | ClientGone | Stitched | Truncated => None,
        _ if stage != Stage::Streaming => match (declared, observed) {
            (Fate::Reroute | Fate::Retry | Fate::Migrate, Rerouted | Retried | Migrated) => None,
            (Fate::Reroute | Fate::Retry | Fate::Migrate, _) => match retry_excuse(v) {
                Some(_) => None,
                None => Some((
                    FindingKind::RetryNotMade,
                    format!("{says} (nothing was delivered yet), but {was}"),
                )),
            },
            (Fate::Fail, Failed) => None,
            (Fate::Fail | Fate::Recompute, _) => mismatch(),
        },
        // Streaming.
        Migrated if declared == Fate::Migrate => None,
        Migrated => None, // a retry after the first delta: flagged by its own checker
        Failed if matches!(declared, Fate::Fail | Fate::Retry | Fate::Reroute) => None,
        Interrupted => None, // a silent end after output: flagged by its own checker
        _ => mismatch(),
    }
}

/// Why a failed request caught before its first delta was legally not retried (M2,
/// M8): the journal shows the retry was made, no other replica was ready, or the
/// retry budget was spent.
fn retry_excuse(v: &View) -> Option<String> {
    let atts = &v.r.attempts;
    if atts.len() >= 2 {
        return Some(format!("{} attempts were made", atts.len()));
    }
    if v.r.notes.iter().any(|n| n.ev == "no_upstream") {
        return Some("no other replica was ready".into());
    }
    v.r.notes
        .iter()
        .find(|n| n.ev == "retry_denied")
        .map(|n| format!("the gateway denied the retry (M8: {})", n.detail))
}

fn attempts_and_workers(v: &View) -> (Vec<String>, Vec<String>) {
    if v.r.attempts.is_empty() {
        return (
            v.r.attempt.iter().cloned().collect(),
            v.r.worker.iter().cloned().collect(),
        );
    }
    let mut workers: Vec<String> = Vec::new();
    for a in &v.r.attempts {
        if !workers.contains(&a.worker) {
            workers.push(a.worker.clone());
        }
    }
    (v.r.attempts.iter().map(|a| a.id.clone()).collect(), workers)
}
