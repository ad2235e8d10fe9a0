//! The gateway's side of a connection: request heads and bodies found in its bytes,
//! each request begun as an exchange (attributed, recorded, watched) and held at the
//! `Queued` or `Prefill` point when it is a probe.
//!
//! Attribution: the body's marker (`haq-<run token>-<request id>`, `client.marker`),
//! read as the body passes (decoded from chunked framing, across reads, in place: no
//! copy, no delay), else the `x-request-id` header. The `proxy_request` line is
//! written once that is settled: the marker found, the body ended, or its first
//! [`SCAN_CAP`](crate::wire::marker::SCAN_CAP) bytes passed without one. Only while
//! a probe at the `Queued` point is watched and has not fired is a request head that
//! names no probe held until its marker is read (the probe must be stopped before the
//! replica sees it); every other request goes on at once.

use std::sync::atomic::Ordering;
use std::time::Instant;

use super::hold::Hold;
use super::state::{Conn, Exchange, ReqState};
use crate::proxy::http::{self, Body, Framing};
use crate::proxy::probe::{ProxyPoint, ProxySeen, Release};
use crate::trace::{LegBy, Unattributed};
use crate::wire::marker::{MarkerScan, Miss};

impl Conn {
    /// Request bytes from the gateway.
    pub(super) fn on_down(&mut self, now: Instant) {
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
                    Ok(Some(h)) => self.on_head(now, h),
                },
                ReqState::Body(body, scan) => {
                    let r = body.feed(&self.dbuf, |d, _| {
                        if let Some(s) = scan.as_mut() {
                            s.feed(d);
                        }
                    });
                    let settled = scan.as_ref().is_some_and(|s| !s.looking());
                    match r {
                        Err(_) => {
                            let scan = self.take_scan();
                            self.req = ReqState::Raw;
                            self.settle(scan, false);
                        }
                        Ok(None) => {
                            let b = self.dbuf.split().freeze();
                            self.forward_up(now, b);
                            if settled {
                                let scan = self.take_scan();
                                self.settle(scan, false);
                            }
                            return;
                        }
                        Ok(Some(n)) => {
                            let b = self.dbuf.split_to(n).freeze();
                            self.forward_up(now, b);
                            let scan = self.take_scan();
                            self.req = ReqState::Head;
                            self.settle(scan, true);
                            self.request_sent();
                        }
                    }
                }
            }
        }
    }

    /// A request head: its exchange begun, held when it is (or may be) a probe at the
    /// `Queued` point, the head forwarded, its body's scan set up.
    fn on_head(&mut self, now: Instant, h: http::RequestHead) {
        let mut x = self.begin(&h);
        let token = self.p.board.run_token();
        let scan = match token {
            Some(t) if x.recorded && h.framing != Framing::Empty => Some(MarkerScan::new(t)),
            _ => None,
        };
        if x.recorded && token.is_none() && x.id.is_none() {
            x.by = Err(Unattributed::NoToken);
        }
        let queued = matches!(x.probe, Some((ProxyPoint::Queued, _)));
        if queued && let Some(rx) = self.reach(&x) {
            self.release_marker_wait(None);
            self.up_hold = Some(Hold::new(Some(rx)));
        } else if scan.is_some() && x.probe.is_none() && self.p.board.holds_heads() {
            // It may be the probe: its marker decides before the replica sees it.
            if self.up_hold.is_none() {
                self.up_hold = Some(Hold::new(None));
                self.marker_wait = true;
            }
        }
        if scan.is_none() {
            self.announce(&mut x);
        }
        self.xs.push_back(x);
        let head = self.dbuf.split_to(h.len).freeze();
        self.forward_up(now, head);
        if h.framing == Framing::Empty {
            self.request_sent();
        } else {
            self.req = ReqState::Body(Body::new(h.framing), scan);
        }
    }

    /// The body's scan, taken: its exchange's attribution is settled now.
    fn take_scan(&mut self) -> Option<MarkerScan> {
        match &mut self.req {
            ReqState::Body(_, scan) => scan.take(),
            _ => None,
        }
    }

    /// The latest exchange's attribution is settled by its body's scan (`ended`: the
    /// body was read to its end): its id from the marker, else from the header; the
    /// probe it is, found by its marker; its line written; a head held for its marker
    /// released, or kept while the fault is applied when it is the `Queued` probe.
    fn settle(&mut self, scan: Option<MarkerScan>, ended: bool) {
        let Some(mut scan) = scan else { return };
        if ended {
            scan.end();
        }
        // The exchange is gone when its response ended before its body did.
        let x = match self.xs.pop_back() {
            Some(x) if x.announced => {
                self.xs.push_back(x);
                None
            }
            x => x,
        };
        let Some(mut x) = x else {
            self.release_marker_wait(None);
            return;
        };
        match scan.found() {
            Some(id) => {
                x.id = Some(id.to_string());
                x.by = Ok(LegBy::Marker);
            }
            None if x.id.is_some() => x.by = Ok(LegBy::Header),
            None => {
                x.by = Err(match scan.miss() {
                    Some(Miss::OtherRun) => Unattributed::OtherRun,
                    Some(Miss::OverCap) => Unattributed::OverCap,
                    _ if ended => Unattributed::NoMarker,
                    _ => Unattributed::Unread,
                })
            }
        }
        if x.probe.is_none() && x.by == Ok(LegBy::Marker) {
            x.probe = self.p.board.hit(x.id.as_deref());
            if let Some((_, tx)) = &x.probe {
                let _ = tx.send(ProxySeen::Routed {
                    replica: self.p.name.clone(),
                    attempt: x.attempt.clone(),
                    t: x.head_t,
                });
            }
        }
        self.announce(&mut x);
        self.release_marker_wait(Some(&x));
        self.xs.push_back(x);
    }

    /// A head held for its marker: kept while the fault is applied when `x` is the
    /// probe at the `Queued` point (reported reached now), else released.
    fn release_marker_wait(&mut self, x: Option<&Exchange>) {
        if !self.marker_wait {
            return;
        }
        self.marker_wait = false;
        let queued = x.filter(|x| matches!(x.probe, Some((ProxyPoint::Queued, _))));
        match queued.and_then(|x| self.reach(x)) {
            Some(rx) => {
                if let Some(h) = self.up_hold.as_mut() {
                    h.release = Some(rx);
                }
            }
            None => self.release_up(Release::Forward, false),
        }
    }

    /// A new exchange from its request head: attributed by its header for now,
    /// counted, watched when the header names a probe.
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
        } else {
            self.p.other_requests.fetch_add(1, Ordering::Relaxed);
        }
        Exchange {
            id: h.request_id.clone(),
            attempt: h.attempt.clone(),
            recorded,
            announced: false,
            by: match h.request_id {
                Some(_) => Ok(LegBy::Header),
                None => Err(Unattributed::NoMarker),
            },
            head_t: t,
            method: h.method.clone(),
            path: h.path.clone(),
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
}
