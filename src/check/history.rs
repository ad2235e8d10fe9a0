//! Folds a trace, event by event, into per-request records (M1: attempts, chunks,
//! how it ended). A request's chunks are held only while it is in flight; when it
//! ends, its record is handed to the per-request checks and dropped, so memory is
//! bounded by the number of requests in flight, however long the run.
//!
//! With a gateway journal merged into the stream, a request's record also collects
//! its attempts. The journal may speak about a request a little after the client saw
//! it end (the gateway learns late that the client left), so an ended request lingers
//! for a bounded window of trace time before it is judged.

use std::collections::{HashMap, VecDeque};

use super::evidence::GwItem;
use crate::trace::journal::{FenceHow, GatewayEntry, WorkerEntry};
use crate::trace::{ChunkKind, Event, Outcome, ProxyEndKind};

#[derive(Debug, Clone)]
pub struct ChunkRec {
    pub t: u64,
    pub n: u32,
    pub kind: ChunkKind,
    pub text: Option<String>,
    pub cid: Option<String>,
    pub finish: Option<String>,
    pub raw: Option<String>,
}

/// Everything the trace says about one request, while it is judged.
#[derive(Debug, Clone, Default)]
pub struct RequestRecord {
    pub id: String,
    pub class: String,
    pub phase: String,
    pub intended: u64,
    pub dispatch: u64,
    pub max_tokens: u32,
    pub protected: bool,
    /// Sent as a streaming request (default true in older traces).
    pub stream: bool,
    /// With a concurrency cap: when the request got its slot.
    pub admitted: Option<u64>,
    /// Server-reported queue time (µs).
    pub queue_us: Option<u64>,
    pub status: Option<u16>,
    pub response_t: Option<u64>,
    pub worker: Option<String>,
    pub attempt: Option<String>,
    pub chunks: Vec<ChunkRec>,
    pub end: Option<EndRec>,
    /// Attempts, from the gateway journal (empty without one).
    pub attempts: Vec<AttemptRec>,
    /// Other journal entries about this request.
    pub notes: Vec<GwNote>,
    /// What haq's interposition proxy saw of it, per upstream connection.
    pub proxy: Vec<ProxyLeg>,
    /// Trace time up to which the gateway journal is known to go on, when this record
    /// was judged (0: no journal).
    pub journal_until: u64,
    /// A probe request (issue 5): the fault whose trigger it drives. Probes are
    /// instrumentation held back at haq's proxy: judged by Request-Fate, not measured
    /// as the workload's latency (Q2).
    pub probe: Option<String>,
}

/// One upstream attempt of a request, as the gateway journaled it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AttemptRec {
    pub id: String,
    pub worker: String,
    pub start: u64,
    /// Deltas already delivered to the client when the attempt started.
    pub delivered_at_start: u32,
    pub end: Option<u64>,
    /// `finished`, `failed`, `client_gone`, `relayed`, or what a newer gateway says.
    pub result: Option<String>,
    pub why: Option<String>,
    /// Deltas delivered to the client (request total) when the attempt ended.
    pub delivered_at_end: Option<u32>,
    /// Engine phases the journal reported: (time, `queued` / `prefill` / `decode`).
    pub phases: Vec<(u64, String)>,
    /// When the attempt was fenced: lease revoked or expired, cancel confirmed,
    /// confirmed dead.
    pub fenced: Option<u64>,
    /// When the gateway handed its first delta to the client (the commit, M1).
    pub first_delta: Option<u64>,
    /// When the gateway cancelled it because the client went away (M4).
    pub cancelled: Option<u64>,
    /// The engine preempted it and recomputed (worker journal).
    pub recomputed: bool,
}

impl AttemptRec {
    /// Alive at `t`: started, not ended.
    pub fn live_at(&self, t: u64) -> bool {
        self.start <= t && self.end.is_none_or(|e| e > t)
    }
    /// The engine phase the journal last reported at or before `t`.
    pub fn phase_at(&self, t: u64) -> Option<&str> {
        self.phases
            .iter()
            .rfind(|(pt, _)| *pt <= t)
            .map(|(_, p)| p.as_str())
    }
}

/// One upstream request of a client request, as haq's proxy forwarded it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProxyLeg {
    pub replica: String,
    pub conn: u64,
    /// The gateway's attempt header, when it sends one.
    pub attempt: Option<String>,
    pub start: u64,
    pub end: Option<(u64, ProxyEndKind)>,
    /// SSE events the replica sent.
    pub events: u32,
    /// When the replica's first event passed the proxy: output was computed.
    pub first_event: Option<u64>,
}

