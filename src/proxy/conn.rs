//! One proxied connection: a single task, one event loop over both directions. Bytes
//! are forwarded as read (no re-encoding); the HTTP/SSE framing in [`super::http`]
//! tells where requests, responses and events end, so rules and holds act on exact
//! boundaries. Every await point is a cancel-safe `select!` branch, so a rule change
//! (blackhole, cut) takes effect at once whatever the connection is doing.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot, watch};
use tokio_util::sync::CancellationToken;

use super::http::{self, Body, Framing, SseScan};
use super::{Cut, PathRules, ProxyPoint, ProxySeen, Release, ReplicaProxy, lock};
use crate::trace::{ChunkKind, Event, ProxyEndKind};

/// Bytes queued or held per direction before reading from that side pauses.
const QUEUE_CAP: usize = 1 << 20;
/// How long a dropped exchange waits for its replica's connection to end (the replica
/// was killed) before haq resets both sides itself.
const CUT_GRACE: Duration = Duration::from_secs(2);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Bytes waiting to be written one way, each with the time it may go (delay rule).
#[derive(Default)]
struct Out {
    q: VecDeque<(Instant, Bytes)>,
    bytes: usize,
    /// Token bucket of a throttle rule: (bytes available, last refill).
    bucket: Option<(f64, Instant)>,
}

impl Out {
    fn push(&mut self, due: Instant, b: Bytes) {
        if !b.is_empty() {
            self.bytes += b.len();
            self.q.push_back((due, b));
        }
    }

    /// How many bytes of the front may be written now, or when to look again.
    fn ready(&mut self, now: Instant, rules: &PathRules) -> Result<usize, Option<Instant>> {
        let Some((due, b)) = self.q.front() else {
            return Err(None);
        };
        if rules.blackhole {
            return Err(None);
        }
        if *due > now {
            return Err(Some(*due));
        }
        let Some(rate) = rules.throttle else {
            self.bucket = None;
            return Ok(b.len());
        };
        let rate = rate.max(1) as f64;
        let burst = (rate / 20.0).max(256.0);
        let (tokens, last) = self.bucket.get_or_insert((burst, now));
        *tokens = (*tokens + now.duration_since(*last).as_secs_f64() * rate).min(burst);
        *last = now;
        if *tokens >= 1.0 {
            Ok((*tokens as usize).min(b.len()))
        } else {
            Err(Some(now + Duration::from_secs_f64((1.0 - *tokens) / rate)))
        }
    }

    fn front(&self, n: usize) -> &[u8] {
        self.q
            .front()
            .map_or(&[][..], |(_, b)| &b[..n.min(b.len())])
    }

    fn advance(&mut self, n: usize) {
        if let Some((_, b)) = self.q.front_mut() {
            b.advance(n);
            self.bytes -= n;
            if b.is_empty() {
                self.q.pop_front();
            }
        }
        if let Some((tokens, _)) = &mut self.bucket {
            *tokens -= n as f64;
        }
    }
}

/// How long a [`Release::Auto`] waits for the replica's side to end.
const AUTO_GRACE: Duration = Duration::from_millis(300);

/// Bytes held back at a probe point.
struct Hold {
    held: BytesMut,
    /// Set once the point was reached and reported.
    release: Option<oneshot::Receiver<Release>>,
    /// After [`Release::Auto`]: deliver at this time unless the replica's side ends.
    auto_until: Option<Instant>,
}

impl Hold {
    fn new(release: Option<oneshot::Receiver<Release>>) -> Hold {
        Hold {
            held: BytesMut::new(),
            release,
            auto_until: None,
        }
    }
}

