//! The fold of one trace into a [`Judgement`]: a first pass collects the faults and
//! the clock base, the second folds every event (merged in time with the sim's
//! journals) into the per-request checks, the metrics and the run-level evidence;
//! [`super::verdicts`] then judges the eight verdicts in one place.

use std::path::Path;

use anyhow::Context;

use super::capacity::adaptive::Search;
use super::capacity::search::Judged;
use super::history::{FaultRec, Folder, RequestRecord, RequestSink};
use super::judgement::Judgement;
use super::latency::{PhaseAcc, PhaseStats};
use super::retain::Keep;
use super::{evidence, fate, run, verdicts};
use crate::plan::Plan;
use crate::plan::capacity::{DIR, OVERLOAD, Params, STEP};
use crate::trace::files::SCENARIO_FILE;
use crate::trace::{Event, Line};

struct Acc {
    phases: Vec<PhaseAcc>,
    fate: fate::FateAcc,
    run: run::RunAcc,
    slo: crate::scenario::Slo,
    series: crate::metrics::SeriesAcc,
    slip: crate::metrics::SlipAcc,
    local: super::validity::LocalAcc,
    agents: super::agents::AgentAcc,
    own: super::own::OwnAcc,
}

impl RequestSink for Acc {
    fn request(&mut self, r: &RequestRecord, faults: &[FaultRec]) {
        let m = crate::metrics::Measured::of(r, &self.slo);
        // Probe requests are held back at haq's proxy on purpose: their latency is the
        // instrument's, not the service's (Q2). Request-Fate and the timeline judge them.
        if r.probe.is_none() {
            if let Some(p) = self.phases.iter_mut().find(|p| p.name == r.phase) {
                p.add_measured(r, &m);
            }
            self.series.add(r, &m);
            self.slip.add(r, &m);
        }
        self.local.add(r);
        self.agents.add(r);
        let caught = self.fate.add(r, faults);
        self.run.request(r, &m, faults, caught);
    }
}

/// Judges a trace (no other evidence) against the plan.
pub fn judge<I: IntoIterator<Item = Event>>(plan: &Plan, events: impl Fn() -> I) -> Judgement {
    judge_with(plan, events, evidence::Sources::none())
}

/// Judges a trace and the other evidence of the run against the plan. `events` is
/// called twice: a first pass collects the faults (their lines may follow the requests
/// they cut: a fault is written once verified) and the clock base; the second folds
/// the requests, merged in time with the gateway journal.
pub fn judge_with<I: IntoIterator<Item = Event>>(
    plan: &Plan,
    events: impl Fn() -> I,
    src: evidence::Sources,
) -> Judgement {
    judge_keeping(plan, events, src, Keep::Every)
}

/// As [`judge_with`], keeping what `keep` says of the per-request items.
pub fn judge_keeping<I: IntoIterator<Item = Event>>(
    plan: &Plan,
    events: impl Fn() -> I,
    src: evidence::Sources,
    keep: Keep,
) -> Judgement {
    judge_set_up(
        plan,
        Setup::from(events()),
        Trace::Events(events()),
        src,
        (None, keep),
    )
}

/// What the first pass over a trace collects before requests are folded.
struct Setup {
    folder: Folder,
    mono_ns: u64,
    proxied: bool,
    /// Wall-clock start of load: the run's start plus its first phase edge (the
    /// interval log's base time).
    load_start: std::time::SystemTime,
    /// The run's capacity search, judged from its directory (`RUN_DIR/capacity/`).
    search: Option<Search>,
}