impl ProxyLeg {
    /// The leg as an attempt, for gateways that keep no journal: ended by the gateway
    /// closing the connection is a cancel (`client_gone`), by the replica a failure.
    pub fn attempt(&self) -> AttemptRec {
        let result = self.end.map(|(_, k)| match k {
            ProxyEndKind::Completed => "finished",
            ProxyEndKind::DownstreamClosed | ProxyEndKind::DownstreamReset => "client_gone",
            ProxyEndKind::Stopped => "stopped",
            _ => "failed",
        });
        AttemptRec {
            id: self
                .attempt
                .clone()
                .unwrap_or_else(|| format!("{}#{}", self.replica, self.conn)),
            worker: self.replica.clone(),
            start: self.start,
            end: self.end.map(|e| e.0),
            result: result.map(str::to_string),
            why: self.end.map(|(_, k)| format!("proxy: {k:?}")),
            ..Default::default()
        }
    }
}

/// A journal entry about a request that is not an attempt's start or end.
#[derive(Debug, Clone, PartialEq)]
pub struct GwNote {
    pub t: u64,
    pub ev: String,
    pub attempt: Option<String>,
    pub delivered: Option<u32>,
    pub detail: String,
}

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

#[derive(Debug, Clone)]
pub struct EndRec {
    pub t: u64,
    pub outcome: Outcome,
    pub detail: Option<String>,
    pub tokens: u32,
    pub done: bool,
    pub finish: Option<String>,
    pub counted: Option<u32>,
    pub usage: Option<crate::trace::Usage>,
    pub error: Option<crate::trace::InBandError>,
    pub tool_calls: Vec<crate::trace::ToolCall>,
    pub json_valid: Option<bool>,
}

impl RequestRecord {
    pub fn deltas(&self) -> impl Iterator<Item = &ChunkRec> {
        self.chunks.iter().filter(|c| c.kind.is_delta())
    }
    pub fn first_delta_t(&self) -> Option<u64> {
        self.deltas().next().map(|c| c.t)
    }
    /// Inter-token gaps: (arrival of the later delta, gap), µs.
    pub fn itl_gaps(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        let d: Vec<u64> = self.deltas().map(|c| c.t).collect();
        (1..d.len()).map(move |i| (d[i], d[i].saturating_sub(d[i - 1])))
    }
    pub fn end_t(&self) -> Option<u64> {
        self.end.as_ref().map(|e| e.t)
    }
    pub fn outcome(&self) -> Option<Outcome> {
        self.end.as_ref().map(|e| e.outcome)
    }
    /// The delivered output text.
    pub fn text(&self) -> String {
        self.deltas().filter_map(|c| c.text.as_deref()).collect()
    }
    /// Attempt number from a `<id>/aN` attempt header, when the gateway sends one.
    pub fn attempt_number(&self) -> Option<u32> {
        self.attempt.as_deref()?.rsplit_once("/a")?.1.parse().ok()
    }
}

/// A fault as the trace recorded it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct FaultRec {
    pub t: u64,
    pub name: String,
    pub domain: String,
    pub action: String,
    pub replica: String,
    pub pid: Option<u32>,
    pub verified: bool,
    pub detail: String,
    /// `process`, `proxy` or `command` (absent in traces before it was recorded).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backend: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// What fired it (`time`, a probe point, a load condition).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trigger: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub probe: Option<String>,
}

#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct RunInfo {
    pub name: String,
    pub seed: u64,
    pub wall: String,
    /// Trace time of the first phase start (start of load).
    pub load_start: Option<u64>,
    pub complete: bool,
    pub interrupted: bool,
    pub reason: Option<String>,
    pub phase_starts: Vec<(String, u64)>,
}

/// Receives each finished request.
pub trait RequestSink {
    fn request(&mut self, r: &RequestRecord, faults: &[FaultRec]);
}

/// What became of the journal lines the fold read.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct JournalStats {
    pub lines: u64,
    /// Attached to a request of the trace.
    pub attached: u64,
    /// About no request the trace knows (another client, or too late to attach).
    pub unattached: u64,
    /// Trace time of the last journal line.
    pub last_t: u64,
    /// All of the journal has been read.
    pub ended: bool,
}

