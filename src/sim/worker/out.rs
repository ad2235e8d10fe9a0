//! The publication gate of one response: every byte a worker publishes for a request
//! goes through its [`Out`], which refuses frames once the client is gone, the attempt
//! was revoked or its lease expired (M5). The HTTP body ([`OutBody`]) drains it and
//! checks the lease again at the socket, so nothing is written after the deadline even
//! if it was queued before.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Instant;

use bytes::Bytes;
use futures_util::Stream;

use crate::wire::mono_ns;

/// Why an [`Out`] stopped accepting frames before it was closed normally.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// The client (or the gateway) dropped the response.
    ClientGone,
    /// The gateway revoked the attempt.
    Revoked,
    /// The attempt's lease deadline passed.
    LeaseExpired,
    /// The engine died (a lost GPU) while the request was in it.
    EngineDead,
}

impl Ended {
    pub fn as_str(self) -> &'static str {
        match self {
            Ended::ClientGone => "client gone",
            Ended::Revoked => "lease revoked",
            Ended::LeaseExpired => "lease expired",
            Ended::EngineDead => "engine dead",
        }
    }
}

/// Called (on the HTTP runtime, after the connection task has flushed the frame) when
/// a frame marked with it has been handed to the socket.
pub type AfterWrite = Box<dyn FnOnce() + Send>;

struct Frame {
    bytes: Bytes,
    after: Option<AfterWrite>,
    /// When the model says this event was due (engine step deadline).
    due: Option<Instant>,
}

/// How late token events reach the socket writer against the model's step deadline:
/// the sim's timing error as a client sees it (`haq sim bench`, docs/performance.md).
pub fn event_lateness() -> &'static crate::sim::engine::stats::Hist {
    static H: std::sync::OnceLock<crate::sim::engine::stats::Hist> = std::sync::OnceLock::new();
    H.get_or_init(crate::sim::engine::stats::Hist::new)
}

#[derive(Default)]
struct Inner {
    queue: VecDeque<Frame>,
    closed: bool,
    ended: Option<Ended>,
    waker: Option<Waker>,
}

/// One response's output.
pub struct Out {
    pub rid: String,
    pub attempt: Option<String>,
    /// CLOCK_MONOTONIC deadline of the attempt's lease; 0 = no lease.
    lease_ns: AtomicU64,
    inner: Mutex<Inner>,
}

