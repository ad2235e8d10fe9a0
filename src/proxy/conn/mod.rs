//! One proxied connection: a single task, one event loop over both directions. Bytes
//! are forwarded as read (no re-encoding); the HTTP/SSE framing in
//! [`crate::proxy::http`] tells where requests, responses and events end, so rules and
//! holds act on exact boundaries. Every await point is a cancel-safe `select!` branch,
//! so a rule change (blackhole, cut) takes effect at once whatever the connection is
//! doing.
//!
//! This file owns the connection's life (registration, the first request head, the
//! upstream connect) and the loop; [`state`] holds what the loop works on,
//! [`request`] and [`response`] read each direction's bytes (the response side counts
//! the events), [`queue`] paces the writes, [`hold`] keeps what a probe point held.

mod hold;
mod queue;
mod request;
mod response;
mod state;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use self::hold::{Hold, released};
use self::state::{Close, Conn, ReqState, RespState, acked};
use super::http;
use super::probe::{Release, lock};
use super::replica::ReplicaProxy;
use super::rules::{Cut, PathRules};
use crate::trace::{Event, ProxyEndKind, RefusedHow};

/// Bytes queued or held per direction before reading from that side pauses.
const QUEUE_CAP: usize = 1 << 20;
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

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
    let mut c = Conn::new(p, id, rules, ack);
    // The gateway connected, so does the proxy, at once: the replica sees a connection
    // when the gateway opens one, as without haq. One that cannot be reached is dead
    // (or gone): the gateway's connection is reset at once, unread — the closest an
    // accepted connection comes to the refusal it would have met — and recorded as a
    // connect attempt to the dead endpoint; the listener closes. Under a cut or a
    // blackhole the path is cut: the connect waits for the first request (below).
    let mut up = None;
    if c.rules.cut.is_none() && !c.rules.blackhole {
        match c.connect(&stop).await {
            None => return,
            Some(Ok(u)) => up = Some(u),
            Some(Err(e)) if c.p.local_failure(&e, "connect") => {
                return close_one(&down, Cut::Reset);
            }
            Some(Err(_)) => {
                c.unreached(&down);
                c.p.check_dead().await;
                return close_one(&down, Cut::Reset);
            }
        }
    }
    // Under a blackhole the gateway's requests are still read as they come (up to the
    // queue's cap, as a socket buffer would take them) and recorded then — the gateway
    // routed them at that time — but go nowhere until the heal.
    let raw = loop {
        if let Some(cut) = c.rules.cut {
            c.end_all(ProxyEndKind::Cut);
            return close_one(&down, cut);
        }
        if !c.rules.blackhole {
            if !c.xs.is_empty() || !c.to_up.q.is_empty() {
                break false;
            }
            match http::parse_request(&c.dbuf) {
                Ok(Some(_)) => break false,
                Err(_) => break true,
                Ok(None) => {}
            }
        }
        let up_open = up.is_some() && !c.rules.blackhole;
        let room = c.to_up.bytes < QUEUE_CAP && c.dbuf.len() < QUEUE_CAP;
        tokio::select! {
            _ = stop.cancelled() => return,
            r = rules_rx.changed() => {
                if r.is_err() { return; }
                c.apply(rules_rx.borrow_and_update().clone());
            }
            r = down.read_buf(&mut c.dbuf), if room => match r {
                Ok(0) | Err(_) => {
                    // The gateway gave up on a connection the cut path never carried.
                    c.end_all(ProxyEndKind::DownstreamClosed);
                    return;
                }
                Ok(_) if c.rules.blackhole => c.on_down(Instant::now()),
                Ok(_) => {}
            },
            // The replica spoke first (not HTTP: relayed as is) or ended the idle
            // connection, which the gateway then sees ended the same way.
            r = read_some(up.as_mut(), &mut c.ubuf), if up_open => match r {
                Ok(0) => {
                    c.p.check_dead().await;
                    return;
                }
                Err(_) => {
                    c.p.check_dead().await;
                    return close_one(&down, Cut::Reset);
                }
                Ok(_) => break true,
            },
        }
    };
    if raw {
        c.req = ReqState::Raw;
        c.resp = RespState::Raw;
    }
    let up = match up {
        Some(u) => u,
        None => match c.connect(&stop).await {
            Some(Ok(u)) => u,
            Some(Err(e)) if c.p.local_failure(&e, "connect") => {
                c.on_down(Instant::now());
                c.end_all(ProxyEndKind::Local);
                return close_one(&down, Cut::Reset);
            }
            _ => {
                c.on_down(Instant::now());
                c.end_all(ProxyEndKind::UpstreamRefused);
                // The next connection is refused by the kernel, as without haq.
                c.p.check_dead().await;
                return close_one(&down, Cut::Reset);
            }
        },
    };
    c.run(down, up, rules_rx, stop).await;
}

