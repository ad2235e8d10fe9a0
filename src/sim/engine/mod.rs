//! The batching engine of a sim worker: one scheduler loop on its own thread stepping
//! the whole batch, as a continuous-batching engine does (vLLM, SGLang). Every running
//! sequence advances one token per step; the step's duration comes from the model
//! below (fixed cost + per sequence + per context token + prefill tokens), so queueing,
//! preemption and batch-dependent inter-token latency follow from the schedule rather
//! than being drawn per stream.
//!
//! The loop is a task on the worker's current-thread runtime, sharing its one thread
//! with the HTTP side: a step's tokens reach the connection tasks without a
//! cross-thread wake-up. It sleeps on a `timerfd` (nanosecond deadlines through epoll)
//! instead of tokio's millisecond timer wheel, which keeps the step timing error far
//! below a millisecond when the machine has CPU to spare (docs/performance.md).

pub mod capacity;
pub mod kv;
pub mod sched;
pub mod stats;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::io::unix::AsyncFd;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender};

use crate::sim::config::EngineCfg;
use kv::Kv;
use sched::{Limits, Note, Sched, Seq, Verdict, Work};
use stats::Stats;

/// Step time of the engine model.
#[derive(Debug, Clone, Copy)]
pub struct StepModel {
    pub base: Duration,
    pub per_seq: Duration,
    pub per_1k_context: Duration,
    pub prefill_tokens_per_s: f64,
}

impl StepModel {
    /// The configured step times, scaled by `speed` (`target.engine.speed`).
    pub fn from_cfg(c: &EngineCfg) -> StepModel {
        let k = if c.speed.is_finite() && c.speed > 0.0 {
            c.speed
        } else {
            1.0
        };
        StepModel {
            base: c.decode_step.0.div_f64(k),
            per_seq: c.decode_step_per_seq.0.div_f64(k),
            per_1k_context: c.decode_step_per_1k_context.0.div_f64(k),
            prefill_tokens_per_s: c.prefill_tokens_per_s * k,
        }
    }

    /// How long a step computing `w` takes on the modelled GPU.
    pub fn duration(&self, w: &Work) -> Duration {
        self.base
            + self.per_seq * w.decode
            + self.per_1k_context.mul_f64(w.context as f64 / 1000.0)
            + Duration::from_secs_f64(f64::from(w.prefill) / self.prefill_tokens_per_s)
    }
}

/// Runtime knobs changed through the admin API.
pub struct Controls {
    slow_bits: AtomicU64,
    pub hang: AtomicBool,
    /// While hung: `/health` and `/ready` hang too (else they pass).
    pub hang_timeout: AtomicBool,
    /// The engine is dead (a lost GPU) while the process lives on.
    pub dead: AtomicBool,
    /// Which GPU of the tensor-parallel group was lost.
    pub dead_gpu: std::sync::atomic::AtomicU32,
    /// Wakes the loop at once when `dead` changes (a step in progress never completes).
    pub kick: tokio::sync::Notify,
}

impl Default for Controls {
    fn default() -> Self {
        Controls {
            slow_bits: AtomicU64::new(1.0f64.to_bits()),
            hang: AtomicBool::new(false),
            hang_timeout: AtomicBool::new(false),
            dead: AtomicBool::new(false),
            dead_gpu: std::sync::atomic::AtomicU32::new(0),
            kick: tokio::sync::Notify::new(),
        }
    }
}

impl Controls {
    pub fn slow(&self) -> f64 {
        f64::from_bits(self.slow_bits.load(Ordering::Relaxed))
    }
    pub fn set_slow(&self, f: f64) {
        self.slow_bits.store(f.to_bits(), Ordering::Relaxed);
    }
}

/// What the engine tells the worker about its sequences. Implemented by the worker's
/// publisher (SSE events, fault hooks, journal) and by test doubles.
pub trait Publisher: Send + 'static {
    type Job: Send + 'static;
    /// False once the job's response is gone (client left, lease ended, revoked).
    fn live(&self, job: &Self::Job) -> bool;
    /// The sequence entered the waiting queue.
    fn submitted(&mut self, _seq: &Seq<Self::Job>) {}
    /// The sequence left the queue (first time: its prefill begins now).
    fn scheduled(&mut self, _seq: &mut Seq<Self::Job>, _cached: u32, _recompute: bool) {}
    fn preempted(&mut self, _seq: &Seq<Self::Job>) {}
    /// Token `i` was sampled; `now` is when the step's outputs are published, `due`
    /// when the model says the step ended.
    fn token(&mut self, seq: &mut Seq<Self::Job>, i: u32, now: Instant, due: Instant) -> Verdict;
    /// The sequence finished (after the token that ended it).
    fn finished(&mut self, _seq: Seq<Self::Job>) {}
    /// The engine's clock restarted: it published a step `lost` after the next one
    /// was due to end (a stall longer than a step: modelled time not made up).
    fn stalled(&mut self, _lost: Duration) {}
    /// The sequence was dropped because it was no longer live.
    fn dropped(&mut self, _seq: Seq<Self::Job>) {}
    /// The engine died (a lost GPU) with the sequence in it: it gets the engine's error.
    fn engine_dead(&mut self, _seq: Seq<Self::Job>) {}
}

