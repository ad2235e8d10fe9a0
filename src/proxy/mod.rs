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
pub mod http;

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot, watch};
use tokio_util::sync::CancellationToken;

use crate::trace::{Clock, TraceWriter};

/// One fault rule on a path. Several may be active at once (their effects combine).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    /// Forward nothing either way; keep every socket open.
    Blackhole,
    /// Add this latency to every byte, both ways.
    Delay(Duration),
    /// At most this many bytes per second, each way.
    Throttle(u64),
    /// Abort connections with RST (existing ones at once, new ones on accept).
    Reset,
    /// Close connections with FIN (existing ones at once, new ones on accept).
    Close,
}

/// How a connection is cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cut {
    Reset,
    Close,
}

/// The combined effect of the active rules, as every connection applies it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PathRules {
    /// Bumped on every change; connections acknowledge the epoch they applied.
    pub epoch: u64,
    pub blackhole: bool,
    pub delay: Duration,
    pub throttle: Option<u64>,
    pub cut: Option<Cut>,
}

impl PathRules {
    fn combine(epoch: u64, rules: impl Iterator<Item = Rule>) -> PathRules {
        let mut r = PathRules {
            epoch,
            ..Default::default()
        };
        for rule in rules {
            match rule {
                Rule::Blackhole => r.blackhole = true,
                Rule::Delay(d) => r.delay += d,
                Rule::Throttle(b) => r.throttle = Some(r.throttle.map_or(b, |t| t.min(b))),
                Rule::Reset => r.cut = Some(Cut::Reset),
                Rule::Close => r.cut = r.cut.or(Some(Cut::Close)),
            }
        }
        r
    }
}

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

/// Probe requests being watched, shared by every replica's proxy.
#[derive(Default)]
pub struct ProbeBoard {
    n: AtomicUsize,
    map: Mutex<HashMap<String, Watch>>,
}