async fn read_some(
    up: Option<&mut TcpStream>,
    buf: &mut bytes::BytesMut,
) -> std::io::Result<usize> {
    match up {
        Some(u) => u.read_buf(buf).await,
        None => std::future::pending().await,
    }
}

fn close_one(s: &TcpStream, cut: Cut) {
    if cut == Cut::Reset {
        let _ = s.set_zero_linger();
    }
}

impl Conn {
    /// Connects to the replica; `None` when the proxies stop meanwhile.
    async fn connect(&self, stop: &CancellationToken) -> Option<std::io::Result<TcpStream>> {
        let Some(addr) = self.p.upstream() else {
            return Some(Err(std::io::ErrorKind::NotConnected.into()));
        };
        let r = tokio::select! {
            r = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr)) => r,
            _ = stop.cancelled() => return None,
        };
        let s = match r {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => return Some(Err(e)),
            Err(_) => return Some(Err(std::io::ErrorKind::TimedOut.into())),
        };
        let _ = s.set_nodelay(true);
        Some(Ok(s))
    }

    /// A connection accepted for a replica that could not be reached: a connect
    /// attempt to a dead endpoint, reset before anything was read.
    fn unreached(&self, down: &TcpStream) {
        self.p.trace.emit(Event::ProxyRefused {
            t: self.now_us(),
            replica: self.p.name.clone(),
            peer: down.peer_addr().map(|a| a.to_string()).unwrap_or_default(),
            how: RefusedHow::Reset,
        });
    }

    /// The loop: each turn ends the connection if it is done, applies automatic
    /// releases, then waits on whichever of the rules, the releases, the writes each
    /// way, the reads each way and the next timer comes first.
    async fn run(
        &mut self,
        mut down: TcpStream,
        mut up: TcpStream,
        mut rules_rx: watch::Receiver<PathRules>,
        stop: CancellationToken,
    ) {
        // Bytes read before the loop: the first request, or what the replica said first.
        if !self.dbuf.is_empty() {
            self.on_down(Instant::now());
        }
        if !self.ubuf.is_empty() {
            self.on_up(Instant::now());
        }
        let mut down_eof = false;
        let mut up_eof = false;
        let close = {
            let (mut dr, mut dw) = down.split();
            let (mut ur, mut uw) = up.split();
            loop {
                if let Some(close) = self.cut_by_rule() {
                    break close;
                }
                if let Some(close) = self.end_after_blackhole(&mut uw).await {
                    break close;
                }
                let now = Instant::now();
                // First: bytes an automatic release lets through join the queues
                // before the writes are budgeted (else nothing may wake the loop to
                // write them: a replica that is done sends nothing more).
                self.auto_release(now, up_eof);
                let up_ready = self.to_up.ready(now, &self.rules);
                let down_ready = self.to_down.ready(now, &self.rules);
                if let Some(close) = self.finished(now, up_eof, down_eof) {
                    break close;
                }
                let wake = self.wake(&up_ready, &down_ready);
                let can_read_down = self.can_read_down(down_eof);
                let can_read_up = self.can_read_up(up_eof);
                let up_n = up_ready.unwrap_or(0);
                let down_n = down_ready.unwrap_or(0);
                tokio::select! {
                    biased;
                    _ = stop.cancelled() => break self.reset_all(ProxyEndKind::Stopped),
                    r = rules_rx.changed() => {
                        if r.is_err() {
                            break self.reset_all(ProxyEndKind::Stopped);
                        }
                        self.apply(rules_rx.borrow_and_update().clone());
                    }
                    r = released(&mut self.up_hold) => self.release_up(r, up_eof),
                    r = released(&mut self.down_hold) => self.release_down(r, up_eof),
                    r = uw.write(self.to_up.front(up_n)), if up_n > 0 => match r {
                        Ok(n) => self.to_up.advance(n),
                        Err(_) => {
                            self.p.check_dead().await;
                            break self.end_upstream(ProxyEndKind::UpstreamReset);
                        }
                    },
                    r = dw.write(self.to_down.front(down_n)), if down_n > 0 => match r {
                        Ok(n) => self.to_down.advance(n),
                        Err(_) => break self.reset_all(ProxyEndKind::DownstreamReset),
                    },
                    r = ur.read_buf(&mut self.ubuf), if can_read_up => match r {
                        Ok(0) => {
                            up_eof = true;
                            self.upstream_eof().await;
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
                            self.downstream_eof(&mut uw).await;
                        }
                        Ok(_) => self.on_down(Instant::now()),
                        Err(_) if self.rules.blackhole => {
                            down_eof = true;
                            self.end_all(ProxyEndKind::DownstreamReset);
                            self.ended_in_blackhole = Some(Close::Rst);
                        }
                        Err(_) => break self.reset_all(ProxyEndKind::DownstreamReset),
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

    /// A cut rule in force ends every exchange and closes as it says.
    #[inline]
    fn cut_by_rule(&mut self) -> Option<Close> {
        let cut = self.rules.cut?;
        self.end_all(ProxyEndKind::Cut);
        Some(match cut {
            Cut::Reset => Close::Rst,
            Cut::Close => Close::Fin,
        })
    }

    /// How the loop ends when it is done: both sides ended and nothing is left to
    /// write, or a dropped exchange's replica did not end within the grace.
    #[inline]
    fn finished(&mut self, now: Instant, up_eof: bool, down_eof: bool) -> Option<Close> {
        if up_eof && self.to_down.q.is_empty() && self.down_hold.is_none() {
            return Some(if self.xs.is_empty() {
                Close::Fin
            } else {
                self.end_upstream(ProxyEndKind::UpstreamClosed)
            });
        }
        if down_eof
            && !self.rules.blackhole
            && self.ended_in_blackhole.is_none()
            && self.to_up.q.is_empty()
            && self.up_hold.is_none()
            && self.xs.is_empty()
        {
            return Some(Close::Fin);
        }
        if let Some(d) = self.cut_deadline
            && now >= d
        {
            return Some(self.reset_all(ProxyEndKind::HeldDropped));
        }
        None
    }

    /// An automatic release: the replica's side ended (drop) or it did not within the
    /// grace (deliver).
    #[inline]
    fn auto_release(&mut self, now: Instant, up_eof: bool) {
        let r = if up_eof {
            Release::Drop
        } else {
            Release::Forward
        };
        let due = |h: &Option<Hold>| {
            h.as_ref()
                .and_then(|h| h.auto_until)
                .is_some_and(|u| up_eof || now >= u)
        };
        if due(&self.up_hold) {
            self.release_up(r, up_eof);
        }
        if due(&self.down_hold) {
            self.release_down(r, up_eof);
        }
    }

    /// When the loop must look again with nothing read or written: the next paced
    /// write either way, the drop's grace, an automatic release's grace.
    #[inline]
    fn wake(
        &self,
        up_ready: &Result<usize, Option<Instant>>,
        down_ready: &Result<usize, Option<Instant>>,
    ) -> Option<Instant> {
        let auto = [&self.up_hold, &self.down_hold]
            .into_iter()
            .filter_map(|h| h.as_ref().and_then(|h| h.auto_until))
            .min();
        [
            up_ready.err().flatten(),
            down_ready.err().flatten(),
            self.cut_deadline,
            auto,
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Whether to read the gateway's side: not once it ended, not while the bytes
    /// queued for the replica are at the cap. Also under a blackhole: what the gateway
    /// sends is recorded when it comes and queued until the heal.
    #[inline]
    fn can_read_down(&self, down_eof: bool) -> bool {
        !down_eof && self.to_up.bytes < QUEUE_CAP
    }

    /// Whether to read the replica's side: as [`Conn::can_read_down`], and not while
    /// a held response is at the cap.
    #[inline]
    fn can_read_up(&self, up_eof: bool) -> bool {
        !self.rules.blackhole
            && !up_eof
            && self.to_down.bytes < QUEUE_CAP
            && self
                .down_hold
                .as_ref()
                .is_none_or(|h| h.held.len() < QUEUE_CAP)
    }

    /// The gateway's side ended (FIN): its exchanges end; the replica's side is shut
    /// too, or at the heal under a blackhole.
    async fn downstream_eof(&mut self, uw: &mut tokio::net::tcp::WriteHalf<'_>) {
        self.up_hold = None;
        self.marker_wait = false;
        self.end_all(ProxyEndKind::DownstreamClosed);
        if self.rules.blackhole {
            self.ended_in_blackhole = Some(Close::Fin);
        } else {
            let _ = uw.shutdown().await;
        }
    }

    /// The gateway ended its side under a blackhole: the replica learns it once the
    /// path carries again, after what was queued before it (a reset ends the loop).
    async fn end_after_blackhole(
        &mut self,
        uw: &mut tokio::net::tcp::WriteHalf<'_>,
    ) -> Option<Close> {
        let end = self.ended_in_blackhole?;
        if self.rules.blackhole || !self.to_up.q.is_empty() {
            return None;
        }
        self.ended_in_blackhole = None;
        if end == Close::Rst {
            return Some(Close::Rst);
        }
        let _ = uw.shutdown().await;
        None
    }

    /// The replica's side ended (FIN).
    async fn upstream_eof(&mut self) {
        // A replica that died makes its address refuse at once, before the gateway
        // learns of the broken connection.
        self.p.check_dead().await;
        // A body that runs until close ends here, complete.
        if matches!(self.resp, RespState::Body { ref body, .. } if body.until_close()) {
            self.complete_front(ProxyEndKind::Completed);
            self.resp = RespState::Head;
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

    /// Ends the open exchanges as `end` and resets both sides.
    fn reset_all(&mut self, end: ProxyEndKind) -> Close {
        self.end_all(end);
        Close::Rst
    }
}

async fn sleep_until(t: Option<Instant>) {
    match t {
        Some(t) => tokio::time::sleep_until(t.into()).await,
        None => std::future::pending().await,
    }
}
