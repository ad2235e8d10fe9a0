//! Every evidence source of a run directory, read as streams and placed on the trace's
//! timeline (M10): the client's `trace.jsonl` (always), the sim gateway's journal
//! `gateway.jsonl`, and the tool service's execution log `tools.jsonl`. Response
//! headers named in the scenario (`evidence.attempt_header`, `evidence.worker_header`)
//! and proxy observations arrive inside the trace itself.
//!
//! Other processes stamp their lines with CLOCK_MONOTONIC (`t_ns`); `run_start.mono_ns`
//! maps them onto the trace: `t = (t_ns - mono_ns) / 1000` µs. Files are streamed line
//! by line, never loaded whole, so judging stays memory-bounded however long the run.

use std::io::BufRead;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::scenario::{Plan, TargetKind};
use crate::trace::Event;
use crate::trace::journal::{GatewayEntry, Stamped, ToolExecution};

pub const GATEWAY_FILE: &str = "gateway.jsonl";
pub const TOOLS_FILE: &str = "tools.jsonl";

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
            GwItem::Known(e) => match e {
                GatewayEntry::AttemptStart { req, .. }
                | GatewayEntry::AttemptEnd { req, .. }
                | GatewayEntry::ExplicitError { req, .. }
                | GatewayEntry::RetryAfterDelta { req, .. }
                | GatewayEntry::NoUpstream { req, .. } => Some(req),
                _ => None,
            },
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
        let v: serde_json::Value = serde_json::from_str(line).map_err(|e| e.to_string())?;
        let t_ns = v["t_ns"].as_u64().ok_or("no `t_ns` stamp")?;
        let ev = v["ev"].as_str().ok_or("no `ev` kind")?.to_string();
        let item = match serde_json::from_value::<Stamped<GatewayEntry>>(v.clone()) {
            Ok(s) => GwItem::Known(s.entry),
            Err(e) if KNOWN_KINDS.contains(&ev.as_str()) => {
                return Err(format!("`{ev}` entry: {e}"));
            }
            Err(_) => GwItem::Other { ev, fields: v },
        };
        Ok(GwLine { t_ns, item })
    }

    /// Trace time (µs) of this line, given the trace's `run_start.mono_ns`.
    pub fn trace_t(&self, mono_ns: u64) -> u64 {
        self.t_ns.saturating_sub(mono_ns) / 1000
    }
}

/// Entry kinds typed in [`GatewayEntry`]: a malformed one is an error, not "unknown".
const KNOWN_KINDS: [&str; 7] = [
    "attempt_start",
    "attempt_end",
    "explicit_error",
    "retry_after_delta",
    "no_upstream",
    "upstream_ready",
    "upstream_removed",
];

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
    pub tools: Option<Lines<Stamped<ToolExecution>>>,
    pub reports: Vec<SourceReport>,
}

impl Sources {
    /// The client's trace only (hand-written traces, url targets with no extras).
    pub fn none() -> Sources {
        Sources {
            gateway: None,
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
    /// The journal has no more lines (it was read to its end or stopped on an error).
    GatewayEnd,
}

/// Merges the trace (fault lines excluded: they are known up front) with the gateway
/// journal by time. Both are written as things happen, so each is nearly in time
/// order; the fold tolerates what little disorder remains. A journal line that cannot
/// be read stops the journal and is reported through `on_error`.
pub fn merge<'a, I: Iterator<Item = Event> + 'a>(
    trace: I,
    gateway: Option<Lines<GwLine>>,
    mono_ns: u64,
    mut on_error: impl FnMut(String) + 'a,
) -> impl Iterator<Item = Item> + 'a {
    let mut trace = trace.peekable();
    let mut gw = gateway;
    let mut gw_head: Option<(u64, GwItem)> = None;
    std::iter::from_fn(move || {
        if gw_head.is_none()
            && let Some(g) = gw.as_mut()
        {
            match g.next() {
                Some(Ok(l)) => gw_head = Some((l.trace_t(mono_ns), l.item)),
                Some(Err(e)) => {
                    on_error(e);
                    gw = None;
                }
                None => gw = None,
            }
            if gw.is_none() {
                return Some(Item::GatewayEnd);
            }
        }
        let take_gw = match (&gw_head, trace.peek()) {
            (Some((gt, _)), Some(ev)) => *gt < ev.t(),
            (Some(_), None) => true,
            (None, _) => false,
        };
        if take_gw {
            gw_head.take().map(|(t, it)| Item::Gateway(t, it))
        } else {
            trace.next().map(Item::Trace)
        }
    })
}

/// Brings evidence that lives outside the run directory into it at the end of a run,
/// so `haq check RUN_DIR` needs no network: `evidence.tool_log` (a path or an
/// `http(s)://` URL) becomes `RUN_DIR/tools.jsonl`. Returns what went wrong, if
/// anything (the judge then reports the tool log as missing).
pub async fn collect(plan: &Plan, dir: &Path) -> Result<(), String> {
    let Some(src) = &plan.scenario.evidence.tool_log else {
        return Ok(());
    };
    let dest = dir.join(TOOLS_FILE);
    if src.starts_with("http://") || src.starts_with("https://") {
        let http = crate::client::http_client(
            std::time::Duration::from_secs(5),
            &reqwest::header::HeaderMap::new(),
        )
        .map_err(|e| format!("tool log {src}: {e}"))?;
        let resp = http
            .get(src)
            .timeout(std::time::Duration::from_secs(30))
            .send()
            .await
            .and_then(reqwest::Response::error_for_status)
            .map_err(|e| format!("tool log {src}: {e}"))?;
        let body = resp
            .bytes()
            .await
            .map_err(|e| format!("tool log {src}: {e}"))?;
        std::fs::write(&dest, &body).map_err(|e| format!("{}: {e}", dest.display()))
    } else {
        let p = PathBuf::from(src);
        if p == dest {
            return Ok(());
        }
        std::fs::copy(&p, &dest)
            .map(|_| ())
            .map_err(|e| format!("tool log {}: {e}", p.display()))
    }
}
