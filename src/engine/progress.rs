//! Progress on stderr: a line per phase and a status line every few seconds. Silent
//! with `--quiet`.

use std::io::IsTerminal;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::scenario::PhasePlan;
use crate::trace::Outcome;

#[derive(Default)]
pub struct Counters {
    sent: AtomicU64,
    completed: AtomicU64,
    failed: AtomicU64,
}

#[derive(Clone)]
pub struct Stats(Arc<Counters>);

impl Stats {
    pub fn sent(&self) {
        self.0.sent.fetch_add(1, Ordering::Relaxed);
    }
    pub fn done(&self, o: Outcome) {
        if o == Outcome::Completed {
            self.0.completed.fetch_add(1, Ordering::Relaxed);
        } else {
            self.0.failed.fetch_add(1, Ordering::Relaxed);
        }
    }
}

#[derive(Clone)]
pub struct Progress {
    quiet: bool,
    stats: Stats,
    ticker: Option<Arc<tokio::task::JoinHandle<()>>>,
}

impl Progress {
    pub fn new(quiet: bool) -> Self {
        let stats = Stats(Arc::new(Counters::default()));
        let ticker = (!quiet).then(|| {
            let s = stats.clone();
            let started = Instant::now();
            let every = if std::io::stderr().is_terminal() { 2 } else { 10 };
            Arc::new(tokio::spawn(async move {
                let mut tick = tokio::time::interval(Duration::from_secs(every));
                tick.tick().await;
                loop {
                    tick.tick().await;
                    let c = &s.0;
                    let sent = c.sent.load(Ordering::Relaxed);
                    let ok = c.completed.load(Ordering::Relaxed);
                    let bad = c.failed.load(Ordering::Relaxed);
                    eprintln!(
                        "  {:>5.0}s  sent {sent} · in flight {} · completed {ok} · not completed {bad}",
                        started.elapsed().as_secs_f64(),
                        sent.saturating_sub(ok + bad)
                    );
                }
            }))
        });
        Progress {
            quiet,
            stats,
            ticker,
        }
    }

    pub fn stats(&self) -> Stats {
        self.stats.clone()
    }

    pub fn line(&self, s: &str) {
        if !self.quiet {
            eprintln!("{s}");
        }
    }

    pub fn phase(&self, p: &PhasePlan) {
        self.line(&format!(
            "phase {} ({:?}) · {:.0}s",
            p.name,
            p.kind,
            p.duration.as_secs_f64()
        ));
    }

    pub fn finish(&self) {
        if let Some(t) = &self.ticker {
            t.abort();
        }
    }
}
