//! Folds a trace, event by event, into per-request records (M1: attempts, chunks,
//! how it ended). A request's chunks are held only while it is in flight; when it
//! ends, its record is handed to the per-request checks and dropped, so memory is
//! bounded by the number of requests in flight, however long the run.
//!
//! With a gateway journal merged into the stream, a request's record also collects
//! its attempts. The journal may speak about a request a little after the client saw
//! it end (the gateway learns late that the client left), so an ended request lingers
//! for a bounded window of trace time before it is judged.

mod attempts;

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

pub use crate::trace::record::{AttemptRec, ChunkRec, EndRec, GwNote, ProxyLeg, RequestRecord};
pub use attempts::{FENCE_KINDS, Jot};
use attempts::{attach, worker_req};

use super::evidence::GwItem;
use crate::scenario::{FailureDomain, FaultAction, FaultBackend};
use crate::trace::{ChunkRef, Event, FaultLine};
use crate::wire::journal::WorkerEntry;

/// A chunk id: the previous chunk's when it is the same (no new allocation).
fn share(prev: Option<&Arc<str>>, cid: Option<&str>) -> Option<Arc<str>> {
    let cid = cid?;
    Some(match prev {
        Some(p) if **p == *cid => Arc::clone(p),
        _ => Arc::from(cid),
    })
}

/// A fault as the trace recorded it (report.json `faults`).
#[derive(Debug, Clone, serde::Serialize)]
pub struct FaultRec {
    pub t: u64,
    pub name: String,
    pub domain: FailureDomain,
    pub action: FaultAction,
    pub replica: String,
    pub pid: Option<u32>,
    pub verified: bool,
    pub detail: String,
    /// The backend that applied it (absent in traces before it was recorded).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backend: Option<FaultBackend>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// What fired it (`time`, a probe point, a load condition).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trigger: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub probe: Option<String>,
}

impl FaultRec {
    /// Why the fault was never applied (no pid, not verified, the detail
    /// `faults::fire::missed` writes): nothing was removed. `None` for a fault that
    /// was applied, verified or not.
    pub fn not_applied(&self) -> Option<&str> {
        if self.verified || self.pid.is_some() {
            return None;
        }
        self.detail.strip_prefix(crate::trace::NOT_APPLIED)
    }

    /// The replica it hit, for people: a fault that never fired (a probe whose serving
    /// replica was never known) names none.
    pub fn replica_label(&self) -> &str {
        replica_label(&self.replica)
    }
}

/// A replica name for people; an empty one (a fault that hit no replica) reads so.
pub fn replica_label(name: &str) -> &str {
    if name.is_empty() { "no replica" } else { name }
}

