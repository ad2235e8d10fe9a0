//! What the journals and haq's proxy say about one request's attempts (M1, M5): the
//! records, and how each journal line is filed into them.

use super::{AttemptRec, GwNote, RequestRecord};
use crate::check::evidence::GwItem;
use crate::wire::journal::{FenceHow, GatewayEntry, WorkerEntry};

/// Journal entry kinds (from a newer gateway) that mean "this attempt can no longer
/// publish": the retry after it is legal (M2, M5).
pub const FENCE_KINDS: [&str; 6] = [
    "fence",
    "fenced",
    "lease_revoked",
    "lease_expired",
    "cancel_confirmed",
    "cancel_ack",
];

/// A journal line about one request, from the gateway or a worker.
#[derive(Debug, Clone)]
pub enum Jot {
    Gateway(GwItem),
    Worker(String, WorkerEntry),
}

pub(super) fn worker_req(e: &WorkerEntry) -> Option<&str> {
    use WorkerEntry::*;
    match e {
        Admitted { req, .. }
        | FirstToken { req, .. }
        | Scheduled { req, .. }
        | Preempted { req, .. }
        | LeaseExpired { req, .. }
        | LeaseRevoked { req, .. }
        | FaultFired { req, .. }
        | Finished { req, .. } => Some(req),
        _ => None,
    }
}

/// Files one journal line into its request's record.
pub(super) fn attach(r: &mut RequestRecord, t: u64, jot: Jot) {
    match jot {
        Jot::Gateway(GwItem::Known(e)) => attach_gateway(r, t, e),
        Jot::Gateway(GwItem::Other { ev, fields }) => {
            let attempt = fields["attempt"].as_str().map(str::to_string);
            let a = attempt.as_deref().and_then(|id| find(r, id));
            match (a, fields["phase"].as_str()) {
                (Some(a), Some(phase)) if ev == "phase" => a.phases.push((t, phase.to_string())),
                (Some(a), _) if FENCE_KINDS.contains(&ev.as_str()) => {
                    a.fenced.get_or_insert(t);
                }
                _ => r.notes.push(GwNote {
                    t,
                    ev,
                    attempt,
                    delivered: fields["delivered"].as_u64().map(|d| d as u32),
                    detail: fields["why"].as_str().unwrap_or_default().to_string(),
                }),
            }
        }
        Jot::Worker(worker, e) => attach_worker(r, t, &worker, e),
    }
}

fn find<'r>(r: &'r mut RequestRecord, attempt: &str) -> Option<&'r mut AttemptRec> {
    r.attempts.iter_mut().rfind(|a| a.id == attempt)
}

fn note(
    r: &mut RequestRecord,
    t: u64,
    ev: &str,
    attempt: Option<String>,
    delivered: Option<u32>,
    detail: String,
) {
    r.notes.push(GwNote {
        t,
        ev: ev.into(),
        attempt,
        delivered,
        detail,
    });
}

/// Gateway journal: an attempt's bounds and marks, or a note on the request.
fn attach_gateway(r: &mut RequestRecord, t: u64, e: GatewayEntry) {
    use GatewayEntry as G;
    match e {
        G::AttemptStart { .. } | G::AttemptEnd { .. } => attempt_bounds(r, t, e),
        G::Fence { .. }
        | G::CancelConfirmed { .. }
        | G::LeaseExpired { .. }
        | G::FirstDelta { .. }
        | G::ClientGone { .. } => attempt_mark(r, t, e),
        e => gateway_note(r, t, e),
    }
}

/// An attempt starts or ends (any other entry is ignored).
fn attempt_bounds(r: &mut RequestRecord, t: u64, e: GatewayEntry) {
    use GatewayEntry as G;
    match e {
        G::AttemptStart {
            attempt,
            worker,
            delivered,
            ..
        } => r.attempts.push(AttemptRec {
            id: attempt,
            worker,
            start: t,
            delivered_at_start: delivered,
            ..Default::default()
        }),
        G::AttemptEnd {
            attempt,
            worker,
            result,
            why,
            delivered,
            ..
        } => {
            if let Some(a) = find(r, &attempt) {
                a.end = Some(t);
                a.result = Some(result);
                a.why = why;
                a.delivered_at_end = Some(delivered);
            } else {
                // The start was lost (torn journal): keep what the end says.
                r.attempts.push(AttemptRec {
                    id: attempt,
                    worker,
                    start: t,
                    end: Some(t),
                    result: Some(result),
                    why,
                    delivered_at_end: Some(delivered),
                    ..Default::default()
                });
            }
        }
        _ => {}
    }
}

