//! One attempt: send the request to a worker with its attempt id and lease, relay the
//! SSE stream to the client, and say how it ended. The attempt commits when its first
//! delta is handed to the client connection; response headers go out with that delta,
//! so they name the attempt that really serves (Routing attribution).

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use super::net::{error_text, refused};
use super::peek::{peek, sse};
use super::state::Gateway;
use super::upstream::{Busy, Upstream};
use crate::sim::config::GatewayPolicy;
use crate::sim::worker::{LEASE_HEADER, REVISION_HEADER, TOOL_KEY_HEADER};
use crate::wire::headers::{ATTEMPT_HEADER, WORKER_HEADER};
use crate::wire::journal::{GatewayEntry, RemovalCause};
use crate::wire::sse::{SseItem, SseParser};

/// What the request task tells the HTTP handler before any body byte.
pub enum Head {
    /// Stream committed to this attempt; the body follows on the channel.
    Stream { worker: String, attempt: String },
    /// A complete answer (status, headers, body).
    Whole {
        status: u16,
        headers: Vec<(String, String)>,
        body: Bytes,
    },
}

/// The client side of one request, shared by its attempts.
pub struct Client {
    head: std::sync::Mutex<Option<oneshot::Sender<Head>>>,
    pub body: mpsc::Sender<Bytes>,
    /// Deltas delivered to the client so far.
    pub delivered: AtomicU32,
    /// What the deltas said, kept under the `migrate` policies (the continuation
    /// re-sends it): (text, where the last delta's text begins, a tool call seen).
    pub said: std::sync::Mutex<(String, usize, bool)>,
}

impl Client {
    pub fn new(head: oneshot::Sender<Head>, body: mpsc::Sender<Bytes>) -> Arc<Client> {
        Arc::new(Client {
            head: std::sync::Mutex::new(Some(head)),
            body,
            delivered: AtomicU32::new(0),
            said: std::sync::Mutex::new((String::new(), 0, false)),
        })
    }

    /// The response head went out (the request is committed to an attempt).
    pub fn committed(&self) -> bool {
        self.head
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_none()
    }

    /// Sends the head; false if it was already sent.
    pub fn send_head(&self, h: Head) -> bool {
        let tx = self.head.lock().unwrap_or_else(|p| p.into_inner()).take();
        match tx {
            Some(tx) => {
                let _ = tx.send(h);
                true
            }
            None => false,
        }
    }

    pub fn delivered(&self) -> u32 {
        self.delivered.load(Ordering::SeqCst)
    }
}

/// How an attempt ended.
#[derive(Debug, Clone)]
pub enum End {
    /// The stream finished (`[DONE]` or finish_reason, then end of body).
    Finished,
    /// A whole (non-stream) answer or a client error was relayed.
    Relayed,
    /// The client went away.
    ClientGone,
    /// The worker's address refused the connection: it is dead.
    Refused(String),
    /// The worker refused to start it (503 starting/draining, 409 lease refused, 5xx).
    NotStarted(String),
    /// The connection broke or the body ended early (dead, or cut off).
    Broken(String),
    /// Renewals failed and the lease deadline passed: cut off or frozen.
    LeaseLost(String),
    /// Reachable but silent for `upstream_timeout`.
    Stuck(String),
    /// Cut by the gateway (flawed `hard-drain`).
    Aborted(String),
    /// The worker wrote an in-band error event (its engine died mid-stream): the
    /// attempt failed, whatever clean end follows it.
    UpstreamError(String),
}

impl End {
    pub fn result(&self) -> (&'static str, Option<String>) {
        match self {
            End::Finished => ("finished", None),
            End::Relayed => ("relayed", None),
            End::ClientGone => ("client_gone", None),
            End::Refused(w)
            | End::NotStarted(w)
            | End::Broken(w)
            | End::LeaseLost(w)
            | End::Stuck(w)
            | End::Aborted(w)
            | End::UpstreamError(w) => ("failed", Some(w.clone())),
        }
    }
}

/// The request as the gateway forwards it.
pub struct Forward {
    pub rid: String,
    pub path: String,
    pub body: Bytes,
    /// A migrated stream's continuation (policy `migrate`): the original prompt's
    /// tokens and the output tokens re-sent after it, to report the whole answer's
    /// usage.
    pub resumed: Option<(u32, u32)>,
}

/// A spare attempt the flawed `soft-timeout` policy wants started.
pub type Spare = Box<dyn FnOnce(u64) + Send>;

/// Silence and lease watch of one attempt (M4: dead vs cut off vs slow).
struct Watch {
    last: Instant,
    slow_noted: bool,
    /// How often it is checked.
    every: Duration,
}

