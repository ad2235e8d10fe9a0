//! Hand-written traces for the verdict tests: cheap, deterministic, and each one
//! shaped to show a verdict PASS or FAIL for one stated reason.

use serde_json::json;

use super::evidence::{GwItem, GwLine, Sources};
use super::{Judgement, judge_with};
use crate::plan::Plan;
use crate::trace::{Edge, Event, Outcome, ReplicaInfo};
use crate::wire::journal::{GatewayEntry, Stamped};

pub const MONO: u64 = 5_000_000_000;

/// An event from its JSON form (nulls dropped, as the writer omits them).
pub fn event(mut v: serde_json::Value) -> Event {
    if let Some(m) = v.as_object_mut() {
        m.retain(|_, x| !x.is_null());
    }
    serde_json::from_value(v).unwrap_or_else(|e| panic!("test event: {e}"))
}

pub fn us(s: f64) -> u64 {
    (s * 1e6).round() as u64
}

/// The base scenario: 3 sim replicas, 10/s offered = protected, baseline 10s, fault
/// 10s (w2 killed 2s in), degraded 10s; SLO TTFT 500ms, ITL 50ms, E2E 3s.
pub const BASE: &str = r#"
name: hand
target: {kind: sim, replicas: 3}
workload:
  seed: 1
  mix: {classes: [{name: chat, prompt_tokens: 100, output_tokens: 10}]}
  arrival: {process: constant, rate: 10/s}
protected_load: 10/s
slo: {ttft_p95: 500ms, itl_p95: 50ms, e2e_p95: 3s, error_rate_max: 5%, rejection_rate_max: 1%}
phases:
  - {name: baseline, duration: 10s}
  - {name: fault, duration: 10s}
  - {name: degraded, duration: 10s}
faults:
  - {name: kill-w2, domain: worker, action: kill, target: {replica: w2}, at: {phase: fault, offset: 2s}}
"#;

pub fn plan(sets: &[&str]) -> Plan {
    plan_from(BASE, sets)
}

pub fn plan_from(yaml: &str, sets: &[&str]) -> Plan {
    let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
    crate::plan::load_str(yaml, "hand.yaml", std::path::Path::new("."), &sets, None)
        .unwrap_or_else(|e| panic!("{e}"))
}

/// One request as the builder writes it.
#[derive(Clone)]
pub struct R<'a> {
    pub id: String,
    pub phase: &'a str,
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
    pub fn probe(mut self, fault: &'a str) -> Self {
        self.probe = Some(fault);
        self.protected = false;
        self
    }
}

pub struct Tb {
    pub events: Vec<Event>,
    pub journal: Option<Vec<Stamped<GatewayEntry>>>,
    /// Responses carry the `x-haq-worker` attribution header.
    pub headers: bool,
    /// haq's proxy records each request routed to a worker (`proxy_request`).
    pub proxy: bool,
    n: usize,
}

impl Default for Tb {
    fn default() -> Self {
        Self::new()
    }
}

impl Tb {
    pub fn new() -> Self {
        Tb {
            events: vec![
                Event::RunStart {
                    t: 0,
                    name: "hand".into(),
                    seed: 1,
                    wall: "2026-01-01T00:00:00.000Z".into(),
                    mono_ns: MONO,
                    version: "test".into(),
                },
                Event::Target {
                    t: us(0.5),
                    url: "http://127.0.0.1:1/v1".into(),
                    replicas: (1..=3)
                        .map(|i| ReplicaInfo {
                            name: format!("w{i}"),
                            url: format!("http://127.0.0.1:{i}"),
                            pid: Some(100 + i),
                            proxy: None,
                            node: None,
                        })
                        .collect(),
                },
            ],
            journal: Some(Vec::new()),
            headers: true,
            proxy: false,
            n: 0,
        }
    }

    /// No gateway journal (a `url` target).
    pub fn without_journal(mut self) -> Self {
        self.journal = None;
        self
    }

    /// haq's proxy in front of every replica (a `url` target with `listen`): no
    /// journal, no attribution header; its watch of refused connects on or off.
    pub fn behind_proxies(mut self, watching: bool) -> Self {
        self.journal = None;
        self.headers = false;
        self.proxy = true;
        if let Some(Event::Target { replicas, .. }) = self.events.get_mut(1) {
            for (i, r) in replicas.iter_mut().enumerate() {
                r.proxy = Some(format!("127.0.0.1:{}", 9101 + i));
            }
        }
        let detail = if watching {
            "refusals seen (packet socket on lo)"
        } else {
            "cannot be seen: packet socket: Operation not permitted (it needs CAP_NET_RAW)"
        };
        self.ev(Event::ProxyWatch {
            t: us(0.4),
            watching,
            detail: detail.into(),
        });
        self
    }

