//! haq's interposition proxy: one TCP listener per replica, between the gateway and
//! that replica, moving the original bytes both ways (HTTP/1.1).
//!
//! It is SSE-aware: it knows where each request and response starts and ends and
//! counts the events of every streamed response, so it can
//! - attribute each request to its replica (`proxy_request` / `proxy_end` trace events:
//!   Routing evidence that needs no gateway cooperation);
//! - apply network faults to the path: reset (RST), close (FIN), blackhole (nothing
//!   forwarded either way, sockets kept open: a cut path with the replica alive),
//!   delay, throttle;
//! - stop a chosen request at a chosen point of its token loop (the request held before
//!   the engine sees it; the response held from its first byte; event k held after the
//!   engine computed it but before the gateway received it) while a fault is applied,
//!   then release or drop what it held.

mod conn;
pub mod daemon;
pub mod handover;
pub mod http;
mod probe;
mod replica;
mod rules;
mod watch;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use futures_util::FutureExt;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::trace::{Clock, TraceWriter};
use probe::lock;
pub use probe::{ProbeBoard, ProxyPoint, ProxySeen, Release};
pub use replica::ReplicaProxy;
use replica::upstream_alive;
pub use rules::{Cut, PathRules, Rule};

/// One spec per replica: name, listen address, upstream `host:port` (may come later).
#[derive(Debug, Clone)]
pub struct ProxySpec {
    pub name: String,
    pub listen: SocketAddr,
    pub upstream: Option<String>,
}

/// The proxies of a run: one per replica, sharing one probe board.
pub struct ProxySet {
    pub replicas: Vec<Arc<ReplicaProxy>>,
    board: Arc<ProbeBoard>,
    stop: CancellationToken,
    /// The proxies' thread, joined by [`ProxySet::stop`].
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// Listeners borrowed from `haq proxy`, given back once the thread has ended.
    leases: Mutex<Vec<handover::Lease>>,
}

impl ProxySet {
    /// Binds every listener (all or nothing) — or borrows it from `haq proxy` when
    /// one holds the address — and starts accepting.
    pub async fn start(
        specs: &[ProxySpec],
        trace: &TraceWriter,
        clock: &Clock,
    ) -> anyhow::Result<ProxySet> {
        let mut listeners = Vec::new();
        let mut leases = Vec::new();
        for s in specs {
            match handover::borrow(&handover::dir(), s.listen)? {
                Some(b) => {
                    listeners.push(b.listener);
                    leases.push(b.lease);
                }
                None => listeners.push(bind(s)?),
            }
        }
        let set = ProxySet::from_listeners(specs, listeners, trace, clock)?;
        *lock(&set.leases) = leases;
        Ok(set)
    }

    /// Starts accepting on `listeners` (one per spec, non-blocking): listening
    /// again if a previous holder left one shut down.
    pub fn from_listeners(
        specs: &[ProxySpec],
        listeners: Vec<std::net::TcpListener>,
        trace: &TraceWriter,
        clock: &Clock,
    ) -> anyhow::Result<ProxySet> {
        for l in &listeners {
            let _ = relisten(l);
        }
        let board = Arc::new(ProbeBoard::default());
        let stop = CancellationToken::new();
        let tasks = TaskTracker::new();
        let (rt, thread) = own_runtime(stop.clone(), tasks.clone())?;
        let mut replicas = Vec::new();
        for (s, l) in specs.iter().zip(listeners) {
            let p = Arc::new(ReplicaProxy::new(
                s.name.clone(),
                l.local_addr()?,
                s.upstream.clone(),
                board.clone(),
                trace.clone(),
                *clock,
            ));
            let (p2, stop2, tasks2) = (p.clone(), stop.clone(), tasks.clone());
            rt.spawn(async move {
                // Registered with the proxies' own runtime, whose thread serves it.
                match TcpListener::from_std(l) {
                    Ok(l) => accept_loop(p2, l, stop2, tasks2).await,
                    Err(e) => eprintln!("haq: proxy for {}: {e}", p2.name),
                }
            });
            replicas.push(p);
        }
        let watched = replicas
            .iter()
            .map(|p| watch::Watched {
                listen: p.listen,
                replica: p.name.clone(),
            })
            .collect();
        watch::start(&rt, watched, trace, *clock, stop.clone());
        Ok(ProxySet {
            replicas,
            board,
            stop,
            thread: Mutex::new(Some(thread)),
            leases: Mutex::new(Vec::new()),
        })
    }