impl Setup {
    /// The only kinds of event the first pass reads.
    const TAGS: &'static [&'static str] = &["fault", "run_start", "proxy_request", "phase"];

    fn from(events: impl IntoIterator<Item = Event>) -> Setup {
        let mut s = Setup {
            folder: Folder::default(),
            mono_ns: 0,
            proxied: false,
            search: None,
            load_start: std::time::UNIX_EPOCH,
        };
        let mut wall = std::time::UNIX_EPOCH;
        let mut first_phase = None;
        for ev in events {
            match ev {
                Event::Fault(_) => s.folder.push(ev, &mut NoSink),
                Event::RunStart {
                    mono_ns: m,
                    wall: w,
                    ..
                } => {
                    s.mono_ns = m;
                    if let Ok(t) = chrono::DateTime::parse_from_rfc3339(&w) {
                        let us = t.timestamp_micros().max(0) as u64;
                        wall = std::time::UNIX_EPOCH + std::time::Duration::from_micros(us);
                    }
                }
                Event::Phase { t, .. } => {
                    first_phase.get_or_insert(t);
                }
                Event::ProxyRequest { .. } => s.proxied = true,
                _ => {}
            }
        }
        s.load_start = wall + std::time::Duration::from_micros(first_phase.unwrap_or(0));
        s.folder.faults.sort_by_key(|f| f.t);
        s
    }
}

/// The trace as the fold reads it.
enum Trace<'b, I> {
    /// Events built by the caller.
    Events(I),
    /// A trace file, read in place. The first line that does not read ends the trace
    /// and is kept in `bad`.
    File(crate::trace::Reader, &'b mut Option<String>),
}

impl<'b, I: IntoIterator<Item = Event> + 'b> Trace<'b, I> {
    /// Every event, up to the first line that does not read.
    fn events(self) -> Box<dyn Iterator<Item = Event> + 'b> {
        match self {
            Trace::Events(events) => Box::new(events.into_iter()),
            Trace::File(mut r, bad) => Box::new(
                std::iter::from_fn(move || r.next_with(|l| l.into_event())).map_while(|r| {
                    r.map_err(|msg| {
                        bad.get_or_insert(msg);
                    })
                    .ok()
                }),
            ),
        }
    }
}

/// Judges a set-up trace: the fold, then the tool log, then the eight verdicts.
fn judge_set_up<I: IntoIterator<Item = Event>>(
    plan: &Plan,
    setup: Setup,
    trace: Trace<'_, I>,
    mut src: evidence::Sources,
    (mut intervals, keep): (Option<crate::metrics::series::IntervalSink>, Keep),
) -> Judgement {
    let Setup {
        mut folder,
        mono_ns,
        proxied,
        search,
        ..
    } = setup;
    let mut acc = Acc::new(plan, &src, &mut folder, (proxied, keep));
    let read_errors = fold_trace(
        &mut acc,
        &mut folder,
        &mut intervals,
        trace,
        &mut src,
        mono_ns,
    );
    folder.finish(&mut acc);
    if folder.proxy.legs > 0 {
        src.report(
            "haq's proxy",
            evidence::SourceState::Used,
            folder.proxy.describe(),
        );
    }
    for (source, e) in read_errors {
        src.report(source, evidence::SourceState::Unreadable, e);
    }
    fold_tools(&mut acc, &mut src, mono_ns);
    judgement(plan, acc, (folder, search), src, &mut intervals)
}

impl Acc {
    /// The folds of a run, and the linger window the evidence needs: with a journal
    /// (or proxy lines), late lines past the cancel grace are waited for before a
    /// request is judged — the gateway learns late that a client left.
    fn new(
        plan: &Plan,
        src: &evidence::Sources,
        folder: &mut Folder,
        (proxied, keep): (bool, Keep),
    ) -> Acc {
        let mut ctx = fate::Ctx::new(plan);
        ctx.journal = src.gateway.is_some();
        if ctx.journal || proxied {
            folder.linger = ctx.cancel_grace + 1_000_000;
        }
        Acc {
            phases: plan
                .phases
                .iter()
                .map(|p| PhaseAcc::new(&p.name, p.kind).with_duration(p.duration))
                .collect(),
            fate: fate::FateAcc::new(ctx),
            run: run::RunAcc::keeping(plan, src.gateway.is_some(), &folder.faults, keep),
            slo: plan.scenario.slo.clone(),
            series: crate::metrics::SeriesAcc::default(),
            slip: crate::metrics::SlipAcc::new(plan),
            local: Default::default(),
            agents: Default::default(),
            own: Default::default(),
        }
    }
}

