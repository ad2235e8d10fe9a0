//! The builder's state ([`Tb`]), its two starts (a run, a history), the generic
//! event writer and judging: what every writer file adds lines to.

use std::collections::HashMap;

use crate::check::evidence::{GwLine, Sources, WkLine};
use crate::check::{Judgement, Keep, judge_keeping, judge_with};
use crate::plan::Plan;
use crate::trace::{Edge, Event, ReplicaInfo};
use crate::wire::journal::{Stamped, ToolExecution};

/// 1 ms in trace µs.
pub const MS: u64 = 1000;

/// CLOCK_MONOTONIC at t = 0 of a run ([`Tb::new`]); a history starts at 0.
pub const MONO: u64 = 5_000_000_000;

/// Seconds to trace µs.
pub fn us(s: f64) -> u64 {
    (s * 1e6).round() as u64
}

/// An event from its JSON form (nulls dropped, as the writer omits them).
pub fn event(mut v: serde_json::Value) -> Event {
    if let Some(m) = v.as_object_mut() {
        m.retain(|_, x| !x.is_null());
    }
    serde_json::from_value(v).unwrap_or_else(|e| panic!("test event: {e}"))
}

/// How [`Tb::judge`] hands the events to the judge.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Order {
    /// Sorted by time (stably): the run-level helpers write out of order.
    ByTime,
    /// As written, like the client's file: a history may put a line late on purpose.
    AsWritten,
}

/// A trace being written, with the evidence beside it.
pub struct Tb {
    pub events: Vec<Event>,
    /// The gateway journal; `None`: the target has none (a `url` target), and
    /// gateway lines written to it are dropped, as no gateway wrote them.
    pub journal: Option<Vec<GwLine>>,
    /// The tool service's log, from its first line on.
    pub tools: Option<Vec<Stamped<ToolExecution>>>,
    /// Each sim worker's journal, in the order first written.
    pub workers: Vec<(String, Vec<WkLine>)>,
    /// Responses carry the `x-haq-worker` attribution header.
    pub headers: bool,
    /// haq's proxy records each request [`Tb::request`] routes to a worker
    /// (`proxy_request`); set by [`Tb::behind_proxies`].
    pub proxy: bool,
    pub order: Order,
    /// CLOCK_MONOTONIC (ns) at t = 0: journals are stamped `mono_ns + t µs`.
    pub(super) mono_ns: u64,
    /// The next chunk number of each request, as the client counts (a test may
    /// skip one).
    pub chunks: HashMap<String, u32>,
    /// Requests [`Tb::steady`] has named so far.
    pub(super) requests: usize,
}

impl Default for Tb {
    fn default() -> Self {
        Self::new()
    }
}

impl Tb {
    fn empty(order: Order, journal: Option<Vec<GwLine>>) -> Tb {
        Tb {
            events: Vec::new(),
            journal,
            tools: None,
            workers: Vec::new(),
            headers: true,
            proxy: false,
            order,
            mono_ns: 0,
            chunks: HashMap::new(),
            requests: 0,
        }
    }

    /// A run: started at [`MONO`], a target of w1..w3 (pids 101..103), a gateway
    /// journal, events judged by time. Add phases, load, faults and the run's end.
    pub fn new() -> Self {
        let mut tb = Tb::empty(Order::ByTime, Some(Vec::new()));
        tb.run_start("hand", "2026-01-01T00:00:00.000Z", MONO);
        tb.ev(Event::Target {
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
            marker: None,
        });
        tb
    }

    /// A history: started at mono 0 in phase `baseline`, no gateway journal, events
    /// judged as written, a run end added when judged if none was written.
    pub fn history() -> Self {
        let mut tb = Tb::empty(Order::AsWritten, None);
        tb.run_start("t", "2026-01-01T00:00:00Z", 0);
        tb.phase(0, "baseline", Edge::Start);
        tb
    }

    /// A history with a (possibly empty) gateway journal.
    pub fn journaled() -> Self {
        let mut tb = Tb::history();
        tb.journal = Some(Vec::new());
        tb
    }

    /// No gateway journal (a `url` target).
    pub fn without_journal(mut self) -> Self {
        self.journal = None;
        self
    }

    /// The first line, which sets the clock the journals are stamped on.
    fn run_start(&mut self, name: &str, wall: &str, mono_ns: u64) -> &mut Self {
        self.mono_ns = mono_ns;
        self.ev(Event::RunStart {
            t: 0,
            name: name.into(),
            seed: 1,
            wall: wall.into(),
            mono_ns,
            version: "test".into(),
            token: None,
        })
    }

    /// Appends `e` as given; the writers of every file come through here.
    pub fn ev(&mut self, e: Event) -> &mut Self {
        self.events.push(e);
        self
    }

    /// The journal stamp of trace time `t` (µs).
    pub(super) fn stamp(&self, t: u64) -> u64 {
        self.mono_ns + t * 1000
    }

    /// Judges the trace with the journals and the tool log beside it.
    pub fn judge(&self, plan: &Plan) -> Judgement {
        let mut gateway = self.journal.clone();
        if let Some(g) = gateway.as_mut() {
            g.sort_by_key(|l| l.t_ns);
        }
        let sources = || {
            let mut src = Sources::from_memory(gateway.clone(), self.tools.clone());
            for (w, lines) in &self.workers {
                let lines: Vec<Result<WkLine, String>> = lines.iter().cloned().map(Ok).collect();
                src.workers.push((w.clone(), Box::new(lines.into_iter())));
            }
            src
        };
        let mut events = self.events.clone();
        if self.order == Order::ByTime {
            events.sort_by_key(Event::t);
        }
        if !events.iter().any(|e| matches!(e, Event::RunEnd { .. })) {
            let t = events.iter().map(Event::t).max().unwrap_or(0) + MS;
            events.push(run_end_line(t));
        }
        let j = judge_with(plan, || events.clone(), sources());
        // The oracle of the bounded fold (issue 17): judged keeping every item, the
        // verdicts, findings and timeline are the same.
        let every = judge_keeping(plan, || events.clone(), sources(), Keep::Unfiltered);
        same_judgement(&j, &every);
        j
    }

    /// The trace's last line at `t` (µs).
    pub fn run_end(&mut self, t: u64) -> &mut Self {
        self.ev(run_end_line(t))
    }
}

/// The run's end at `t`, not interrupted: what [`Tb::run_end`] writes and what a
/// judged trace without one gets.
fn run_end_line(t: u64) -> Event {
    Event::RunEnd {
        t,
        interrupted: false,
        reason: None,
    }
}

/// Panics naming the first part of `a` that differs from `b` (the judgement as the
/// reports see it: everything but the facts).
pub fn same_judgement(a: &Judgement, b: &Judgement) {
    let (va, vb) = (serde_json::to_value(a), serde_json::to_value(b));
    let (Ok(serde_json::Value::Object(va)), Ok(serde_json::Value::Object(vb))) = (va, vb) else {
        panic!("a judgement that is not a JSON object");
    };
    for (k, x) in &va {
        assert_eq!(
            Some(x),
            vb.get(k),
            "the bounded fold judged `{k}` otherwise than the unfiltered one"
        );
    }
    assert_eq!(va.len(), vb.len());
}
