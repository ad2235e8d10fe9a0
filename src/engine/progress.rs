//! Live progress on stderr: on a terminal, an indicatif bar per phase (elapsed/total,
//! offered and completed rate, in flight, p95 TTFT, failed and rejected); not on a
//! terminal, one line per phase start and end and per fault, no bar; nothing with
//! `--quiet`. Its figures are the phase table's ([`LivePhase`]: a request counts in the
//! phase of its intended time, TTFT only for streamed requests that completed, the same
//! percentile), for the requests ended so far. Fed by the engine as requests start and
//! end; never on the per-event path (one update per request).

use std::io::IsTerminal;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::metrics::live::LivePhase;
use crate::plan::PhasePlan;
use crate::trace::Outcome;

/// Requests sent and ended, over the run (what is in flight).
#[derive(Default)]
struct Counters {
    sent: AtomicU64,
    ended: AtomicU64,
}

struct PhaseView {
    /// Index of the phase in the plan.
    index: usize,
    name: String,
    started: Instant,
    duration: Duration,
    bar: Option<ProgressBar>,
}

struct Live {
    tty: bool,
    c: Counters,
    phase: Mutex<Option<PhaseView>>,
    /// Every phase's figures, by plan index.
    phases: Mutex<Vec<LivePhase>>,
}

/// Cheap to clone; all methods are no-ops with `--quiet`.
#[derive(Clone)]
pub struct Progress {
    live: Option<Arc<Live>>,
    ticker: Option<Arc<tokio::task::JoinHandle<()>>>,
}

impl Live {
    /// The status text of the current phase.
    fn status(&self, v: &PhaseView) -> String {
        let secs = v
            .started
            .elapsed()
            .as_secs_f64()
            .clamp(1e-3, v.duration.as_secs_f64().max(1e-3));
        let in_flight = self
            .c
            .sent
            .load(Ordering::Relaxed)
            .saturating_sub(self.c.ended.load(Ordering::Relaxed));
        let Ok(phases) = self.phases.lock() else {
            return String::new();
        };
        let Some(p) = phases.get(v.index) else {
            return String::new();
        };
        let p95 = p
            .ttft_p95_ms()
            .map_or_else(|| "-".to_string(), |ms| format!("{ms:.0} ms"));
        format!(
            "offered {:.1}/s · completed {:.1}/s · in flight {in_flight} · p95 TTFT {p95} · failed {} · rejected {}",
            p.requests as f64 / secs,
            p.completed as f64 / secs,
            p.failed,
            p.rejected
        )
    }
}

impl Progress {
    /// Progress for a run of `phases` phases.
    pub fn new(quiet: bool, phases: usize) -> Self {
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
            phases: Mutex::new((0..phases).map(|_| LivePhase::default()).collect()),
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

    /// Phase `index` of the plan starts: a new bar on a terminal, a line otherwise.
    pub fn phase(&self, index: usize, p: &PhasePlan) {
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
                "phase {} ({}) · {:.0}s",
                p.name,
                p.kind,
                p.duration.as_secs_f64()
            );
        }
        if let Ok(mut g) = l.phase.lock() {
            *g = Some(PhaseView {
                index,
                name: p.name.clone(),
                started: Instant::now(),
                duration: p.duration,
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

    /// A request of phase `phase` (its intended time's) is due.
    pub fn offered(&self, phase: usize) {
        self.with_phase(phase, LivePhase::offered);
    }

    pub fn sent(&self) {
        if let Some(l) = &self.live {
            l.c.sent.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A request of phase `phase` ended (`stream`: sent streaming; `intended` and
    /// `first_delta` in trace µs).
    pub fn done(
        &self,
        phase: usize,
        o: Outcome,
        stream: bool,
        intended: u64,
        first_delta: Option<u64>,
    ) {
        if let Some(l) = &self.live {
            l.c.ended.fetch_add(1, Ordering::Relaxed);
        }
        self.with_phase(phase, |p| p.ended(o, stream, intended, first_delta));
    }

    fn with_phase(&self, phase: usize, f: impl FnOnce(&mut LivePhase)) {
        if let Some(l) = &self.live
            && let Ok(mut g) = l.phases.lock()
            && let Some(p) = g.get_mut(phase)
        {
            f(p);
        }
    }

    pub fn finish(&self) {
        self.phase_end();
        if let Some(t) = &self.ticker {
            t.abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_counts_by_intended_phase_and_takes_ttft_from_streamed_completions() {
        let p = Progress::new(false, 2);
        let plan = |name: &str| PhasePlan {
            name: name.into(),
            kind: crate::scenario::PhaseKind::Baseline,
            start: Duration::ZERO,
            duration: Duration::from_secs(60),
            rate: 1.0,
        };
        p.phase(1, &plan("fault"));
        for i in 0..20u64 {
            p.offered(1);
            p.sent();
            // Streamed: 40 ms; whole answers (not streamed): 2.7 s.
            let (stream, ttft) = if i % 4 == 0 {
                (false, 2_700_000)
            } else {
                (true, 40_000)
            };
            p.done(
                1,
                Outcome::Completed,
                stream,
                i * 1000,
                Some(i * 1000 + ttft),
            );
        }
        // A request of the previous phase ending now counts there, not here.
        p.sent();
        p.done(0, Outcome::Rejected, true, 0, None);
        p.offered(1);
        p.sent();
        let l = p.live.as_ref().expect("live");
        let g = l.phase.lock().expect("lock");
        let status = l.status(g.as_ref().expect("phase"));
        assert!(status.contains("p95 TTFT 40 ms"), "{status}");
        assert!(status.contains("in flight 1"), "{status}");
        assert!(status.ends_with("failed 0 · rejected 0"), "{status}");
        assert_eq!(l.phases.lock().expect("lock")[0].rejected, 1);
    }
}