/// A mark on one attempt: fenced, first delta, client gone (any other entry is
/// ignored). An unfenced retry is a note on the request.
fn attempt_mark(r: &mut RequestRecord, t: u64, e: GatewayEntry) {
    use GatewayEntry as G;
    match e {
        G::Fence { attempt, how, .. } => {
            if how == FenceHow::Unfenced {
                note(r, t, "unfenced", Some(attempt), None, String::new());
            } else if let Some(a) = find(r, &attempt) {
                a.fenced.get_or_insert(t);
            }
        }
        G::CancelConfirmed { attempt, .. } | G::LeaseExpired { attempt, .. } => {
            if let Some(a) = find(r, &attempt) {
                a.fenced.get_or_insert(t);
            }
        }
        G::FirstDelta { attempt, .. } => {
            if let Some(a) = find(r, &attempt) {
                a.first_delta.get_or_insert(t);
            }
        }
        G::ClientGone { attempt, .. } => {
            if let Some(a) = find(r, &attempt) {
                a.cancelled.get_or_insert(t);
            }
        }
        _ => {}
    }
}

/// An entry about the request as a whole (errors, retries, queueing, its end): a
/// note on its record. Entries of no interest are ignored.
fn gateway_note(r: &mut RequestRecord, t: u64, e: GatewayEntry) {
    use GatewayEntry as G;
    match e {
        G::ExplicitError { delivered, why, .. } => {
            note(r, t, "explicit_error", None, Some(delivered), why);
        }
        G::RetryAfterDelta { delivered, .. } => {
            note(
                r,
                t,
                "retry_after_delta",
                None,
                Some(delivered),
                String::new(),
            );
        }
        G::NoUpstream { attempts, .. } => {
            note(
                r,
                t,
                "no_upstream",
                None,
                None,
                format!("{attempts} attempts made"),
            );
        }
        G::RetryDenied { why, .. } => note(r, t, "retry_denied", None, None, why),
        G::Retry {
            after,
            delivered,
            why,
            ..
        } => note(r, t, "retry", Some(after), Some(delivered), why),
        G::SoftTimeoutFailover {
            attempt, silent_ms, ..
        } => note(
            r,
            t,
            "soft_timeout_failover",
            Some(attempt),
            None,
            format!("after {silent_ms} ms of silence, without fencing"),
        ),
        G::HardDrainAbort { attempt, .. } => {
            note(r, t, "hard_drain_abort", Some(attempt), None, String::new());
        }
        G::Queued { queue_len, .. } => {
            note(
                r,
                t,
                "queued",
                None,
                None,
                format!("queue length {queue_len}"),
            );
        }
        G::RequestEnd {
            outcome,
            attempts,
            delivered,
            ..
        } => note(
            r,
            t,
            "request_end",
            None,
            Some(delivered),
            format!("{outcome} after {attempts} attempts"),
        ),
        _ => {}
    }
}

/// Worker journal: engine phases of an attempt (M1), fault hooks, leases.
fn attach_worker(r: &mut RequestRecord, t: u64, worker: &str, e: WorkerEntry) {
    use WorkerEntry as W;
    let (attempt, phase) = match &e {
        W::Admitted { attempt, .. } => (attempt.clone(), Some("queued")),
        W::Preempted { attempt, .. } => (attempt.clone(), Some("queued")),
        W::Scheduled { attempt, .. } => (attempt.clone(), Some("prefill")),
        W::FaultFired { attempt, point, .. } => (
            attempt.clone(),
            match point.as_str() {
                "prefill" => Some("prefill"),
                // Computed, not yet written; or a tool call executed, not yet streamed.
                "before_event" | "after_tool_call" => Some("decode"),
                _ => None,
            },
        ),
        W::LeaseExpired { attempt, .. } | W::LeaseRevoked { attempt, .. } => {
            (Some(attempt.clone()), None)
        }
        W::Finished { attempt, .. } | W::FirstToken { attempt, .. } => (attempt.clone(), None),
        _ => (None, None),
    };
    // The attempt by id, else the latest one on this worker.
    let a = match attempt.as_deref() {
        Some(id) => r.attempts.iter_mut().rfind(|a| a.id == id),
        None => r.attempts.iter_mut().rfind(|a| a.worker == worker),
    };
    let Some(a) = a else { return };
    if let Some(p) = phase {
        a.phases.push((t, p.to_string()));
    }
    match e {
        W::Admitted {
            prompt_tokens,
            resumed,
            ..
        } => {
            a.engine = Some(crate::trace::record::EngineRec {
                admitted: t,
                prompt_tokens,
                resumed,
                first_token: None,
            });
        }
        W::FirstToken { .. } => {
            if let Some(x) = a.engine.as_mut() {
                x.first_token.get_or_insert(t);
            }
        }
        W::Preempted { .. }
        | W::Scheduled {
            recompute: true, ..
        } => a.recomputed = true,
        W::LeaseExpired { .. } | W::LeaseRevoked { .. } => {
            a.fenced.get_or_insert(t);
        }
        _ => {}
    }
}
