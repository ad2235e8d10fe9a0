//! The streaming client: sends one OpenAI-compatible request, stamps every SSE event
//! on arrival (before parsing), writes each to the trace and classifies how the stream
//! ended.

pub mod chunk;
pub mod sse;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use reqwest::header::HeaderMap;
use tokio_util::sync::CancellationToken;

use crate::trace::{ChunkKind, Clock, Event, Outcome, TraceWriter};
use sse::{SseItem, SseParser};

/// Header naming the replica that served a request (the sim gateway sets it).
pub const WORKER_HEADER: &str = "x-haq-worker";
/// Header naming the attempt that produced the response.
pub const ATTEMPT_HEADER: &str = "x-haq-attempt";

#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    pub first_token: Duration,
    pub idle: Duration,
}

/// One request to send.
#[derive(Debug, Clone)]
pub struct Call {
    pub id: String,
    pub url: String,
    pub body: Bytes,
    /// Told of the response head and every delivered delta (probe requests only).
    pub observe: Option<Observe>,
}

/// What a per-request observer is told, inline from the read loop.
#[derive(Debug, Clone, Copy)]
pub enum Seen<'a> {
    /// Status and the serving worker (`x-haq-worker`), when the head arrives.
    Head {
        status: u16,
        worker: Option<&'a str>,
    },
    /// The number of deltas delivered so far, after each delta.
    Deltas(u32),
}

/// A per-request observer (the fault triggers of probe requests). It runs on the
/// request's read loop: it must be cheap and never block.
#[derive(Clone)]
pub struct Observe(pub Arc<dyn Fn(Seen<'_>) + Send + Sync>);

impl std::fmt::Debug for Observe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Observe")
    }
}

/// What the engine needs to know live (the trace has everything else).
#[derive(Debug, Clone, Copy)]
pub struct CallResult {
    pub outcome: Outcome,
    /// Time to first output delta, µs from dispatch.
    pub ttft_us: Option<u64>,
    pub e2e_us: u64,
    pub tokens: u32,
}

/// Builds the HTTP client all requests share: rustls (ring), no proxies, no retries.
pub fn http_client(
    connect_timeout: Duration,
    headers: &HeaderMap,
) -> reqwest::Result<reqwest::Client> {
    crate::install_crypto_provider();
    reqwest::Client::builder()
        .connect_timeout(connect_timeout)
        .pool_idle_timeout(Duration::from_secs(30))
        .no_proxy()
        .tcp_nodelay(true)
        .default_headers(headers.clone())
        .build()
}

fn header(h: &HeaderMap, name: &str) -> Option<String> {
    h.get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

/// Walks an error's source chain to the I/O error kind underneath.
pub fn io_kind(e: &(dyn std::error::Error + 'static)) -> Option<std::io::ErrorKind> {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            return Some(io.kind());
        }
        cur = err.source();
    }
    None
}

fn chain_text(e: &(dyn std::error::Error + 'static)) -> String {
    let mut parts = vec![e.to_string()];
    let mut cur = e.source();
    while let Some(s) = cur {
        let t = s.to_string();
        if !parts.iter().any(|p| p.contains(&t)) {
            parts.push(t);
        }
        cur = s.source();
    }
    parts.join(": ")
}

/// Classifies a failed send (before any response).
fn classify_send_error(e: &reqwest::Error) -> Outcome {
    match io_kind(e) {
        Some(std::io::ErrorKind::ConnectionRefused) => Outcome::Refused,
        Some(std::io::ErrorKind::TimedOut) => Outcome::ConnectTimeout,
        _ if e.is_timeout() && e.is_connect() => Outcome::ConnectTimeout,
        _ if e.is_connect() => Outcome::Refused,
        _ => Outcome::Reset,
    }
}

/// Classifies an error while reading the body.
fn classify_body_error(e: &reqwest::Error) -> (Outcome, String) {
    let text = chain_text(e);
    match io_kind(e) {
        Some(std::io::ErrorKind::UnexpectedEof) => (
            Outcome::Reset,
            format!("connection closed before the end of the body (unexpected EOF): {text}"),
        ),
        _ => (Outcome::Reset, text),
    }
}

/// Stream state while reading.
struct Reading<'a> {
    id: &'a str,
    trace: &'a TraceWriter,
    observe: Option<&'a Observe>,
    n: u32,
    deltas: u32,
    usage: Option<u32>,
    done: bool,
    finish: Option<String>,
    error: Option<String>,
    malformed: bool,
    first_delta_us: Option<u64>,
}

impl Reading<'_> {
    fn on_item(&mut self, t: u64, item: SseItem) {
        let data = match item {
            SseItem::Comment(_) => return,
            SseItem::Event(ev) => {
                if ev.unterminated {
                    self.malformed = !ev.data.trim().is_empty() && self.error.is_none();
                }
                ev.data
            }
        };
        let info = chunk::classify(&data);
        let kind = info.kind.unwrap_or(ChunkKind::Other);
        match kind {
            ChunkKind::Done => self.done = true,
            ChunkKind::Error => self.error = Some(data.clone()),
            k if k.is_delta() => {
                self.deltas += 1;
                self.first_delta_us.get_or_insert(t);
                if let Some(o) = self.observe {
                    (o.0)(Seen::Deltas(self.deltas));
                }
            }
            _ => {}
        }
        if info.finish.is_some() {
            self.finish.clone_from(&info.finish);
        }
        if info.usage_tokens.is_some() {
            self.usage = info.usage_tokens;
        }
        self.trace.emit(Event::Chunk {
            t,
            id: self.id.to_string(),
            n: self.n,
            kind,
            text: info.text,
            cid: info.cid,
            finish: info.finish,
            raw: info.keep_raw.then_some(data),
        });
        self.n += 1;
    }
}

