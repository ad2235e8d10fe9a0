//! The workers behind the gateway: active health checks that respect readiness and
//! drain (Q6, Q7), removal on connection failure, least-loaded round-robin choice.

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};

use super::Gateway;
use super::lease::LeaseBook;
use crate::sim::config::GatewayPolicy;
use crate::wire::journal::{GatewayEntry, RemovalCause};

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

    pub fn routable(&self) -> bool {
        self.health() == Health::Ready
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
        let before = {
            let mut st = u.lock();
            let before = st.health;
            st.health = health;
            if health == Health::Ready {
                st.fails = 0;
            }
            before
        };
        if before == health {
            return;
        }
        let (worker, why) = (u.name.clone(), why.to_string());
        if health == Health::Ready {
            self.journal
                .write(GatewayEntry::UpstreamReady { worker, why });
        } else if before == Health::Ready {
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

    /// A request to worker `i` failed at the connection level: out of rotation now
    /// (unless health checks are off: the flaw of `no-health-check`).
    pub fn mark_down(&self, i: usize, cause: RemovalCause, why: &str) {
        if self.cfg.policy == GatewayPolicy::NoHealthCheck {
            return;
        }
        self.set_health(i, Health::Down, cause, why);
    }

    fn check_failed(&self, i: usize, why: &str) {
        let fails = {
            let mut st = self.ups[i].lock();
            st.fails += 1;
            st.fails
        };
        if fails >= self.cfg.health_failures {
            self.set_health(i, Health::Down, RemovalCause::HealthCheckFailed, why);
        }
    }
}

/// Polls worker `i`'s `/ready` every `health_interval` for as long as the gateway runs.
pub async fn health_loop(gw: Arc<Gateway>, i: usize) {
    let every = gw.cfg.health_interval.0;
    let timeout = gw.cfg.health_timeout();
    let url = format!("{}/ready", gw.ups[i].url);
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let r = gw.control.get(&url).timeout(timeout).send().await;
        match r {
            Ok(resp) if resp.status().is_success() => {
                gw.set_health(i, Health::Ready, RemovalCause::Other, "ready check passed")
            }
            Ok(resp) if resp.status().as_u16() == 503 => {
                let v: serde_json::Value = resp.json().await.unwrap_or_default();
                match v["status"].as_str() {
                    Some("draining") => gw.set_health(
                        i,
                        Health::Draining,
                        RemovalCause::Draining,
                        "ready check: draining",
                    ),
                    Some("starting") => gw.set_health(
                        i,
                        Health::Starting,
                        RemovalCause::NotReady,
                        "ready check: starting",
                    ),
                    _ => gw.check_failed(i, "ready check: HTTP 503"),
                }
            }
            Ok(resp) => gw.check_failed(i, &format!("ready check: HTTP {}", resp.status())),
            Err(e) => gw.check_failed(i, &format!("ready check: {}", super::relay::error_text(&e))),
        }
    }
}
