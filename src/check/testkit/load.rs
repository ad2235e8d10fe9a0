//! The run-level layer: whole requests ([`R`]), steady load and a plan's phases.
//! Load is described in f64 (request times and ranges in s, TTFT/ITL in ms, rates
//! per s), converted with [`us`] where it calls the event writers.

use super::client::{Ask, Close, Head, Piece};
use super::state::{MS, Tb, us};
use crate::plan::Plan;
use crate::trace::{ChunkKind, Edge, Event, Outcome};
use crate::wire::journal::GatewayEntry;

/// One request as [`Tb::request`] writes it.
#[derive(Clone)]
pub struct R<'a> {
    pub id: String,
    pub phase: &'a str,
    /// Sent at (s).
    pub t: f64,
    pub worker: Option<&'a str>,
    pub ttft_ms: f64,
    pub itl_ms: f64,
    pub tokens: u32,
    pub outcome: Outcome,
    pub status: u16,
    pub protected: bool,
    pub retry_after: bool,
    /// A probe request driving this fault's trigger.
    pub probe: Option<&'a str>,
    /// Sent as a streaming request (a non-streamed answer is one delta at its end).
    pub stream: bool,
    /// Sent this long (ms) after it was intended: haq's own lateness.
    pub late_ms: f64,
}

impl<'a> R<'a> {
    pub fn ok(id: impl Into<String>, phase: &'a str, t: f64, worker: &'a str) -> Self {
        R {
            id: id.into(),
            phase,
            t,
            worker: Some(worker),
            ttft_ms: 100.0,
            itl_ms: 20.0,
            tokens: 10,
            outcome: Outcome::Completed,
            status: 200,
            protected: true,
            retry_after: false,
            probe: None,
            stream: true,
            late_ms: 0.0,
        }
    }
    pub fn rejected(mut self) -> Self {
        self.outcome = Outcome::Rejected;
        self.status = 503;
        self.worker = None;
        self.tokens = 0;
        self.retry_after = true;
        self.ttft_ms = 5.0;
        self
    }
    pub fn outcome(mut self, o: Outcome) -> Self {
        self.outcome = o;
        self
    }
    /// Not streamed: the answer arrives whole, `ttft` after the request, as one delta.
    pub fn whole(mut self) -> Self {
        self.stream = false;
        self.tokens = 1;
        self
    }
    pub fn ttft(mut self, ms: f64) -> Self {
        self.ttft_ms = ms;
        self
    }
    pub fn itl(mut self, ms: f64) -> Self {
        self.itl_ms = ms;
        self
    }
    /// Sent `ms` after it was intended (at `t`, intended `ms` before).
    pub fn late(mut self, ms: f64) -> Self {
        self.late_ms = ms;
        self
    }
    pub fn probe(mut self, fault: &'a str) -> Self {
        self.probe = Some(fault);
        self.protected = false;
        self
    }
}

impl Tb {
    /// A whole request: its request line, head, deltas (`w<n> `, the last with
    /// finish `length` when completed) and end; with its gateway attempt in the
    /// journal when it names a worker.
    pub fn request(&mut self, r: R) -> &mut Self {
        let t0 = us(r.t);
        let ask = Ask {
            phase: r.phase,
            max_tokens: 10,
            protected: r.protected,
            probe: r.probe,
            stream: r.stream,
            late: us(r.late_ms / 1000.0),
        };
        self.req_as(&r.id, t0, ask);
        if let Some(w) = r.worker {
            self.attempt_of(&r, w);
            if self.proxy {
                self.proxy_req(&r.id, t0 + 100, w, 1);
            }
        }
        let first = t0 + us(r.ttft_ms / 1000.0);
        let head = Head {
            status: r.status,
            worker: r.worker,
            attempt: r.worker.map(|_| format!("{}/a1", r.id)),
            retry_after: r.retry_after.then_some("1"),
        };
        self.head_as(&r.id, first, head);
        let ok = r.outcome == Outcome::Completed;
        let cid = format!("c-{}", r.id);
        let mut t = first;
        for n in 0..r.tokens {
            let text = format!("w{n} ");
            let piece = Piece {
                text: Some(&text),
                cid: Some(&cid),
                finish: (n + 1 == r.tokens && ok).then_some("length"),
                ..Piece::of(ChunkKind::Content)
            };
            self.chunk_as(&r.id, t, piece);
            t += us(r.itl_ms / 1000.0);
        }
        let close = Close {
            outcome: r.outcome,
            done: Some(ok),
            tallied: false,
        };
        self.end_as(&r.id, t.max(first), close)
    }