impl ProbeBoard {
    /// Watches requests with this `x-request-id`.
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
        self.n.store(m.len(), Ordering::Release);
        rx
    }

    pub fn unwatch(&self, id: &str) {
        let mut m = lock(&self.map);
        m.remove(id);
        self.n.store(m.len(), Ordering::Release);
    }

    /// The watch on `id`, if any (cheap when nothing is watched).
    fn hit(&self, id: Option<&str>) -> Option<(ProxyPoint, mpsc::UnboundedSender<ProxySeen>)> {
        if self.n.load(Ordering::Acquire) == 0 {
            return None;
        }
        let m = lock(&self.map);
        let w = m.get(id?)?;
        Some((w.point, w.tx.clone()))
    }

    /// Claims the one firing of the watch on `id` (a retry elsewhere does not fire again).
    fn claim(&self, id: &str) -> bool {
        let mut m = lock(&self.map);
        match m.get_mut(id) {
            Some(w) if !w.fired => {
                w.fired = true;
                true
            }
            _ => false,
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The proxy in front of one replica.
pub struct ReplicaProxy {
    pub name: String,
    pub listen: SocketAddr,
    upstream: RwLock<Option<String>>,
    rules: Mutex<(u64, BTreeMap<u64, Rule>)>,
    rules_tx: watch::Sender<PathRules>,
    /// Live connections: id → the rules epoch each has applied.
    conns: Mutex<HashMap<u64, Arc<AtomicU64>>>,
    next_conn: AtomicU64,
    /// Inference requests (POST) forwarded and not yet answered in full.
    in_flight: watch::Sender<u32>,
    /// Inference requests answered in full with a 2xx status.
    served: watch::Sender<u64>,
    /// Requests not recorded in the trace (health checks, metrics).
    pub other_requests: AtomicU64,
    /// The listener is open (false while the replica is dead).
    listening: watch::Sender<bool>,
    /// Wakes the accept loop to close the listener.
    dead: tokio::sync::Notify,
    board: Arc<ProbeBoard>,
    trace: TraceWriter,
    clock: Clock,
}

impl ReplicaProxy {
    /// The `host:port` it forwards to.
    pub fn upstream(&self) -> Option<String> {
        self.upstream
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Points the path at another upstream (a replacement replica); new connections
    /// go there.
    pub fn set_upstream(&self, addr: &str) {
        *self.upstream.write().unwrap_or_else(|e| e.into_inner()) = Some(addr.to_string());
    }

    /// Activates a rule; returns its id and the epoch connections must acknowledge.
    pub fn add_rule(&self, rule: Rule) -> (u64, u64) {
        let mut g = lock(&self.rules);
        let id = g.1.keys().next_back().map_or(1, |k| k + 1);
        g.1.insert(id, rule);
        g.0 += 1;
        let epoch = g.0;
        self.rules_tx
            .send_replace(PathRules::combine(epoch, g.1.values().copied()));
        (id, epoch)
    }

    /// Removes a rule; returns the new epoch, or `None` if it was not active.
    pub fn remove_rule(&self, id: u64) -> Option<u64> {
        let mut g = lock(&self.rules);
        g.1.remove(&id)?;
        g.0 += 1;
        let epoch = g.0;
        self.rules_tx
            .send_replace(PathRules::combine(epoch, g.1.values().copied()));
        Some(epoch)
    }

    /// The rules in force.
    pub fn rules(&self) -> PathRules {
        self.rules_tx.borrow().clone()
    }

    /// Whether every live connection has applied `epoch`: how many there are, or how
    /// many have not yet.
    pub fn applied_now(&self, epoch: u64) -> Result<usize, usize> {
        let c = lock(&self.conns);
        let behind = c
            .values()
            .filter(|a| a.load(Ordering::Acquire) < epoch)
            .count();
        if behind == 0 {
            Ok(c.len())
        } else {
            Err(behind)
        }
    }

    /// Waits until every live connection has applied `epoch`; returns how many did,
    /// or how many had not after `timeout`.
    pub async fn applied(&self, epoch: u64, timeout: Duration) -> Result<usize, usize> {
        let deadline = Instant::now() + timeout;
        loop {
            match self.applied_now(epoch) {
                Ok(n) => return Ok(n),
                Err(behind) if Instant::now() >= deadline => return Err(behind),
                Err(_) => tokio::time::sleep(Duration::from_millis(5)).await,
            }
        }
    }

    /// Live connections through this proxy.
    pub fn connections(&self) -> usize {
        lock(&self.conns).len()
    }

    /// Checks whether the replica is dead (its address refuses connections); if so,
    /// closes the listener before returning, so the gateway's next connection is
    /// refused. Returns true when it is dead.
    pub async fn check_dead(&self) -> bool {
        if upstream_alive(self).await != Some(false) {
            return false;
        }
        self.dead.notify_one();
        let mut l = self.listening.subscribe();
        let _ = tokio::time::timeout(Duration::from_millis(200), l.wait_for(|v| !*v)).await;
        true
    }

    /// The listener is open (the replica is not known dead).
    pub fn is_listening(&self) -> bool {
        *self.listening.borrow()
    }

    /// Inference requests in flight on this replica (a watch to wait on).
    pub fn in_flight(&self) -> watch::Receiver<u32> {
        self.in_flight.subscribe()
    }

    /// Inference requests served in full so far (a watch to wait on).
    pub fn served(&self) -> watch::Receiver<u64> {
        self.served.subscribe()
    }
}

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
}

impl ProxySet {
    /// Binds every listener (all or nothing) and starts accepting.
    pub async fn start(
        specs: &[ProxySpec],
        trace: &TraceWriter,
        clock: &Clock,
    ) -> anyhow::Result<ProxySet> {
        let mut listeners = Vec::new();
        for s in specs {
            let l = std::net::TcpListener::bind(s.listen)
                .and_then(|l| l.set_nonblocking(true).map(|()| l))
                .map_err(|e| {
                    anyhow::anyhow!("proxy for {}: cannot listen on {}: {e}", s.name, s.listen)
                })?;
            listeners.push(l);
        }
        let board = Arc::new(ProbeBoard::default());
        let stop = CancellationToken::new();
        let rt = own_runtime(stop.clone())?;
        let mut replicas = Vec::new();
        for (s, l) in specs.iter().zip(listeners) {
            let p = Arc::new(ReplicaProxy {
                name: s.name.clone(),
                listen: l.local_addr()?,
                upstream: RwLock::new(s.upstream.clone()),
                rules: Mutex::new((0, BTreeMap::new())),
                rules_tx: watch::Sender::new(PathRules::default()),
                conns: Mutex::new(HashMap::new()),
                next_conn: AtomicU64::new(1),
                in_flight: watch::Sender::new(0),
                served: watch::Sender::new(0),
                other_requests: AtomicU64::new(0),
                listening: watch::Sender::new(true),
                dead: tokio::sync::Notify::new(),
                board: board.clone(),
                trace: trace.clone(),
                clock: *clock,
            });
            let (p2, stop2) = (p.clone(), stop.clone());
            rt.spawn(async move {
                // Registered with the proxies' own runtime, whose thread serves it.
                match TcpListener::from_std(l) {
                    Ok(l) => accept_loop(p2, l, stop2).await,
                    Err(e) => eprintln!("haq: proxy for {}: {e}", p2.name),
                }
            });
            replicas.push(p);
        }
        Ok(ProxySet {
            replicas,
            board,
            stop,
        })
    }

    pub fn get(&self, name: &str) -> Option<&Arc<ReplicaProxy>> {
        self.replicas.iter().find(|r| r.name == name)
    }

    pub fn board(&self) -> &Arc<ProbeBoard> {
        &self.board
    }

    /// Stops accepting and closes every connection.
    pub fn stop(&self) {
        self.stop.cancel();
    }
}

/// The proxies relay every byte between gateway and replicas; on their own thread and
/// runtime they never delay the load client's dispatch or its reading of a stream (the
/// client's timing is the evidence, SPEC Q12). The thread ends, dropping the runtime and
/// every connection, when `stop` is cancelled.
fn own_runtime(stop: CancellationToken) -> anyhow::Result<tokio::runtime::Handle> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::Builder::new()
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
            rt.block_on(stop.cancelled());
        })?;
    rx.recv()
        .map_err(|_| anyhow::anyhow!("the proxy thread ended at once"))?
        .map_err(|e| anyhow::anyhow!("cannot start the proxy runtime: {e}"))
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
/// it would without haq in between (M4: dead is not cut off); it is reopened, on the
/// same port, once the replica's address accepts connections again.
async fn accept_loop(p: Arc<ReplicaProxy>, l: TcpListener, stop: CancellationToken) {
    let mut l = Some(l);
    loop {
        let Some(listener) = l.take() else {
            // Dead: wait for the replica (a replacement) to listen again.
            tokio::select! {
                _ = tokio::time::sleep(REVIVE_POLL) => {}
                _ = stop.cancelled() => return,
            }
            if upstream_alive(&p).await == Some(true)
                && let Ok(nl) = TcpListener::bind(p.listen).await
            {
                l = Some(nl);
                p.listening.send_replace(true);
            }
            continue;
        };
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = p.dead.notified() => {
                drop(listener);
                p.listening.send_replace(false);
                continue;
            }
            _ = stop.cancelled() => return,
        };
        match accepted {
            Ok((sock, _)) => {
                let _ = sock.set_nodelay(true);
                tokio::spawn(conn::serve(p.clone(), sock, stop.clone()));
            }
            // Out of descriptors or similar: back off instead of spinning.
            Err(_) => tokio::time::sleep(REVIVE_POLL).await,
        }
        l = Some(listener);
    }
}

/// Whether the replica's address accepts a TCP connection: `Some(false)` when it is
/// refused (nothing listens: the replica is dead), `None` when it cannot tell (no
/// answer in time: frozen or cut off is not dead).
async fn upstream_alive(p: &ReplicaProxy) -> Option<bool> {
    let addr = p.upstream()?;
    match tokio::time::timeout(
        Duration::from_millis(200),
        tokio::net::TcpStream::connect(addr),
    )
    .await
    {
        Ok(Ok(_)) => Some(true),
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused => Some(false),
        _ => None,
    }
}

#[cfg(test)]
mod tests;
