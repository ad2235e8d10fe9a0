//! The load loop. A dedicated dispatcher thread walks one timeline of phase edges and
//! requests, each at its absolute deadline from the start of load (open loop: a slow
//! server never delays the next send; SPEC Q12). It sleeps on the OS timer with 1 ns
//! slack (tokio's timer wheel has 1 ms granularity), builds each request body *before*
//! its deadline, and at the deadline only spawns the request onto the runtime, which
//! stamps the dispatch. Faults fire on the same clock in their own task
//! (`faults::schedule`), so this loop only dispatches. Then in-flight requests drain.
//!
//! With `workload.arrival.max_concurrency`, a request due while the cap is reached
//! waits for a slot (closed loop); `admitted` records when it got one, its latency
//! still counts from its intended time, and schedule slip is measured from
//! `max(intended, admitted)`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::progress::Progress;
use crate::client::{self, Call, Timeouts};
use crate::plan::Plan;
use crate::trace::{Clock, Edge, Event, Outcome, ReplicaInfo, TraceWriter};
use crate::workload::{self, Planned, Schedule, Share};

/// Which part of the load this process offers (`haq run --agents`, docs/agents.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Part {
    /// Phase edges and every request: one process, as without agents.
    Whole,
    /// Phase edges only: the coordinator, whose agents send the requests.
    Edges,
    /// One share of the requests and no edges: an agent.
    Share(Share),
}

impl Part {
    fn sends(self, idx: u64) -> bool {
        match self {
            Part::Whole => true,
            Part::Edges => false,
            Part::Share(s) => s.holds(idx),
        }
    }

    /// The warm connections this part opens: an agent its share of them.
    fn warm(self, wanted: u32) -> u32 {
        match self {
            Part::Whole => wanted,
            Part::Edges => 0,
            Part::Share(s) => wanted.div_ceil(s.count.max(1) as u32),
        }
    }
}

/// What the dispatcher thread owns.
struct Dispatcher {
    plan: Plan,
    api_url: String,
    http: client::Http,
    timeouts: Timeouts,
    clock: Clock,
    tw: TraceWriter,
    cancel: CancellationToken,
    stop: Arc<client::stop::Stop>,
    progress: Progress,
    tracker: TaskTracker,
    handle: tokio::runtime::Handle,
    cap: Option<Arc<Semaphore>>,
    load_start: Instant,
    /// Attribution headers other than the sim's, as the scenario names them.
    attribution: Option<Arc<client::Attribution>>,
    /// When a client last went away before its answer ended (trace µs; 0: never).
    left: Arc<AtomicU64>,
    /// Where each body carries its marker, and the run's token.
    marker: workload::BodyMarker,
    part: Part,
}

/// A request ready to go: body built, event filled but for the dispatch stamp.
struct Ready {
    call: Call,
    event: Event,
    at: Duration,
    intended: u64,
    /// The plan's index of the request's phase, and whether it streams (progress).
    phase: usize,
    stream: bool,
}

/// Where the load goes: the target's API and replicas (for attribution).
#[derive(Clone, Copy)]
pub(super) struct Aim<'a> {
    pub api_url: &'a str,
    pub replicas: &'a [ReplicaInfo],
    /// Addresses the target learns while the run goes (kubernetes replacements).
    pub learned: Option<&'a Arc<client::Learned>>,
}

/// What the load shares with the rest of the run.
pub(super) struct Ctx<'a> {
    pub clock: &'a Clock,
    pub tw: &'a TraceWriter,
    pub cancel: &'a CancellationToken,
    pub progress: &'a Progress,
    /// Set to the last time a client went away before its answer ended: its workload
    /// abandonment, or haq's own stop at the drain timeout.
    pub left: Arc<AtomicU64>,
    pub part: Part,
    /// The start of load, when another process set it (agents); else 50 ms from now.
    pub load_start: Option<Instant>,
}