impl Out {
    pub fn new(rid: String, attempt: Option<String>, lease_ns: Option<u64>) -> Arc<Out> {
        Arc::new(Out {
            rid,
            attempt,
            lease_ns: AtomicU64::new(lease_ns.unwrap_or(0)),
            inner: Mutex::new(Inner::default()),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn lease_passed(&self) -> bool {
        let d = self.lease_ns.load(Ordering::Acquire);
        d != 0 && mono_ns() >= d
    }

    /// Marks the gate ended (first reason wins), drops queued frames, wakes the body.
    fn end(&self, inner: &mut Inner, why: Ended) -> bool {
        let first = inner.ended.is_none() && !inner.closed;
        if inner.ended.is_none() {
            inner.ended = Some(why);
        }
        inner.queue.clear();
        inner.closed = true;
        if let Some(w) = inner.waker.take() {
            w.wake();
        }
        first
    }

    /// Why this output stopped early, checking the lease clock.
    pub fn ended(&self) -> Option<Ended> {
        let mut g = self.lock();
        if g.ended.is_none() && !g.closed && self.lease_passed() {
            self.end(&mut g, Ended::LeaseExpired);
        }
        g.ended
    }

    /// Queues a frame; `Err` says why the gate is shut (nothing was queued).
    pub fn push(&self, bytes: Bytes, after: Option<AfterWrite>) -> Result<(), Ended> {
        self.push_due(bytes, after, None)
    }

    /// Queues a frame the model says was due at `due`.
    pub fn push_due(
        &self,
        bytes: Bytes,
        after: Option<AfterWrite>,
        due: Option<Instant>,
    ) -> Result<(), Ended> {
        let mut g = self.lock();
        if let Some(e) = g.ended {
            return Err(e);
        }
        if self.lease_passed() {
            self.end(&mut g, Ended::LeaseExpired);
            return Err(Ended::LeaseExpired);
        }
        if g.closed {
            return Err(Ended::ClientGone);
        }
        g.queue.push_back(Frame { bytes, after, due });
        if let Some(w) = g.waker.take() {
            w.wake();
        }
        Ok(())
    }

    /// No more frames: the body ends after the queued ones.
    pub fn close(&self) {
        let mut g = self.lock();
        g.closed = true;
        if let Some(w) = g.waker.take() {
            w.wake();
        }
    }

    /// The engine died: a stream gets `last` (the engine's error events) after what is
    /// queued and ends; a whole answer ends with nothing ([`Ended::EngineDead`]).
    pub fn engine_dead(&self, last: &[Bytes]) {
        let mut g = self.lock();
        if g.ended.is_some() || g.closed {
            return;
        }
        if last.is_empty() {
            g.ended = Some(Ended::EngineDead);
        } else {
            for b in last {
                g.queue.push_back(Frame {
                    bytes: b.clone(),
                    after: None,
                    due: None,
                });
            }
        }
        g.closed = true;
        if let Some(w) = g.waker.take() {
            w.wake();
        }
    }

    /// Revokes the attempt: nothing more is written, queued frames are dropped. True if
    /// it was still publishing.
    pub fn revoke(&self) -> bool {
        let mut g = self.lock();
        self.end(&mut g, Ended::Revoked)
    }

    /// Extends the lease to `deadline_ns`; refused (false) once the lease has passed or
    /// the output ended.
    pub fn renew(&self, deadline_ns: u64) -> bool {
        let g = self.lock();
        if g.ended.is_some() || g.closed || self.lease_passed() {
            return false;
        }
        self.lease_ns.fetch_max(deadline_ns, Ordering::AcqRel);
        true
    }

    /// Still publishing (not closed, not ended).
    pub fn live(&self) -> bool {
        self.ended().is_none() && !self.lock().closed
    }
}

/// Counts a response in flight (a SIGTERM drain waits for zero).
pub struct OpenGuard(Arc<std::sync::atomic::AtomicU32>);

impl OpenGuard {
    pub fn new(open: Arc<std::sync::atomic::AtomicU32>) -> OpenGuard {
        open.fetch_add(1, Ordering::SeqCst);
        OpenGuard(open)
    }
}

impl Drop for OpenGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The HTTP body that drains an [`Out`]; dropping it (client gone) shuts the gate.
pub struct OutBody {
    out: Arc<Out>,
    _open: Option<OpenGuard>,
}

impl OutBody {
    pub fn new(out: Arc<Out>, open: Option<OpenGuard>) -> OutBody {
        OutBody { out, _open: open }
    }
}

impl Stream for OutBody {
    type Item = Result<Bytes, Infallible>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let out = &self.out;
        let mut g = out.lock();
        if g.ended.is_none() && out.lease_passed() {
            out.end(&mut g, Ended::LeaseExpired);
        }
        if let Some(f) = g.queue.pop_front() {
            drop(g);
            if let Some(due) = f.due {
                event_lateness()
                    .record_us(Instant::now().saturating_duration_since(due).as_micros() as u64);
            }
            if let Some(after) = f.after {
                // Runs once this connection task yields, i.e. after hyper has written and
                // flushed the frame (poll_write then poll_flush in one turn) on the
                // worker's current-thread runtime.
                tokio::spawn(async move { after() });
            }
            return Poll::Ready(Some(Ok(f.bytes)));
        }
        if g.closed {
            return Poll::Ready(None);
        }
        g.waker = Some(cx.waker().clone());
        Poll::Pending
    }
}

impl Drop for OutBody {
    fn drop(&mut self) {
        let out = &self.out;
        let mut g = out.lock();
        if !g.closed || !g.queue.is_empty() {
            out.end(&mut g, Ended::ClientGone);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::StreamExt;

    #[tokio::test]
    async fn frames_flow_until_closed() {
        let out = Out::new("r".into(), None, None);
        let mut body = OutBody::new(out.clone(), None);
        out.push(Bytes::from_static(b"a"), None).expect("push");
        out.close();
        assert_eq!(
            body.next().await.and_then(Result::ok).as_deref(),
            Some(&b"a"[..])
        );
        assert!(body.next().await.is_none());
    }

    #[tokio::test]
    async fn revoke_drops_queued_frames_and_refuses_more() {
        let out = Out::new("r".into(), Some("r/a1".into()), None);
        let mut body = OutBody::new(out.clone(), None);
        out.push(Bytes::from_static(b"a"), None).expect("push");
        assert!(out.revoke());
        assert!(body.next().await.is_none(), "queued frame not written");
        assert_eq!(
            out.push(Bytes::from_static(b"b"), None),
            Err(Ended::Revoked)
        );
        assert!(!out.renew(u64::MAX));
    }

    #[tokio::test]
    async fn an_expired_lease_shuts_the_gate_even_for_queued_frames() {
        let out = Out::new(
            "r".into(),
            Some("r/a1".into()),
            Some(mono_ns() + 20_000_000),
        );
        let mut body = OutBody::new(out.clone(), None);
        out.push(Bytes::from_static(b"a"), None).expect("push");
        tokio::time::sleep(std::time::Duration::from_millis(40)).await;
        assert!(body.next().await.is_none());
        assert_eq!(out.ended(), Some(Ended::LeaseExpired));
        assert!(!out.renew(u64::MAX), "renewal after expiry is refused");
    }

    #[test]
    fn dropping_the_body_means_the_client_is_gone() {
        let out = Out::new("r".into(), None, None);
        drop(OutBody::new(out.clone(), None));
        assert_eq!(out.push(Bytes::new(), None), Err(Ended::ClientGone));
    }
}