impl Watch {
    /// Checked on every tick: the lease lost (renewals failed and the last deadline sent
    /// passed: cut off or frozen; renewed again if the attempt publishes before that),
    /// stuck (reachable but silent for `upstream_timeout`),
    /// slow (silent for `soft_timeout`: journaled, or a spare attempt for the flawed
    /// `soft-timeout`).
    fn check(
        &mut self,
        gw: &Gateway,
        i: usize,
        attempt: &str,
        req: &str,
        spare: &mut Option<Spare>,
    ) -> Option<End> {
        let up = &gw.ups[i];
        let silent = self.last.elapsed();
        if let Some(l) = up.leases.get(attempt)
            && !l.renewing
        {
            if crate::wire::mono_ns() >= l.sent_until {
                return Some(End::LeaseLost(format!(
                    "no byte for {} ms and lease renewals failed; lease expired",
                    silent.as_millis()
                )));
            }
            // A renewal failed, yet the attempt published since the last tick, inside
            // its lease: the worker came back (a short stall), so its lease is renewed
            // again rather than left to run out under a stream that is being served.
            if silent < self.every {
                up.leases.resume(attempt);
            }
        }
        if silent >= gw.cfg.upstream_timeout.0 {
            return Some(End::Stuck(format!("no byte for {} ms", silent.as_millis())));
        }
        if silent >= gw.cfg.soft_timeout.0 && !self.slow_noted {
            self.slow_noted = true;
            let silent_ms = silent.as_millis() as u64;
            let (req, attempt, worker) = (req.to_string(), attempt.to_string(), up.name.clone());
            match spare.take() {
                Some(start_spare) => {
                    gw.journal.write(GatewayEntry::SoftTimeoutFailover {
                        req,
                        attempt,
                        worker,
                        silent_ms,
                    });
                    start_spare(silent_ms);
                }
                None => gw.journal.write(GatewayEntry::SlowUpstream {
                    req,
                    attempt,
                    worker,
                    silent_ms,
                }),
            }
        }
        None
    }
}

/// Why an attempt cut by the flawed `hard-drain` policy ended.
const HARD_DRAIN: &str = "upstream draining (hard-drain)";

/// Runs attempt `attempt` of `f` on worker `i`.
pub async fn run(
    gw: &Gateway,
    i: usize,
    attempt: &str,
    f: &Forward,
    client: &Client,
    spare: Option<Spare>,
) -> End {
    let up = &gw.ups[i];
    let _busy = Busy::new(up);
    let abort = CancellationToken::new();
    let deadline = up
        .leases
        .grant(&f.rid, attempt, gw.cfg.lease_ttl.0, abort.clone());
    gw.journal.write(GatewayEntry::LeaseGranted {
        req: f.rid.clone(),
        attempt: attempt.into(),
        worker: up.name.clone(),
        deadline_ns: deadline,
    });
    let tool_key = match gw.cfg.policy {
        GatewayPolicy::NoToolIdempotency => attempt,
        _ => &f.rid,
    };
    let send = gw
        .http
        .post(format!("{}{}", up.url, f.path))
        .header("content-type", "application/json")
        .header("x-request-id", &f.rid)
        .header(ATTEMPT_HEADER, attempt)
        .header(LEASE_HEADER, deadline.to_string())
        .header(TOOL_KEY_HEADER, tool_key)
        .body(f.body.clone())
        .send();
    let tick_every =
        (gw.cfg.lease_ttl.0 / 4).clamp(Duration::from_millis(10), Duration::from_millis(250));
    let mut tick = tokio::time::interval(tick_every.min(gw.cfg.soft_timeout.0));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut a = Attempt {
        gw,
        i,
        id: attempt,
        f,
        client,
        spare,
        abort,
        tick,
        watch: Watch {
            last: Instant::now(),
            slow_noted: false,
            every: tick_every.min(gw.cfg.soft_timeout.0),
        },
    };
    match a.send(send).await {
        Ok(resp) => a.answer(resp).await,
        Err(end) => end,
    }
}

/// One attempt in flight: where it runs, for which client, and what watches it.
struct Attempt<'a> {
    gw: &'a Gateway,
    i: usize,
    id: &'a str,
    f: &'a Forward,
    client: &'a Client,
    spare: Option<Spare>,
    /// Cancelled to cut the attempt from the gateway side (flawed `hard-drain`).
    abort: CancellationToken,
    /// When the watch is checked.
    tick: tokio::time::Interval,
    watch: Watch,
}

