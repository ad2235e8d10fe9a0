//! The proxy in front of one replica ([`ReplicaProxy`]): its upstream, its active
//! rules, its live connections and what it counted; and the check of whether the
//! replica's address still accepts connections.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use tokio::sync::watch;

use super::probe::{ProbeBoard, lock};
use super::rules::{PathRules, Rule};
use crate::trace::{Clock, Event, TraceWriter};

/// The proxy in front of one replica.
pub struct ReplicaProxy {
    pub name: String,
    pub listen: SocketAddr,
    upstream: RwLock<Option<String>>,
    rules: Mutex<(u64, BTreeMap<u64, Rule>)>,
    pub(super) rules_tx: watch::Sender<PathRules>,
    /// Live connections: id → the rules epoch each has applied.
    pub(super) conns: Mutex<HashMap<u64, Arc<AtomicU64>>>,
    pub(super) next_conn: AtomicU64,
    /// Inference requests (POST) forwarded and not yet answered in full.
    pub(super) in_flight: watch::Sender<u32>,
    /// Inference requests answered in full with a 2xx status.
    pub(super) served: watch::Sender<u64>,
    /// Requests not recorded in the trace (health checks, metrics).
    pub other_requests: AtomicU64,
    /// The listener is open (false while the replica is dead).
    pub(super) listening: watch::Sender<bool>,
    /// Wakes the accept loop to close the listener.
    pub(super) dead: tokio::sync::Notify,
    /// haq is killing the replica: the listener stays closed, whatever the dying
    /// process's address still accepts, until the kill is settled.
    killing: AtomicBool,
    pub(super) board: Arc<ProbeBoard>,
    pub(super) trace: TraceWriter,
    pub(super) clock: Clock,
}

impl ReplicaProxy {
    /// A proxy listening on `listen` (bound by the caller), forwarding to `upstream`,
    /// with no rule active and no connection yet.
    pub(super) fn new(
        name: String,
        listen: SocketAddr,
        upstream: Option<String>,
        board: Arc<ProbeBoard>,
        trace: TraceWriter,
        clock: Clock,
    ) -> ReplicaProxy {
        ReplicaProxy {
            name,
            listen,
            upstream: RwLock::new(upstream),
            rules: Mutex::new((0, BTreeMap::new())),
            rules_tx: watch::Sender::new(PathRules::default()),
            conns: Mutex::new(HashMap::new()),
            next_conn: AtomicU64::new(1),
            in_flight: watch::Sender::new(0),
            served: watch::Sender::new(0),
            other_requests: AtomicU64::new(0),
            listening: watch::Sender::new(true),
            dead: tokio::sync::Notify::new(),
            killing: AtomicBool::new(false),
            board,
            trace,
            clock,
        }
    }

    /// Whether `e` (of an accept or a connect, `during`) is haq's own host out of a
    /// resource ([`crate::wire::io::local_errno`]); if so it is recorded as haq's
    /// failure (`proxy_local`), never as the replica's.
    pub(super) fn local_failure(&self, e: &std::io::Error, during: &str) -> bool {
        let Some(errno) = crate::wire::io::local_errno(e) else {
            return false;
        };
        self.trace.emit(crate::trace::Event::ProxyLocal {
            t: self.clock.now_us(),
            replica: self.name.clone(),
            errno: errno.name().into(),
            during: during.into(),
        });
        true
    }

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

    /// haq has just signalled the replica to die: the listener closes now, not once
    /// the death is verified, so no connection is accepted for a replica that is
    /// dying; it stays closed until [`Self::kill_settled`].
    pub fn killing(&self) {
        self.killing.store(true, Ordering::Release);
        self.dead.notify_one();
    }

    /// The kill is verified (or failed): the listener reopens once the replica's
    /// address accepts connections again (a replacement, or a kill that did not take).
    pub fn kill_settled(&self) {
        self.killing.store(false, Ordering::Release);
    }

    /// Whether the listener may reopen (no kill in progress).
    pub(super) fn may_reopen(&self) -> bool {
        !self.killing.load(Ordering::Acquire)
    }

    /// Records the listener's new state (a trace line when it changes).
    pub(super) fn set_listening(&self, open: bool) {
        if self.listening.send_replace(open) != open {
            self.trace.emit(Event::ProxyListener {
                t: self.clock.now_us(),
                replica: self.name.clone(),
                open,
            });
        }
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

/// Whether the replica's address accepts a TCP connection: `Some(false)` when it is
/// refused (nothing listens: the replica is dead), `None` when it cannot tell (no
/// answer in time: frozen or cut off is not dead).
pub(super) async fn upstream_alive(p: &ReplicaProxy) -> Option<bool> {
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
