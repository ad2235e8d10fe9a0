//! One proxied connection's state ([`Conn`]: buffers, the open exchanges, the queues
//! each way, the holds) and what every part of its handling does with it: forward
//! bytes each way (into a hold or a queue), resolve a release, report a reached probe
//! point, record an exchange's end.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use tokio::sync::{mpsc, oneshot};

use super::hold::{Hold, settle};
use super::queue::Out;
use crate::proxy::http::{Body, SseScan};
use crate::proxy::probe::{ProxyPoint, ProxySeen, Release};
use crate::proxy::replica::ReplicaProxy;
use crate::proxy::rules::PathRules;
use crate::trace::{Event, LegBy, ProxyEndKind, Unattributed};
use crate::wire::marker::MarkerScan;

/// How long a dropped exchange waits for its replica's connection to end (the replica
/// was killed) before haq resets both sides itself.
const CUT_GRACE: Duration = Duration::from_secs(2);

/// One request/response exchange on the connection.
pub(super) struct Exchange {
    /// The client's request id: the body's marker, else `x-request-id`.
    pub(super) id: Option<String>,
    pub(super) attempt: Option<String>,
    /// Recorded in the trace and counted in flight (an inference request).
    pub(super) recorded: bool,
    /// Its `proxy_request` line is written (once its attribution is settled).
    pub(super) announced: bool,
    /// How `id` was read, or why there is none.
    pub(super) by: Result<LegBy, Unattributed>,
    /// When its head arrived (trace µs).
    pub(super) head_t: u64,
    pub(super) method: String,
    pub(super) path: String,
    pub(super) status: Option<u16>,
    pub(super) events: u32,
    pub(super) first_event: Option<u64>,
    /// The watch on this request, when it is a probe.
    pub(super) probe: Option<(ProxyPoint, mpsc::UnboundedSender<ProxySeen>)>,
    pub(super) held: Option<u32>,
    /// Output deltas seen (watched responses only).
    pub(super) deltas: u32,
}

pub(super) enum ReqState {
    Head,
    /// A body, with the scan for its marker while the exchange's attribution is open.
    Body(Body, Option<MarkerScan>),
    Raw,
}

pub(super) enum RespState {
    Head,
    Body { body: Body, sse: Option<SseScan> },
    Raw,
}

/// How the loop ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Close {
    /// Flush, then FIN both ways.
    Fin,
    /// RST both ways at once.
    Rst,
}

pub(super) struct Conn {
    pub(super) p: Arc<ReplicaProxy>,
    pub(super) id: u64,
    pub(super) rules: PathRules,
    ack: Arc<AtomicU64>,
    pub(super) dbuf: BytesMut,
    pub(super) ubuf: BytesMut,
    pub(super) req: ReqState,
    pub(super) resp: RespState,
    pub(super) xs: VecDeque<Exchange>,
    pub(super) to_up: Out,
    pub(super) to_down: Out,
    pub(super) up_hold: Option<Hold>,
    pub(super) down_hold: Option<Hold>,
    /// Drop the rest of the current response (a held exchange was dropped).
    pub(super) discard_down: bool,
    /// After a drop: when to stop waiting for the replica's side to end.
    pub(super) cut_deadline: Option<Instant>,
    /// Event ends found in the last read: (raw offset, event number, decoded offset).
    pub(super) marks: Vec<(usize, u32, usize)>,
    /// A watched response: its decoded bytes not yet classified (event by event)…
    pub(super) wbuf: Vec<u8>,
    /// …and the raw bytes of its current event, held until the event is classified.
    pub(super) pending: BytesMut,
    /// `up_hold` holds a request head until its body's marker says whether it is a
    /// probe to stop at the `Queued` point.
    pub(super) marker_wait: bool,
    /// The gateway ended its side (FIN or RST) under a blackhole: passed on at the heal.
    pub(super) ended_in_blackhole: Option<Close>,
}

/// The epoch a connection acknowledges on applying `rules`: under a cut rule it
/// acknowledges nothing, and leaves the live set once cut (that is how it applies it).
pub(super) fn acked(rules: &PathRules) -> u64 {
    if rules.cut.is_some() { 0 } else { rules.epoch }
}

impl Conn {
    /// Connection `id` of `p`, under `rules`, acknowledging the epochs it applies in
    /// `ack`; nothing read yet.
    pub(super) fn new(
        p: Arc<ReplicaProxy>,
        id: u64,
        rules: PathRules,
        ack: Arc<AtomicU64>,
    ) -> Conn {
        Conn {
            p,
            id,
            rules,
            ack,
            dbuf: BytesMut::with_capacity(8 * 1024),
            ubuf: BytesMut::with_capacity(16 * 1024),
            req: ReqState::Head,
            resp: RespState::Head,
            xs: VecDeque::new(),
            to_up: Out::default(),
            to_down: Out::default(),
            up_hold: None,
            down_hold: None,
            discard_down: false,
            cut_deadline: None,
            marks: Vec::new(),
            wbuf: Vec::new(),
            pending: BytesMut::new(),
            marker_wait: false,
            ended_in_blackhole: None,
        }
    }