/// Offers the schedule and fires phase edges on time from the start of load (told to
/// `started`, whose clock the fault schedule shares), then drains.
pub(super) async fn drive(
    plan: &Plan,
    target: Aim<'_>,
    marker: workload::BodyMarker,
    started: tokio::sync::oneshot::Sender<Instant>,
    ctx: Ctx<'_>,
) -> anyhow::Result<()> {
    let Ctx {
        clock,
        tw,
        cancel,
        progress,
        left,
        part,
        load_start,
    } = ctx;
    let c = &plan.scenario.client;
    let http = client::Http::new(
        c.connect_timeout.0,
        &super::headers::request_headers(plan)?,
        c.transport,
    )?
    .with_limits(&c.limits);
    // Fail before any load if the schedule cannot be built (input data missing).
    Schedule::new(plan).map_err(anyhow::Error::msg)?;
    let warm_n = part.warm(c.warm_connections);
    if warm_n > 0 {
        let to = (&http, target.api_url);
        warm(plan, to, warm_n, clock, tw, cancel, progress).await;
    }
    // Stops in-flight requests: at the drain timeout they record `cancelled`, at an
    // interrupt `interrupted`.
    let stop = Arc::new(client::stop::Stop::default());
    // An interrupt stops them too.
    let _interrupt = {
        let (cancel, stop) = (cancel.clone(), stop.clone());
        tokio_util::task::AbortOnDropHandle::new(tokio::spawn(async move {
            cancel.cancelled().await;
            stop.interrupt();
        }))
    };
    let tracker = TaskTracker::new();
    let load_start = load_start.unwrap_or_else(|| Instant::now() + Duration::from_millis(50));
    let _ = started.send(load_start);
    let d = Dispatcher {
        plan: plan.clone(),
        api_url: target.api_url.to_string(),
        http,
        timeouts: Timeouts {
            first_token: c.first_token_timeout.0,
            idle: c.idle_timeout.0,
        },
        clock: *clock,
        tw: tw.clone(),
        cancel: cancel.clone(),
        stop: stop.clone(),
        progress: progress.clone(),
        tracker: tracker.clone(),
        handle: tokio::runtime::Handle::current(),
        cap: plan
            .scenario
            .workload
            .arrival
            .max_concurrency
            .map(|n| Arc::new(Semaphore::new(n as usize))),
        load_start,
        attribution: attribution(plan, target.replicas, target.learned),
        left,
        marker,
        part,
    };
    let dispatched = dispatch(d, cancel).await;
    drain(plan, &tracker, cancel, progress).await;
    // After an interrupt the requests left are the interrupt's (`interrupted`), also
    // when this comes before the task above has seen the cancel.
    if cancel.is_cancelled() {
        stop.interrupt();
    } else {
        stop.stop();
    }
    tracker.wait().await;
    progress.finish();
    dispatched.map_err(anyhow::Error::msg)
}

/// Records how the trace writer kept up (issue #4 item 5): any wait for room in its
/// bounded buffer makes the run INVALID when judged.
pub(super) fn emit_trace_stats(tw: &TraceWriter, clock: &Clock) {
    let b = tw.backpressure();
    tw.emit(Event::TraceStats {
        t: clock.now_us(),
        waits: b.waits,
        waited_us: b.waited_us,
        worst_us: b.worst_us,
        peak_bytes: b.peak_bytes,
        cap_bytes: b.cap_bytes,
        lines: b.lines,
    });
}

/// The response headers that name the serving replica and attempt, when the scenario
/// names others than the sim's or the target's replicas have addresses a gateway may
/// name them by (its own upstream header, `evidence.worker_header`).
pub(super) fn attribution(
    plan: &Plan,
    replicas: &[ReplicaInfo],
    learned: Option<&Arc<client::Learned>>,
) -> Option<Arc<client::Attribution>> {
    let ev = &plan.scenario.evidence;
    let by_address = plan.scenario.target.kind != crate::scenario::TargetKind::Sim;
    let named =
        ev.worker_header != client::WORKER_HEADER || ev.attempt_header != client::ATTEMPT_HEADER;
    (named || by_address).then(|| {
        Arc::new(client::Attribution {
            worker: ev.worker_header.to_ascii_lowercase(),
            attempt: ev.attempt_header.to_ascii_lowercase(),
            replicas: replicas
                .iter()
                .map(|r| {
                    let addrs = [r.proxy.as_deref(), Some(r.url.as_str())]
                        .into_iter()
                        .flatten()
                        .map(|a| crate::wire::headers::authority(a).to_string())
                        .filter(|a| !a.is_empty())
                        .collect();
                    (r.name.clone(), addrs)
                })
                .collect(),
            learned: learned.cloned(),
        })
    })
}

/// Opens `client.warm_connections` connections before load and records them.
async fn warm(
    plan: &Plan,
    (http, api_url): (&client::Http, &str),
    wanted: u32,
    clock: &Clock,
    tw: &TraceWriter,
    cancel: &CancellationToken,
    progress: &Progress,
) {
    let c = &plan.scenario.client;
    let w = http
        .warm(api_url, wanted, c.connect_timeout.0, cancel)
        .await;
    progress.line(&format!(
        "warmed {} of {} connections to the target{}",
        w.conns.len(),
        wanted,
        if w.failed > 0 {
            format!(" ({} failed)", w.failed)
        } else {
            String::new()
        }
    ));
    tw.emit(Event::Warmed {
        t: clock.now_us(),
        wanted,
        conns: w.conns,
        failed: w.failed,
    });
}

