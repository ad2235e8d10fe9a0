//! The gateway's side of a connection: request heads and bodies found in its bytes,
//! each request begun as an exchange (attributed, recorded, watched) and held at the
//! `Queued` or `Prefill` point when it is a probe.

use std::sync::atomic::Ordering;
use std::time::Instant;

use super::hold::Hold;
use super::state::{Conn, Exchange, ReqState};
use crate::proxy::http::{self, Body, Framing};
use crate::proxy::probe::{ProxyPoint, ProxySeen};
use crate::trace::Event;

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
}