/// Folds the whole trace: a file with no journal to merge line by line in place,
/// anything else merged in time with the journals. Returns the journals' read errors.
fn fold_trace<I: IntoIterator<Item = Event>>(
    acc: &mut Acc,
    folder: &mut Folder,
    intervals: &mut Option<crate::metrics::series::IntervalSink>,
    trace: Trace<'_, I>,
    src: &mut evidence::Sources,
    mono_ns: u64,
) -> Vec<(&'static str, String)> {
    let journals = src.gateway.is_some() || !src.workers.is_empty();
    match trace {
        Trace::File(r, bad) if !journals => {
            fold_file(acc, folder, intervals, r, bad);
            Vec::new()
        }
        trace => fold_merged(acc, folder, intervals, trace.events(), src, mono_ns),
    }
}

/// Nothing to merge in time: each line is folded as it is read, a chunk line from
/// the read buffer. The first line that does not read ends the trace, kept in `bad`.
fn fold_file(
    acc: &mut Acc,
    folder: &mut Folder,
    intervals: &mut Option<crate::metrics::series::IntervalSink>,
    mut r: crate::trace::Reader,
    bad: &mut Option<String>,
) {
    while let Some(read) = r.next_with(|line| match line {
        Line::Chunk(c) => {
            acc.run.see_t(c.t);
            acc.series.tick(c.t, intervals);
            folder.push_chunk(&c, acc);
        }
        Line::Event(Event::Fault(_)) => {}
        Line::Event(ev) => fold_event(acc, folder, intervals, ev),
    }) {
        if let Err(msg) = read {
            bad.get_or_insert(msg);
            break;
        }
    }
}

/// Folds the tool log into Request-Fate, up to its first unreadable line.
fn fold_tools(acc: &mut Acc, src: &mut evidence::Sources, mono_ns: u64) {
    let Some(tools) = src.tools.take() else {
        return;
    };
    for line in tools {
        match line {
            Ok(x) => acc
                .fate
                .tool(x.t_ns.saturating_sub(mono_ns) / 1000, &x.entry),
            Err(e) => {
                src.report("tool log", evidence::SourceState::Unreadable, e);
                break;
            }
        }
    }
}

/// The folds finished: the eight verdicts judged, and everything reported with them.
fn judgement(
    plan: &Plan,
    acc: Acc,
    (folder, search): (Folder, Option<Search>),
    src: evidence::Sources,
    intervals: &mut Option<crate::metrics::series::IntervalSink>,
) -> Judgement {
    let phases: Vec<PhaseStats> = acc.phases.iter().map(PhaseStats::from).collect();
    let seconds = acc.series.finish(intervals);
    let level = acc.run.finish(plan, &folder.faults, &seconds, search);
    let protected_load = super::capacity::protected_load(plan, &phases);
    let verdicts = verdicts::judge(&verdicts::Judged {
        plan,
        level: &level,
        phases: &phases,
        fate: &acc.fate,
        sources: &src.reports,
        complete: folder.info.complete,
        load: &protected_load,
        interrupted: folder.info.interrupted,
    });
    let gates = super::gates::judge(plan, &verdicts);
    let unfinished = folder.unfinished();
    let client =
        super::validity::judge(plan, &acc.slip.finish(), &phases, (&acc.local, &acc.agents));
    let own = acc.own.finish();
    let fate_table = acc.fate.table_rows();
    let fate = acc.fate;
    let cache_effects = super::cache_effects::table(&level.evidence, &level.timeline);
    let degraded = level.degraded();
    let mut facts = level.evidence;
    // The verdicts read what was kept; the reports get every request.
    if let Some(every) = facts.every.take() {
        facts.requests = every;
    }
    Judgement {
        run: folder.info,
        verdicts,
        phases,
        faults: folder.faults,
        findings: fate.findings,
        finding_counts: fate.counts.into_iter().collect(),
        fate_table,
        fate_requests: fate.fates,
        evidence: src.reports,
        checker_crashes: fate.crashes,
        unfinished,
        degraded,
        cache_effects,
        timeline: level.timeline,
        capacity: level.capacity,
        facts,
        seconds,
        client,
        own,
        gates,
        protected_load,
    }
}