#[derive(Default)]
pub struct Folder {
    pub info: RunInfo,
    pub faults: Vec<FaultRec>,
    in_flight: HashMap<String, RequestRecord>,
    /// Ended requests waiting out the linger window: (deadline, id) in end order.
    closing: VecDeque<(u64, String)>,
    /// Journal lines that came before their request's first trace line.
    early: HashMap<String, Vec<(u64, Jot)>>,
    early_q: VecDeque<(u64, String)>,
    /// How long (µs of trace time) an ended request waits for late journal lines.
    pub linger: u64,
    /// The latest time seen on any stream.
    cursor: u64,
    pub journal: JournalStats,
    pub parse_errors: Vec<String>,
}

impl Folder {
    pub fn push(&mut self, ev: Event, sink: &mut dyn RequestSink) {
        self.advance(ev.t(), sink);
        match ev {
            Event::RunStart {
                name, seed, wall, ..
            } => {
                self.info.name = name;
                self.info.seed = seed;
                self.info.wall = wall;
            }
            Event::Phase { t, name, edge } => {
                if edge == crate::trace::Edge::Start {
                    self.info.load_start.get_or_insert(t);
                    self.info.phase_starts.push((name, t));
                }
            }
            Event::Request {
                t,
                id,
                class,
                phase,
                intended,
                max_tokens,
                protected,
                stream,
                admitted,
                probe,
                ..
            } => {
                let mut r = RequestRecord {
                    id: id.clone(),
                    class,
                    phase,
                    intended,
                    dispatch: t,
                    max_tokens,
                    protected,
                    stream,
                    admitted,
                    probe,
                    ..Default::default()
                };
                for (gt, item) in self.early.remove(&id).into_iter().flatten() {
                    self.journal.attached += 1;
                    attach(&mut r, gt, item);
                }
                self.in_flight.insert(id, r);
            }
            Event::Response {
                t,
                id,
                status,
                worker,
                attempt,
                queue_us,
                ..
            } => {
                if let Some(r) = self.in_flight.get_mut(&id) {
                    r.queue_us = queue_us;
                    r.status = Some(status);
                    r.response_t = Some(t);
                    r.worker = worker;
                    r.attempt = attempt;
                }
            }
            Event::Chunk {
                t,
                id,
                n,
                kind,
                text,
                cid,
                finish,
                raw,
            } => {
                if let Some(r) = self.in_flight.get_mut(&id) {
                    r.chunks.push(ChunkRec {
                        t,
                        n,
                        kind,
                        text,
                        cid,
                        finish,
                        raw,
                    });
                }
            }
            Event::End {
                t,
                id,
                outcome,
                detail,
                tokens,
                done,
                finish,
                counted,
                usage,
                error,
                tool_calls,
                json_valid,
                ..
            } => {
                if let Some(r) = self.in_flight.get_mut(&id)
                    && r.end.is_none()
                {
                    r.end = Some(EndRec {
                        t,
                        outcome,
                        detail,
                        tokens,
                        done,
                        finish,
                        counted,
                        usage,
                        error,
                        tool_calls,
                        json_valid,
                    });
                    if self.linger == 0 {
                        self.finalize(&id, sink);
                    } else {
                        self.closing.push_back((t + self.linger, id));
                    }
                }
            }
            Event::Fault {
                t,
                name,
                domain,
                action,
                replica,
                pid,
                verified,
                detail,
                backend,
                node,
                trigger,
                probe,
                ..
            } => self.faults.push(FaultRec {
                t,
                name,
                domain,
                action,
                replica,
                pid,
                verified,
                detail,
                backend,
                node,
                trigger,
                probe,
            }),
            Event::RunEnd {
                interrupted,
                reason,
                ..
            } => {
                self.info.complete = true;
                self.info.interrupted = interrupted;
                self.info.reason = reason;
            }
            Event::ProxyRequest {
                t,
                replica,
                conn,
                id: Some(id),
                attempt,
                ..
            } => {
                if let Some(r) = self.in_flight.get_mut(&id) {
                    r.proxy.push(ProxyLeg {
                        replica,
                        conn,
                        attempt,
                        start: t,
                        ..Default::default()
                    });
                }
            }
            Event::ProxyEnd {
                t,
                replica,
                conn,
                id: Some(id),
                events,
                first_event,
                end,
                ..
            } => {
                if let Some(leg) = self.in_flight.get_mut(&id).and_then(|r| {
                    r.proxy
                        .iter_mut()
                        .rfind(|l| l.replica == replica && l.conn == conn && l.end.is_none())
                }) {
                    leg.end = Some((t, end));
                    leg.events = events;
                    leg.first_event = first_event;
                }
            }
            Event::Target { .. }
            | Event::Heal { .. }
            | Event::Observation { .. }
            | Event::Replacement { .. }
            | Event::Exited { .. }
            | Event::ProxyRequest { .. }
            | Event::ProxyEnd { .. } => {}
        }
    }