/// A request for the engine thread.
pub struct Submit<J> {
    pub job: J,
    pub prompt_tokens: u32,
    pub hashes: Vec<u64>,
    pub arrived: Instant,
}

/// The HTTP side's handle on a running engine.
pub struct EngineHandle<J> {
    tx: UnboundedSender<Submit<J>>,
    pub stats: Arc<Stats>,
    pub controls: Arc<Controls>,
}

impl<J: Send + 'static> EngineHandle<J> {
    /// Queues a sequence; false if the engine task is gone.
    pub fn submit(&self, s: Submit<J>) -> bool {
        self.tx.send(s).is_ok()
    }
}

struct Engine<P: Publisher> {
    sched: Sched<P::Job>,
    model: StepModel,
    publisher: P,
    controls: Arc<Controls>,
    stats: Arc<Stats>,
    /// Arrival time per sequence id (queue time, TTFT).
    arrivals: std::collections::HashMap<u64, (Instant, Option<Instant>)>,
}

/// When a step of `dur` that follows the step due at `prev` (`None`: the engine was
/// idle) ends, the step published at `now`: right after `prev` when `now` is less than
/// `dur` (at least [`RESYNC`]) past it — the lateness is made up, the step never ends
/// before `now` by more than [`RESYNC`] — else after `now` (a stall is lost).
pub fn deadline_after(prev: Option<Instant>, now: Instant, dur: Duration) -> Instant {
    match prev {
        Some(t) if now.saturating_duration_since(t) < dur.max(RESYNC) => t + dur,
        _ => now + dur,
    }
}

/// A nanosecond-resolution one-shot timer in the tokio reactor.
struct Timer(AsyncFd<Tfd>);

struct Tfd(nix::sys::timerfd::TimerFd);

impl std::os::fd::AsRawFd for Tfd {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        use std::os::fd::AsFd;
        self.0.as_fd().as_raw_fd()
    }
}

impl Timer {
    fn new() -> std::io::Result<Timer> {
        use nix::sys::timerfd::{ClockId, TimerFd, TimerFlags};
        let fd = TimerFd::new(
            ClockId::CLOCK_MONOTONIC,
            TimerFlags::TFD_NONBLOCK | TimerFlags::TFD_CLOEXEC,
        )?;
        // SAFETY: `Tfd` owns the timerfd; it stays open and the same for the AsyncFd's
        // whole life (it is dropped with it).
        let fd = unsafe { AsyncFd::register_with_interest(Tfd(fd), tokio::io::Interest::READABLE) }
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        Ok(Timer(fd))
    }

    /// Sleeps until `deadline` (CLOCK_MONOTONIC, as `Instant` is on Linux).
    async fn sleep_until(&self, deadline: Instant) {
        use nix::sys::time::TimeSpec;
        use nix::sys::timerfd::{Expiration, TimerSetTimeFlags};
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return;
        }
        let armed = self.0.get_ref().0.set(
            Expiration::OneShot(TimeSpec::from_duration(left)),
            TimerSetTimeFlags::empty(),
        );
        if armed.is_err() {
            tokio::time::sleep_until(deadline.into()).await;
            return;
        }
        loop {
            let Ok(mut guard) = self.0.readable().await else {
                tokio::time::sleep_until(deadline.into()).await;
                return;
            };
            match guard.try_io(|fd| fd.get_ref().0.wait().map_err(std::io::Error::from)) {
                Ok(_) => return,
                Err(_would_block) => continue,
            }
        }
    }
}

