//! Hand-written histories for every finding, positive and negative. [`H`] writes a
//! trace (and, when asked, a gateway journal and a tool log) the way the client, the
//! sim gateway and the tool service would, then judges it.

mod compose;
mod ending;
mod output;
mod policy;
mod proxy;
mod side_effects;
mod sim_journal;
mod writers;

use std::collections::HashMap;

use crate::check::evidence::{GwItem, GwLine, Sources, WkLine};
use crate::check::fate::{FindingKind, Stage};
use crate::check::{Judgement, Status, Verdict, judge_with};
use crate::plan::Plan;
use crate::trace::{ChunkKind, Edge, Event, FaultLine, Outcome};
use crate::wire::journal::{GatewayEntry, Stamped, ToolExecution, WorkerEntry};

/// 1 ms in trace µs.
pub const MS: u64 = 1000;

/// The quickstart (one kill of w2) with overrides.
pub fn plan(sets: &[&str]) -> Plan {
    let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/quickstart.yaml");
    crate::plan::load(&p, &sets, None).unwrap_or_else(|e| panic!("{e}"))
}

/// A history being written.
pub struct H {
    pub events: Vec<Event>,
    pub gw: Option<Vec<GwLine>>,
    pub tools: Option<Vec<Stamped<ToolExecution>>>,
    pub workers: Vec<(String, Vec<WkLine>)>,
    n: HashMap<String, u32>,
}

impl H {
    pub fn new() -> H {
        H {
            events: vec![
                Event::RunStart {
                    t: 0,
                    name: "t".into(),
                    seed: 1,
                    wall: "2026-01-01T00:00:00Z".into(),
                    mono_ns: 0,
                    version: "test".into(),
                    token: None,
                },
                Event::Phase {
                    t: 0,
                    name: "baseline".into(),
                    edge: Edge::Start,
                },
            ],
            gw: None,
            tools: None,
            workers: Vec::new(),
            n: HashMap::new(),
        }
    }

    /// With a (possibly empty) gateway journal.
    pub fn journaled() -> H {
        let mut h = H::new();
        h.gw = Some(Vec::new());
        h
    }

    pub fn req(&mut self, id: &str, t: u64) -> &mut Self {
        self.events.push(Event::Request {
            t,
            id: id.into(),
            class: "chat".into(),
            phase: "baseline".into(),
            intended: t,
            prompt_tokens: 100,
            max_tokens: 64,
            protected: true,
            stream: true,
            admitted: None,
            session: None,
            turn: None,
            probe: None,
        });
        self
    }

    pub fn head(&mut self, id: &str, t: u64, worker: &str, attempt: &str) -> &mut Self {
        self.events.push(Event::Response {
            t,
            id: id.into(),
            status: 200,
            worker: Some(worker.into()),
            attempt: Some(attempt.into()),
            retry_after: None,
            queue_us: None,
            headers: Vec::new(),
            headers_omitted: 0,
            conn: None,
        });
        self
    }

    /// Appends a chunk, numbering it as the client would.
    fn put(&mut self, mut ev: Event) -> &mut Self {
        if let Event::Chunk { id, n, .. } = &mut ev {
            let next = self.n.entry(id.clone()).or_default();
            *n = *next;
            *next += 1;
        }
        self.events.push(ev);
        self
    }

    pub fn chunk(
        &mut self,
        id: &str,
        t: u64,
        kind: ChunkKind,
        text: Option<&str>,
        cid: Option<&str>,
    ) -> &mut Self {
        self.put(Event::Chunk {
            t,
            id: id.into(),
            n: 0,
            kind,
            text: text.map(Into::into),
            cid: cid.map(Into::into),
            finish: None,
            raw: None,
        })
    }

    /// Content deltas from generation `cid`, one every 20 ms from `t0`.
    pub fn deltas(&mut self, id: &str, cid: &str, t0: u64, texts: &[&str]) -> &mut Self {
        for (i, tx) in texts.iter().enumerate() {
            self.chunk(
                id,
                t0 + i as u64 * 20 * MS,
                ChunkKind::Content,
                Some(tx),
                Some(cid),
            );
        }
        self
    }

    pub fn finish(&mut self, id: &str, cid: &str, t: u64) -> &mut Self {
        self.put(Event::Chunk {
            t,
            id: id.into(),
            n: 0,
            kind: ChunkKind::Finish,
            text: None,
            cid: Some(cid.into()),
            finish: Some("stop".into()),
            raw: None,
        })
        .chunk(id, t, ChunkKind::Done, None, None)
    }

    pub fn error_event(&mut self, id: &str, t: u64, raw: &str) -> &mut Self {
        self.put(Event::Chunk {
            t,
            id: id.into(),
            n: 0,
            kind: ChunkKind::Error,
            text: None,
            cid: None,
            finish: None,
            raw: Some(raw.into()),
        })
    }

    /// The seed's explicit error for `delivered` deltas.
    pub fn seed_error(&mut self, id: &str, t: u64, delivered: u32) -> &mut Self {
        let raw = serde_json::json!({"error": {"code": "upstream_decode_interrupted",
            "message": "interrupted", "request_id": id, "partial_output": true,
            "delivered_output_tokens": delivered, "retryable": false}})
        .to_string();
        self.error_event(id, t, &raw)
    }

