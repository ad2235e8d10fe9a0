//! Publication leases (M5): the book of one worker's live attempts, each with the
//! latest lease deadline sent to the worker (CLOCK_MONOTONIC ns, sent as
//! `x-haq-lease-deadline-ns`) and whether it is still renewed. Renewal and fencing,
//! which use the book, are in `fence.rs`.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::wire::mono_ns;

/// One live attempt's lease.
#[derive(Debug, Clone)]
pub struct Lease {
    pub req: String,
    /// Latest deadline ever sent to the worker.
    pub sent_until: u64,
    /// Still renewed (false after a failed or refused renewal).
    pub renewing: bool,
    /// Cancelled to cut the attempt from the gateway side (flawed `hard-drain`).
    pub abort: CancellationToken,
}

/// The leases of one worker's live attempts, and the renewal loop's wake-up when one
/// is renewed again after a failure (so its renewal goes out at once, inside its lease).
#[derive(Default)]
pub struct LeaseBook(Mutex<HashMap<String, Lease>>, pub tokio::sync::Notify);

impl LeaseBook {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Lease>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Grants a lease for `attempt`; returns its deadline.
    pub fn grant(&self, req: &str, attempt: &str, ttl: Duration, abort: CancellationToken) -> u64 {
        let d = mono_ns() + ttl.as_nanos() as u64;
        self.lock().insert(
            attempt.to_string(),
            Lease {
                req: req.to_string(),
                sent_until: d,
                renewing: true,
                abort,
            },
        );
        d
    }

    pub fn get(&self, attempt: &str) -> Option<Lease> {
        self.lock().get(attempt).cloned()
    }

    pub fn remove(&self, attempt: &str) -> Option<Lease> {
        self.lock().remove(attempt)
    }

    /// Cancels every live attempt (flawed `hard-drain`); returns (req, attempt) pairs.
    pub fn abort_all(&self) -> Vec<(String, String)> {
        self.lock()
            .iter()
            .map(|(a, l)| {
                l.abort.cancel();
                (l.req.clone(), a.clone())
            })
            .collect()
    }

    /// The attempts to renew now, with their deadlines raised to `until` (before the
    /// renewal is sent: the worker may apply it even if its answer is lost).
    pub fn begin_renewal(&self, until: u64) -> Vec<String> {
        let mut g = self.lock();
        let mut v = Vec::new();
        for (a, l) in g.iter_mut() {
            if l.renewing {
                l.sent_until = l.sent_until.max(until);
                v.push(a.clone());
            }
        }
        v
    }

    /// Renews `attempt` again after a renewal failed, if its lease has not run out: the
    /// worker publishes it again, so it is reachable and alive (a stall shorter than
    /// the lease — a pause, a short freeze — is slow, not dead: M4). A fenced attempt
    /// is never resumed (the fence removes it from the book).
    pub fn resume(&self, attempt: &str) -> bool {
        let mut g = self.lock();
        match g.get_mut(attempt) {
            Some(l) if !l.renewing && mono_ns() < l.sent_until => {
                l.renewing = true;
                self.1.notify_one();
                true
            }
            _ => false,
        }
    }

    /// Stops renewing `attempts` (their leases run out at the last deadline sent).
    pub fn stop_renewing(&self, attempts: &[String]) {
        let mut g = self.lock();
        for a in attempts {
            if let Some(l) = g.get_mut(a) {
                l.renewing = false;
            }
        }
    }
}
