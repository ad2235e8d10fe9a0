//! Live progress on stderr: on a terminal, an indicatif bar per phase (elapsed/total,
//! offered vs achieved rate, in flight, p95 TTFT, errors); not on a terminal, one line
//! per phase start and end and per fault, no bar; nothing with `--quiet`. Fed by the
//! engine's counters; never on the per-event path (one update per request).

use std::io::IsTerminal;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::metrics::hist::{interval_hist, rec};
use crate::plan::PhasePlan;
use crate::trace::Outcome;

#[derive(Default)]
struct Counters {
    offered: AtomicU64,
    sent: AtomicU64,
    completed: AtomicU64,
    failed: AtomicU64,
}

struct PhaseView {
    name: String,
    started: Instant,
    duration: Duration,
    /// Counters when the phase started.
    base: [u64; 4],
    ttft: Histogram<u64>,
    bar: Option<ProgressBar>,
}

struct Live {
    tty: bool,
    c: Counters,
    phase: Mutex<Option<PhaseView>>,
}

/// Cheap to clone; all methods are no-ops with `--quiet`.
#[derive(Clone)]
pub struct Progress {
    live: Option<Arc<Live>>,
    ticker: Option<Arc<tokio::task::JoinHandle<()>>>,
}

impl Live {
    fn counts(&self) -> [u64; 4] {
        let c = &self.c;
        [
            c.offered.load(Ordering::Relaxed),
            c.sent.load(Ordering::Relaxed),
            c.completed.load(Ordering::Relaxed),
            c.failed.load(Ordering::Relaxed),
        ]
    }

    /// The status text of the current phase.
    fn status(&self, v: &PhaseView) -> String {
        let now = self.counts();
        let d = |i: usize| now[i].saturating_sub(v.base[i]);
        let secs = v.started.elapsed().as_secs_f64().max(1e-3);
        let in_flight = now[1].saturating_sub(now[2] + now[3]);
        let p95 = if v.ttft.is_empty() {
            "-".to_string()
        } else {
            format!("{:.0} ms", v.ttft.value_at_quantile(0.95) as f64 / 1000.0)
        };
        format!(
            "offered {:.1}/s · achieved {:.1}/s · in flight {in_flight} · p95 TTFT {p95} · errors {}",
            d(0) as f64 / secs,
            d(2) as f64 / secs,
            d(3)
        )
    }
}

impl Progress {
    pub fn new(quiet: bool) -> Self {
        if quiet {
            return Progress {
                live: None,
                ticker: None,
            };
        }
        let live = Arc::new(Live {
            tty: std::io::stderr().is_terminal(),
            c: Counters::default(),
            phase: Mutex::new(None),
        });
        let ticker = live.tty.then(|| {
            let l = live.clone();
            Arc::new(tokio::spawn(async move {
                let mut tick = tokio::time::interval(Duration::from_millis(250));
                loop {
                    tick.tick().await;
                    if let Ok(g) = l.phase.lock()
                        && let Some(v) = g.as_ref()
                        && let Some(b) = &v.bar
                    {
                        b.set_position(v.started.elapsed().as_millis() as u64);
                        b.set_message(l.status(v));
                    }
                }
            }))
        });
        Progress {
            live: Some(live),
            ticker,
        }
    }

    /// A message line (above the bar on a terminal).
    pub fn line(&self, s: &str) {
        let Some(l) = &self.live else { return };
        let bar = l
            .phase
            .lock()
            .ok()
            .and_then(|g| g.as_ref().and_then(|v| v.bar.clone()));
        match bar {
            Some(b) => b.println(s),
            None => eprintln!("{s}"),
        }
    }

    /// A phase starts: a new bar on a terminal, a line otherwise.
    pub fn phase(&self, p: &PhasePlan) {
        let Some(l) = &self.live else { return };
        self.phase_end();
        let bar = l.tty.then(|| {
            let b = ProgressBar::with_draw_target(
                Some(p.duration.as_millis() as u64),
                ProgressDrawTarget::stderr_with_hz(4),
            );
            let style = ProgressStyle::with_template(
                "{prefix:>10} [{bar:24}] {elapsed_precise} / {len_s} · {msg}",
            )
            .map(|s| {
                s.with_key(
                    "len_s",
                    |st: &indicatif::ProgressState, w: &mut dyn std::fmt::Write| {
                        let _ = write!(w, "{:.0}s", st.len().unwrap_or(0) as f64 / 1000.0);
                    },
                )
                .progress_chars("=> ")
            });
            if let Ok(s) = style {
                b.set_style(s);
            }
            b.set_prefix(p.name.clone());
            b
        });
        if !l.tty {
            eprintln!(
                "phase {} ({:?}) · {:.0}s",
                p.name,
                p.kind,
                p.duration.as_secs_f64()
            );
        }
        if let Ok(mut g) = l.phase.lock() {
            *g = Some(PhaseView {
                name: p.name.clone(),
                started: Instant::now(),
                duration: p.duration,
                base: l.counts(),
                ttft: interval_hist(),
                bar,
            });
        }
    }

    /// The current phase ends: its bar stays with the final numbers.
    pub fn phase_end(&self) {
        let Some(l) = &self.live else { return };
        let Ok(mut g) = l.phase.lock() else { return };
        let Some(v) = g.take() else { return };
        let status = l.status(&v);
        match &v.bar {
            Some(b) => {
                b.set_position(v.duration.as_millis() as u64);
                b.finish_with_message(status);
            }
            None => eprintln!("phase {} done · {status}", v.name),
        }
    }

    pub fn offered(&self) {
        if let Some(l) = &self.live {
            l.c.offered.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub fn sent(&self) {
        if let Some(l) = &self.live {
            l.c.sent.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A request ended; `ttft_us` from its intended time.
    pub fn done(&self, o: Outcome, ttft_us: Option<u64>) {
        let Some(l) = &self.live else { return };
        if o == Outcome::Completed {
            l.c.completed.fetch_add(1, Ordering::Relaxed);
        } else {
            l.c.failed.fetch_add(1, Ordering::Relaxed);
        }
        if let (Some(t), Ok(mut g)) = (ttft_us, l.phase.lock())
            && let Some(v) = g.as_mut()
        {
            rec(&mut v.ttft, t);
        }
    }

    pub fn finish(&self) {
        self.phase_end();
        if let Some(t) = &self.ticker {
            t.abort();
        }
    }
}
