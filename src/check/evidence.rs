//! Every evidence source of a run directory, read as streams and placed on the trace's
//! timeline (M10): the client's `trace.jsonl` (always), the sim gateway's journal
//! `gateway.jsonl`, each sim worker's journal `worker-<name>.jsonl` (engine phases,
//! fault hooks, leases), and the tool service's execution log `tools.jsonl`. Response
//! headers named in the scenario (`evidence.attempt_header`, `evidence.worker_header`)
//! and proxy observations arrive inside the trace itself.
//!
//! Other processes stamp their lines with CLOCK_MONOTONIC (`t_ns`); `run_start.mono_ns`
//! maps them onto the trace: `t = (t_ns - mono_ns) / 1000` µs. Files are streamed line
//! by line, never loaded whole, so judging stays memory-bounded however long the run.

use std::io::BufRead;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::scenario::TargetKind;

use crate::plan::Plan;
use crate::trace::Event;
use crate::wire::journal::{GatewayEntry, Stamped, ToolExecution, WorkerEntry};

pub use crate::trace::files::{GATEWAY_FILE, TOOLS_FILE};
use crate::trace::files::{WORKER_PREFIX, WORKER_SUFFIX};

/// One line of the gateway journal, read forward-compatibly: entry kinds this version
/// does not type are kept with their fields (a newer sim may journal more).
#[derive(Debug, Clone, PartialEq)]
pub enum GwItem {
    Known(GatewayEntry),
    Other {
        ev: String,
        fields: serde_json::Value,
    },
}

impl GwItem {
    /// The request the entry is about, if any.
    pub fn req(&self) -> Option<&str> {
        match self {
            GwItem::Known(e) => e.req(),
            GwItem::Other { fields, .. } => fields["req"].as_str(),
        }
    }
}

/// A gateway journal line with its own clock stamp.
#[derive(Debug, Clone, PartialEq)]
pub struct GwLine {
    pub t_ns: u64,
    pub item: GwItem,
}

impl GwLine {
    /// Parses one journal line; an unknown `ev` is kept as [`GwItem::Other`].
    pub fn parse(line: &str) -> Result<GwLine, String> {
        let (t_ns, ev, v) = stamp(line)?;
        let item = match typed::<GatewayEntry>(&ev, v.clone())? {
            Some(e) => GwItem::Known(e),
            None => GwItem::Other { ev, fields: v },
        };
        Ok(GwLine { t_ns, item })
    }

    /// Trace time (µs) of this line, given the trace's `run_start.mono_ns`.
    pub fn trace_t(&self, mono_ns: u64) -> u64 {
        trace_t(self.t_ns, mono_ns)
    }
}

/// A sim worker's journal line; kinds this version does not type are skipped.
#[derive(Debug, Clone, PartialEq)]
pub struct WkLine {
    pub t_ns: u64,
    pub entry: Option<WorkerEntry>,
}

impl WkLine {
    pub fn parse(line: &str) -> Result<WkLine, String> {
        let (t_ns, ev, v) = stamp(line)?;
        Ok(WkLine {
            t_ns,
            entry: typed::<WorkerEntry>(&ev, v)?,
        })
    }
}

/// Trace time (µs) of a CLOCK_MONOTONIC stamp.
pub fn trace_t(t_ns: u64, mono_ns: u64) -> u64 {
    t_ns.saturating_sub(mono_ns) / 1000
}

/// `t_ns`, `ev` and the whole object of one journal line.
fn stamp(line: &str) -> Result<(u64, String, serde_json::Value), String> {
    let v: serde_json::Value = serde_json::from_str(line).map_err(|e| e.to_string())?;
    let t_ns = v["t_ns"].as_u64().ok_or("no `t_ns` stamp")?;
    let ev = v["ev"].as_str().ok_or("no `ev` kind")?.to_string();
    Ok((t_ns, ev, v))
}

/// The typed entry, `None` for a kind this version does not know (a newer writer's),
/// an error for a known kind with bad fields.
fn typed<T: serde::de::DeserializeOwned>(
    ev: &str,
    v: serde_json::Value,
) -> Result<Option<T>, String> {
    match serde_json::from_value::<Stamped<T>>(v) {
        Ok(s) => Ok(Some(s.entry)),
        Err(e) if e.to_string().starts_with("unknown variant") => Ok(None),
        Err(e) => Err(format!("`{ev}` entry: {e}")),
    }
}