    pub fn get(&self, name: &str) -> Option<&Arc<ReplicaProxy>> {
        self.replicas.iter().find(|r| r.name == name)
    }

    pub fn board(&self) -> &Arc<ProbeBoard> {
        &self.board
    }

    /// Stops accepting and closes every connection; returns once every exchange
    /// still open has written its `proxy_end` (`stopped`) and the proxies' thread has
    /// ended — at most [`STOP_GRACE`] after the cancel, a few ms as a rule.
    pub fn stop(&self) {
        self.stop.cancel();
        if let Some(t) = lock(&self.thread).take() {
            let _ = t.join();
        }
        lock(&self.leases).clear();
    }
}

/// A listener on `s.listen`, non-blocking.
pub fn bind(s: &ProxySpec) -> anyhow::Result<std::net::TcpListener> {
    std::net::TcpListener::bind(s.listen)
        .and_then(|l| l.set_nonblocking(true).map(|()| l))
        .map_err(|e| anyhow::anyhow!("proxy for {}: cannot listen on {}: {e}", s.name, s.listen))
}

/// Backlog of a listener (the kernel's default cap).
const BACKLOG: i32 = 4096;

/// Stops listening on `l`'s socket — for every holder of it, as a close would for
/// one: connects are refused by the kernel, the port stays bound (`haq proxy` may
/// hold the same socket).
fn unlisten<S: std::os::fd::AsFd>(l: &S) {
    let _ = socket2::SockRef::from(l).shutdown(std::net::Shutdown::Read);
}

/// Listens again on `at` after [`unlisten`]: the same socket (its explicitly bound
/// port stays bound, also for `haq proxy`, which may hold it too), registered afresh;
/// a socket bound to an ephemeral port (`:0`, tests) lost its port to the shutdown, so
/// a fresh one is bound at `at` instead. `Err`: not yet, with what was parked.
fn reopen(
    parked: Option<std::net::TcpListener>,
    at: SocketAddr,
) -> Result<TcpListener, Option<std::net::TcpListener>> {
    if let Some(s) = parked {
        if relisten(&s).is_ok() && s.local_addr().is_ok_and(|a| a == at) {
            return TcpListener::from_std(s).map_err(|_| None);
        }
        unlisten(&s);
    }
    std::net::TcpListener::bind(at)
        .and_then(|l| l.set_nonblocking(true).map(|()| l))
        .and_then(TcpListener::from_std)
        .map_err(|_| None)
}

/// Listens on `l`'s socket again (a no-op but for the backlog when it listens).
fn relisten<S: std::os::fd::AsFd>(l: &S) -> std::io::Result<()> {
    socket2::SockRef::from(l).listen(BACKLOG)
}

/// How long a dead replica's address must keep accepting, without having refused
/// once, before the listener reopens (a kill that did not take).
const REOPEN_UNSEEN: Duration = Duration::from_secs(2);

/// How long the proxies' connections get, once stopped, to see the stop and write
/// how their exchanges ended before the runtime (and every connection) is dropped.
pub const STOP_GRACE: Duration = Duration::from_secs(1);