/// Folds one trace event (every fold sees it before the request fold).
fn fold_event(
    acc: &mut Acc,
    folder: &mut Folder,
    intervals: &mut Option<crate::metrics::series::IntervalSink>,
    ev: Event,
) {
    acc.run.see(&ev);
    acc.local.observe(&ev);
    acc.series.observe(&ev, intervals);
    acc.slip.observe(&ev);
    acc.agents.observe(&ev);
    acc.own.observe(&ev);
    folder.push(ev, acc)
}

/// Folds the trace merged in time with the gateway and worker journals; returns the
/// journals' read errors.
fn fold_merged(
    acc: &mut Acc,
    folder: &mut Folder,
    intervals: &mut Option<crate::metrics::series::IntervalSink>,
    trace: impl IntoIterator<Item = Event>,
    src: &mut evidence::Sources,
    mono_ns: u64,
) -> Vec<(&'static str, String)> {
    let mut read_errors = Vec::new();
    let trace = trace.into_iter().filter(|e| !matches!(e, Event::Fault(_)));
    let workers = std::mem::take(&mut src.workers);
    let on_error = |source, e| read_errors.push((source, e));
    for item in evidence::merge(trace, src.gateway.take(), workers, mono_ns, on_error) {
        match item {
            evidence::Item::Trace(ev) => fold_event(acc, folder, intervals, ev),
            evidence::Item::Gateway(t, it) => {
                acc.run.gateway(t, &it);
                folder.push_gateway(t, it, acc)
            }
            evidence::Item::Worker(t, w, e) => {
                acc.own.worker(&e);
                folder.push_worker(t, &w, e, acc)
            }
            evidence::Item::GatewayEnd => folder.gateway_ended(),
        }
    }
    read_errors
}

struct NoSink;
impl RequestSink for NoSink {
    fn request(&mut self, _: &RequestRecord, _: &[FaultRec]) {}
}

/// Re-reads a run directory's scenario and trace and judges them: no network, and
/// nothing written (`haq check` of a read-only run directory).
/// It keeps only what the verdicts read of the requests (not one record per request:
/// [`Keep::Bounded`]), so its judgement's `facts.requests` holds those alone.
pub fn judge_dir(dir: &Path) -> anyhow::Result<(Plan, Judgement)> {
    judge_dir_keeping(dir, None, Keep::Bounded)
}

/// As [`judge_dir`], writing the run's HdrHistogram interval log (`latency.hlog`: it is
/// rebuilt from the trace each time the run is judged) into `hlog` as the judging goes.
/// An unreadable trace line fails the whole judgement; the caller then drops what was
/// written.
pub fn judge_dir_with(
    dir: &Path,
    hlog: Option<&mut dyn std::io::Write>,
) -> anyhow::Result<(Plan, Judgement)> {
    judge_dir_keeping(dir, hlog, Keep::Every)
}

