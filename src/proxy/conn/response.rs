//! The replica's side of a connection: response heads and bodies found in its
//! bytes, and the event counting of streamed responses. A watched response passes
//! event by event, each classified as the client would, so the `Event(k)` and
//! `ToolCall` points stop it at an exact event boundary.

use std::time::Instant;

use super::hold::Hold;
use super::state::{Conn, ReqState, RespState};
use crate::proxy::http::{self, Body, Framing, SseScan};
use crate::proxy::probe::ProxyPoint;
use crate::trace::{ChunkKind, ProxyEndKind};

impl Conn {
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
    pub(super) fn on_up(&mut self, now: Instant) {
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