impl<'a> Attempt<'a> {
    fn up(&self) -> &'a Upstream {
        &self.gw.ups[self.i]
    }

    /// Why the gateway cut this attempt: its worker failed the deep health check (a
    /// dead or hung engine: given up like a stuck upstream), or the flawed `hard-drain`.
    fn cut(&self) -> End {
        match self.up().stalled_why() {
            Some(why) => End::Stuck(why),
            None => End::Aborted(HARD_DRAIN.into()),
        }
    }

    /// The head that commits the request to this attempt.
    fn stream_head(&self) -> Head {
        Head::Stream {
            worker: self.up().name.clone(),
            attempt: self.id.to_string(),
        }
    }

    /// Waits for the worker's response head while watching the client, the drain and
    /// the silence; a connection failure takes the worker out of rotation.
    async fn send(
        &mut self,
        send: impl Future<Output = reqwest::Result<reqwest::Response>>,
    ) -> Result<reqwest::Response, End> {
        tokio::pin!(send);
        let sent = loop {
            tokio::select! {
                r = &mut send => break r,
                _ = self.client.body.closed() => return Err(End::ClientGone),
                _ = self.abort.cancelled() => return Err(self.cut()),
                _ = self.tick.tick() => {
                    let (gw, i, id, rid) = (self.gw, self.i, self.id, &self.f.rid);
                    if let Some(end) = self.watch.check(gw, i, id, rid, &mut self.spare) {
                        return Err(end);
                    }
                }
            }
        };
        match sent {
            Ok(r) => Ok(r),
            Err(e) if refused(&e) => {
                self.gw
                    .mark_down(self.i, RemovalCause::ConnectFailed, "connection refused");
                Err(End::Refused(format!("connect: {}", error_text(&e))))
            }
            Err(e) => {
                self.gw
                    .mark_down(self.i, RemovalCause::ConnectFailed, "connection failed");
                Err(End::Broken(format!("send: {}", error_text(&e))))
            }
        }
    }

    /// Relays the worker's answer: a refusal to start (5xx, 409), a whole answer
    /// (anything but a 200 event stream), or the stream.
    async fn answer(&mut self, resp: reqwest::Response) -> End {
        let status = resp.status().as_u16();
        let header = |name: &str| {
            resp.headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        };
        let revision = header(REVISION_HEADER);
        let ctype = header("content-type").unwrap_or_else(|| "application/json".into());
        if status >= 500 || status == 409 {
            let body = resp.bytes().await.unwrap_or_default();
            let text = String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned();
            return End::NotStarted(format!("upstream HTTP {status}: {text}"));
        }
        if status != 200 || !ctype.starts_with("text/event-stream") {
            return match resp.bytes().await {
                Ok(b) => {
                    self.client.send_head(Head::Whole {
                        status,
                        headers: vec![
                            ("content-type".into(), ctype),
                            (WORKER_HEADER.into(), self.up().name.clone()),
                            (ATTEMPT_HEADER.into(), self.id.into()),
                        ],
                        body: b,
                    });
                    End::Relayed
                }
                Err(e) => End::Broken(format!("body: {}", error_text(&e))),
            };
        }
        self.stream(resp, revision).await
    }

    /// Relays the event stream read by read until it ends, the client leaves, the
    /// attempt is cut or its watch ends it.
    async fn stream(&mut self, mut resp: reqwest::Response, revision: Option<String>) -> End {
        let mut parser = SseParser::new();
        let mut items = Vec::new();
        let mut commit = Commit {
            held: Vec::new(),
            finished: false,
            done_sent: false,
            revision,
            error: None,
        };
        loop {
            let next = tokio::select! {
                biased;
                _ = self.client.body.closed() => return End::ClientGone,
                _ = self.abort.cancelled() => return self.cut(),
                c = resp.chunk() => c,
                _ = self.tick.tick() => {
                    let (gw, i, id, rid) = (self.gw, self.i, self.id, &self.f.rid);
                    if let Some(end) = self.watch.check(gw, i, id, rid, &mut self.spare) {
                        return self.unless_over(commit, end).await;
                    }
                    continue;
                }
            };
            let eof = matches!(next, Ok(None));
            match next {
                Ok(Some(b)) => {
                    self.watch.last = Instant::now();
                    self.watch.slow_noted = false;
                    parser.push(&b, &mut items);
                }
                Ok(None) => parser.finish(&mut items),
                Err(e) => {
                    self.gw
                        .mark_down(self.i, RemovalCause::StreamBroken, "stream broken");
                    let end = End::Broken(format!("stream: {}", error_text(&e)));
                    return self.unless_over(commit, end).await;
                }
            }
            // Everything this read brought, forwarded in one write.
            let out = self.forward(&mut items, &mut commit);
            if !out.is_empty() && self.client.body.send(out.freeze()).await.is_err() {
                return End::ClientGone;
            }
            if let Some(e) = commit.error.take() {
                return End::UpstreamError(format!("upstream error event: {e}"));
            }
            if eof {
                break;
            }
        }
        self.end(commit).await
    }

    /// The events of one read, as one write to the client. Events before the first
    /// delta are held back; the first delta commits the attempt (the head goes out,
    /// `first_delta` is journaled) and carries what was held.
    fn forward(&self, items: &mut Vec<SseItem>, commit: &mut Commit) -> bytes::BytesMut {
        let mut out = bytes::BytesMut::new();
        for it in items.drain(..) {
            let SseItem::Event(ev) = it else { continue };
            if ev.unterminated {
                continue;
            }
            let p = peek(&ev.data);
            if p.error {
                // The engine's error ends the attempt: not the client's stream (the
                // policy decides what the client gets), nor anything after it.
                commit.error = Some(ev.data.chars().take(200).collect());
                break; // the drain drops the rest of this read
            }
            commit.finished |= p.finished;
            commit.done_sent |= ev.data.trim() == "[DONE]";
            if !self.client.committed() {
                if !p.delta {
                    commit.held.push(sse(&ev.data));
                    continue;
                }
                // First delta: commit this attempt and send the head with it.
                if self.client.send_head(self.stream_head()) {
                    self.gw.journal.write(GatewayEntry::FirstDelta {
                        req: self.f.rid.clone(),
                        attempt: self.id.into(),
                        worker: self.up().name.clone(),
                        revision: commit.revision.clone(),
                    });
                }
            }
            for hb in commit.held.drain(..) {
                out.extend_from_slice(&hb);
            }
            if p.delta {
                self.client.delivered.fetch_add(1, Ordering::SeqCst);
                if self.gw.cfg.policy.migrates() {
                    self.keep_said(&ev.data);
                }
            }
            out.extend_from_slice(b"data: ");
            match self.f.resumed {
                Some(r) if !p.delta && ev.data.contains("\"usage\"") => {
                    out.extend_from_slice(super::migrate::whole_usage(&ev.data, r).as_bytes())
                }
                _ => out.extend_from_slice(ev.data.as_bytes()),
            }
            out.extend_from_slice(b"\n\n");
        }
        out
    }

    /// Keeps a delivered delta's text for a continuation (a tool call is not continued).
    fn keep_said(&self, data: &str) {
        let info = crate::wire::chunk::classify(data);
        let mut g = self.client.said.lock().unwrap_or_else(|p| p.into_inner());
        g.1 = g.0.len();
        match info.text {
            Some(t) => g.0.push_str(&t),
            None => g.2 = true,
        }
        g.2 |= !info.tools.is_empty();
    }

    /// How an attempt whose upstream broke (or whose watch gave up on it) ends: as it
    /// says, unless the answer was already over for the client — a finish_reason or
    /// `[DONE]` relayed. Then the client has its whole answer: it gets the `[DONE]` it
    /// may still lack and nothing else (an error event after `[DONE]` would break the
    /// stream's grammar), and the attempt is finished.
    async fn unless_over(&mut self, commit: Commit, end: End) -> End {
        if !(commit.finished && self.client.committed()) {
            return end;
        }
        if !commit.done_sent {
            let _ = self
                .client
                .body
                .send(Bytes::from_static(b"data: [DONE]\n\n"))
                .await;
        }
        End::Finished
    }

    /// The end of the worker's body: finished only after `[DONE]` or a finish_reason.
    /// (`&mut`: the attempt holds its spare, which is `Send` but not `Sync`.)
    async fn end(&mut self, mut commit: Commit) -> End {
        if !commit.finished {
            return End::Broken("upstream stream ended without [DONE] or finish_reason".into());
        }
        if !self.client.committed() {
            // A stream with no delta at all: commit now, flush what was held.
            self.client.send_head(self.stream_head());
        }
        for hb in commit.held.drain(..) {
            let _ = self.client.body.send(hb).await;
        }
        End::Finished
    }
}

/// What the stream relay keeps between reads until the attempt commits.
struct Commit {
    /// Events held back until the first delta commits the attempt (role-only chunks).
    held: Vec<Bytes>,
    /// `[DONE]` or a finish_reason was seen.
    finished: bool,
    /// `[DONE]` was relayed to the client.
    done_sent: bool,
    /// The weights revision the worker answered with (journaled with `first_delta`).
    revision: Option<String>,
    /// The in-band error event the worker wrote (its first 200 characters).
    error: Option<String>,
}