/// Sends `call` and reads its stream to the end. `dispatch_us` is when it was sent.
pub async fn execute(
    client: &reqwest::Client,
    call: &Call,
    timeouts: Timeouts,
    clock: &Clock,
    trace: &TraceWriter,
) -> CallResult {
    let dispatch_us = clock.now_us();
    let end = |outcome: Outcome, detail: Option<String>, r: Option<&Reading>| {
        let t = clock.now_us();
        let (tokens, done, finish) = match r {
            Some(r) => (r.usage.unwrap_or(r.deltas), r.done, r.finish.clone()),
            None => (0, false, None),
        };
        trace.emit(Event::End {
            t,
            id: call.id.clone(),
            outcome,
            detail,
            tokens,
            done,
            finish,
        });
        CallResult {
            outcome,
            ttft_us: r
                .and_then(|r| r.first_delta_us)
                .map(|f| f.saturating_sub(dispatch_us)),
            e2e_us: t.saturating_sub(dispatch_us),
            tokens,
        }
    };

    let send = client
        .post(&call.url)
        .header("content-type", "application/json")
        .header("accept", "text/event-stream")
        .header("x-request-id", &call.id)
        .body(call.body.clone())
        .send();
    let mut resp = match tokio::time::timeout(timeouts.first_token, send).await {
        Err(_) => {
            return end(
                Outcome::FirstTokenTimeout,
                Some("no response headers".into()),
                None,
            );
        }
        Ok(Err(e)) => return end(classify_send_error(&e), Some(chain_text(&e)), None),
        Ok(Ok(r)) => r,
    };
    let status = resp.status().as_u16();
    let h = resp.headers();
    trace.emit(Event::Response {
        t: clock.now_us(),
        id: call.id.clone(),
        status,
        worker: header(h, WORKER_HEADER),
        attempt: header(h, ATTEMPT_HEADER),
        retry_after: header(h, "retry-after"),
    });
    if let Some(o) = &call.observe {
        (o.0)(Seen::Head {
            status,
            worker: h.get(WORKER_HEADER).and_then(|v| v.to_str().ok()),
        });
    }
    if status != 200 {
        let body = tokio::time::timeout(timeouts.idle, resp.bytes())
            .await
            .ok()
            .and_then(Result::ok)
            .map(|b| String::from_utf8_lossy(&b[..b.len().min(512)]).into_owned())
            .unwrap_or_default();
        let outcome = if matches!(status, 429 | 503) {
            Outcome::Rejected
        } else {
            Outcome::HttpError
        };
        return end(outcome, Some(format!("HTTP {status}: {body}")), None);
    }

    let mut r = Reading {
        id: &call.id,
        trace,
        observe: call.observe.as_ref(),
        n: 0,
        deltas: 0,
        usage: None,
        done: false,
        finish: None,
        error: None,
        malformed: false,
        first_delta_us: None,
    };
    let mut parser = SseParser::new();
    let mut items = Vec::with_capacity(8);
    let cut: Option<(Outcome, String)> = loop {
        let wait = if r.n == 0 {
            timeouts.first_token
        } else {
            timeouts.idle
        };
        match tokio::time::timeout(wait, resp.chunk()).await {
            Ok(Ok(Some(bytes))) => {
                let t = clock.now_us();
                parser.push(&bytes, &mut items);
                for it in items.drain(..) {
                    r.on_item(t, it);
                }
            }
            Ok(Ok(None)) => {
                let t = clock.now_us();
                parser.finish(&mut items);
                for it in items.drain(..) {
                    r.on_item(t, it);
                }
                break None;
            }
            Ok(Err(e)) => break Some(classify_body_error(&e)),
            Err(_) if r.n == 0 => {
                break Some((
                    Outcome::FirstTokenTimeout,
                    format!("no event within {wait:?}"),
                ));
            }
            Err(_) => break Some((Outcome::IdleTimeout, format!("no event for {wait:?}"))),
        }
    };
    if let Some(e) = r.error.clone() {
        return end(Outcome::ExplicitError, Some(e), Some(&r));
    }
    if r.done || r.finish.is_some() {
        return end(Outcome::Completed, cut.map(|c| c.1), Some(&r));
    }
    if r.malformed {
        return end(
            Outcome::Malformed,
            Some("stream ended inside an event".into()),
            Some(&r),
        );
    }
    match cut {
        Some((o, d)) => end(o, Some(d), Some(&r)),
        None => end(
            Outcome::Truncated,
            Some("end of body without [DONE], finish_reason or error".into()),
            Some(&r),
        ),
    }
}

/// Runs `call` to its end, or until `stop` fires: then it is recorded as cancelled
/// (stopped by haq: an interrupt or the drain timeout) and `None` is returned.
pub async fn execute_until(
    client: &reqwest::Client,
    call: &Call,
    timeouts: Timeouts,
    clock: &Clock,
    trace: &TraceWriter,
    stop: &CancellationToken,
) -> Option<CallResult> {
    tokio::select! {
        r = execute(client, call, timeouts, clock, trace) => Some(r),
        _ = stop.cancelled() => {
            trace.emit(Event::End {
                t: clock.now_us(),
                id: call.id.clone(),
                outcome: Outcome::Cancelled,
                detail: Some("stopped by haq (interrupt or drain timeout)".into()),
                tokens: 0,
                done: false,
                finish: None,
            });
            None
        }
    }
}