    pub(super) fn apply(&mut self, rules: PathRules) {
        self.ack.store(acked(&rules), Ordering::Release);
        self.rules = rules;
    }

    pub(super) fn now_us(&self) -> u64 {
        self.p.clock.now_us()
    }

    pub(super) fn forward_up(&mut self, now: Instant, b: Bytes) {
        match &mut self.up_hold {
            Some(h) => h.held.extend_from_slice(&b),
            None => self.to_up.push(now + self.rules.delay, b),
        }
    }

    pub(super) fn forward_down(&mut self, now: Instant, b: Bytes) {
        if self.discard_down {
            return;
        }
        match &mut self.down_hold {
            Some(h) => h.held.extend_from_slice(&b),
            None => self.to_down.push(now + self.rules.delay, b),
        }
    }

    /// Applies a release; `up_ended` says whether the replica's side has ended.
    pub(super) fn release_up(&mut self, r: Release, up_ended: bool) {
        let Some((r, h)) = settle(&mut self.up_hold, r, up_ended) else {
            return;
        };
        self.marker_wait = false;
        match r {
            Release::Drop => self.cut_deadline = Some(Instant::now() + CUT_GRACE),
            _ => {
                let now = Instant::now();
                self.to_up.push(now + self.rules.delay, h.held.freeze());
            }
        }
    }

    pub(super) fn release_down(&mut self, r: Release, up_ended: bool) {
        let Some((r, h)) = settle(&mut self.down_hold, r, up_ended) else {
            return;
        };
        match r {
            Release::Drop => {
                self.discard_down = true;
                self.cut_deadline = Some(Instant::now() + CUT_GRACE);
            }
            _ => {
                let now = Instant::now();
                self.to_down.push(now + self.rules.delay, h.held.freeze());
            }
        }
    }

    /// Reports that the probe reached its point here; holds until released.
    pub(super) fn reach(&self, x: &Exchange) -> Option<oneshot::Receiver<Release>> {
        let (_, tx) = x.probe.as_ref()?;
        if !self.p.board.claim(x.id.as_deref()?) {
            return None;
        }
        let (rtx, rrx) = oneshot::channel();
        tx.send(ProxySeen::Reached {
            replica: self.p.name.clone(),
            attempt: x.attempt.clone(),
            t: self.now_us(),
            release: rtx,
        })
        .ok()?;
        Some(rrx)
    }

    /// Writes the exchange's `proxy_request` line (once), stamped with its head's time.
    pub(super) fn announce(&self, x: &mut Exchange) {
        if !x.recorded || x.announced {
            return;
        }
        x.announced = true;
        self.p.trace.emit(Event::ProxyRequest {
            t: x.head_t,
            replica: self.p.name.clone(),
            conn: self.id,
            id: x.id.clone(),
            by: x.by.ok(),
            unattributed: x.by.err(),
            attempt: x.attempt.clone(),
            method: x.method.clone(),
            path: std::mem::take(&mut x.path),
        });
    }

    fn record_end(&self, x: &mut Exchange, end: ProxyEndKind) {
        if !x.recorded {
            return;
        }
        // Ended before its attribution settled (the body was not read to its marker):
        // attributed by its header, if any.
        self.announce(x);
        self.p.in_flight.send_modify(|n| *n = n.saturating_sub(1));
        if end == ProxyEndKind::Completed && x.status.is_some_and(|s| (200..300).contains(&s)) {
            self.p.served.send_modify(|n| *n += 1);
        }
        self.p.trace.emit(Event::ProxyEnd {
            t: self.now_us(),
            replica: self.p.name.clone(),
            conn: self.id,
            id: x.id.clone(),
            attempt: x.attempt.clone(),
            status: x.status,
            events: x.events,
            first_event: x.first_event,
            end,
            held: x.held,
        });
    }

    pub(super) fn complete_front(&mut self, end: ProxyEndKind) {
        if let Some(mut x) = self.xs.pop_front() {
            self.record_end(&mut x, end);
        }
    }

    pub(super) fn end_all(&mut self, end: ProxyEndKind) {
        while let Some(mut x) = self.xs.pop_front() {
            let end = if x.held.is_some() {
                ProxyEndKind::HeldDropped
            } else {
                end
            };
            self.record_end(&mut x, end);
        }
    }
}
