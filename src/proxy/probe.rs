//! Probe requests: where in its life a watched request is stopped ([`ProxyPoint`]),
//! what the proxy tells its watcher ([`ProxySeen`]), what the fault answers
//! ([`Release`]), and the board every replica's proxy looks watches up on.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

use tokio::sync::{mpsc, oneshot};

use crate::wire::marker::RunToken;

/// What the fault tells a held request or response to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Release {
    /// Deliver what was held and carry on.
    Forward,
    /// Drop what was held and end the exchange (the replica is gone).
    Drop,
    /// Drop it if the replica's side ends within a short grace (the fault removed the
    /// replica), else deliver it (a fault haq cannot see into, e.g. a user command).
    Auto,
}

/// Where in a watched request's life the proxy stops it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProxyPoint {
    /// Only report where it is routed.
    Route,
    /// Hold the request before the replica sees it.
    Queued,
    /// Once the request reached the replica, hold its response from the first byte.
    Prefill,
    /// Hold the response's k-th output delta (1-based: content, reasoning or tool-call)
    /// once it was received from the replica, whole: computed, not yet sent.
    Event(u32),
    /// Hold the response's first tool-call delta: the engine wrote it once the tool had
    /// run (the sim runs the tool before streaming the call).
    ToolCall,
}

/// What the proxy tells the watcher of a probe request.
#[derive(Debug)]
pub enum ProxySeen {
    /// An attempt of the probe was sent to `replica`.
    Routed {
        replica: String,
        attempt: Option<String>,
        t: u64,
    },
    /// The probe reached the watched point on `replica` and is held there until
    /// `release` says what to do (dropping the sender forwards).
    Reached {
        replica: String,
        attempt: Option<String>,
        t: u64,
        release: oneshot::Sender<Release>,
    },
}

struct Watch {
    point: ProxyPoint,
    tx: mpsc::UnboundedSender<ProxySeen>,
    fired: bool,
}

/// Probe requests being watched, shared by every replica's proxy; and the run's token,
/// by which the proxies read the marker in each request body.
#[derive(Default)]
pub struct ProbeBoard {
    n: AtomicUsize,
    /// Watches at the `Queued` point not fired yet: while there is one, a request
    /// head that names no watched probe waits for its body's marker before it is
    /// forwarded (the probe must be held before the replica sees it).
    queued: AtomicUsize,
    map: Mutex<HashMap<String, Watch>>,
    token: OnceLock<RunToken>,
}

impl ProbeBoard {
    /// The run's token: from now on, request bodies are scanned for its markers.
    pub fn set_run_token(&self, token: RunToken) {
        let _ = self.token.set(token);
    }

    pub fn run_token(&self) -> Option<RunToken> {
        self.token.get().copied()
    }

    /// Watches requests with this id (`x-request-id`, or the marker in the body).
    pub fn watch(&self, id: &str, point: ProxyPoint) -> mpsc::UnboundedReceiver<ProxySeen> {
        let (tx, rx) = mpsc::unbounded_channel();
        let mut m = lock(&self.map);
        m.insert(
            id.to_string(),
            Watch {
                point,
                tx,
                fired: false,
            },
        );
        self.recount(&m);
        rx
    }

    pub fn unwatch(&self, id: &str) {
        let mut m = lock(&self.map);
        m.remove(id);
        self.recount(&m);
    }

    fn recount(&self, m: &HashMap<String, Watch>) {
        self.n.store(m.len(), Ordering::Release);
        let q = m
            .values()
            .filter(|w| w.point == ProxyPoint::Queued && !w.fired)
            .count();
        self.queued.store(q, Ordering::Release);
    }

    /// A request head that names no watched probe must wait for its marker: a probe
    /// at the `Queued` point is watched and has not fired (cheap when none is).
    pub(super) fn holds_heads(&self) -> bool {
        self.queued.load(Ordering::Acquire) > 0
    }

    /// The watch on `id`, if any (cheap when nothing is watched).
    pub(super) fn hit(
        &self,
        id: Option<&str>,
    ) -> Option<(ProxyPoint, mpsc::UnboundedSender<ProxySeen>)> {
        if self.n.load(Ordering::Acquire) == 0 {
            return None;
        }
        let m = lock(&self.map);
        let w = m.get(id?)?;
        Some((w.point, w.tx.clone()))
    }

    /// Claims the one firing of the watch on `id` (a retry elsewhere does not fire again).
    pub(super) fn claim(&self, id: &str) -> bool {
        let mut m = lock(&self.map);
        let claimed = match m.get_mut(id) {
            Some(w) if !w.fired => {
                w.fired = true;
                true
            }
            _ => false,
        };
        if claimed {
            self.recount(&m);
        }
        claimed
    }
}

/// Locks `m`, going on after a panic elsewhere poisoned it.
pub(super) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