/// Starts the engine task on the current tokio runtime.
pub fn spawn<P: Publisher>(
    cfg: &EngineCfg,
    publisher: P,
    stats: Arc<Stats>,
) -> std::io::Result<EngineHandle<P::Job>> {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let timer = Timer::new()?;
    let controls = Arc::new(Controls::default());
    let blocks = (cfg.kv_cache_tokens / cfg.block_size.max(1)).max(1);
    stats.c.kv_total_blocks.store(blocks, Ordering::Relaxed);
    let engine = Engine {
        sched: Sched::new(
            Limits {
                max_num_seqs: cfg.max_num_seqs,
                max_batched_tokens: cfg.max_num_batched_tokens,
                block_size: cfg.block_size.max(1),
            },
            Kv::new(blocks, cfg.prefix_caching),
        ),
        model: StepModel::from_cfg(cfg),
        publisher,
        controls: controls.clone(),
        stats: stats.clone(),
        arrivals: Default::default(),
    };
    tokio::spawn(engine.run(rx, timer));
    Ok(EngineHandle {
        tx,
        stats,
        controls,
    })
}

/// Steps whose outputs come later than this (or than the next step's modelled
/// duration, when that is longer) after their deadline restart the clock: a frozen or
/// starved process must not burst to catch up.
const RESYNC: Duration = Duration::from_millis(5);

impl<P: Publisher> Engine<P> {
    fn accept(&mut self, s: Submit<P::Job>) {
        let id = self.sched.submit(s.job, s.prompt_tokens, s.hashes);
        self.arrivals.insert(id, (s.arrived, None));
        let c = &self.stats.c;
        c.prompt_tokens
            .fetch_add(u64::from(s.prompt_tokens), Ordering::Relaxed);
        if let Some(seq) = self.sched.find_waiting(id) {
            self.publisher.submitted(seq);
        }
    }

    fn publish_gauges(&self) {
        let c = &self.stats.c;
        Stats::set(&c.running, self.sched.running());
        Stats::set(&c.waiting, self.sched.waiting());
        c.kv_used_blocks
            .store(self.sched.kv.used(), Ordering::Relaxed);
        c.prefix_queries
            .store(self.sched.prefix_queries, Ordering::Relaxed);
        c.prefix_hits
            .store(self.sched.prefix_hits, Ordering::Relaxed);
        c.preemptions
            .store(self.sched.preemptions, Ordering::Relaxed);
    }

    /// Takes submissions until `deadline` (or until the next one when `None`); false
    /// when the HTTP side is gone.
    async fn wait(
        &mut self,
        rx: &mut UnboundedReceiver<Submit<P::Job>>,
        timer: &Timer,
        deadline: Option<Instant>,
    ) -> bool {
        let Some(deadline) = deadline else {
            return match rx.recv().await {
                Some(s) => {
                    self.accept(s);
                    true
                }
                None => false,
            };
        };
        loop {
            tokio::select! {
                biased;
                _ = timer.sleep_until(deadline) => return true,
                _ = self.controls.kick.notified() => return true,
                s = rx.recv() => match s {
                    Some(s) => self.accept(s),
                    None => return false,
                },
            }
        }
    }

    /// A dead engine: every sequence in it (and every one submitted while it is dead)
    /// ends with the engine's error; the KV cache is gone (a restart starts cold).
    fn fail_all(&mut self) {
        let seqs = self.sched.drain_all();
        if seqs.is_empty() {
            return;
        }
        for seq in seqs {
            self.arrivals.remove(&seq.id);
            self.stats.c.finished_abort.fetch_add(1, Ordering::Relaxed);
            self.publisher.engine_dead(seq);
        }
        self.sched.kv.clear();
        self.publish_gauges();
    }

    /// The scheduler loop: take submissions, drop dead sequences, schedule a step, wait
    /// out its modelled duration, publish its tokens; idle (or hung) while there is no
    /// work. Ends when the HTTP side is gone.
    async fn run(mut self, mut rx: UnboundedReceiver<Submit<P::Job>>, timer: Timer) {
        let mut next_start: Option<Instant> = None;
        loop {
            while let Ok(s) = rx.try_recv() {
                self.accept(s);
            }
            self.drop_dead();
            // Dead (a lost GPU: every sequence fails) or hung: no step; look again soon.
            let dead = self.controls.dead.load(Ordering::Relaxed);
            if dead || self.controls.hang.load(Ordering::Relaxed) {
                if dead {
                    self.fail_all();
                }
                self.publish_gauges();
                next_start = None;
                let soon = Instant::now() + Duration::from_millis(20);
                if !self.wait(&mut rx, &timer, Some(soon)).await {
                    return;
                }
                continue;
            }
            let work = self.schedule();
            self.publish_gauges();
            if work.is_empty() {
                next_start = None;
                let idle_until = if self.sched.running() + self.sched.waiting() > 0 {
                    Some(Instant::now() + Duration::from_millis(20))
                } else {
                    None
                };
                if !self.wait(&mut rx, &timer, idle_until).await {
                    return;
                }
                continue;
            }
            let deadline = self.step_deadline(&work, next_start);
            self.account_stall(next_start, deadline, &work);
            // Until the step's deadline (woken early by a death: its outputs never come).
            while Instant::now() < deadline && !self.controls.dead.load(Ordering::Relaxed) {
                if !self.wait(&mut rx, &timer, Some(deadline)).await {
                    return;
                }
            }
            if self.controls.dead.load(Ordering::Relaxed) {
                continue;
            }
            next_start = Some(deadline);
            self.complete(deadline);
            self.publish_gauges();
        }
    }