/// Runs the dispatcher on its own thread until the schedule ends (or a cancel).
async fn dispatch(d: Dispatcher, cancel: &CancellationToken) -> Result<(), String> {
    let (done_tx, done_rx) = tokio::sync::oneshot::channel();
    let thread = std::thread::Builder::new()
        .name("haq-dispatch".into())
        .spawn(move || {
            let r = d.run();
            let _ = done_tx.send(r);
        })
        .map_err(|e| e.to_string())?;
    // The dispatcher sleeps parked until its next deadline; a cancel wakes it at once.
    let waker = {
        let (cancel, thread) = (cancel.clone(), thread.thread().clone());
        tokio::spawn(async move {
            cancel.cancelled().await;
            thread.unpark();
        })
    };
    let dispatched = done_rx
        .await
        .unwrap_or_else(|_| Err("the dispatcher thread panicked".into()));
    waker.abort();
    dispatched
}

/// Lets in-flight requests finish, within the drain timeout.
async fn drain(
    plan: &Plan,
    tracker: &TaskTracker,
    cancel: &CancellationToken,
    progress: &Progress,
) {
    let c = &plan.scenario.client;
    tracker.close();
    if !cancel.is_cancelled() && !tracker.is_empty() {
        progress.line(&format!(
            "load done; waiting for {} in-flight requests",
            tracker.len()
        ));
        let drain = c.drain_timeout.0;
        let drained = tokio::select! {
            _ = tracker.wait() => true,
            _ = tokio::time::sleep(drain) => false,
            _ = cancel.cancelled() => false,
        };
        if !drained && !cancel.is_cancelled() {
            progress.line(&format!(
                "drain timeout ({drain:?}): cancelling {} requests",
                tracker.len()
            ));
        }
    }
}

/// Sleeps on the OS timer until `deadline`; false when cancelled first (the cancel
/// unparks the dispatcher thread: no polling wake-ups while it waits).
fn sleep_until(deadline: Instant, cancel: &CancellationToken) -> bool {
    loop {
        if cancel.is_cancelled() {
            return false;
        }
        let now = Instant::now();
        if now >= deadline {
            return true;
        }
        std::thread::park_timeout(deadline - now);
    }
}

/// Asks the kernel to wake this thread on time (default timer slack is 50 µs).
fn tight_timer_slack() {
    // SAFETY: PR_SET_TIMERSLACK takes a plain integer and affects only this thread.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0);
    }
}

impl Dispatcher {
    fn prepare(&self, p: Planned) -> Ready {
        let plan = &self.plan;
        let class = &plan.mix.classes[p.class];
        let mut call = Call::new(
            p.id.clone(),
            format!("{}{}", self.api_url, workload::api_path(class.api)),
            workload::request_body(plan, &p, &self.marker),
        );
        call.expect_json = class.response_format.is_some();
        call.leave = p.leave;
        call.attribution.clone_from(&self.attribution);
        call.headers.push((
            reqwest::header::HeaderName::from_static(client::PRIORITY_HEADER),
            reqwest::header::HeaderValue::from_static(workload::priority_value(plan, &p)),
        ));
        let intended = self.clock.us_of(self.load_start + p.at);
        let event = Event::Request {
            t: 0,
            id: p.id.clone(),
            class: class.name.clone(),
            phase: plan.phases[p.phase].name.clone(),
            intended,
            prompt_tokens: p.total_prompt_tokens(),
            max_tokens: p.max_tokens,
            protected: workload::is_protected(plan, &p),
            stream: p.stream,
            admitted: None,
            session: p.session.as_ref().map(|s| s.session.clone()),
            turn: p.session.as_ref().map(|s| s.turn),
            probe: None,
        };
        Ready {
            call,
            event,
            at: p.at,
            intended,
            phase: p.phase,
            stream: p.stream,
        }
    }

    /// The next request of the schedule this part sends, ready.
    fn next_mine(&self, schedule: &mut Schedule) -> Option<Ready> {
        if self.part == Part::Edges {
            return None;
        }
        schedule
            .find(|p| self.part.sends(p.idx))
            .map(|p| self.prepare(p))
    }

    fn edge(&self, (i, edge): (usize, Edge)) {
        let p = &self.plan.phases[i];
        self.tw.emit(Event::Phase {
            t: self.clock.now_us(),
            name: p.name.clone(),
            edge,
        });
        super::own::emit(&self.tw, &self.clock, &self.handle, &p.name, edge);
        match edge {
            Edge::Start => self.progress.phase(i, p),
            Edge::End => self.progress.phase_end(),
        }
    }