    /// A connect to `replica`'s closed proxy listener, refused by the kernel.
    pub fn refused(&mut self, t: f64, replica: &str) -> &mut Self {
        self.ev(Event::ProxyRefused {
            t: us(t),
            replica: replica.into(),
            peer: format!("127.0.0.1:{}", 40000 + self.events.len()),
            how: crate::trace::RefusedHow::Refused,
        })
    }

    /// haq's proxy closed (the replica refuses connections) or reopened its listener.
    pub fn listener(&mut self, t: f64, replica: &str, open: bool) -> &mut Self {
        self.ev(Event::ProxyListener {
            t: us(t),
            replica: replica.into(),
            open,
        })
    }

    /// A request the gateway answered with an error status and body, before any output.
    pub fn answered(
        &mut self,
        id: &str,
        phase: &str,
        t: f64,
        status: u16,
        body: &str,
    ) -> &mut Self {
        let t0 = us(t);
        self.ev(event(
            json!({"ev": "request", "t": t0, "id": id, "class": "chat",
            "phase": phase, "intended": t0, "prompt_tokens": 100, "max_tokens": 10,
            "protected": true}),
        ));
        self.ev(event(
            json!({"ev": "response", "t": t0 + 2000, "id": id, "status": status}),
        ));
        self.ev(event(json!({"ev": "end", "t": t0 + 3000, "id": id,
            "outcome": if status == 503 { "rejected" } else { "http_error" },
            "detail": format!("HTTP {status}: {body}"), "tokens": 0, "done": false,
            "status": status})))
    }

    /// The phases of a plan, back to back from 1 s.
    pub fn phases(&mut self, plan: &Plan) -> &mut Self {
        for p in &plan.phases {
            let s = 1.0 + p.start.as_secs_f64();
            self.ev(Event::Phase {
                t: us(s),
                name: p.name.clone(),
                edge: Edge::Start,
            });
            self.ev(Event::Phase {
                t: us(s + p.duration.as_secs_f64()),
                name: p.name.clone(),
                edge: Edge::End,
            });
        }
        self
    }

    pub fn ev(&mut self, e: Event) -> &mut Self {
        self.events.push(e);
        self
    }

    pub fn gw(&mut self, t: f64, entry: GatewayEntry) -> &mut Self {
        if let Some(j) = &mut self.journal {
            j.push(Stamped {
                t_ns: MONO + us(t) * 1000,
                entry,
            });
        }
        self
    }

    pub fn removed(&mut self, t: f64, w: &str, why: &str) -> &mut Self {
        self.gw(
            t,
            GatewayEntry::UpstreamRemoved {
                worker: w.into(),
                why: why.into(),
                cause: Default::default(),
            },
        )
    }

    pub fn ready(&mut self, t: f64, w: &str) -> &mut Self {
        self.gw(
            t,
            GatewayEntry::UpstreamReady {
                worker: w.into(),
                why: "ready check passed".into(),
            },
        )
    }

    pub fn fault(&mut self, name: &str, replica: &str, t: f64, verified: bool) -> &mut Self {
        self.fault_as(name, "worker", "kill", replica, t, verified)
    }

    pub fn fault_as(
        &mut self,
        name: &str,
        domain: &str,
        action: &str,
        replica: &str,
        t: f64,
        verified: bool,
    ) -> &mut Self {
        let detail = if verified {
            "SIGKILL sent; process exited by signal 9"
        } else {
            "SIGKILL sent; process still alive after 5s"
        };
        self.ev(event(
            json!({"ev": "fault", "t": us(t), "name": name, "domain": domain,
            "action": action, "replica": replica,
            "pid": replica[1..].parse::<u32>().ok().map(|i| 100 + i),
            "verified": verified, "detail": detail}),
        ))
    }

    /// haq healed the fault (SIGCONT, proxy rule removed).
    pub fn heal(&mut self, name: &str, replica: &str, t: f64) -> &mut Self {
        self.ev(Event::Heal {
            t: us(t),
            name: name.into(),
            detail: "SIGCONT sent".into(),
            replica: Some(replica.into()),
            verified: Some(true),
        })
    }

