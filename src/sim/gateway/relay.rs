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

use super::Gateway;
use super::upstream::Busy;
use crate::sim::config::GatewayPolicy;
use crate::sim::worker::{LEASE_HEADER, REVISION_HEADER, TOOL_KEY_HEADER};
use crate::wire::chunk;
use crate::wire::headers::{ATTEMPT_HEADER, WORKER_HEADER};
use crate::wire::journal::{GatewayEntry, RemovalCause};
use crate::wire::kinds::ChunkKind;
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
}

impl Client {
    pub fn new(head: oneshot::Sender<Head>, body: mpsc::Sender<Bytes>) -> Arc<Client> {
        Arc::new(Client {
            head: std::sync::Mutex::new(Some(head)),
            body,
            delivered: AtomicU32::new(0),
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
            | End::Aborted(w) => ("failed", Some(w.clone())),
        }
    }
}

/// The request as the gateway forwards it.
pub struct Forward {
    pub rid: String,
    pub path: String,
    pub body: Bytes,
}

/// True when `e` is a refused connection (nothing listens).
pub fn refused(e: &reqwest::Error) -> bool {
    crate::wire::io::io_kind(e) == Some(std::io::ErrorKind::ConnectionRefused)
}

/// The error and its sources, on one line.
pub fn error_text(e: &(dyn std::error::Error + 'static)) -> String {
    crate::wire::io::chain_text(e)
}

/// What the gateway needs to know of one SSE payload, found without parsing the JSON
/// (the gateway relays ~10^5 events/s in `haq sim bench`): whether it is an output delta
/// (non-empty content or text, reasoning, a tool call) and whether it ends the answer
/// (`[DONE]` or a finish_reason). Agrees with `client::chunk::classify` on every event
/// the sim worker writes (tested).
pub struct Peek {
    pub delta: bool,
    pub finished: bool,
}

pub fn peek(data: &str) -> Peek {
    let d = data.trim();
    if d == "[DONE]" {
        return Peek {
            delta: false,
            finished: true,
        };
    }
    let non_empty = |key: &str| {
        d.match_indices(key)
            .any(|(i, _)| !d[i + key.len()..].starts_with('"'))
    };
    let compact = !d.contains("\": ");
    if !compact || d.starts_with("{\"error\"") {
        // Not the sim's compact format, or an error: ask the full classifier.
        let info = chunk::classify(d);
        return Peek {
            delta: info.kind.unwrap_or(ChunkKind::Other).is_delta(),
            finished: info.kind == Some(ChunkKind::Done) || info.finish.is_some(),
        };
    }
    Peek {
        delta: non_empty("\"content\":\"")
            || non_empty("\"text\":\"")
            || non_empty("\"reasoning_content\":\"")
            || d.contains("\"tool_calls\":["),
        finished: d.contains("\"finish_reason\":\""),
    }
}

pub fn sse(data: &str) -> Bytes {
    Bytes::from(format!("data: {data}\n\n"))
}

/// A spare attempt the flawed `soft-timeout` policy wants started.
pub type Spare = Box<dyn FnOnce(u64) + Send>;

/// Silence and lease watch of one attempt (M4: dead vs cut off vs slow).
struct Watch {
    last: Instant,
    slow_noted: bool,
}

impl Watch {
    /// Checked on every tick: the lease lost (renewals failed and the last deadline sent
    /// passed: cut off or frozen), stuck (reachable but silent for `upstream_timeout`),
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
            && crate::wire::mono_ns() >= l.sent_until
        {
            return Some(End::LeaseLost(format!(
                "no byte for {} ms and lease renewals failed; lease expired",
                silent.as_millis()
            )));
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

/// Runs attempt `attempt` of `f` on worker `i`.
pub async fn run(
    gw: &Gateway,
    i: usize,
    attempt: &str,
    f: &Forward,
    client: &Client,
    mut spare: Option<Spare>,
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
    let mut watch = Watch {
        last: Instant::now(),
        slow_noted: false,
    };
    tokio::pin!(send);
    let sent = loop {
        tokio::select! {
            r = &mut send => break r,
            _ = client.body.closed() => return End::ClientGone,
            _ = abort.cancelled() => return End::Aborted("upstream draining (hard-drain)".into()),
            _ = tick.tick() => {
                if let Some(end) = watch.check(gw, i, attempt, &f.rid, &mut spare) {
                    return end;
                }
            }
        }
    };
    let mut resp = match sent {
        Ok(r) => r,
        Err(e) if refused(&e) => {
            gw.mark_down(i, RemovalCause::ConnectFailed, "connection refused");
            return End::Refused(format!("connect: {}", error_text(&e)));
        }
        Err(e) => {
            gw.mark_down(i, RemovalCause::ConnectFailed, "connection failed");
            return End::Broken(format!("send: {}", error_text(&e)));
        }
    };
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
                client.send_head(Head::Whole {
                    status,
                    headers: vec![
                        ("content-type".into(), ctype),
                        (WORKER_HEADER.into(), up.name.clone()),
                        (ATTEMPT_HEADER.into(), attempt.into()),
                    ],
                    body: b,
                });
                End::Relayed
            }
            Err(e) => End::Broken(format!("body: {}", error_text(&e))),
        };
    }

    let mut parser = SseParser::new();
    let mut items = Vec::new();
    // Events held back until the first delta commits the attempt (role-only chunks).
    let mut held: Vec<Bytes> = Vec::new();
    let mut finished = false;
    loop {
        let next = tokio::select! {
            biased;
            _ = client.body.closed() => return End::ClientGone,
            _ = abort.cancelled() => return End::Aborted("upstream draining (hard-drain)".into()),
            c = resp.chunk() => c,
            _ = tick.tick() => {
                if let Some(end) = watch.check(gw, i, attempt, &f.rid, &mut spare) {
                    return end;
                }
                continue;
            }
        };
        let eof = matches!(next, Ok(None));
        match next {
            Ok(Some(b)) => {
                watch.last = Instant::now();
                watch.slow_noted = false;
                parser.push(&b, &mut items);
            }
            Ok(None) => parser.finish(&mut items),
            Err(e) => {
                gw.mark_down(i, RemovalCause::StreamBroken, "stream broken");
                return End::Broken(format!("stream: {}", error_text(&e)));
            }
        }
        // Everything this read brought, forwarded in one write.
        let mut out = bytes::BytesMut::new();
        for it in items.drain(..) {
            let SseItem::Event(ev) = it else { continue };
            if ev.unterminated {
                continue;
            }
            let p = peek(&ev.data);
            finished |= p.finished;
            if !client.committed() {
                if !p.delta {
                    held.push(sse(&ev.data));
                    continue;
                }
                // First delta: commit this attempt and send the head with it.
                if client.send_head(Head::Stream {
                    worker: up.name.clone(),
                    attempt: attempt.to_string(),
                }) {
                    gw.journal.write(GatewayEntry::FirstDelta {
                        req: f.rid.clone(),
                        attempt: attempt.into(),
                        worker: up.name.clone(),
                        revision: revision.clone(),
                    });
                }
            }
            for hb in held.drain(..) {
                out.extend_from_slice(&hb);
            }
            if p.delta {
                client.delivered.fetch_add(1, Ordering::SeqCst);
            }
            out.extend_from_slice(b"data: ");
            out.extend_from_slice(ev.data.as_bytes());
            out.extend_from_slice(b"\n\n");
        }
        if !out.is_empty() && client.body.send(out.freeze()).await.is_err() {
            return End::ClientGone;
        }
        if eof {
            break;
        }
    }
    if !finished {
        return End::Broken("upstream stream ended without [DONE] or finish_reason".into());
    }
    if !client.committed() {
        // A stream with no delta at all: commit now, flush what was held.
        client.send_head(Head::Stream {
            worker: up.name.clone(),
            attempt: attempt.to_string(),
        });
    }
    for hb in held.drain(..) {
        let _ = client.body.send(hb).await;
    }
    End::Finished
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::worker::api::Fmt;

    #[test]
    fn peek_agrees_with_the_full_classifier_on_every_sim_event() {
        let mut events = Vec::new();
        for chat in [true, false] {
            let f = Fmt::new(chat, "c1".into(), "m".into(), true, 3);
            events.push(f.token(" ba", true));
            events.push(f.token(" ba", false));
            events.push(f.token("", false));
            events.extend(f.tail("length", 2));
            events.extend(f.tail("stop", 2));
            if chat {
                events.extend(f.tool_events("call_1", "lookup", "{\"q\": \"x\"}", 4));
                events.extend(f.tail("tool_calls", 2));
            }
        }
        let mut payloads: Vec<String> = events
            .iter()
            .map(|b| {
                let s = std::str::from_utf8(b).expect("utf8");
                s.trim_start_matches("data: ").trim_end().to_string()
            })
            .collect();
        payloads.push(r#"{"error": {"code": "upstream_decode_interrupted"}}"#.into());
        payloads.push(
            r#"{"choices": [{"delta": {"content": "spaced"}, "finish_reason": null}]}"#.into(),
        );
        for d in payloads {
            let info = chunk::classify(&d);
            let p = peek(&d);
            assert_eq!(
                (p.delta, p.finished),
                (
                    info.kind.unwrap_or(ChunkKind::Other).is_delta(),
                    info.kind == Some(ChunkKind::Done) || info.finish.is_some()
                ),
                "{d}"
            );
        }
    }
}
