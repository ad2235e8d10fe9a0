//! Folds a trace, event by event, into per-request records. A request's chunks are
//! held only while it is in flight; when it ends, its record is reduced to a small
//! summary and handed to the per-request checks, so memory is bounded by the number
//! of requests in flight, however long the run.

use std::collections::HashMap;

use crate::trace::{ChunkKind, Event, Outcome};

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
    pub status: Option<u16>,
    pub response_t: Option<u64>,
    pub worker: Option<String>,
    pub attempt: Option<String>,
    pub chunks: Vec<ChunkRec>,
    pub end: Option<EndRec>,
}

#[derive(Debug, Clone)]
pub struct EndRec {
    pub t: u64,
    pub outcome: Outcome,
    pub detail: Option<String>,
    pub tokens: u32,
    pub done: bool,
    pub finish: Option<String>,
}

impl RequestRecord {
    pub fn deltas(&self) -> impl Iterator<Item = &ChunkRec> {
        self.chunks.iter().filter(|c| c.kind.is_delta())
    }
    pub fn first_delta_t(&self) -> Option<u64> {
        self.deltas().next().map(|c| c.t)
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

#[derive(Default)]
pub struct Folder {
    pub info: RunInfo,
    pub faults: Vec<FaultRec>,
    in_flight: HashMap<String, RequestRecord>,
    pub parse_errors: Vec<String>,
}

impl Folder {
    pub fn push(&mut self, ev: Event, sink: &mut dyn RequestSink) {
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
                ..
            } => {
                self.in_flight.insert(
                    id.clone(),
                    RequestRecord {
                        id,
                        class,
                        phase,
                        intended,
                        dispatch: t,
                        max_tokens,
                        protected,
                        ..Default::default()
                    },
                );
            }
            Event::Response {
                t,
                id,
                status,
                worker,
                attempt,
                ..
            } => {
                if let Some(r) = self.in_flight.get_mut(&id) {
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
            } => {
                if let Some(mut r) = self.in_flight.remove(&id) {
                    r.end = Some(EndRec {
                        t,
                        outcome,
                        detail,
                        tokens,
                        done,
                        finish,
                    });
                    sink.request(&r, &self.faults);
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
            Event::Target { .. }
            | Event::Heal { .. }
            | Event::Observation { .. }
            | Event::Replacement { .. }
            | Event::Exited { .. }
            | Event::ProxyRequest { .. }
            | Event::ProxyEnd { .. } => {}
        }
    }

    /// Requests with no end in the trace (the run was killed): indeterminate.
    pub fn unfinished(&self) -> usize {
        self.in_flight.len()
    }
}