    pub fn end(&mut self, id: &str, t: u64, outcome: Outcome) -> &mut Self {
        let deltas = self
            .events
            .iter()
            .filter(|e| matches!(e, Event::Chunk { id: i, kind, .. } if i == id && kind.is_delta()))
            .count() as u32;
        let finish = self.events.iter().rev().find_map(|e| match e {
            Event::Chunk {
                id: i, finish: f, ..
            } if i == id && f.is_some() => f.clone(),
            _ => None,
        });
        let done = self
            .events
            .iter()
            .any(|e| matches!(e, Event::Chunk { id: i, kind: ChunkKind::Done, .. } if i == id));
        self.events.push(Event::End {
            t,
            id: id.into(),
            outcome,
            detail: None,
            tokens: deltas,
            done,
            finish,
            status: Some(200),
            counted: Some(deltas),
            usage: None,
            error: None,
            tool_calls: Vec::new(),
            json_valid: None,
        });
        self
    }

    /// A verified kill of `replica` at `t`; written last, as the engine does.
    pub fn kill(&mut self, t: u64, replica: &str) -> &mut Self {
        self.fault(t, replica, "kill")
    }

    /// A verified fault `action` on `replica` at `t`.
    pub fn fault(&mut self, t: u64, replica: &str, action: &str) -> &mut Self {
        self.events.push(Event::Fault(FaultLine {
            t,
            name: format!("{action}-{replica}"),
            domain: crate::scenario::FailureDomain::Worker,
            action: serde_json::from_value(action.into()).expect("a fault action"),
            replica: replica.into(),
            pid: Some(4242),
            verified: true,
            detail: "gone".into(),
            backend: Some(crate::scenario::FaultBackend::Process),
            node: None,
            trigger: Some("time".into()),
            triggered: Some(t),
            probe: None,
        }));
        self
    }

    pub fn gw(&mut self, t: u64, e: GatewayEntry) -> &mut Self {
        self.gw.get_or_insert_with(Vec::new).push(GwLine {
            t_ns: t * 1000,
            item: GwItem::Known(e),
        });
        self
    }

    /// haq's proxy forwarded `id` to `replica` on connection `conn`.
    pub fn proxy_req(&mut self, id: &str, t: u64, replica: &str, conn: u64) -> &mut Self {
        self.events.push(Event::ProxyRequest {
            t,
            replica: replica.into(),
            conn,
            id: Some(id.into()),
            by: Some(crate::trace::LegBy::Marker),
            unattributed: None,
            attempt: None,
            method: "POST".into(),
            path: "/v1/chat/completions".into(),
        });
        self
    }

    /// How that forwarded request ended at the proxy.
    pub fn proxy_end(
        &mut self,
        id: &str,
        t: u64,
        (replica, conn): (&str, u64),
        end: crate::trace::ProxyEndKind,
    ) -> &mut Self {
        self.proxy_end_after(id, t, (replica, conn), end, None)
    }

    /// As [`H::proxy_end`], with the time the replica's first event passed the proxy
    /// (that event held back at a probe point).
    pub fn proxy_end_after(
        &mut self,
        id: &str,
        t: u64,
        leg: (&str, u64),
        end: crate::trace::ProxyEndKind,
        first_event: Option<u64>,
    ) -> &mut Self {
        self.push_leg_end(id, t, leg, end, (first_event, first_event.map(|_| 1)))
    }

    /// How an upstream request ended at the proxy, with when the replica's first event
    /// passed it (none held back).
    pub fn leg_end(
        &mut self,
        id: &str,
        t: u64,
        leg: (&str, u64),
        end: crate::trace::ProxyEndKind,
        first_event: u64,
    ) -> &mut Self {
        self.push_leg_end(id, t, leg, end, (Some(first_event), None))
    }

    fn push_leg_end(
        &mut self,
        id: &str,
        t: u64,
        (replica, conn): (&str, u64),
        end: crate::trace::ProxyEndKind,
        (first_event, held): (Option<u64>, Option<u32>),
    ) -> &mut Self {
        self.events.push(Event::ProxyEnd {
            t,
            replica: replica.into(),
            conn,
            id: Some(id.into()),
            attempt: None,
            status: Some(200),
            events: u32::from(first_event.is_some()),
            first_event,
            end,
            held,
        });
        self
    }

    /// A line of worker `w`'s journal.
    pub fn wk(&mut self, t: u64, w: &str, e: WorkerEntry) -> &mut Self {
        let line = WkLine {
            t_ns: t * 1000,
            entry: Some(e),
        };
        match self.workers.iter_mut().find(|(n, _)| n == w) {
            Some((_, v)) => v.push(line),
            None => self.workers.push((w.to_string(), vec![line])),
        }
        self
    }

