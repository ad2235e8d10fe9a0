//! The engine loop with a recording publisher: the batching model's effects on the
//! clock. Deterministic on a busy 2-core machine: orderings and step counts are exact,
//! and times are the model's step deadlines (`due`), which are spaced by at least each
//! step's modelled duration whatever the machine does (a late step only adds time), so
//! only lower bounds are taken from them, plus minima with wide margins.

use std::time::{Duration, Instant};
use tokio::sync::mpsc::{
    UnboundedReceiver as Receiver, UnboundedSender as Sender, unbounded_channel as channel,
};

use super::*;
use crate::wire::units::Dur;

/// One published token: job id, token index, the step's modelled deadline.
type Tok = (u32, u32, Instant);

struct Rec(Sender<Tok>);

/// The token index a [`Rec`] sends for a sequence the engine's death ended.
const DEAD: u32 = u32::MAX;

struct TJob {
    id: u32,
    max: u32,
}

impl Publisher for Rec {
    type Job = TJob;
    fn live(&self, _: &TJob) -> bool {
        true
    }
    fn engine_dead(&mut self, seq: Seq<TJob>) {
        let _ = self.0.send((seq.job.id, DEAD, Instant::now()));
    }
    fn token(&mut self, seq: &mut Seq<TJob>, i: u32, _now: Instant, due: Instant) -> Verdict {
        let _ = self.0.send((seq.job.id, i, due));
        if i + 1 >= seq.job.max {
            Verdict::Finish
        } else {
            Verdict::Continue
        }
    }
}

fn cfg(max_num_seqs: u32, step_ms: u64, per_seq_ms: u64) -> EngineCfg {
    EngineCfg {
        max_num_seqs,
        decode_step: Dur::millis(step_ms),
        decode_step_per_seq: Dur::millis(per_seq_ms),
        decode_step_per_1k_context: Dur::millis(0),
        prefill_tokens_per_s: 1_000_000.0,
        ..EngineCfg::default()
    }
}

fn start(c: &EngineCfg) -> (EngineHandle<TJob>, Receiver<Tok>) {
    let (tx, rx) = channel();
    let h = spawn(c, Rec(tx), Arc::new(Stats::default())).expect("engine thread");
    (h, rx)
}

fn submit(h: &EngineHandle<TJob>, id: u32, max: u32) -> Instant {
    let at = Instant::now();
    assert!(h.submit(Submit {
        job: TJob { id, max },
        prompt_tokens: 8,
        hashes: Vec::new(),
        arrived: at,
    }));
    at
}

