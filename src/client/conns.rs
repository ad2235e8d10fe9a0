//! Which connections the client opened: a tower layer around reqwest's connector, so
//! what a warm-up opened is attested by the connector itself rather than inferred from
//! which connections answers came back on (hyper hands a connection back to its pool as
//! soon as a small answer is in, so concurrent requests may share one, and a connect
//! that lost the race to an idle connection still finishes into the pool).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use hyper_util::client::legacy::connect::{Connection, HttpInfo};

/// Counts the client's connection attempts and, while recording, keeps the client end
/// (`ip:port`) of each connection opened. Cloned into the connector: every clone
/// shares one log.
#[derive(Clone, Default)]
pub struct ConnLog(Arc<Inner>);

#[derive(Default)]
struct Inner {
    started: AtomicU64,
    opened: AtomicU64,
    failed: AtomicU64,
    /// While recording: the client ends of the connections opened.
    ends: Mutex<Option<Vec<String>>>,
    /// While set: connections opened are held back from the client.
    hold: Mutex<Option<Hold>>,
}

/// Connections opened are held until `until` connects have started (then released),
/// or at most until `deadline`: so none serves a request before all of a warm-up's
/// connects have begun.
struct Hold {
    until: u64,
    deadline: tokio::time::Instant,
    gate: Arc<super::stop::Stop>,
}

impl ConnLog {
    /// Connections opened so far.
    pub fn opened(&self) -> u64 {
        self.0.opened.load(Ordering::Acquire)
    }

    /// Connects started that have neither opened nor failed yet.
    pub fn pending(&self) -> u64 {
        let i = &self.0;
        let done = i.opened.load(Ordering::Acquire) + i.failed.load(Ordering::Acquire);
        i.started.load(Ordering::Acquire).saturating_sub(done)
    }

    /// Keep the client end of every connection opened from now on.
    pub fn record(&self) {
        lock(&self.0.ends).get_or_insert_with(Vec::new);
    }

    /// Stop recording; returns the client ends recorded.
    pub fn take(&self) -> Vec<String> {
        lock(&self.0.ends).take().unwrap_or_default()
    }

    /// Holds back every connection opened from now on until `n` more connects have
    /// started, [`ConnLog::release`], or `within` has passed.
    pub fn hold(&self, n: u64, within: std::time::Duration) {
        *lock(&self.0.hold) = Some(Hold {
            until: self.0.started.load(Ordering::Acquire) + n,
            deadline: tokio::time::Instant::now() + within,
            gate: Arc::default(),
        });
    }

    /// Lets held connections go to the client.
    pub fn release(&self) {
        if let Some(h) = lock(&self.0.hold).take() {
            h.gate.stop();
        }
    }

    /// A connect has started: the hold it must wait for, if any (the connect that
    /// completes the count releases everyone).
    fn started_one(&self) -> Option<(Arc<super::stop::Stop>, tokio::time::Instant)> {
        let started = self.0.started.fetch_add(1, Ordering::AcqRel) + 1;
        let mut hold = lock(&self.0.hold);
        let h = hold.as_ref()?;
        if started >= h.until {
            if let Some(h) = hold.take() {
                h.gate.stop();
            }
            return None;
        }
        Some((h.gate.clone(), h.deadline))
    }

    fn opened_one(&self, end: Option<String>) {
        if let Some(ends) = lock(&self.0.ends).as_mut() {
            ends.push(end.unwrap_or_else(|| "?".to_string()));
        }
        self.0.opened.fetch_add(1, Ordering::AcqRel);
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl std::fmt::Debug for ConnLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnLog")
            .field("opened", &self.opened())
            .field("pending", &self.pending())
            .finish()
    }
}

impl<S> tower_layer::Layer<S> for ConnLog {
    type Service = Logged<S>;

    fn layer(&self, inner: S) -> Logged<S> {
        Logged {
            inner,
            log: self.clone(),
        }
    }
}

/// reqwest's connector, its connections counted into a [`ConnLog`].
#[derive(Clone)]
pub struct Logged<S> {
    inner: S,
    log: ConnLog,
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S, R> tower_service::Service<R> for Logged<S>
where
    S: tower_service::Service<R>,
    S::Response: Connection + Send + 'static,
    S::Error: Send + 'static,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = BoxFuture<Result<S::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: R) -> Self::Future {
        let hold = self.log.started_one();
        let connecting = self.inner.call(req);
        let log = self.log.clone();
        Box::pin(async move {
            let r = connecting.await;
            let opened = match &r {
                Ok(conn) => {
                    let mut ext = http::Extensions::new();
                    conn.connected().get_extras(&mut ext);
                    let end = ext.get::<HttpInfo>().map(|i| i.local_addr().to_string());
                    log.opened_one(end);
                    true
                }
                Err(_) => {
                    log.0.failed.fetch_add(1, Ordering::AcqRel);
                    false
                }
            };
            if let (true, Some((gate, deadline))) = (opened, hold) {
                let _ = tokio::time::timeout_at(deadline, gate.wait()).await;
            }
            r
        })
    }
}