/// As [`judge_dir_with`], keeping what `keep` says of the per-request items.
pub fn judge_dir_keeping(
    dir: &Path,
    hlog: Option<&mut dyn std::io::Write>,
    keep: Keep,
) -> anyhow::Result<(Plan, Judgement)> {
    let sc = dir.join(SCENARIO_FILE);
    let text = std::fs::read_to_string(&sc).with_context(|| format!("reading {}", sc.display()))?;
    let plan = crate::plan::from_recorded_json(&text).map_err(anyhow::Error::msg)?;
    let tp = dir.join(crate::trace::TRACE_FILE);
    let reading = |e: std::io::Error| anyhow::anyhow!("reading {}: {e}", tp.display());
    let setup = Setup::from(
        crate::trace::read_only(&tp, Setup::TAGS)
            .map_err(reading)?
            .map_while(Result::ok),
    );
    // One full pass reads (and checks) every line while judging.
    let mut bad_line = None;
    let trace = crate::trace::Reader::open(&tp, None).map_err(reading)?;
    let sources = evidence::open(dir, &plan);
    let mut setup = setup;
    setup.search = Params::of(&plan).map(|p| judge_search_dir(&dir.join(DIR), &plan, &p));
    let trace = Trace::<Option<Event>>::File(trace, &mut bad_line);
    let j = match hlog {
        Some(mut out) => crate::metrics::hlog::write(&mut out, setup.load_start, |sink| {
            judge_set_up(&plan, setup, trace, sources, (Some(sink), keep))
        })
        .context("writing the interval log")?,
        None => judge_set_up(&plan, setup, trace, sources, (None, keep)),
    };
    if let Some(msg) = bad_line.take() {
        anyhow::bail!("{}: {msg}", tp.display());
    }
    let mut j = j;
    search_interrupted(dir, &mut j);
    Ok((plan, j))
}

/// One step of a capacity search judged from its run directory: a bracketing step
/// (its `step` phase, `check::capacity::steps`) or an overload step (its Overload
/// verdict and the stretch after the excess, `check::capacity::excess`).
pub fn judge_search_step(dir: &Path) -> anyhow::Result<Judged> {
    let (p, j) = judge_dir(dir)?;
    if p.phases.iter().any(|x| x.name == OVERLOAD) {
        let v = j
            .verdicts
            .iter()
            .find(|v| v.name == super::VerdictName::Overload)
            .with_context(|| format!("{}: no Overload verdict", dir.display()))?;
        let s = super::capacity::excess::judge(
            &p,
            v,
            &j.phases,
            (&j.facts.requests, &j.faults),
            (&j.client, &j.own),
        );
        return Ok(Judged::Overload(Box::new(s)));
    }
    let stats = j
        .phases
        .iter()
        .find(|s| s.name == STEP)
        .with_context(|| format!("{}: no `{STEP}` phase measured", dir.display()))?;
    let rate = p
        .phases
        .iter()
        .find(|x| x.name == STEP)
        .map_or(0.0, |x| x.rate);
    let s = super::capacity::steps::judge(
        &p,
        stats,
        (&j.facts.requests, &j.faults),
        (&j.client, &j.own),
        rate,
    );
    Ok(Judged::Step(Box::new(s)))
}

/// A capacity search judged from its directory: `haq capacity`'s `OUT/`, a run's
/// `RUN_DIR/capacity/` (`plan`: the search's scenario, `params`: how it searched).
pub fn judge_search_dir(dir: &Path, plan: &Plan, params: &Params) -> Search {
    super::capacity::search::judge(dir, plan, params, &judge_search_step)
}

/// A run whose capacity search SIGINT/SIGTERM stopped is an interrupted run
/// (`capacity/stopped.txt` says so): its result is INTERRUPTED, as its exit code was.
fn search_interrupted(dir: &Path, j: &mut Judgement) {
    let stopped = std::fs::read_to_string(dir.join(DIR).join(crate::plan::capacity::STOPPED));
    if let Ok(why) = stopped.as_deref()
        && why.starts_with(crate::plan::capacity::INTERRUPTED)
        && !j.run.interrupted
    {
        j.run.interrupted = true;
        j.run.reason = Some(why.trim().to_string());
    }
}