/// Submits every job while the engine is held (`hang`), then lets it run: they all
/// wait in the queue (the engine's own gauge says so) before the first step.
async fn submit_together(h: &EngineHandle<TJob>, jobs: impl IntoIterator<Item = (u32, u32)>) {
    h.controls.hang.store(true, Ordering::Relaxed);
    let mut n = 0u32;
    for (id, max) in jobs {
        submit(h, id, max);
        n += 1;
    }
    let limit = Instant::now() + Duration::from_secs(30);
    while h.stats.c.waiting.load(Ordering::Relaxed) != n {
        assert!(Instant::now() < limit, "{n} requests never all queued");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    h.controls.hang.store(false, Ordering::Relaxed);
}

/// Collects `n` tokens.
async fn collect(rx: &mut Receiver<Tok>, n: usize) -> Vec<Tok> {
    let mut v = Vec::new();
    while v.len() < n {
        let t = tokio::time::timeout(Duration::from_secs(30), rx.recv()).await;
        v.push(t.ok().flatten().expect("token"));
    }
    v
}

/// The step (1-based, counted over distinct deadlines) at which `id` got token 0.
fn first_token_step(v: &[Tok], id: u32) -> usize {
    let mut steps = 0;
    let mut last = None;
    for (j, i, due) in v {
        if last != Some(*due) {
            steps += 1;
            last = Some(*due);
        }
        if (*j, *i) == (id, 0) {
            return steps;
        }
    }
    panic!("no first token for {id}")
}

fn first_token(v: &[Tok], id: u32) -> Instant {
    v.iter()
        .find(|(j, i, _)| *j == id && *i == 0)
        .map(|t| t.2)
        .expect("first token")
}

fn last_token(v: &[Tok], id: u32) -> Instant {
    v.iter()
        .rev()
        .find(|(j, _, _)| *j == id)
        .map(|t| t.2)
        .expect("a token")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ttft_grows_with_load_and_a_queue_forms_at_saturation() {
    let (h, mut rx) = start(&cfg(2, 5, 0));
    submit_together(&h, [(0, 10)]).await;
    let alone = collect(&mut rx, 10).await;
    assert_eq!(
        first_token_step(&alone, 0),
        1,
        "alone: first token in the first step"
    );

    // Six requests, two batch slots: a queue of four forms at once.
    submit_together(&h, (1..=6).map(|id| (id, 10))).await;
    let loaded = collect(&mut rx, 60).await;
    // The third and fourth start only after the first two finished, the sixth after
    // two whole generations (2 × 10 steps).
    for (late, early) in [(3, 1), (4, 2), (5, 3), (6, 4)] {
        assert!(
            first_token(&loaded, late) > last_token(&loaded, early),
            "{late} waited for {early}"
        );
    }
    assert_eq!(first_token_step(&loaded, 6), 21, "sixth: TTFT of 21 steps");
    // Wall time never runs faster than the model: ≥ 20 steps × 5 ms in the queue.
    assert!(h.stats.queue.snapshot().max() >= 100_000);
}

/// Smallest gap between consecutive tokens of `id` in model time.
fn min_itl(v: &[Tok], id: u32) -> Duration {
    let t: Vec<Instant> = v.iter().filter(|x| x.0 == id).map(|x| x.2).collect();
    t.windows(2).map(|w| w[1] - w[0]).min().expect("two tokens")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inter_token_latency_grows_with_the_batch() {
    let (h, mut rx) = start(&cfg(16, 4, 10));
    submit_together(&h, [(0, 12)]).await;
    let alone = min_itl(&collect(&mut rx, 12).await, 0);
    submit_together(&h, (1..=8).map(|id| (id, 12))).await;
    let batch = min_itl(&collect(&mut rx, 96).await, 8);
    // Model: 4 + 10 ms alone vs 4 + 8 × 10 ms with eight decoding. Deadlines are never
    // closer than the model's step (`batch` is exact or more); `alone` exceeds 14 ms
    // only if every one of its 11 steps was more than 70 ms late.
    assert!(batch >= Duration::from_millis(84), "batch of 8 {batch:?}");
    assert!(
        alone < Duration::from_millis(84),
        "alone {alone:?}, batch of 8 {batch:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hang_stops_every_stream_and_slow_stretches_steps() {
    let (h, mut rx) = start(&cfg(4, 5, 0));
    h.controls.hang.store(true, Ordering::Relaxed);
    submit(&h, 1, 3);
    let none = tokio::time::timeout(Duration::from_millis(150), rx.recv()).await;
    assert!(none.is_err(), "hung: no token");
    h.controls.hang.store(false, Ordering::Relaxed);
    collect(&mut rx, 3).await;
    submit(&h, 2, 10);
    let normal = min_itl(&collect(&mut rx, 10).await, 2);
    h.controls.set_slow(20.0);
    submit(&h, 3, 6);
    let slow = min_itl(&collect(&mut rx, 6).await, 3);
    // ×20: every step ≥ 100 ms; normal steps are 5 ms unless all 9 were 95 ms late.
    assert!(slow >= Duration::from_millis(100), "slow ×20 {slow:?}");
    assert!(
        normal < Duration::from_millis(100),
        "normal {normal:?}, slow ×20 {slow:?}"
    );
}

#[test]
fn step_time_model_adds_its_terms() {
    let m = StepModel::from_cfg(&EngineCfg::default());
    let idle_batch = m.duration(&Work {
        decode: 1,
        context: 1000,
        prefill: 0,
    });
    let big = m.duration(&Work {
        decode: 64,
        context: 64_000,
        prefill: 0,
    });
    let prefill = m.duration(&Work {
        decode: 0,
        context: 0,
        prefill: 2000,
    });
    // Defaults (docs/sim.md): ~6.6 ms alone, ~12.6 ms at 64 × 1k context, +100 ms for
    // 2000 prompt tokens at 20k tok/s.
    assert!(
        (6.0..7.5).contains(&(idle_batch.as_secs_f64() * 1e3)),
        "{idle_batch:?}"
    );
    assert!((11.0..14.0).contains(&(big.as_secs_f64() * 1e3)), "{big:?}");
    assert!(
        (100.0..110.0).contains(&(prefill.as_secs_f64() * 1e3)),
        "{prefill:?}"
    );
}

/// A dead engine (a lost GPU) ends every sequence in it and each one submitted while
/// it is dead, publishes nothing more, and starts again with an empty queue.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_engine_ends_every_sequence_and_publishes_nothing_more() {
    let (h, mut rx) = start(&cfg(8, 5, 0));
    for id in 0..3 {
        submit(&h, id, 10_000);
    }
    collect(&mut rx, 6).await;
    h.controls.dead.store(true, Ordering::SeqCst);
    h.controls.kick.notify_one();
    let mut dead = std::collections::BTreeSet::new();
    while dead.len() < 3 {
        let (id, i, _) = collect(&mut rx, 1).await[0];
        if i == DEAD {
            dead.insert(id);
        }
    }
    submit(&h, 7, 5);
    assert_eq!(collect(&mut rx, 1).await[0].1, DEAD, "refused while dead");
    tokio::time::sleep(Duration::from_millis(60)).await;
    assert!(rx.try_recv().is_err(), "nothing after the death");
    assert_eq!(h.stats.c.running.load(Ordering::Relaxed), 0);
    h.controls.dead.store(false, Ordering::SeqCst);
    h.controls.kick.notify_one();
    submit(&h, 9, 3);
    let v = collect(&mut rx, 3).await;
    assert!(v.iter().all(|t| t.0 == 9 && t.1 != DEAD), "{v:?}");
}

/// A step published late is made up by the next one (the engine keeps its model's
/// throughput on a machine that wakes it a few ms late); a stall longer than a step
/// is lost, never burst through; `speed` divides every step time.
#[test]
fn a_late_step_is_made_up_and_a_stall_is_lost() {
    let t0 = Instant::now();
    let step = Duration::from_millis(70);
    let ms = Duration::from_millis;
    // Idle before: the step starts now.
    assert_eq!(deadline_after(None, t0, step), t0 + step);
    // 2 ms and 40 ms late: the next step ends 70 ms after the previous deadline.
    assert_eq!(deadline_after(Some(t0), t0 + ms(2), step), t0 + step);
    assert_eq!(deadline_after(Some(t0), t0 + ms(40), step), t0 + step);
    // Later than the step itself: the clock restarts (no burst of steps).
    assert_eq!(deadline_after(Some(t0), t0 + ms(90), step), t0 + ms(160));
    // Short steps keep the 5 ms floor.
    let short = ms(1);
    assert_eq!(deadline_after(Some(t0), t0 + ms(3), short), t0 + short);
    assert_eq!(deadline_after(Some(t0), t0 + ms(6), short), t0 + ms(7));
    let fast = StepModel::from_cfg(&EngineCfg {
        speed: 4.0,
        ..cfg(8, 40, 2)
    });
    assert_eq!(
        (fast.base, fast.per_seq),
        (ms(10), Duration::from_micros(500))
    );
}
