//! The worker's shared state: its name, model and engine configuration, serving state
//! (starting, ready, draining), engine handle, fault hooks, journal, open responses, and
//! the publication leases of its attempts (M5).

use std::sync::atomic::{AtomicU8, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use super::emit::Job;
use super::faults::Faults;
use super::out::Out;
use crate::sim::config::EngineCfg;
use crate::sim::engine::EngineHandle;
use crate::sim::journal::Journal;

/// Serving states (`Worker::state`).
pub(super) const STARTING: u8 = 0;
pub(super) const READY: u8 = 1;
pub(super) const DRAINING: u8 = 2;

/// Attempts with a lease, and attempts revoked before (or after) they arrived.
#[derive(Default)]
pub(super) struct Leases {
    live: Mutex<std::collections::HashMap<String, Weak<Out>>>,
    revoked: Mutex<(
        std::collections::VecDeque<String>,
        std::collections::HashSet<String>,
    )>,
}

impl Leases {
    pub(super) fn register(&self, out: &Arc<Out>) {
        if let Some(a) = &out.attempt {
            let mut g = self.live.lock().unwrap_or_else(|p| p.into_inner());
            if g.len() > 4096 {
                g.retain(|_, w| w.strong_count() > 0);
            }
            g.insert(a.clone(), Arc::downgrade(out));
        }
    }

    pub(super) fn get(&self, attempt: &str) -> Option<Arc<Out>> {
        let g = self.live.lock().unwrap_or_else(|p| p.into_inner());
        g.get(attempt).and_then(Weak::upgrade)
    }

    pub(super) fn mark_revoked(&self, attempt: &str) {
        let mut g = self.revoked.lock().unwrap_or_else(|p| p.into_inner());
        if g.1.insert(attempt.to_string()) {
            g.0.push_back(attempt.to_string());
            if g.0.len() > 8192
                && let Some(old) = g.0.pop_front()
            {
                g.1.remove(&old);
            }
        }
    }

    pub(super) fn is_revoked(&self, attempt: &str) -> bool {
        let g = self.revoked.lock().unwrap_or_else(|p| p.into_inner());
        g.1.contains(attempt)
    }
}

pub struct Worker {
    pub(super) name: String,
    pub(super) model: String,
    pub(super) cfg: EngineCfg,
    pub(super) state: AtomicU8,
    pub(super) engine: EngineHandle<Job>,
    pub(super) faults: Arc<Faults>,
    pub(super) leases: Leases,
    pub(super) journal: Journal,
    pub(super) open: Arc<AtomicU32>,
    pub(super) seq: AtomicU64,
}

impl Worker {
    pub(super) fn state_name(&self) -> &'static str {
        match self.state.load(Ordering::SeqCst) {
            STARTING => "starting",
            READY => "ready",
            _ => "draining",
        }
    }
}