    pub fn obs(&mut self, t: f64, source: &str, replica: &str, what: &str) -> &mut Self {
        self.ev(Event::Observation {
            t: us(t),
            source: source.into(),
            replica: Some(replica.into()),
            what: what.into(),
            detail: None,
        })
    }

    /// A request, its head, its deltas and its end; with a gateway attempt in the
    /// journal when it names a worker.
    pub fn req(&mut self, r: R) -> &mut Self {
        let t0 = us(r.t);
        // Built from JSON, as the trace reader does, so fields others add with
        // defaults need no change here.
        self.ev(event(
            json!({"ev": "request", "t": t0, "id": r.id, "class": "chat",
            "phase": r.phase, "intended": t0, "prompt_tokens": 100, "max_tokens": 10,
            "protected": r.protected, "probe": r.probe, "stream": r.stream}),
        ));
        if let Some(w) = r.worker {
            let attempt = format!("{}/a1", r.id);
            self.gw(
                r.t + 0.0001,
                GatewayEntry::AttemptStart {
                    req: r.id.clone(),
                    attempt: attempt.clone(),
                    worker: w.into(),
                    delivered: 0,
                },
            );
            let done = r.t + (r.ttft_ms + r.itl_ms * f64::from(r.tokens)) / 1000.0;
            self.gw(
                done,
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
        if let Some(w) = r.worker.filter(|_| self.proxy) {
            self.ev(Event::ProxyRequest {
                t: t0 + 100,
                replica: w.into(),
                conn: 1,
                id: Some(r.id.clone()),
                attempt: None,
                method: "POST".into(),
                path: "/v1/chat/completions".into(),
            });
        }
        let first = t0 + us(r.ttft_ms / 1000.0);
        let worker = r.worker.filter(|_| self.headers);
        self.ev(event(
            json!({"ev": "response", "t": first, "id": r.id, "status": r.status,
            "worker": worker, "attempt": worker.map(|_| format!("{}/a1", r.id)),
            "retry_after": r.retry_after.then_some("1")}),
        ));
        let mut t = first;
        for n in 0..r.tokens {
            let last = n + 1 == r.tokens && r.outcome == Outcome::Completed;
            self.ev(event(json!({"ev": "chunk", "t": t, "id": r.id, "n": n,
                "kind": "content", "text": format!("w{n} "), "cid": format!("c-{}", r.id),
                "finish": last.then_some("length")})));
            t += us(r.itl_ms / 1000.0);
        }
        let ok = r.outcome == Outcome::Completed;
        self.ev(event(json!({"ev": "end", "t": t.max(first), "id": r.id,
            "outcome": r.outcome, "tokens": r.tokens, "done": ok,
            "finish": ok.then_some("length")})))
    }

    /// Requests every `1/rate` s in `[from, to)`, routed by `route(i)` (None: rejected).
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
            self.n += 1;
            let id = format!("{phase}-{:04}", self.n);
            let r = match route(i, t) {
                Some(w) => R::ok(id, phase, t, w),
                None => R::ok(id, phase, t, "w1").rejected(),
            };
            self.req(r);
            i += 1;
        }
    }

    pub fn end(&mut self, t: f64) -> &mut Self {
        self.ev(Event::RunEnd {
            t: us(t),
            interrupted: false,
            reason: None,
        })
    }

    pub fn judge(&self, plan: &Plan) -> Judgement {
        let gateway = self.journal.clone().map(|mut j| {
            j.sort_by_key(|s| s.t_ns);
            j.into_iter()
                .map(|s| GwLine {
                    t_ns: s.t_ns,
                    item: GwItem::Known(s.entry),
                })
                .collect()
        });
        let mut events = self.events.clone();
        events.sort_by_key(|e| e.t());
        judge_with(plan, || events.clone(), Sources::from_memory(gateway, None))
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
    tb.fault("kill-w2", "w2", 13.0, true);
    tb.removed(13.05, "w2", "connection failed");
    tb.steady("fault", 13.1, 21.0, 10.0, rr(&["w1", "w3"]));
    tb.steady("degraded", 21.0, 31.0, 10.0, rr(&["w1", "w3"]));
    tb.end(32.0);
    tb
}

pub fn pick(j: &Judgement, name: impl std::fmt::Display) -> super::Verdict {
    let name = name.to_string();
    j.verdicts
        .iter()
        .find(|v| v.name == name.as_str())
        .cloned()
        .unwrap_or_else(|| panic!("no verdict {name}"))
}
