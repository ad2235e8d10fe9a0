//! One worker behind the gateway as the gateway sees it: its health (ready, starting,
//! draining, down) with the count of failed checks, its requests in flight and the
//! leases of its live attempts. Rotation across workers is in `state.rs`, the health
//! checks in `health.rs`.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};

use super::lease::LeaseBook;

/// What the gateway believes about a worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Health {
    Ready,
    Starting,
    Draining,
    Down,
}

impl Health {
    pub fn as_str(self) -> &'static str {
        match self {
            Health::Ready => "ready",
            Health::Starting => "starting",
            Health::Draining => "draining",
            Health::Down => "down",
        }
    }
}

struct State {
    health: Health,
    fails: u32,
    /// Why the deep health check failed (a dead or hung engine), while it does.
    stalled: Option<String>,
}

pub struct Upstream {
    pub name: String,
    pub url: String,
    st: Mutex<State>,
    pub inflight: AtomicU32,
    pub leases: LeaseBook,
}

impl Upstream {
    pub fn new(name: String, url: String, routable: bool) -> Upstream {
        Upstream {
            name,
            url,
            st: Mutex::new(State {
                health: if routable {
                    Health::Ready
                } else {
                    Health::Starting
                },
                fails: 0,
                stalled: None,
            }),
            inflight: AtomicU32::new(0),
            leases: LeaseBook::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.st.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn health(&self) -> Health {
        self.lock().health
    }

    /// Ready by its readiness checks, and its engine steps (deep check).
    pub fn routable(&self) -> bool {
        let st = self.lock();
        st.health == Health::Ready && st.stalled.is_none()
    }

    /// Why the deep health check fails, while it does.
    pub fn stalled_why(&self) -> Option<String> {
        self.lock().stalled.clone()
    }

    /// Sets (or clears) the deep check's failure; returns whether the worker was
    /// routable before and is after.
    pub fn set_stalled(&self, why: Option<String>) -> (bool, bool) {
        let mut st = self.lock();
        let before = st.health == Health::Ready && st.stalled.is_none();
        st.stalled = why;
        (before, st.health == Health::Ready && st.stalled.is_none())
    }

    /// Moves to `health` (a ready worker starts again with no failed check); returns
    /// the health before.
    pub fn set_health(&self, health: Health) -> Health {
        let mut st = self.lock();
        let before = st.health;
        st.health = health;
        if health == Health::Ready {
            st.fails = 0;
        }
        before
    }

    /// Counts one more failed health check; returns the count.
    pub fn count_failure(&self) -> u32 {
        let mut st = self.lock();
        st.fails += 1;
        st.fails
    }
}

/// Counts a request in flight on an upstream.
pub struct Busy<'a>(&'a Upstream);

impl<'a> Busy<'a> {
    pub fn new(u: &'a Upstream) -> Self {
        u.inflight.fetch_add(1, Ordering::Relaxed);
        Busy(u)
    }
}

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        self.0.inflight.fetch_sub(1, Ordering::Relaxed);
    }
}
