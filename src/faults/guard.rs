//! The heal guard: every reversible fault registers how to undo it. Heals run when a
//! fault's duration ends, at the end of the run, and — because the guard heals what is
//! left when it is dropped — on error and on panic too. SIGINT/SIGTERM cancel the run,
//! which then heals through the same path (no worker left frozen, no path left cut).

use std::sync::{Arc, Mutex};

use crate::trace::{Clock, Event, TraceWriter};

/// How an undo went.
#[derive(Debug, Clone)]
pub struct Healed {
    pub verified: bool,
    pub detail: String,
}

/// Undoes one applied fault and verifies the undo. Runs synchronously and quickly
/// (a signal, a rule removal, a bounded command), so it can also run while unwinding.
pub trait Undo: Send {
    fn undo(&mut self) -> Healed;
}

struct Pending {
    id: u64,
    fault: String,
    replica: String,
    undo: Box<dyn Undo>,
}

/// Shared by the fault tasks; [`HealGuard`] owns it for the run.
pub struct Heals {
    pending: Mutex<(u64, Vec<Pending>)>,
    trace: TraceWriter,
    clock: Clock,
}

impl Heals {
    /// Registers an applied fault's undo; returns its id.
    pub fn register(&self, fault: &str, replica: &str, undo: Box<dyn Undo>) -> u64 {
        let mut g = self.lock();
        g.0 += 1;
        let id = g.0;
        g.1.push(Pending {
            id,
            fault: fault.into(),
            replica: replica.into(),
            undo,
        });
        id
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, (u64, Vec<Pending>)> {
        self.pending.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn take(&self, id: Option<u64>) -> Vec<Pending> {
        let mut g = self.lock();
        match id {
            Some(id) => {
                let (mine, rest): (Vec<_>, Vec<_>) = g.1.drain(..).partition(|p| p.id == id);
                g.1 = rest;
                mine
            }
            None => g.1.drain(..).collect(),
        }
    }

    fn run(&self, mut p: Pending, why: &str) -> Healed {
        let h = p.undo.undo();
        self.trace.emit(Event::Heal {
            t: self.clock.now_us(),
            name: p.fault.clone(),
            detail: format!("{why}: {}", h.detail),
            replica: Some(p.replica.clone()),
            verified: Some(h.verified),
        });
        h
    }

    /// Heals one fault (its duration ended); off the async threads.
    pub async fn heal(self: &Arc<Self>, id: u64, why: &str) -> Vec<Healed> {
        self.heal_async(Some(id), why).await
    }

    /// Heals everything still applied (end of run, interrupt).
    pub async fn heal_all(self: &Arc<Self>, why: &str) -> Vec<Healed> {
        self.heal_async(None, why).await
    }

    async fn heal_async(self: &Arc<Self>, id: Option<u64>, why: &str) -> Vec<Healed> {
        let ps = self.take(id);
        if ps.is_empty() {
            return Vec::new();
        }
        let me = self.clone();
        let why = why.to_string();
        let work = move || ps.into_iter().map(|p| me.run(p, &why)).collect::<Vec<_>>();
        match tokio::task::spawn_blocking(work).await {
            Ok(v) => v,
            Err(e) => vec![Healed {
                verified: false,
                detail: format!("heal task failed: {e}"),
            }],
        }
    }

    /// Heals everything still applied, on this thread (drop, panic).
    pub fn heal_all_now(&self, why: &str) -> Vec<Healed> {
        self.take(None)
            .into_iter()
            .map(|p| self.run(p, why))
            .collect()
    }

    /// Faults still applied.
    pub fn pending(&self) -> usize {
        self.lock().1.len()
    }
}

/// Owns the run's heals: whatever is still applied when it is dropped (an error
/// return, a panic unwinding) is healed then.
pub struct HealGuard(Arc<Heals>);

impl HealGuard {
    pub fn new(trace: TraceWriter, clock: Clock) -> HealGuard {
        HealGuard(Arc::new(Heals {
            pending: Mutex::new((0, Vec::new())),
            trace,
            clock,
        }))
    }

    pub fn heals(&self) -> Arc<Heals> {
        self.0.clone()
    }
}

impl Drop for HealGuard {
    fn drop(&mut self) {
        let why = if std::thread::panicking() {
            "healed while unwinding a panic"
        } else {
            "healed when the run ended early"
        };
        self.0.heal_all_now(why);
    }
}
