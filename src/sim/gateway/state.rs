//! The gateway's shared state: its workers, configuration, HTTP clients, journal,
//! admission and retry budget; and the rotation over the workers — capacity,
//! least-loaded round-robin choice, health changes (journaled) and removal on
//! connection failure.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use super::admission::Admission;
use super::upstream::{Health, Upstream};
use crate::sim::config::{GatewayCfg, GatewayPolicy};
use crate::sim::journal::Journal;
use crate::wire::journal::{GatewayEntry, RemovalCause};

pub struct Gateway {
    pub(super) ups: Vec<Upstream>,
    pub(super) cfg: GatewayCfg,
    /// Attempts (pooled connections).
    pub(super) http: reqwest::Client,
    /// Health checks, lease renewals and revocations: a fresh connection each time, so
    /// a refused connection really means nothing listens (a pooled connection to a dead
    /// process would only say "reset").
    pub(super) control: reqwest::Client,
    pub(super) journal: Journal,
    /// Where `journal` writes (for `GET /haq/requests/{id}`).
    pub(super) journal_path: Option<PathBuf>,
    pub(super) admission: Arc<Admission>,
    pub(super) retry_tokens: Mutex<f64>,
    pub(super) rr: AtomicUsize,
    pub(super) seq: AtomicU64,
}

impl Gateway {
    /// Ready workers × per-worker limit (every worker when health checks are off).
    pub fn capacity(&self) -> u32 {
        let n = self
            .ups
            .iter()
            .filter(|u| self.cfg.policy == GatewayPolicy::NoHealthCheck || u.routable())
            .count() as u32;
        n.saturating_mul(self.cfg.max_inflight_per_worker)
    }

    /// The least-loaded routable worker not in `tried`, ties broken round-robin.
    pub fn pick(&self, tried: &[usize]) -> Option<usize> {
        let n = self.ups.len();
        let start = self.rr.fetch_add(1, Ordering::Relaxed);
        let blind = self.cfg.policy == GatewayPolicy::NoHealthCheck;
        (0..n)
            .map(|k| (start + k) % n)
            .filter(|i| !tried.contains(i) && (blind || self.ups[*i].routable()))
            .min_by_key(|i| self.ups[*i].inflight.load(Ordering::Relaxed))
    }

    /// Moves worker `i` to `health`, journaling rotation changes.
    pub fn set_health(&self, i: usize, health: Health, cause: RemovalCause, why: &str) {
        let u = &self.ups[i];
        let was = u.routable();
        let before = u.set_health(health);
        if before == health {
            return;
        }
        let (worker, why) = (u.name.clone(), why.to_string());
        let now = u.routable();
        if now && !was {
            self.journal
                .write(GatewayEntry::UpstreamReady { worker, why });
        } else if was && !now {
            self.journal
                .write(GatewayEntry::UpstreamRemoved { worker, why, cause });
        }
        if health == Health::Draining && self.cfg.policy == GatewayPolicy::HardDrain {
            for (req, attempt) in u.leases.abort_all() {
                self.journal.write(GatewayEntry::HardDrainAbort {
                    req,
                    attempt,
                    worker: u.name.clone(),
                });
            }
        }
        self.admission.set_capacity(self.capacity());
    }

    /// The deep health check of worker `i` failed (`Some(why)`: out of rotation, its
    /// attempts given up — a dead or hung engine publishes nothing more) or passed again.
    pub fn set_stalled(&self, i: usize, why: Option<String>) {
        let u = &self.ups[i];
        let stalled = why.is_some();
        let (before, after) = u.set_stalled(why.clone());
        let worker = u.name.clone();
        if before && !after {
            self.journal.write(GatewayEntry::UpstreamRemoved {
                worker,
                why: why.unwrap_or_default(),
                cause: RemovalCause::EngineUnhealthy,
            });
        } else if !before && after {
            self.journal.write(GatewayEntry::UpstreamReady {
                worker,
                why: "deep health check passed".into(),
            });
        }
        if stalled {
            u.leases.abort_all();
        }
        if before != after {
            self.admission.set_capacity(self.capacity());
        }
    }

    /// A request to worker `i` failed at the connection level: out of rotation now
    /// (unless health checks are off: the flaw of `no-health-check`).
    pub fn mark_down(&self, i: usize, cause: RemovalCause, why: &str) {
        if self.cfg.policy == GatewayPolicy::NoHealthCheck {
            return;
        }
        self.set_health(i, Health::Down, cause, why);
    }
}