impl From<FaultLine> for FaultRec {
    fn from(f: FaultLine) -> Self {
        FaultRec {
            t: f.t,
            name: f.name,
            domain: f.domain,
            action: f.action,
            replica: f.replica,
            pid: f.pid,
            verified: f.verified,
            detail: f.detail,
            backend: f.backend,
            node: f.node,
            trigger: f.trigger,
            probe: f.probe,
        }
    }
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

/// What became of the upstream requests haq's proxy recorded (`proxy_request` lines).
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct ProxyStats {
    pub legs: u64,
    /// Tied to a request of the trace, by this run's marker in the body…
    pub by_marker: u64,
    /// …or by the `x-request-id` header.
    pub by_header: u64,
    /// Traffic of unknown requests, per replica: no attribution, or an id the trace does
    /// not know (another client's, a gateway's own request id). Routing and Overload
    /// evidence still counts it.
    pub unknown: std::collections::BTreeMap<String, u64>,
    /// Why the unattributed ones were (`unknown` also counts ids of no request).
    pub reasons: std::collections::BTreeMap<crate::trace::Unattributed, u64>,
    /// `client.marker: auto`'s own requests before the load (not traffic of the load).
    pub calibration: u64,
    /// Where the markers went, when `auto` learned it (the `target` line).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub marker: Option<crate::trace::MarkerUse>,
}

impl ProxyStats {
    /// One line for people: how the legs were tied to requests.
    pub fn describe(&self) -> String {
        let unknown: u64 = self.unknown.values().sum();
        let mut s = format!(
            "{} upstream requests: {} tied to their client request by the body's marker, {} by x-request-id, {unknown} of unknown requests",
            self.legs, self.by_marker, self.by_header
        );
        if let Some(m) = &self.marker {
            let dropped: Vec<&str> = m
                .tried
                .iter()
                .filter(|t| !t.forwarded)
                .map(|t| t.field.as_str())
                .collect();
            s.push_str(&format!("; markers in `{}` (learned at the start", m.field));
            if !dropped.is_empty() {
                s.push_str(&format!(": not forwarded in {}", dropped.join(", ")));
            }
            s.push(')');
        }
        if self.calibration > 0 {
            s.push_str(&format!(
                "; {} of the marker calibration before the load",
                self.calibration
            ));
        }
        if unknown > 0 {
            let per: Vec<String> = self
                .unknown
                .iter()
                .map(|(r, n)| format!("{r}: {n}"))
                .collect();
            s.push_str(&format!(" ({})", per.join(", ")));
            let why: Vec<String> = self
                .reasons
                .iter()
                .map(|(k, n)| format!("{} ×{n}", k.as_str()))
                .collect();
            if !why.is_empty() {
                s.push_str(&format!("; unattributed: {}", why.join(", ")));
            }
        }
        s
    }
}

type Ids = foldhash::fast::RandomState;

#[derive(Default)]
pub struct Folder {
    pub info: RunInfo,
    pub faults: Vec<FaultRec>,
    /// Keyed by request id; foldhash, as a lookup per chunk line with SipHash costs
    /// more than the rest of the lookup (no order is ever taken from these maps).
    in_flight: HashMap<String, RequestRecord, Ids>,
    /// Ended requests waiting out the linger window: (deadline, id) in end order.
    closing: VecDeque<(u64, String)>,
    /// Journal lines that came before their request's first trace line.
    early: HashMap<String, Vec<(u64, Jot)>, Ids>,
    early_q: VecDeque<(u64, String)>,
    /// How long (µs of trace time) an ended request waits for late journal lines.
    pub linger: u64,
    /// The latest time seen on any stream.
    cursor: u64,
    pub journal: JournalStats,
    pub proxy: ProxyStats,
    /// Chunk vectors of judged requests, emptied, for the next requests: a stream's
    /// vector would otherwise grow (and be copied) from empty for every request.
    spare_chunks: Vec<Vec<ChunkRec>>,
    /// Chunk texts of judged requests, for the texts of chunks read in place: a
    /// stream's chunks are freed together, and reusing their buffers is cheaper
    /// than the allocator's way back from a burst of frees.
    spare_texts: Vec<String>,
    /// Chunks come in place ([`Folder::push_chunk`]): only then are texts kept for
    /// reuse (chunks of events bring their own).
    texts_in_place: bool,
}

/// Most texts kept for reuse, and the largest kept (bytes): at most 2 MiB.
const SPARE_TEXTS: usize = 8192;
const SPARE_TEXT_CAP: usize = 256;

/// Most emptied chunk vectors kept, and the largest kept (in chunks): memory stays
/// bounded by the requests in flight, not by the longest stream ever read.
const SPARE_CHUNK_VECS: usize = 16;
const SPARE_CHUNK_CAP: usize = 4096;

impl Folder {
    /// Folds one trace event: run-level lines into [`RunInfo`] and the faults, a
    /// request's lines into its record (which is judged once it ends and lingers out).
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
            ev @ Event::Request { .. } => self.open(ev),
            ev @ Event::Response { .. } => self.respond(ev),
            Event::Chunk {
                t,
                id,
                n,
                kind,
                text,
                cid,
                finish,
                raw,
            } => self.add_chunk(&id, |prev, _| ChunkRec {
                t,
                n,
                kind,
                text,
                cid: share(prev, cid.as_deref()),
                finish,
                raw,
            }),
            ev @ Event::End { .. } => self.end(ev, sink),
            Event::Fault(f) => self.faults.push(FaultRec::from(f)),
            Event::RunEnd {
                interrupted,
                reason,
                ..
            } => {
                self.info.complete = true;
                self.info.interrupted = interrupted;
                self.info.reason = reason;
            }
            ev @ Event::ProxyRequest { .. } => self.proxy_leg(ev),
            ev @ Event::ProxyEnd { id: Some(_), .. } => self.proxy_leg_end(ev),
            Event::Target { marker, .. } => self.proxy.marker = marker,
            Event::Heal { .. }
            | Event::Observation { .. }
            | Event::EngineMetrics { .. }
            | Event::Replacement { .. }
            | Event::Exited { .. }
            | Event::ProxyEnd { .. }
            | Event::ProxyRefused { .. }
            | Event::ProxyLocal { .. }
            | Event::ProxyWatch { .. }
            | Event::ProxyListener { .. }
            | Event::Warmed { .. }
            | Event::OwnLoad { .. }
            | Event::TraceStats { .. } => {}
        }
    }

    /// A `request` line (any other event is ignored): the request's record opens,
    /// with the journal lines that came before it.
    #[inline]
    fn open(&mut self, ev: Event) {
        let Event::Request {
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
        } = ev
        else {
            return;
        };
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
            chunks: self.spare_chunks.pop().unwrap_or_default(),
            ..Default::default()
        };
        for (gt, item) in self.early.remove(&id).into_iter().flatten() {
            self.journal.attached += 1;
            attach(&mut r, gt, item);
        }
        self.in_flight.insert(id, r);
    }

    /// A `response` line (any other event is ignored): status and attribution.
    #[inline]
    fn respond(&mut self, ev: Event) {
        let Event::Response {
            t,
            id,
            status,
            worker,
            attempt,
            queue_us,
            ..
        } = ev
        else {
            return;
        };
        if let Some(r) = self.in_flight.get_mut(&id) {
            r.queue_us = queue_us;
            r.status = Some(status);
            r.response_t = Some(t);
            r.worker = worker;
            r.attempt = attempt;
        }
    }

    /// An `end` line (any other event is ignored): the first end of a request in
    /// flight closes it, judged now or once its linger window has passed.
    #[inline]
    fn end(&mut self, ev: Event, sink: &mut dyn RequestSink) {
        let Event::End {
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
        } = ev
        else {
            return;
        };
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

    /// A `proxy_request` line (any other event is ignored): a leg opens on the record
    /// of the request it names; one that names no request of the trace is counted as
    /// traffic of an unknown request on its replica.
    #[inline]
    fn proxy_leg(&mut self, ev: Event) {
        let Event::ProxyRequest {
            t,
            replica,
            conn,
            id,
            by,
            unattributed,
            attempt,
            ..
        } = ev
        else {
            return;
        };
        let st = &mut self.proxy;
        match id.as_deref().and_then(|id| self.in_flight.get_mut(id)) {
            Some(r) => {
                st.legs += 1;
                match by {
                    Some(crate::trace::LegBy::Marker) => st.by_marker += 1,
                    _ => st.by_header += 1,
                }
                r.proxy.push(ProxyLeg {
                    replica,
                    conn,
                    attempt,
                    start: t,
                    ..Default::default()
                });
            }
            None if id
                .as_deref()
                .is_some_and(|id| id.starts_with(crate::wire::marker::CALIBRATE_PREFIX)) =>
            {
                st.calibration += 1;
            }
            None => {
                st.legs += 1;
                if let Some(u) = unattributed {
                    *st.reasons.entry(u).or_default() += 1;
                }
                *st.unknown.entry(replica).or_default() += 1;
            }
        }
    }

    /// A `proxy_end` line with a request id (any other event is ignored): the latest
    /// open leg on that replica and connection ends.
    #[inline]
    fn proxy_leg_end(&mut self, ev: Event) {
        let Event::ProxyEnd {
            t,
            replica,
            conn,
            id: Some(id),
            events,
            first_event,
            end,
            ..
        } = ev
        else {
            return;
        };
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

    /// A chunk line read in place ([`crate::trace::Line::Chunk`]): what [`Folder::push`]
    /// does with its event, with nothing copied for a request the trace does not know.
    pub fn push_chunk(&mut self, c: &ChunkRef<'_>, sink: &mut dyn RequestSink) {
        self.texts_in_place = true;
        self.advance(c.t, sink);
        let own = |s: Option<&str>| s.map(str::to_string);
        self.add_chunk(c.id, |prev, spare| ChunkRec {
            t: c.t,
            n: c.n,
            kind: c.kind,
            text: c.text.map(|s| {
                let mut t = spare.pop().unwrap_or_default();
                t.push_str(s);
                t
            }),
            cid: share(prev, c.cid),
            finish: own(c.finish),
            raw: own(c.raw),
        });
    }

    /// Appends a chunk to its request's record, built from the record's last chunk's
    /// id (to share it), when the request is in flight.
    fn add_chunk(
        &mut self,
        id: &str,
        rec: impl FnOnce(Option<&Arc<str>>, &mut Vec<String>) -> ChunkRec,
    ) {
        if let Some(r) = self.in_flight.get_mut(id) {
            let prev = r.chunks.last().and_then(|c| c.cid.as_ref());
            let c = rec(prev, &mut self.spare_texts);
            r.chunks.push(c);
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
            // No gateway journal for it: the proxy's legs are its attempts, each with
            // the deltas the client had when it started (a leg after the first delta is
            // a hand-over the client's stream may not show).
            if r.attempts.is_empty() && !r.proxy.is_empty() {
                let delivered = |t: u64| r.deltas().filter(|c| c.t < t).count() as u32;
                r.attempts = r
                    .proxy
                    .iter()
                    .map(|l| {
                        let mut a = l.attempt();
                        a.delivered_at_start = delivered(l.start);
                        a
                    })
                    .collect();
            }
            // Lines still to come are later than anything seen so far.
            r.journal_until = if self.journal.ended {
                self.journal.last_t
            } else {
                self.cursor.max(self.journal.last_t)
            };
            sink.request(&r, &self.faults);
            let mut chunks = r.chunks;
            if self.texts_in_place {
                let texts = chunks.iter_mut().filter_map(|c| c.text.take());
                for mut t in texts.filter(|t| t.capacity() <= SPARE_TEXT_CAP) {
                    if self.spare_texts.len() == SPARE_TEXTS {
                        break;
                    }
                    t.clear();
                    self.spare_texts.push(t);
                }
            }
            if self.spare_chunks.len() < SPARE_CHUNK_VECS && chunks.capacity() <= SPARE_CHUNK_CAP {
                chunks.clear();
                self.spare_chunks.push(chunks);
            }
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