/// One request/response exchange on the connection.
struct Exchange {
    id: Option<String>,
    attempt: Option<String>,
    /// Recorded in the trace and counted in flight (an inference request).
    recorded: bool,
    method: String,
    status: Option<u16>,
    events: u32,
    first_event: Option<u64>,
    /// The watch on this request, when it is a probe.
    probe: Option<(ProxyPoint, mpsc::UnboundedSender<ProxySeen>)>,
    held: Option<u32>,
    /// Output deltas seen (watched responses only).
    deltas: u32,
}

enum ReqState {
    Head,
    Body(Body),
    Raw,
}

enum RespState {
    Head,
    Body { body: Body, sse: Option<SseScan> },
    Raw,
}

/// How the loop ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Close {
    /// Flush, then FIN both ways.
    Fin,
    /// RST both ways at once.
    Rst,
}

struct Conn {
    p: Arc<ReplicaProxy>,
    id: u64,
    rules: PathRules,
    ack: Arc<AtomicU64>,
    dbuf: BytesMut,
    ubuf: BytesMut,
    req: ReqState,
    resp: RespState,
    xs: VecDeque<Exchange>,
    to_up: Out,
    to_down: Out,
    up_hold: Option<Hold>,
    down_hold: Option<Hold>,
    /// Drop the rest of the current response (a held exchange was dropped).
    discard_down: bool,
    /// After a drop: when to stop waiting for the replica's side to end.
    cut_deadline: Option<Instant>,
    /// Event ends found in the last read: (raw offset, event number, decoded offset).
    marks: Vec<(usize, u32, usize)>,
    /// A watched response: its decoded bytes not yet classified (event by event)…
    wbuf: Vec<u8>,
    /// …and the raw bytes of its current event, held until the event is classified.
    pending: BytesMut,
}

/// Removes the connection from the live set when it ends, however it ends.
struct Registered(Arc<ReplicaProxy>, u64);
impl Drop for Registered {
    fn drop(&mut self) {
        lock(&self.0.conns).remove(&self.1);
    }
}