/// How an evidence source stood when the run was judged (shown with Request-Fate).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SourceState {
    /// Read and used.
    Used,
    /// This kind of target does not produce it: the checks that need it say so.
    NotExpected,
    /// Expected but absent: what needed it is UNKNOWN.
    Missing,
    /// Present but could not be read to the end: what needed it is UNKNOWN.
    Unreadable,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SourceReport {
    pub source: &'static str,
    pub state: SourceState,
    pub detail: String,
}

pub type Lines<T> = Box<dyn Iterator<Item = Result<T, String>>>;

/// The evidence besides the trace, as line streams (each read once).
pub struct Sources {
    pub gateway: Option<Lines<GwLine>>,
    /// Each sim worker's journal, by worker name.
    pub workers: Vec<(String, Lines<WkLine>)>,
    pub tools: Option<Lines<Stamped<ToolExecution>>>,
    pub reports: Vec<SourceReport>,
}

impl Sources {
    /// The client's trace only (hand-written traces, url targets with no extras).
    pub fn none() -> Sources {
        Sources {
            gateway: None,
            workers: Vec::new(),
            tools: None,
            reports: Vec::new(),
        }
    }

    /// In-memory evidence (tests, hand-written histories).
    pub fn from_memory(
        gateway: Option<Vec<GwLine>>,
        tools: Option<Vec<Stamped<ToolExecution>>>,
    ) -> Sources {
        let mut s = Sources::none();
        if let Some(g) = gateway {
            s.report("gateway journal", SourceState::Used, "in memory");
            s.gateway = Some(Box::new(g.into_iter().map(Ok)));
        }
        if let Some(t) = tools {
            s.report("tool log", SourceState::Used, "in memory");
            s.tools = Some(Box::new(t.into_iter().map(Ok)));
        }
        s
    }

    pub fn report(&mut self, source: &'static str, state: SourceState, detail: impl Into<String>) {
        self.reports.retain(|r| r.source != source);
        self.reports.push(SourceReport {
            source,
            state,
            detail: detail.into(),
        });
    }

    pub fn state(&self, source: &str) -> Option<SourceState> {
        self.reports
            .iter()
            .find(|r| r.source == source)
            .map(|r| r.state)
    }
}

/// Opens the evidence files of a run directory. Which sources are expected follows
/// from the scenario: the sim always journals its gateway; a tool log is expected when
/// `evidence.tool_log` names one (the sim's tool service writes it into the run dir).
pub fn open(dir: &Path, plan: &Plan) -> Sources {
    let mut s = Sources::none();
    let gw = dir.join(GATEWAY_FILE);
    match stream(&gw, GwLine::parse) {
        Ok(lines) => {
            s.report("gateway journal", SourceState::Used, gw.display().to_string());
            s.gateway = Some(lines);
        }
        Err(e) if plan.scenario.target.kind == TargetKind::Sim => s.report(
            "gateway journal",
            SourceState::Missing,
            format!("the sim gateway journals every attempt, but {e}"),
        ),
        Err(_) => s.report(
            "gateway journal",
            SourceState::NotExpected,
            "a url target has no gateway journal: attempts are read from response headers and chunk ids",
        ),
    }
    let mut names: Vec<(String, PathBuf)> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let w = name
                .strip_prefix(WORKER_PREFIX)?
                .strip_suffix(WORKER_SUFFIX)?
                .to_string();
            Some((w, e.path()))
        })
        .collect();
    names.sort();
    for (w, p) in &names {
        match stream(p, WkLine::parse) {
            Ok(lines) => s.workers.push((w.clone(), lines)),
            Err(e) => s.report("worker journals", SourceState::Unreadable, e),
        }
    }
    if s.state("worker journals").is_none() {
        let found: Vec<&str> = names.iter().map(|(w, _)| w.as_str()).collect();
        if !found.is_empty() {
            s.report(
                "worker journals",
                SourceState::Used,
                format!("worker-{{{}}}.jsonl", found.join(",")),
            );
        } else if plan.scenario.target.kind == TargetKind::Sim {
            s.report(
                "worker journals",
                SourceState::NotExpected,
                "no worker journal in the run: stages before the first delta come from the gateway only",
            );
        }
    }
    let tools = dir.join(TOOLS_FILE);
    match stream(&tools, |l| {
        serde_json::from_str::<Stamped<ToolExecution>>(l).map_err(|e| e.to_string())
    }) {
        Ok(lines) => {
            s.report("tool log", SourceState::Used, tools.display().to_string());
            s.tools = Some(lines);
        }
        Err(e) => match &plan.scenario.evidence.tool_log {
            Some(src) => s.report(
                "tool log",
                SourceState::Missing,
                format!("evidence.tool_log is {src}, but {e}"),
            ),
            None => s.report(
                "tool log",
                SourceState::NotExpected,
                "no tool log in the run (evidence.tool_log not set): tool side effects are not checked",
            ),
        },
    }
    s
}