    /// Drops the sequences whose responses are gone (counted as aborted).
    fn drop_dead(&mut self) {
        let publisher = &mut self.publisher;
        for seq in self.sched.retain(|s| publisher.live(&s.job)) {
            self.arrivals.remove(&seq.id);
            self.stats.c.finished_abort.fetch_add(1, Ordering::Relaxed);
            publisher.dropped(seq);
        }
    }

    /// Schedules the next step, recording the queue time of sequences scheduled for the
    /// first time and telling the publisher.
    fn schedule(&mut self) -> Work {
        let now = Instant::now();
        let (publisher, arrivals, stats) = (&mut self.publisher, &mut self.arrivals, &self.stats);
        self.sched.schedule(|n| match n {
            Note::Scheduled {
                seq,
                cached,
                recompute,
            } => {
                if let (false, Some((at, _))) = (recompute, arrivals.get(&seq.id)) {
                    stats
                        .queue
                        .record_us(now.duration_since(*at).as_micros() as u64);
                }
                publisher.scheduled(seq, cached, recompute);
            }
            Note::Preempted { seq } => publisher.preempted(seq),
        })
    }

    /// When the step computing `work` ends: its modelled duration (times the `slow`
    /// factor) after the previous step's deadline, or after now when that is more than
    /// the step's duration (at least [`RESYNC`]) ago. A step published late is made up
    /// by the next one, which then ends no earlier than now: the engine's throughput is
    /// its model's on a machine that wakes it a few milliseconds late (a busy CI box),
    /// and a longer stall (a frozen process) is lost, never burst through.
    fn step_deadline(&self, work: &Work, next_start: Option<Instant>) -> Instant {
        let dur = self
            .model
            .duration(work)
            .mul_f64(self.controls.slow().max(0.0));
        deadline_after(next_start, Instant::now(), dur)
    }

    /// A step that restarted the clock after a stall: the time between the previous
    /// deadline and the new step's start is lost (counted, and told the publisher).
    fn account_stall(&mut self, prev: Option<Instant>, deadline: Instant, work: &Work) {
        let Some(prev) = prev else { return };
        let dur = self
            .model
            .duration(work)
            .mul_f64(self.controls.slow().max(0.0));
        let start = deadline.checked_sub(dur).unwrap_or(deadline);
        if start > prev {
            let lost = start - prev;
            self.stats
                .c
                .lost_us
                .fetch_add(lost.as_micros() as u64, Ordering::Relaxed);
            self.publisher.stalled(lost);
        }
    }

    /// Publishes the tokens of the step that ended at `deadline`: step lateness, TTFT,
    /// inter-token and end-to-end latency; finished sequences go to the publisher.
    fn complete(&mut self, deadline: Instant) {
        let at = Instant::now();
        self.stats
            .step_lateness
            .record_us(at.saturating_duration_since(deadline).as_micros() as u64);
        self.stats.c.steps.fetch_add(1, Ordering::Relaxed);
        let (publisher, arrivals, stats) = (&mut self.publisher, &mut self.arrivals, &self.stats);
        let done = self.sched.complete(|seq, i| {
            if let Some((arrived, last)) = arrivals.get_mut(&seq.id) {
                match last {
                    None => stats
                        .ttft
                        .record_us(at.duration_since(*arrived).as_micros() as u64),
                    Some(l) => stats
                        .itl
                        .record_us(at.duration_since(*l).as_micros() as u64),
                }
                *last = Some(at);
            }
            stats.c.generation_tokens.fetch_add(1, Ordering::Relaxed);
            publisher.token(seq, i, at, deadline)
        });
        for seq in done {
            if let Some((arrived, _)) = self.arrivals.remove(&seq.id) {
                self.stats
                    .e2e
                    .record_us(at.duration_since(arrived).as_micros() as u64);
            }
            self.publisher.finished(seq);
        }
    }
}

#[cfg(test)]
mod tests;
