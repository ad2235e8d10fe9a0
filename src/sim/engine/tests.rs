//! The engine loop with a recording publisher: the batching model's effects on the
//! clock. Bounds are ratios with wide margins (a busy 2-core machine).

use std::time::{Duration, Instant};
use tokio::sync::mpsc::{
    UnboundedReceiver as Receiver, UnboundedSender as Sender, unbounded_channel as channel,
};

use super::*;
use crate::scenario::units::Dur;

struct Rec(Sender<(u32, u32, Instant)>);

struct TJob {
    id: u32,
    max: u32,
}

impl Publisher for Rec {
    type Job = TJob;
    fn live(&self, _: &TJob) -> bool {
        true
    }
    fn token(&mut self, seq: &mut Seq<TJob>, i: u32, now: Instant, _due: Instant) -> Verdict {
        let _ = self.0.send((seq.job.id, i, now));
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

fn start(c: &EngineCfg) -> (EngineHandle<TJob>, Receiver<(u32, u32, Instant)>) {
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

/// Collects `n` tokens.
async fn collect(rx: &mut Receiver<(u32, u32, Instant)>, n: usize) -> Vec<(u32, u32, Instant)> {
    let mut v = Vec::new();
    while v.len() < n {
        let t = tokio::time::timeout(Duration::from_secs(20), rx.recv()).await;
        v.push(t.ok().flatten().expect("token"));
    }
    v
}

fn first_token(v: &[(u32, u32, Instant)], id: u32) -> Instant {
    v.iter()
        .find(|(j, i, _)| *j == id && *i == 0)
        .map(|t| t.2)
        .expect("first token")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ttft_grows_with_load_and_a_queue_forms_at_saturation() {
    let (h, mut rx) = start(&cfg(2, 5, 0));
    let alone_at = submit(&h, 0, 10);
    let alone = collect(&mut rx, 10).await;
    let ttft_alone = first_token(&alone, 0) - alone_at;

    let mut sent = Vec::new();
    for id in 1..=6 {
        sent.push(submit(&h, id, 10));
    }
    tokio::time::sleep(Duration::from_millis(20)).await;
    let c = &h.stats.c;
    assert_eq!(c.running.load(Ordering::Relaxed), 2, "batch full");
    assert!(c.waiting.load(Ordering::Relaxed) >= 3, "a queue forms");
    let loaded = collect(&mut rx, 60).await;
    let ttft_last = first_token(&loaded, 6) - sent[5];
    // Alone: one step (~5 ms). Sixth of six with two slots: two whole generations
    // (2 × 10 steps) first.
    assert!(
        ttft_last > ttft_alone * 5 && ttft_last > Duration::from_millis(80),
        "alone {ttft_alone:?}, sixth {ttft_last:?}"
    );
    assert!(h.stats.queue.snapshot().max() >= 80_000);
}

fn mean_itl(v: &[(u32, u32, Instant)], id: u32) -> Duration {
    let t: Vec<Instant> = v.iter().filter(|x| x.0 == id).map(|x| x.2).collect();
    (t[t.len() - 1] - t[0]) / (t.len() as u32 - 1)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inter_token_latency_grows_with_the_batch() {
    let (h, mut rx) = start(&cfg(16, 4, 2));
    submit(&h, 0, 12);
    let alone = mean_itl(&collect(&mut rx, 12).await, 0);
    for id in 1..=8 {
        submit(&h, id, 12);
    }
    let batch = mean_itl(&collect(&mut rx, 96).await, 8);
    // Model: 4 + 2 ms alone vs 4 + 8 × 2 ms with eight decoding.
    assert!(
        batch > alone.mul_f64(1.8),
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
    submit(&h, 2, 6);
    let normal = mean_itl(&collect(&mut rx, 6).await, 2);
    h.controls.set_slow(8.0);
    submit(&h, 3, 6);
    let slow = mean_itl(&collect(&mut rx, 6).await, 3);
    assert!(slow > normal * 3, "normal {normal:?}, slow ×8 {slow:?}");
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
