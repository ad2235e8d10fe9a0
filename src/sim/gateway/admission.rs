//! Admission control (Q10): at most `max_inflight_per_worker` × ready workers requests
//! in flight; the rest wait in one queue, protected traffic ahead of best-effort. Beyond
//! `best_effort_queue_limit` best-effort requests are shed, beyond `queue_limit`
//! protected ones too — after evicting any queued best-effort request first. Shed
//! requests get 429 + Retry-After; a request that waited `queue_timeout` gets 503.
//! The flawed `no-shedding` policy queues without bound.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::oneshot;

use crate::wire::journal::Priority;

/// Why a request was refused.
#[derive(Debug, Clone)]
pub struct Shed {
    pub status: u16,
    pub queue_len: u32,
    pub why: String,
}

struct Waiter {
    id: u64,
    prio: Priority,
    tx: oneshot::Sender<Result<(), Shed>>,
}

#[derive(Default)]
struct State {
    inflight: u32,
    capacity: u32,
    queue: VecDeque<Waiter>,
    next: u64,
}

pub struct Admission {
    st: Mutex<State>,
    pub bounded: bool,
    queue_limit: u32,
    best_effort_limit: u32,
    queue_timeout: Duration,
}

/// A slot in flight; released on drop.
pub struct Permit(Arc<Admission>);

impl std::fmt::Debug for Permit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Permit")
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        let mut st = self.0.lock();
        st.inflight = st.inflight.saturating_sub(1);
        Admission::pump(&mut st);
    }
}

impl Admission {
    pub fn new(
        bounded: bool,
        queue_limit: u32,
        best_effort_limit: u32,
        queue_timeout: Duration,
    ) -> Arc<Admission> {
        Arc::new(Admission {
            st: Mutex::new(State::default()),
            bounded,
            queue_limit,
            best_effort_limit,
            queue_timeout,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.st.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn pump(st: &mut State) {
        while st.inflight < st.capacity {
            let Some(w) = st.queue.pop_front() else {
                break;
            };
            if w.tx.send(Ok(())).is_ok() {
                st.inflight += 1;
            }
        }
    }

    /// Sets the number of requests that may be in flight (ready workers × per-worker
    /// limit) and admits waiters if it grew.
    pub fn set_capacity(&self, capacity: u32) {
        let mut st = self.lock();
        st.capacity = if self.bounded { capacity } else { u32::MAX };
        Self::pump(&mut st);
    }

    pub fn queue_len(&self) -> u32 {
        self.lock().queue.len() as u32
    }

    pub fn inflight(&self) -> u32 {
        self.lock().inflight
    }

    /// Admits a request of priority `prio`, waiting in the queue if needed.
    pub async fn admit(
        self: &Arc<Self>,
        prio: Priority,
        on_queued: impl FnOnce(u32),
    ) -> Result<Permit, Shed> {
        let (rx, id, pos) = {
            let mut st = self.lock();
            if st.inflight < st.capacity && st.queue.is_empty() {
                st.inflight += 1;
                return Ok(Permit(self.clone()));
            }
            let len = st.queue.len() as u32;
            if self.bounded {
                let limit = match prio {
                    Priority::Protected => self.queue_limit,
                    Priority::BestEffort => self.best_effort_limit,
                };
                if len >= limit {
                    let victim = (prio == Priority::Protected)
                        .then(|| {
                            st.queue
                                .iter()
                                .rposition(|w| w.prio == Priority::BestEffort)
                        })
                        .flatten();
                    match victim {
                        Some(v) => {
                            if let Some(w) = st.queue.remove(v) {
                                let _ = w.tx.send(Err(Shed {
                                    status: 429,
                                    queue_len: len,
                                    why: "evicted from the queue by protected traffic".into(),
                                }));
                            }
                        }
                        None => {
                            return Err(Shed {
                                status: 429,
                                queue_len: len,
                                why: format!("queue full ({len} waiting)"),
                            });
                        }
                    }
                }
            }
            let (tx, rx) = oneshot::channel();
            st.next += 1;
            let id = st.next;
            let at = match prio {
                Priority::Protected => st
                    .queue
                    .iter()
                    .position(|w| w.prio == Priority::BestEffort)
                    .unwrap_or(st.queue.len()),
                Priority::BestEffort => st.queue.len(),
            };
            st.queue.insert(at, Waiter { id, prio, tx });
            (rx, id, st.queue.len() as u32)
        };
        on_queued(pos);
        match tokio::time::timeout(self.queue_timeout, rx).await {
            Ok(Ok(Ok(()))) => Ok(Permit(self.clone())),
            Ok(Ok(Err(shed))) => Err(shed),
            Ok(Err(_)) | Err(_) => {
                let mut st = self.lock();
                let was_queued = st.queue.iter().position(|w| w.id == id);
                if let Some(i) = was_queued {
                    st.queue.remove(i);
                } else {
                    // Admitted in the same instant the timeout fired: give the slot back.
                    st.inflight = st.inflight.saturating_sub(1);
                    Self::pump(&mut st);
                }
                Err(Shed {
                    status: 503,
                    queue_len: st.queue.len() as u32,
                    why: format!("waited {:?} in the gateway queue", self.queue_timeout),
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn adm(bounded: bool) -> Arc<Admission> {
        let a = Admission::new(bounded, 2, 1, Duration::from_secs(5));
        a.set_capacity(1);
        a
    }

    #[tokio::test]
    async fn best_effort_is_shed_before_protected_and_evicted_by_it() {
        let a = adm(true);
        let first = a.admit(Priority::Protected, |_| {}).await.expect("slot");
        // Queue: one best-effort may wait, the second is shed.
        let a1 = a.clone();
        let be =
            tokio::spawn(async move { a1.admit(Priority::BestEffort, |_| {}).await.map(|_| ()) });
        tokio::task::yield_now().await;
        while a.queue_len() < 1 {
            tokio::task::yield_now().await;
        }
        let shed = a
            .admit(Priority::BestEffort, |_| {})
            .await
            .expect_err("shed");
        assert_eq!(shed.status, 429);
        // Protected fill the queue and evict the queued best-effort.
        let a2 = a.clone();
        let p1 =
            tokio::spawn(async move { a2.admit(Priority::Protected, |_| {}).await.map(|_| ()) });
        while a.queue_len() < 2 {
            tokio::task::yield_now().await;
        }
        let a3 = a.clone();
        let p2 =
            tokio::spawn(async move { a3.admit(Priority::Protected, |_| {}).await.map(|_| ()) });
        let evicted = be.await.expect("task").expect_err("evicted");
        assert!(evicted.why.contains("evicted"), "{}", evicted.why);
        let full = a
            .admit(Priority::Protected, |_| {})
            .await
            .expect_err("queue full");
        assert!(full.why.contains("queue full"));
        drop(first);
        p1.await
            .expect("task")
            .expect("admitted after the first left");
        p2.await.expect("task").expect("admitted in turn");
    }

    #[tokio::test]
    async fn unbounded_admission_never_sheds() {
        let a = adm(false);
        let mut held = Vec::new();
        for _ in 0..50 {
            held.push(
                a.admit(Priority::BestEffort, |_| {})
                    .await
                    .expect("admitted"),
            );
        }
        assert_eq!(a.inflight(), 50);
    }
}