/// Streams a JSON-lines file through `parse`. A torn last line (the writer was killed)
/// ends the stream; any other bad line is an error naming file and line.
pub fn stream<T: 'static>(
    path: &Path,
    parse: fn(&str) -> Result<T, String>,
) -> Result<Lines<T>, String> {
    let f = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let name = path.display().to_string();
    let mut lines = std::io::BufReader::new(f).lines().enumerate().peekable();
    Ok(Box::new(std::iter::from_fn(move || {
        loop {
            let (i, line) = lines.next()?;
            let line = match line {
                Ok(l) => l,
                Err(e) => return Some(Err(format!("{name}:{}: {e}", i + 1))),
            };
            if line.trim().is_empty() {
                continue;
            }
            return match parse(&line) {
                Ok(v) => Some(Ok(v)),
                Err(_) if lines.peek().is_none() => None,
                Err(e) => Some(Err(format!("{name}:{}: {e}", i + 1))),
            };
        }
    })))
}

/// One item of the merged evidence stream, in trace time.
pub enum Item {
    Trace(Event),
    Gateway(u64, GwItem),
    /// A worker journal entry: (time, worker, entry).
    Worker(u64, String, WorkerEntry),
    /// The gateway journal has no more lines (read to its end or stopped on an error).
    GatewayEnd,
}

/// One journal being merged, with the line read ahead.
struct Journal {
    worker: Option<String>,
    lines: Option<Lines<Item>>,
    head: Option<(u64, Item)>,
}

/// Merges the trace (fault lines excluded: they are known up front) with the journals
/// by time. Each is written as things happen, so each is nearly in time order; the
/// fold tolerates what little disorder remains. A journal line that cannot be read
/// stops that journal and is reported through `on_error` (source, message).
pub fn merge<'a, I: Iterator<Item = Event> + 'a>(
    trace: I,
    gateway: Option<Lines<GwLine>>,
    workers: Vec<(String, Lines<WkLine>)>,
    mono_ns: u64,
    mut on_error: impl FnMut(&'static str, String) + 'a,
) -> impl Iterator<Item = Item> + 'a {
    let mut trace = trace.peekable();
    let mut journals: Vec<Journal> = Vec::new();
    if let Some(g) = gateway {
        journals.push(Journal {
            worker: None,
            lines: Some(Box::new(
                g.map(move |l| l.map(|l| Item::Gateway(l.trace_t(mono_ns), l.item))),
            )),
            head: None,
        });
    }
    for (w, lines) in workers {
        let name = w.clone();
        journals.push(Journal {
            worker: Some(w),
            lines: Some(Box::new(lines.filter_map(move |l| match l {
                Ok(WkLine {
                    t_ns,
                    entry: Some(e),
                }) => Some(Ok(Item::Worker(trace_t(t_ns, mono_ns), name.clone(), e))),
                Ok(_) => None,
                Err(e) => Some(Err(e)),
            }))),
            head: None,
        });
    }
    let mut pending_end = false;
    std::iter::from_fn(move || {
        for j in &mut journals {
            if j.head.is_some() {
                continue;
            }
            let Some(lines) = j.lines.as_mut() else {
                continue;
            };
            match lines.next() {
                Some(Ok(item)) => {
                    let t = match &item {
                        Item::Gateway(t, _) | Item::Worker(t, _, _) => *t,
                        _ => 0,
                    };
                    j.head = Some((t, item));
                }
                end => {
                    if let Some(Err(e)) = end {
                        on_error(
                            if j.worker.is_some() {
                                "worker journals"
                            } else {
                                "gateway journal"
                            },
                            e,
                        );
                    }
                    j.lines = None;
                    pending_end |= j.worker.is_none();
                }
            }
        }
        if std::mem::take(&mut pending_end) {
            return Some(Item::GatewayEnd);
        }
        let first = journals
            .iter()
            .enumerate()
            .filter_map(|(i, j)| j.head.as_ref().map(|h| (h.0, i)))
            .min();
        // No journal line waits: the trace goes on, unpeeked.
        let Some((t, i)) = first else {
            return trace.next().map(Item::Trace);
        };
        match trace.peek() {
            Some(ev) if t >= ev.t() => trace.next().map(Item::Trace),
            _ => journals[i].head.take().map(|h| h.1),
        }
    })
}