    /// A request sent at `t` (s) that the gateway answered with an error `status`
    /// and `body`, 2 ms later, before any output (a 503 is a rejection).
    pub fn answered(
        &mut self,
        id: &str,
        phase: &str,
        t: f64,
        status: u16,
        body: &str,
    ) -> &mut Self {
        let t0 = us(t);
        let ask = Ask {
            phase,
            max_tokens: 10,
            ..Ask::default()
        };
        self.req_as(id, t0, ask);
        let head = Head {
            status,
            worker: None,
            attempt: None,
            retry_after: None,
        };
        self.head_as(id, t0 + 2 * MS, head);
        let close = Close {
            outcome: if status == 503 {
                Outcome::Rejected
            } else {
                Outcome::HttpError
            },
            done: Some(false),
            tallied: false,
        };
        self.end_as(id, t0 + 3 * MS, close);
        // The end line as `end_as` writes it, with what the client read of the answer.
        if let Some(Event::End {
            detail, status: s, ..
        }) = self.events.last_mut()
        {
            *detail = Some(format!("HTTP {status}: {body}"));
            *s = Some(status);
        }
        self
    }

    /// The gateway's one attempt of `r` on `w`, from just after the request to its
    /// last delta.
    fn attempt_of(&mut self, r: &R, w: &str) {
        let attempt = format!("{}/a1", r.id);
        self.gw(
            us(r.t + 0.0001),
            GatewayEntry::AttemptStart {
                req: r.id.clone(),
                attempt: attempt.clone(),
                worker: w.into(),
                delivered: 0,
            },
        );
        let done = r.t + (r.ttft_ms + r.itl_ms * f64::from(r.tokens)) / 1000.0;
        self.gw(
            us(done),
            GatewayEntry::AttemptEnd {
                req: r.id.clone(),
                attempt,
                worker: w.into(),
                result: if r.outcome == Outcome::Completed {
                    "finished".into()
                } else {
                    "failed".into()
                },
                why: None,
                delivered: r.tokens,
            },
        );
    }

    /// Requests every `1/rate` s in `[from, to)` (s), routed by `route(i, t)` (None:
    /// rejected), named `<phase>-<nnnn>`.
    pub fn steady(
        &mut self,
        phase: &str,
        from: f64,
        to: f64,
        rate: f64,
        route: impl Fn(usize, f64) -> Option<&'static str>,
    ) -> &mut Self {
        let mut i = 0;
        loop {
            let t = from + i as f64 / rate;
            if t >= to - 1e-9 {
                return self;
            }
            self.requests += 1;
            let id = format!("{phase}-{:04}", self.requests);
            let r = match route(i, t) {
                Some(w) => R::ok(id, phase, t, w),
                None => R::ok(id, phase, t, "w1").rejected(),
            };
            self.request(r);
            i += 1;
        }
    }

    /// The phases of a plan, back to back from 1 s.
    pub fn phases(&mut self, plan: &Plan) -> &mut Self {
        for p in &plan.phases {
            let s = 1.0 + p.start.as_secs_f64();
            self.phase(us(s), &p.name, Edge::Start);
            self.phase(us(s + p.duration.as_secs_f64()), &p.name, Edge::End);
        }
        self
    }
}

/// Round robin over `ws`.
pub fn rr(ws: &'static [&'static str]) -> impl Fn(usize, f64) -> Option<&'static str> {
    move |i, _| Some(ws[i % ws.len()])
}

/// The standard run: baseline on w1..w3, w2 killed at 13 s (fault phase + 2 s) and
/// removed 50 ms later, then w1/w3 only.
pub fn standard(plan: &Plan) -> Tb {
    let mut tb = Tb::new();
    tb.phases(plan);
    tb.steady("baseline", 1.0, 11.0, 10.0, rr(&["w1", "w2", "w3"]));
    tb.steady("fault", 11.0, 12.7, 10.0, rr(&["w1", "w2", "w3"]));
    tb.inject("kill-w2", "w2", us(13.0), true);
    tb.removed(us(13.05), "w2", "connection failed");
    tb.steady("fault", 13.1, 21.0, 10.0, rr(&["w1", "w3"]));
    tb.steady("degraded", 21.0, 31.0, 10.0, rr(&["w1", "w3"]));
    tb.run_end(us(32.0));
    tb
}