pub(super) async fn serve(p: Arc<ReplicaProxy>, mut down: TcpStream, stop: CancellationToken) {
    let id = p.next_conn.fetch_add(1, Ordering::Relaxed);
    let mut rules_rx = p.rules_tx.subscribe();
    let rules = rules_rx.borrow_and_update().clone();
    let ack = Arc::new(AtomicU64::new(acked(&rules)));
    lock(&p.conns).insert(id, ack.clone());
    let _reg = Registered(p.clone(), id);
    let mut c = Conn {
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
    };
    // Until the first request head is in, there is no upstream connection: a request
    // to a dead replica is still seen (and attributed) before it fails.
    let raw = loop {
        if let Some(cut) = c.rules.cut {
            return close_one(&down, cut);
        }
        match http::parse_request(&c.dbuf) {
            Ok(Some(_)) => break false,
            Err(_) => break true,
            Ok(None) => {}
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            r = rules_rx.changed() => {
                if r.is_err() { return; }
                c.apply(rules_rx.borrow_and_update().clone());
            }
            r = down.read_buf(&mut c.dbuf), if !c.rules.blackhole => match r {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    };
    if raw {
        c.req = ReqState::Raw;
        c.resp = RespState::Raw;
    }
    let up = match c.connect(&stop).await {
        Some(u) => u,
        None => {
            c.on_down(Instant::now());
            c.end_all(ProxyEndKind::UpstreamRefused);
            // The next connection is refused by the kernel, as without haq.
            c.p.check_dead().await;
            return close_one(&down, Cut::Reset);
        }
    };
    c.run(down, up, rules_rx, stop).await;
}

/// The epoch a connection acknowledges on applying `rules`: under a cut rule it
/// acknowledges nothing, and leaves the live set once cut (that is how it applies it).
fn acked(rules: &PathRules) -> u64 {
    if rules.cut.is_some() { 0 } else { rules.epoch }
}

fn close_one(s: &TcpStream, cut: Cut) {
    if cut == Cut::Reset {
        let _ = s.set_zero_linger();
    }
}

impl Conn {
    fn apply(&mut self, rules: PathRules) {
        self.ack.store(acked(&rules), Ordering::Release);
        self.rules = rules;
    }

    fn now_us(&self) -> u64 {
        self.p.clock.now_us()
    }

    async fn connect(&self, stop: &CancellationToken) -> Option<TcpStream> {
        let addr = self.p.upstream()?;
        let s = tokio::select! {
            r = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr)) => r.ok()?.ok()?,
            _ = stop.cancelled() => return None,
        };
        let _ = s.set_nodelay(true);
        Some(s)
    }

    async fn run(
        &mut self,
        mut down: TcpStream,
        mut up: TcpStream,
        mut rules_rx: watch::Receiver<PathRules>,
        stop: CancellationToken,
    ) {
        // Bytes read before the upstream existed.
        if !self.dbuf.is_empty() {
            self.on_down(Instant::now());
        }
        let mut down_eof = false;
        let mut up_eof = false;
        let close = {
            let (mut dr, mut dw) = down.split();
            let (mut ur, mut uw) = up.split();
            loop {
                if let Some(cut) = self.rules.cut {
                    self.end_all(ProxyEndKind::Cut);
                    break match cut {
                        Cut::Reset => Close::Rst,
                        Cut::Close => Close::Fin,
                    };
                }
                let now = Instant::now();
                let up_ready = self.to_up.ready(now, &self.rules);
                let down_ready = self.to_down.ready(now, &self.rules);
                // Both sides ended and nothing left to write: done.
                if up_eof && self.to_down.q.is_empty() && self.down_hold.is_none() {
                    break if self.xs.is_empty() {
                        Close::Fin
                    } else {
                        self.end_upstream(ProxyEndKind::UpstreamClosed)
                    };
                }
                if down_eof
                    && self.to_up.q.is_empty()
                    && self.up_hold.is_none()
                    && self.xs.is_empty()
                {
                    break Close::Fin;
                }
                if let Some(d) = self.cut_deadline
                    && now >= d
                {
                    self.end_all(ProxyEndKind::HeldDropped);
                    break Close::Rst;
                }
                // An automatic release: the replica's side ended (drop) or it did not
                // within the grace (deliver).
                let r = if up_eof {
                    Release::Drop
                } else {
                    Release::Forward
                };
                if self
                    .up_hold
                    .as_ref()
                    .and_then(|h| h.auto_until)
                    .is_some_and(|u| up_eof || now >= u)
                {
                    self.release_up(r, up_eof);
                }
                if self
                    .down_hold
                    .as_ref()
                    .and_then(|h| h.auto_until)
                    .is_some_and(|u| up_eof || now >= u)
                {
                    self.release_down(r, up_eof);
                }
                let auto = [&self.up_hold, &self.down_hold]
                    .into_iter()
                    .filter_map(|h| h.as_ref().and_then(|h| h.auto_until))
                    .min();
                let wake = [
                    up_ready.err().flatten(),
                    down_ready.err().flatten(),
                    self.cut_deadline,
                    auto,
                ]
                .into_iter()
                .flatten()
                .min();
                let bh = self.rules.blackhole;
                let can_read_down = !bh && !down_eof && self.to_up.bytes < QUEUE_CAP;
                let can_read_up = !bh
                    && !up_eof
                    && self.to_down.bytes < QUEUE_CAP
                    && self
                        .down_hold
                        .as_ref()
                        .is_none_or(|h| h.held.len() < QUEUE_CAP);
                let up_n = up_ready.unwrap_or(0);
                let down_n = down_ready.unwrap_or(0);
                tokio::select! {
                    biased;
                    _ = stop.cancelled() => {
                        self.end_all(ProxyEndKind::Stopped);
                        break Close::Rst;
                    }
                    r = rules_rx.changed() => {
                        if r.is_err() {
                            self.end_all(ProxyEndKind::Stopped);
                            break Close::Rst;
                        }
                        self.apply(rules_rx.borrow_and_update().clone());
                    }
                    r = released(&mut self.up_hold) => self.release_up(r, up_eof),
                    r = released(&mut self.down_hold) => self.release_down(r, up_eof),
                    r = uw.write(self.to_up.front(up_n)), if up_n > 0 => match r {
                        Ok(n) => self.to_up.advance(n),
                        Err(_) => break self.end_upstream(ProxyEndKind::UpstreamReset),
                    },
                    r = dw.write(self.to_down.front(down_n)), if down_n > 0 => match r {
                        Ok(n) => self.to_down.advance(n),
                        Err(_) => {
                            self.end_all(ProxyEndKind::DownstreamReset);
                            break Close::Rst;
                        }
                    },
                    r = ur.read_buf(&mut self.ubuf), if can_read_up => match r {
                        Ok(0) => {
                            up_eof = true;
                            // A replica that died makes its address refuse at once,
                            // before the gateway learns of the broken connection.
                            self.p.check_dead().await;
                            // A body that runs until close ends here, complete.
                            if matches!(self.resp, RespState::Body { ref body, .. } if body.until_close()) {
                                self.complete_front(ProxyEndKind::Completed);
                                self.resp = RespState::Head;
                            }
                        }
                        Ok(_) => self.on_up(Instant::now()),
                        Err(_) => {
                            // Deliver what the replica sent before it failed, then reset.
                            self.p.check_dead().await;
                            self.end_upstream(ProxyEndKind::UpstreamReset);
                            self.flush_then_rst(&mut dw).await;
                            break Close::Rst;
                        }
                    },
                    r = dr.read_buf(&mut self.dbuf), if can_read_down => match r {
                        Ok(0) => {
                            down_eof = true;
                            self.up_hold = None;
                            self.end_all(ProxyEndKind::DownstreamClosed);
                            let _ = uw.shutdown().await;
                        }
                        Ok(_) => self.on_down(Instant::now()),
                        Err(_) => {
                            self.end_all(ProxyEndKind::DownstreamReset);
                            break Close::Rst;
                        }
                    },
                    _ = sleep_until(wake), if wake.is_some() => {}
                }
            }
        };
        match close {
            Close::Rst => {
                let _ = down.set_zero_linger();
                let _ = up.set_zero_linger();
            }
            Close::Fin => {
                let _ = down.shutdown().await;
                let _ = up.shutdown().await;
            }
        }
    }

    /// The replica's side failed: flush what it sent before (it did send it), then the
    /// caller resets the gateway's side, as the replica's own reset would have.
    async fn flush_then_rst(&mut self, dw: &mut tokio::net::tcp::WriteHalf<'_>) {
        if self.rules.blackhole || self.discard_down {
            return;
        }
        while let Some((_, b)) = self.to_down.q.pop_front() {
            if dw.write_all(&b).await.is_err() {
                return;
            }
        }
    }

    /// Ends the open exchanges because the replica's side ended; the gateway's side is
    /// closed the same way (FIN for FIN, RST for a reset).
    fn end_upstream(&mut self, kind: ProxyEndKind) -> Close {
        let recorded = if self.discard_down || self.cut_deadline.is_some() {
            ProxyEndKind::HeldDropped
        } else {
            kind
        };
        self.end_all(recorded);
        if kind == ProxyEndKind::UpstreamClosed {
            Close::Fin
        } else {
            Close::Rst
        }
    }

    fn forward_up(&mut self, now: Instant, b: Bytes) {
        match &mut self.up_hold {
            Some(h) => h.held.extend_from_slice(&b),
            None => self.to_up.push(now + self.rules.delay, b),
        }
    }

    fn forward_down(&mut self, now: Instant, b: Bytes) {
        if self.discard_down {
            return;
        }
        match &mut self.down_hold {
            Some(h) => h.held.extend_from_slice(&b),
            None => self.to_down.push(now + self.rules.delay, b),
        }
    }

    /// Applies a release; `up_ended` says whether the replica's side has ended.
    fn release_up(&mut self, r: Release, up_ended: bool) {
        let Some((r, h)) = settle(&mut self.up_hold, r, up_ended) else {
            return;
        };
        match r {
            Release::Drop => self.cut_deadline = Some(Instant::now() + CUT_GRACE),
            _ => {
                let now = Instant::now();
                self.to_up.push(now + self.rules.delay, h.held.freeze());
            }
        }
    }

    fn release_down(&mut self, r: Release, up_ended: bool) {
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
    fn reach(&self, x: &Exchange) -> Option<oneshot::Receiver<Release>> {
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

    /// Request bytes from the gateway.
    fn on_down(&mut self, now: Instant) {
        loop {
            if self.dbuf.is_empty() {
                return;
            }
            match &mut self.req {
                ReqState::Raw => {
                    let b = self.dbuf.split().freeze();
                    self.forward_up(now, b);
                }
                ReqState::Head => match http::parse_request(&self.dbuf) {
                    Ok(None) => return,
                    Err(_) => self.req = ReqState::Raw,
                    Ok(Some(h)) => {
                        let x = self.begin(&h);
                        let queued = matches!(x.probe, Some((ProxyPoint::Queued, _)));
                        if queued && let Some(rx) = self.reach(&x) {
                            self.up_hold = Some(Hold::new(Some(rx)));
                        }
                        self.xs.push_back(x);
                        let head = self.dbuf.split_to(h.len).freeze();
                        self.forward_up(now, head);
                        if h.framing == Framing::Empty {
                            self.request_sent();
                        } else {
                            self.req = ReqState::Body(Body::new(h.framing));
                        }
                    }
                },
                ReqState::Body(body) => match body.feed(&self.dbuf, |_, _| {}) {
                    Err(_) => self.req = ReqState::Raw,
                    Ok(None) => {
                        let b = self.dbuf.split().freeze();
                        self.forward_up(now, b);
                        return;
                    }
                    Ok(Some(n)) => {
                        let b = self.dbuf.split_to(n).freeze();
                        self.forward_up(now, b);
                        self.req = ReqState::Head;
                        self.request_sent();
                    }
                },
            }
        }
    }

    /// A new exchange from its request head: attributed, recorded, watched.
    fn begin(&mut self, h: &http::RequestHead) -> Exchange {
        // Inference requests only: not health checks, metrics, lease renewals.
        let recorded = h.method.eq_ignore_ascii_case("POST") && h.path.starts_with("/v1/");
        let t = self.now_us();
        let probe = self.p.board.hit(h.request_id.as_deref());
        if let Some((_, tx)) = &probe {
            let _ = tx.send(ProxySeen::Routed {
                replica: self.p.name.clone(),
                attempt: h.attempt.clone(),
                t,
            });
        }
        if recorded {
            self.p.in_flight.send_modify(|n| *n += 1);
            self.p.trace.emit(Event::ProxyRequest {
                t,
                replica: self.p.name.clone(),
                conn: self.id,
                id: h.request_id.clone(),
                attempt: h.attempt.clone(),
                method: h.method.clone(),
                path: h.path.clone(),
            });
        } else {
            self.p.other_requests.fetch_add(1, Ordering::Relaxed);
        }
        Exchange {
            id: h.request_id.clone(),
            attempt: h.attempt.clone(),
            recorded,
            method: h.method.clone(),
            status: None,
            events: 0,
            first_event: None,
            probe,
            held: None,
            deltas: 0,
        }
    }

    /// The last request is now wholly on its way to the replica.
    fn request_sent(&mut self) {
        let Some(x) = self.xs.back() else { return };
        if matches!(x.probe, Some((ProxyPoint::Prefill, _)))
            && let Some(rx) = self.reach(x)
        {
            self.down_hold = Some(Hold::new(Some(rx)));
        }
    }

    /// The point a watched response is stopped at, while it has not been reached.
    fn watch_point(&self) -> Option<ProxyPoint> {
        let x = self.xs.front()?;
        match x.probe {
            Some((p @ (ProxyPoint::Event(_) | ProxyPoint::ToolCall), _))
                if x.held.is_none() && self.down_hold.is_none() =>
            {
                Some(p)
            }
            _ => None,
        }
    }

    /// Response bytes from the replica.
    fn on_up(&mut self, now: Instant) {
        loop {
            if self.ubuf.is_empty() {
                return;
            }
            match &mut self.resp {
                RespState::Raw => {
                    let b = self.ubuf.split().freeze();
                    self.forward_down(now, b);
                }
                RespState::Head => {
                    let method = self.xs.front().map_or("GET", |x| x.method.as_str());
                    match http::parse_response(&self.ubuf, method) {
                        Ok(None) => return,
                        Err(_) => self.resp = RespState::Raw,
                        Ok(Some(h)) => {
                            let head = self.ubuf.split_to(h.len).freeze();
                            self.forward_down(now, head);
                            if h.status == 101 {
                                self.req = ReqState::Raw;
                                self.resp = RespState::Raw;
                                continue;
                            }
                            if h.status < 200 {
                                continue;
                            }
                            if let Some(x) = self.xs.front_mut() {
                                x.status = Some(h.status);
                            }
                            if h.framing == Framing::Empty {
                                self.complete_front(ProxyEndKind::Completed);
                                continue;
                            }
                            self.resp = RespState::Body {
                                body: Body::new(h.framing),
                                sse: h.sse.then(SseScan::default),
                            };
                            self.wbuf.clear();
                        }
                    }
                }
                RespState::Body { .. } => {
                    if self.on_body(now) {
                        return;
                    }
                }
            }
        }
    }

    /// Walks response body bytes; returns true when it needs more bytes. A watched
    /// response passes event by event: each is held until it is complete and
    /// classified, then delivered, or — at the watched point — kept back while the fault
    /// is applied.
    fn on_body(&mut self, now: Instant) -> bool {
        let watch = self.watch_point();
        let RespState::Body { body, sse } = &mut self.resp else {
            return true;
        };
        let (marks, wbuf) = (&mut self.marks, &mut self.wbuf);
        marks.clear();
        let r = body.feed(&self.ubuf, |d, off| {
            if let Some(s) = sse.as_mut() {
                let base = wbuf.len();
                if watch.is_some() {
                    wbuf.extend_from_slice(d);
                }
                s.feed(d, |e, n| marks.push((off + e, n, base + e)));
            }
        });
        let (end, done) = match r {
            Err(_) => {
                self.resp = RespState::Raw;
                return false;
            }
            Ok(Some(n)) => (n, true),
            Ok(None) => (self.ubuf.len(), false),
        };
        let chunked = matches!(self.resp, RespState::Body { ref body, .. } if body.chunked());
        let (mut taken, mut dec_from) = (0, 0);
        for i in 0..self.marks.len() {
            let (mut m, n, dec) = self.marks[i];
            // An event that ends its chunk takes the chunk's CR LF with it.
            if chunked && self.ubuf[m - taken..].starts_with(b"\r\n") && m + 2 <= end {
                m += 2;
            }
            let seg = self.ubuf.split_to(m - taken).freeze();
            taken = m;
            let t = self.now_us();
            if let Some(x) = self.xs.front_mut() {
                x.events = n;
                x.first_event.get_or_insert(t);
            }
            match watch {
                Some(point) if self.down_hold.is_none() => {
                    self.pending.extend_from_slice(&seg);
                    let kind = event_kind(&self.wbuf[dec_from..dec]);
                    self.on_event(now, point, n, kind);
                }
                _ => self.forward_down(now, seg),
            }
            dec_from = dec;
        }
        if watch.is_some() {
            self.wbuf.drain(..dec_from);
        }
        let seg = self.ubuf.split_to(end - taken).freeze();
        if watch.is_some() && self.down_hold.is_none() {
            self.pending.extend_from_slice(&seg);
        } else {
            self.forward_down(now, seg);
        }
        if done {
            // The point never came: what was waiting for classification goes on.
            let rest = self.pending.split().freeze();
            self.forward_down(now, rest);
            self.complete_front(ProxyEndKind::Completed);
            self.resp = RespState::Head;
        }
        !done
    }

    /// A watched response's event `n` is complete: deliver it, or stop here.
    fn on_event(&mut self, now: Instant, point: ProxyPoint, n: u32, kind: ChunkKind) {
        let Some(x) = self.xs.front_mut() else { return };
        if kind.is_delta() {
            x.deltas += 1;
        }
        let here = match point {
            ProxyPoint::Event(k) => kind.is_delta() && x.deltas == k,
            ProxyPoint::ToolCall => kind == ChunkKind::ToolCall,
            _ => false,
        };
        let rx = if here {
            self.xs.front().and_then(|x| self.reach(x))
        } else {
            None
        };
        match rx {
            Some(rx) => {
                if let Some(x) = self.xs.front_mut() {
                    x.held = Some(n);
                }
                self.down_hold = Some(Hold {
                    held: self.pending.split(),
                    release: Some(rx),
                    auto_until: None,
                });
            }
            None => {
                let b = self.pending.split().freeze();
                self.forward_down(now, b);
            }
        }
    }

    fn record_end(&self, x: &Exchange, end: ProxyEndKind) {
        if !x.recorded {
            return;
        }
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

    fn complete_front(&mut self, end: ProxyEndKind) {
        if let Some(x) = self.xs.pop_front() {
            self.record_end(&x, end);
        }
    }

    fn end_all(&mut self, end: ProxyEndKind) {
        while let Some(x) = self.xs.pop_front() {
            let end = if x.held.is_some() {
                ProxyEndKind::HeldDropped
            } else {
                end
            };
            self.record_end(&x, end);
        }
    }
}

/// Resolves a release of `hold`: what to do with the bytes it held, or `None` while
/// an automatic release waits to see whether the replica's side ends.
fn settle(hold: &mut Option<Hold>, r: Release, up_ended: bool) -> Option<(Release, Hold)> {
    let r = match r {
        Release::Auto if up_ended => Release::Drop,
        Release::Auto => {
            if let Some(h) = hold {
                h.release = None;
                h.auto_until = Some(Instant::now() + AUTO_GRACE);
            }
            return None;
        }
        r => r,
    };
    hold.take().map(|h| (r, h))
}

/// The kind of one SSE event block (its `data:` lines), as the client classifies it.
fn event_kind(block: &[u8]) -> ChunkKind {
    let text = String::from_utf8_lossy(block);
    let data: Vec<&str> = text
        .lines()
        .filter_map(|l| l.trim_end_matches('\r').strip_prefix("data:"))
        .map(|d| d.strip_prefix(' ').unwrap_or(d))
        .collect();
    if data.is_empty() {
        return ChunkKind::Other;
    }
    crate::wire::chunk::classify(&data.join("\n"))
        .kind
        .unwrap_or(ChunkKind::Other)
}

async fn released(h: &mut Option<Hold>) -> Release {
    match h.as_mut().and_then(|h| h.release.as_mut()) {
        // A watcher that went away without a word lets the bytes through.
        Some(rx) => rx.await.unwrap_or(Release::Forward),
        None => std::future::pending().await,
    }
}

async fn sleep_until(t: Option<Instant>) {
    match t {
        Some(t) => tokio::time::sleep_until(t.into()).await,
        None => std::future::pending().await,
    }
}