    /// One gateway journal line, already on the trace's timeline.
    pub fn push_gateway(&mut self, t: u64, item: GwItem, sink: &mut dyn RequestSink) {
        self.journal.last_t = self.journal.last_t.max(t);
        self.advance(t, sink);
        self.journal.lines += 1;
        if let Some(req) = item.req().map(str::to_string) {
            self.file(req, t, Jot::Gateway(item));
        }
    }

    /// One worker journal line, already on the trace's timeline.
    pub fn push_worker(
        &mut self,
        t: u64,
        worker: &str,
        e: WorkerEntry,
        sink: &mut dyn RequestSink,
    ) {
        self.advance(t, sink);
        if let Some(req) = worker_req(&e).map(str::to_string) {
            self.file(req, t, Jot::Worker(worker.to_string(), e));
        }
    }

    fn file(&mut self, req: String, t: u64, jot: Jot) {
        if let Some(r) = self.in_flight.get_mut(&req) {
            self.journal.attached += 1;
            attach(r, t, jot);
        } else {
            self.early_q.push_back((t, req.clone()));
            self.early.entry(req).or_default().push((t, jot));
        }
    }

    /// The journal has no more lines: requests judged from now on know where it ends.
    pub fn gateway_ended(&mut self) {
        self.journal.ended = true;
    }

    /// Moves time forward: judges ended requests whose linger window has passed and
    /// drops journal lines that never found their request.
    fn advance(&mut self, t: u64, sink: &mut dyn RequestSink) {
        self.cursor = self.cursor.max(t);
        while let Some((deadline, _)) = self.closing.front() {
            if *deadline > self.cursor {
                break;
            }
            if let Some((_, id)) = self.closing.pop_front() {
                self.finalize(&id, sink);
            }
        }
        while let Some((et, _)) = self.early_q.front() {
            if et.saturating_add(self.linger.max(1_000_000)) > self.cursor {
                break;
            }
            if let Some((_, id)) = self.early_q.pop_front()
                && let Some(v) = self.early.remove(&id)
            {
                self.journal.unattached += v.len() as u64;
            }
        }
    }

    fn finalize(&mut self, id: &str, sink: &mut dyn RequestSink) {
        if let Some(mut r) = self.in_flight.remove(id) {
            // No gateway journal for it: the proxy's legs are its attempts.
            if r.attempts.is_empty() && !r.proxy.is_empty() {
                r.attempts = r.proxy.iter().map(ProxyLeg::attempt).collect();
            }
            // Lines still to come are later than anything seen so far.
            r.journal_until = if self.journal.ended {
                self.journal.last_t
            } else {
                self.cursor.max(self.journal.last_t)
            };
            sink.request(&r, &self.faults);
        }
    }

    /// End of all streams: judges every ended request still lingering.
    pub fn finish(&mut self, sink: &mut dyn RequestSink) {
        while let Some((_, id)) = self.closing.pop_front() {
            self.finalize(&id, sink);
        }
        self.journal.unattached += self.early.values().map(|v| v.len() as u64).sum::<u64>();
        self.early.clear();
        self.early_q.clear();
    }

    /// Request records held right now (in flight or lingering): what bounds memory.
    pub fn held(&self) -> usize {
        self.in_flight.len()
    }

    /// Requests with no end in the trace (the run was killed): indeterminate.
    pub fn unfinished(&self) -> usize {
        self.in_flight.values().filter(|r| r.end.is_none()).count()
    }
}

/// A journal line about one request, from the gateway or a worker.
#[derive(Debug, Clone)]
pub enum Jot {
    Gateway(GwItem),
    Worker(String, WorkerEntry),
}

fn worker_req(e: &WorkerEntry) -> Option<&str> {
    use WorkerEntry::*;
    match e {
        Admitted { req, .. }
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
fn attach(r: &mut RequestRecord, t: u64, jot: Jot) {
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

fn attach_gateway(r: &mut RequestRecord, t: u64, e: GatewayEntry) {
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
        W::Finished { attempt, .. } => (attempt.clone(), None),
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