    /// A journal entry of a kind this version does not type (a newer gateway's).
    pub fn gw_other(&mut self, t: u64, fields: serde_json::Value) -> &mut Self {
        let ev = fields["ev"].as_str().unwrap_or_default().to_string();
        self.gw.get_or_insert_with(Vec::new).push(GwLine {
            t_ns: t * 1000,
            item: GwItem::Other { ev, fields },
        });
        self
    }

    pub fn attempt(
        &mut self,
        req: &str,
        n: u32,
        worker: &str,
        (start, delivered_at_start): (u64, u32),
        (end, result, delivered_at_end): (u64, &str, u32),
    ) -> &mut Self {
        let attempt = format!("{req}/a{n}");
        self.gw(
            start,
            GatewayEntry::AttemptStart {
                req: req.into(),
                attempt: attempt.clone(),
                worker: worker.into(),
                delivered: delivered_at_start,
            },
        )
        .gw(
            end,
            GatewayEntry::AttemptEnd {
                req: req.into(),
                attempt,
                worker: worker.into(),
                result: result.into(),
                why: (result == "failed").then(|| "stream: connection reset".into()),
                delivered: delivered_at_end,
            },
        )
    }

    pub fn tool(
        &mut self,
        t: u64,
        lr: &str,
        call: &str,
        key: &str,
        args: &str,
        dedup: bool,
    ) -> &mut Self {
        self.tools.get_or_insert_with(Vec::new).push(Stamped {
            t_ns: t * 1000,
            entry: ToolExecution {
                logical_request_id: lr.into(),
                tool_call_id: call.into(),
                idempotency_key: key.into(),
                tool: "create_ticket".into(),
                arguments: args.into(),
                result: "ok".into(),
                deduplicated: dedup,
                attempt: None,
                worker: None,
            },
        });
        self
    }

    pub fn judge(&self, plan: &Plan) -> Judgement {
        let mut gw = self.gw.clone();
        if let Some(g) = gw.as_mut() {
            g.sort_by_key(|l| l.t_ns);
        }
        let mut src = Sources::from_memory(gw, self.tools.clone());
        for (w, lines) in &self.workers {
            let lines: Vec<Result<WkLine, String>> = lines.iter().cloned().map(Ok).collect();
            src.workers.push((w.clone(), Box::new(lines.into_iter())));
        }
        let mut events = self.events.clone();
        if !events.iter().any(|e| matches!(e, Event::RunEnd { .. })) {
            let t = events.iter().map(Event::t).max().unwrap_or(0) + MS;
            events.push(Event::RunEnd {
                t,
                interrupted: false,
                reason: None,
            });
        }
        judge_with(plan, || events.clone(), src)
    }
}

pub fn fate(j: &Judgement) -> &Verdict {
    j.verdicts
        .iter()
        .find(|v| v.name == "Request-Fate")
        .expect("Request-Fate verdict")
}

pub fn kinds(j: &Judgement) -> Vec<FindingKind> {
    let mut k: Vec<FindingKind> = j.findings.iter().map(|f| f.kind).collect();
    k.dedup();
    k
}

pub fn has(j: &Judgement, k: FindingKind) -> bool {
    j.findings.iter().any(|f| f.kind == k)
}

pub fn finding(j: &Judgement, k: FindingKind) -> &crate::check::fate::Finding {
    j.findings
        .iter()
        .find(|f| f.kind == k)
        .unwrap_or_else(|| panic!("no {k:?} in {:#?}", j.findings))
}

/// `hay` contains `want` (with both shown when not).
pub fn contains(hay: &str, want: &str) {
    assert!(hay.contains(want), "`{want}` not in: {hay}");
}

/// r1 on w2: three deltas, then the seed's explicit error; w2 killed at 80 ms.
pub fn cut_properly(h: &mut H) -> &mut H {
    let w = words("k", 3);
    h.req("r1", 0)
        .head("r1", 10 * MS, "w2", "r1/a1")
        .deltas("r1", "A", 10 * MS, &refs(&w))
        .seed_error("r1", 100 * MS, 3)
        .end("r1", 101 * MS, Outcome::ExplicitError)
        .kill(80 * MS, "w2")
}

pub fn status(j: &Judgement) -> Status {
    fate(j).status
}

/// The stage of the one request caught, from the table.
pub fn stages(j: &Judgement) -> Vec<Stage> {
    j.fate_table.iter().map(|r| r.stage).collect()
}

/// Syllable words like the sim's: distinct, so repeats are real repeats.
pub fn words(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!(" {prefix}{i}ka")).collect()
}

pub fn refs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// A clean request `id` on `worker`: head, `n` deltas, finish, completed.
pub fn clean(h: &mut H, id: &str, worker: &str, t0: u64, n: usize) {
    let w = words(id, n);
    let cid = format!("cmpl-{worker}-{id}");
    h.req(id, t0)
        .head(id, t0 + 50 * MS, worker, &format!("{id}/a1"))
        .deltas(id, &cid, t0 + 50 * MS, &refs(&w))
        .finish(id, &cid, t0 + 50 * MS + n as u64 * 20 * MS)
        .end(id, t0 + 60 * MS + n as u64 * 20 * MS, Outcome::Completed);
}
