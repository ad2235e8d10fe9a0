//! A stop signal for in-flight requests, checked on every wake-up of every request's
//! read loop: one atomic load there (a `CancellationToken` takes two locks per poll).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Waker};

use tokio::sync::Notify;
use tokio::sync::futures::Notified;

use crate::trace::Outcome;

/// Set once; every [`Stop::wait`] then completes, with the outcome its request
/// records.
#[derive(Debug, Default)]
pub struct Stop {
    flag: AtomicBool,
    /// The stop is an interrupt's, not the drain timeout's.
    interrupt: AtomicBool,
    notify: Notify,
}

impl Stop {
    /// Stops at the drain timeout: wakes every waiter, now and later (`cancelled`).
    pub fn stop(&self) {
        self.flag.store(true, Ordering::Release);
        self.notify.notify_waiters();
    }

    /// Stops because haq was interrupted (`interrupted`, unless a drain-timeout stop
    /// came first).
    pub fn interrupt(&self) {
        if !self.is_stopped() {
            self.interrupt.store(true, Ordering::Release);
        }
        self.stop();
    }

    /// The outcome a request stopped now records.
    fn outcome(&self) -> Outcome {
        if self.interrupt.load(Ordering::Acquire) {
            Outcome::Interrupted
        } else {
            Outcome::Cancelled
        }
    }

    pub fn is_stopped(&self) -> bool {
        self.flag.load(Ordering::Acquire)
    }

    /// Completes once [`Stop::stop`] is called.
    pub fn wait(&self) -> StopWait<'_> {
        StopWait {
            stop: self,
            notified: Box::pin(self.notify.notified()),
            waker: None,
        }
    }
}

/// See [`Stop::wait`]. Registers with the signal on its first poll (and again only if
/// polled from another task); later polls look at the flag alone.
pub struct StopWait<'a> {
    stop: &'a Stop,
    notified: Pin<Box<Notified<'a>>>,
    waker: Option<Waker>,
}

impl Future for StopWait<'_> {
    type Output = Outcome;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Outcome> {
        let this = &mut *self;
        if this.stop.is_stopped() {
            return Poll::Ready(this.stop.outcome());
        }
        if this.waker.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
            return Poll::Pending;
        }
        // Registered before the flag is read again: a stop in between still wakes us.
        if this.notified.as_mut().poll(cx).is_ready() {
            return Poll::Ready(this.stop.outcome());
        }
        this.waker = Some(cx.waker().clone());
        if this.stop.is_stopped() {
            Poll::Ready(this.stop.outcome())
        } else {
            Poll::Pending
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    #[tokio::test]
    async fn every_waiter_wakes_whenever_it_started_waiting() {
        let stop = Arc::new(Stop::default());
        let mut tasks = Vec::new();
        for _ in 0..8 {
            let s = stop.clone();
            tasks.push(tokio::spawn(async move { s.wait().await }));
        }
        // Let them register, and poll again without a stop (they stay pending).
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(tasks.iter().all(|t| !t.is_finished()));
        stop.stop();
        for t in tasks {
            tokio::time::timeout(Duration::from_secs(10), t)
                .await
                .expect("woken")
                .expect("task");
        }
        // After the stop, a new wait is done at once.
        tokio::time::timeout(Duration::from_secs(10), stop.wait())
            .await
            .expect("done at once");
    }

    /// An interrupt's stop records `interrupted`; the drain timeout's `cancelled`, also
    /// when an interrupt comes after it (the requests were already being stopped).
    #[tokio::test]
    async fn the_stop_says_whose_it_was() {
        let drain = Stop::default();
        drain.stop();
        drain.interrupt();
        assert_eq!(drain.wait().await, Outcome::Cancelled);
        let interrupt = Stop::default();
        interrupt.interrupt();
        assert_eq!(interrupt.wait().await, Outcome::Interrupted);
        assert!(interrupt.is_stopped());
    }

    #[tokio::test]
    async fn a_waiter_polled_many_times_still_wakes() {
        let stop = Arc::new(Stop::default());
        let s = stop.clone();
        let waiter = tokio::spawn(async move {
            let mut w = std::pin::pin!(s.wait());
            let mut polls = 0u32;
            // Woken by a timer many times before the stop (as a read loop is by data).
            loop {
                tokio::select! {
                    biased;
                    _ = &mut w => return polls,
                    _ = tokio::time::sleep(Duration::from_millis(1)) => polls += 1,
                }
            }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        stop.stop();
        let polls = tokio::time::timeout(Duration::from_secs(10), waiter)
            .await
            .expect("woken")
            .expect("task");
        assert!(polls > 1, "{polls}");
    }
}