    /// The dispatcher thread: the merged timeline of phase edges and requests.
    fn run(self) -> Result<(), String> {
        tight_timer_slack();
        let mut schedule = Schedule::new(&self.plan)?;
        let mut edges: Vec<(Duration, (usize, Edge))> = Vec::new();
        // An agent's phase edges are the coordinator's.
        let edged = !matches!(self.part, Part::Share(_));
        for (i, p) in self.plan.phases.iter().enumerate().filter(|_| edged) {
            edges.push((p.start, (i, Edge::Start)));
            edges.push((p.end(), (i, Edge::End)));
        }
        let mut edges = edges.into_iter().peekable();
        let mut next = self.next_mine(&mut schedule);
        // When the dispatcher last came out of a wait for a slot (trace µs).
        let mut released: Option<u64> = None;
        loop {
            let edge_at = edges.peek().map(|e| e.0);
            let req_at = next.as_ref().map(|r| r.at);
            let edge_first = match (edge_at, req_at) {
                (None, None) => return Ok(()),
                (Some(e), Some(r)) => e <= r,
                (e, _) => e.is_some(),
            };
            if edge_first {
                let Some((at, e)) = edges.next() else {
                    continue;
                };
                if !sleep_until(self.load_start + at, &self.cancel) {
                    return Ok(());
                }
                self.edge(e);
                continue;
            }
            let Some(r) = next.take() else { continue };
            if !sleep_until(self.load_start + r.at, &self.cancel) {
                return Ok(());
            }
            self.progress.offered(r.phase);
            let Some((permit, admitted)) = self.admit(&mut edges, r.intended, &mut released) else {
                return Ok(());
            };
            self.spawn(r, permit, admitted);
            // Build the next request while waiting for its deadline.
            next = self.next_mine(&mut schedule);
        }
    }

    /// Takes a slot under the concurrency cap, emitting phase edges that fall due
    /// while waiting. `None` when cancelled. The admission time is when the slot was
    /// granted — or, for a request that fell due while the dispatcher was still
    /// waiting for an earlier one, when that wait ended: its lateness is the cap's.
    fn admit(
        &self,
        edges: &mut std::iter::Peekable<impl Iterator<Item = (Duration, (usize, Edge))>>,
        intended: u64,
        released: &mut Option<u64>,
    ) -> Option<(Option<OwnedSemaphorePermit>, Option<u64>)> {
        let Some(cap) = &self.cap else {
            return Some((None, None));
        };
        if let Ok(p) = cap.clone().try_acquire_owned() {
            return Some((Some(p), released.filter(|u| *u > intended)));
        }
        loop {
            let edge_at = edges.peek().map(|e| self.load_start + e.0);
            let got = self.handle.block_on(async {
                let edge = async {
                    match edge_at {
                        Some(t) => tokio::time::sleep_until(t.into()).await,
                        None => std::future::pending().await,
                    }
                };
                tokio::select! {
                    p = cap.clone().acquire_owned() => p.ok().map(Some),
                    _ = edge => Some(None),
                    _ = self.cancel.cancelled() => None,
                }
            })?;
            match got {
                Some(p) => {
                    let now = self.clock.now_us();
                    *released = Some(now);
                    return Some((Some(p), Some(now)));
                }
                None => {
                    if let Some((_, e)) = edges.next() {
                        self.edge(e);
                    }
                }
            }
        }
    }

    fn spawn(&self, r: Ready, permit: Option<OwnedSemaphorePermit>, admitted: Option<u64>) {
        let Ready {
            call,
            mut event,
            intended,
            phase,
            stream,
            ..
        } = r;
        let (http, tw, clock, stop, progress, timeouts) = (
            self.http.clone(),
            self.tw.clone(),
            self.clock,
            self.stop.clone(),
            self.progress.clone(),
            self.timeouts,
        );
        let left = self.left.clone();
        let task = async move {
            let _slot = permit;
            if let Event::Request { t, admitted: a, .. } = &mut event {
                *t = clock.now_us();
                *a = admitted;
            }
            tw.emit(event);
            progress.sent();
            match client::execute_until(&http, &call, timeouts, &clock, &tw, stop.wait()).await {
                Some(r) => {
                    if r.outcome == Outcome::Abandoned {
                        left.fetch_max(clock.now_us(), Ordering::Relaxed);
                    }
                    progress.done(phase, r.outcome, stream, intended, r.first_delta_us);
                }
                None => {
                    left.fetch_max(clock.now_us(), Ordering::Relaxed);
                    progress.done(phase, Outcome::Cancelled, stream, intended, None);
                }
            }
        };
        self.tracker.spawn_on(task, &self.handle);
    }
}