/// The proxies relay every byte between gateway and replicas; on their own thread and
/// runtime they never delay the load client's dispatch or its reading of a stream (the
/// client's timing is the evidence, SPEC Q12). When `stop` is cancelled the thread
/// waits (at most [`STOP_GRACE`]) for the connection tasks in `tasks` to see it and
/// end — each writes how its open exchanges ended — then ends, dropping the runtime
/// and whatever connection is left.
fn own_runtime(
    stop: CancellationToken,
    tasks: TaskTracker,
) -> anyhow::Result<(tokio::runtime::Handle, std::thread::JoinHandle<()>)> {
    let (tx, rx) = std::sync::mpsc::channel();
    let thread = std::thread::Builder::new()
        .name("haq-proxy".into())
        .spawn(move || {
            let rt = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    let _ = tx.send(Err(e));
                    return;
                }
            };
            let _ = tx.send(Ok(rt.handle().clone()));
            rt.block_on(async {
                stop.cancelled().await;
                tasks.close();
                let _ = tokio::time::timeout(STOP_GRACE, tasks.wait()).await;
            });
        })?;
    let handle = rx
        .recv()
        .map_err(|_| anyhow::anyhow!("the proxy thread ended at once"))?
        .map_err(|e| anyhow::anyhow!("cannot start the proxy runtime: {e}"))?;
    Ok((handle, thread))
}

impl Drop for ProxySet {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// How often a dead replica's address is tried while the proxy stands in for it.
const REVIVE_POLL: Duration = Duration::from_millis(20);

/// Accepts while the replica lives. When it is found dead (its address refuses
/// connections), the listener is closed, so the gateway meets a refused connection as
/// it would without haq in between (M4: dead is not cut off) — each refusal seen by
/// [`watch`]; it is reopened, on the same port, once the replica's address accepts
/// connections again.
async fn accept_loop(
    p: Arc<ReplicaProxy>,
    l: TcpListener,
    stop: CancellationToken,
    tasks: TaskTracker,
) {
    let mut listener = Some(l);
    // While dead: the socket shut down and out of the runtime's poller (a socket that
    // saw its shutdown stays "readable" there for good), to listen again on.
    let mut parked: Option<std::net::TcpListener> = None;
    // Since the death: when, and whether the replica's address has refused once.
    let (mut down_since, mut refused_seen) = (Instant::now(), false);
    let mut last_local = None;
    loop {
        let Some(active) = listener.as_ref() else {
            // Dead: wait for the replica (a replacement) to listen again.
            tokio::select! {
                _ = tokio::time::sleep(REVIVE_POLL) => {}
                _ = stop.cancelled() => return,
            }
            let alive = upstream_alive(&p).await;
            if alive == Some(false) {
                refused_seen = true;
            }
            // A killed process's address can still accept for a moment while its last
            // threads exit (its leader already a zombie, the kill "verified"): alive
            // only counts once the address has refused — or, for a kill that did not
            // take, after REOPEN_UNSEEN.
            let settled = refused_seen || down_since.elapsed() >= REOPEN_UNSEEN;
            if p.may_reopen() && alive == Some(true) && settled {
                match reopen(parked.take(), p.listen) {
                    Ok(l) => {
                        // A death noticed while closed is no reason to close it again.
                        let _ = p.dead.notified().now_or_never();
                        listener = Some(l);
                        p.set_listening(true);
                    }
                    Err(kept) => parked = kept,
                }
            }
            continue;
        };
        let accepted = tokio::select! {
            a = active.accept() => a,
            _ = p.dead.notified() => {
                if let Some(l) = listener.take() {
                    unlisten(&l);
                    parked = l.into_std().ok();
                }
                (down_since, refused_seen) = (Instant::now(), false);
                p.set_listening(false);
                continue;
            }
            _ = stop.cancelled() => return,
        };
        match accepted {
            Ok((sock, _)) => {
                let _ = sock.set_nodelay(true);
                tasks.spawn(conn::serve(p.clone(), sock, stop.clone()));
            }
            // Out of descriptors or similar: haq's failure, recorded (at most once a
            // second: the loop retries every REVIVE_POLL); back off instead of spinning.
            Err(e) => {
                if last_local.is_none_or(|t: Instant| t.elapsed() >= Duration::from_secs(1))
                    && p.local_failure(&e, "accept")
                {
                    last_local = Some(Instant::now());
                }
                tokio::time::sleep(REVIVE_POLL).await
            }
        }
    }
}

#[cfg(test)]
mod tests;
