//! The streaming client: sends one OpenAI-compatible request, stamps every SSE event
//! on arrival (before parsing), writes each to the trace and classifies how the stream
//! ended.

pub mod conns;
pub mod h1;
pub mod stop;
pub mod stream;
pub mod warm;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use tokio::time::Instant;

use crate::trace::{ChunkRef, Clock, Event, Outcome, TraceWriter};
pub use crate::wire::headers::{ATTEMPT_HEADER, PRIORITY_HEADER, QUEUE_HEADERS, WORKER_HEADER};
use stream::{Cut, Ending, StreamState};

/// Most response headers recorded per request (the rest are counted).
pub const MAX_HEADERS: usize = 32;
/// Longest header name or value recorded (bytes); longer ones are cut, marked `…`.
pub const MAX_HEADER_BYTES: usize = 256;

/// The response headers as the trace records them: in order, bounded in number and
/// size (issue #4 item 2), and how many were left out.
pub fn record_headers(h: &HeaderMap) -> (Vec<(String, String)>, u32) {
    fn cut(s: &str) -> String {
        if s.len() <= MAX_HEADER_BYTES {
            return s.to_string();
        }
        let mut end = MAX_HEADER_BYTES;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        format!("{}…", &s[..end])
    }
    let list = h
        .iter()
        .take(MAX_HEADERS)
        .map(|(k, v)| (cut(k.as_str()), cut(&String::from_utf8_lossy(v.as_bytes()))))
        .collect();
    (list, h.len().saturating_sub(MAX_HEADERS) as u32)
}

/// Client timeouts. The first-token deadline runs from dispatch until the first
/// output delta (or an error or terminator); keep-alive comments do not extend it.
/// The idle timeout is the longest silence between data events after that.
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
    /// Extra request headers (priority class).
    pub headers: Vec<(HeaderName, HeaderValue)>,
    /// Structured-output request: check the answer parses as JSON.
    pub expect_json: bool,
    /// Response headers naming the serving replica and attempt, when a gateway uses
    /// others than [`WORKER_HEADER`] and [`ATTEMPT_HEADER`] (`evidence.*_header`).
    pub attribution: Option<Arc<Attribution>>,
    /// Told of the response head and of delivered deltas (probe requests only).
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
    /// The number of deltas delivered so far, after each read that brought some.
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

/// Names of the attribution headers a gateway sends (Request-Fate and Routing evidence).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attribution {
    pub worker: String,
    pub attempt: String,
}

impl Call {
    pub fn new(id: impl Into<String>, url: impl Into<String>, body: Bytes) -> Self {
        Call {
            id: id.into(),
            url: url.into(),
            body,
            headers: Vec::new(),
            expect_json: false,
            attribution: None,
            observe: None,
        }
    }
}

/// What the engine needs to know live (the trace has everything else).
#[derive(Debug, Clone, Copy)]
pub struct CallResult {
    pub outcome: Outcome,
    /// When the request was sent (trace µs).
    pub dispatch_us: u64,
    /// When the first output delta arrived (trace µs).
    pub first_delta_us: Option<u64>,
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
    builder(connect_timeout, headers).build()
}

/// The HTTP clients requests go through: haq's own HTTP/1.1 client ([`h1`]) for
/// `http://` URLs unless `client.transport: reqwest`, reqwest (rustls) for the rest.
/// reqwest's connections are counted into a [`conns::ConnLog`] (the warm-up's
/// attestation). Clones share the pools.
#[derive(Clone)]
pub struct Http {
    reqwest: reqwest::Client,
    h1: Option<h1::Client>,
    log: conns::ConnLog,
}

impl Http {
    pub fn new(
        connect_timeout: Duration,
        headers: &HeaderMap,
        transport: crate::scenario::Transport,
    ) -> reqwest::Result<Http> {
        let log = conns::ConnLog::default();
        Ok(Http {
            reqwest: builder(connect_timeout, headers)
                .connector_layer(log.clone())
                .build()?,
            h1: (transport == crate::scenario::Transport::Auto)
                .then(|| h1::Client::new(connect_timeout, headers)),
            log,
        })
    }

    /// The HTTP/1.1 client when it serves `url`: plain `http://` without credentials
    /// in the URL (reqwest turns those into a basic-auth header).
    fn h1_for(&self, url: &str) -> Option<&h1::Client> {
        let rest = url.strip_prefix("http://")?;
        let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
        self.h1.as_ref().filter(|_| !authority.contains('@'))
    }

    async fn send(&self, call: &Call) -> Result<Resp, SendFail> {
        if let Some(h1) = self.h1_for(&call.url) {
            let fixed = [
                ("content-type", "application/json"),
                ("accept", "text/event-stream"),
                ("x-request-id", call.id.as_str()),
            ];
            let req = h1::Request {
                method: "POST",
                url: &call.url,
                headers: &call.headers,
                fixed: &fixed,
                body: &call.body,
            };
            return h1.send(&req).await.map(Resp::H1).map_err(SendFail::H1);
        }
        let mut req = self
            .reqwest
            .post(&call.url)
            .header("content-type", "application/json")
            .header("accept", "text/event-stream")
            .header("x-request-id", &call.id)
            .body(call.body.clone());
        for (k, v) in &call.headers {
            req = req.header(k, v);
        }
        req.send()
            .await
            .map(|r| Resp::Reqwest(r, None))
            .map_err(SendFail::Reqwest)
    }
}

/// Why a request got no response head.
enum SendFail {
    Reqwest(reqwest::Error),
    H1(h1::SendError),
}

impl SendFail {
    fn outcome(&self) -> Outcome {
        match self {
            SendFail::Reqwest(e) => classify_send_error(e),
            SendFail::H1(e) => match (e.connect, e.err.kind()) {
                (true, std::io::ErrorKind::TimedOut) => Outcome::ConnectTimeout,
                (true, _) => Outcome::Refused,
                (false, _) => Outcome::Reset,
            },
        }
    }

    fn text(&self) -> String {
        match self {
            SendFail::Reqwest(e) => chain_text(e),
            SendFail::H1(e) => chain_text(e),
        }
    }
}

type BodyError = Box<dyn std::error::Error + Send + Sync>;

/// A response whose head is in, from either client. Its body is read in two steps:
/// [`Resp::fill`] waits for bytes, [`Resp::drain`] hands them out (the arrival is
/// stamped in between, before any parsing).
enum Resp {
    /// The chunk read and not yet drained.
    Reqwest(reqwest::Response, Option<Bytes>),
    H1(h1::Response),
}

impl Resp {
    fn status(&self) -> u16 {
        match self {
            Resp::Reqwest(r, _) => r.status().as_u16(),
            Resp::H1(r) => r.status,
        }
    }

    fn headers(&self) -> &HeaderMap {
        match self {
            Resp::Reqwest(r, _) => r.headers(),
            Resp::H1(r) => &r.headers,
        }
    }

    /// The client end of the connection (`ip:port`).
    fn conn(&self) -> Option<String> {
        match self {
            Resp::Reqwest(r, _) => r
                .extensions()
                .get::<hyper_util::client::legacy::connect::HttpInfo>()
                .map(|i| i.local_addr().to_string()),
            Resp::H1(r) => r.local.map(|a| a.to_string()),
        }
    }

    /// `true` when body bytes are ready to drain, `false` at the end of the body.
    async fn fill(&mut self) -> Result<bool, BodyError> {
        match self {
            Resp::Reqwest(_, Some(_)) => Ok(true),
            Resp::Reqwest(r, pending) => {
                *pending = r.chunk().await?;
                Ok(pending.is_some())
            }
            Resp::H1(r) => Ok(r.fill().await?),
        }
    }

    fn drain(&mut self, mut out: impl FnMut(&[u8])) -> Result<(), BodyError> {
        match self {
            Resp::Reqwest(_, pending) => {
                if let Some(b) = pending.take() {
                    out(&b);
                }
                Ok(())
            }
            Resp::H1(r) => Ok(r.drain(out)?),
        }
    }

    /// The rest of the body, up to `max` bytes, read until `deadline`: `Err(None)`
    /// when the deadline came first.
    async fn read_to(
        &mut self,
        max: usize,
        deadline: Instant,
    ) -> Result<Vec<u8>, Option<BodyError>> {
        let mut buf = Vec::new();
        while buf.len() < max {
            match tokio::time::timeout_at(deadline, self.fill()).await {
                Err(_) => return Err(None),
                Ok(Err(e)) => return Err(Some(e)),
                Ok(Ok(false)) => break,
                Ok(Ok(true)) => self.drain(|b| buf.extend_from_slice(b)).map_err(Some)?,
            }
        }
        buf.truncate(max);
        Ok(buf)
    }
}

fn builder(connect_timeout: Duration, headers: &HeaderMap) -> reqwest::ClientBuilder {
    crate::wire::tls::install_crypto_provider();
    reqwest::Client::builder()
        .connect_timeout(connect_timeout)
        .pool_idle_timeout(Duration::from_secs(30))
        .no_proxy()
        .tcp_nodelay(true)
        .default_headers(headers.clone())
}

fn header(h: &HeaderMap, name: &str) -> Option<String> {
    h.get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

pub use crate::wire::io::{chain_text, io_kind};

/// Classifies a failed send (before any response).
pub fn classify_send_error(e: &reqwest::Error) -> Outcome {
    use std::io::ErrorKind::*;
    match io_kind(e) {
        Some(ConnectionRefused) => Outcome::Refused,
        Some(TimedOut) => Outcome::ConnectTimeout,
        _ if e.is_timeout() && e.is_connect() => Outcome::ConnectTimeout,
        _ if e.is_connect() => Outcome::Refused,
        _ => Outcome::Reset,
    }
}

/// Classifies an error while reading the body: a router or proxy that cuts a chunked
/// body mid-stream surfaces as a decode error whose source chain ends in
/// `UnexpectedEof` or `ConnectionReset` (`is_body()` is false for both).
pub fn classify_body_error(e: &(dyn std::error::Error + 'static)) -> Cut {
    use std::io::ErrorKind::*;
    let text = chain_text(e);
    match io_kind(e) {
        Some(UnexpectedEof) => Cut::Failed(
            Outcome::Reset,
            format!("connection closed before the end of the body (unexpected EOF): {text}"),
        ),
        Some(ConnectionReset | ConnectionAborted | BrokenPipe) => Cut::Failed(
            Outcome::Reset,
            format!("connection reset mid-stream: {text}"),
        ),
        Some(TimedOut) => Cut::Failed(Outcome::IdleTimeout, text),
        _ => Cut::Failed(Outcome::Reset, text),
    }
}

fn queue_us(h: &HeaderMap) -> Option<u64> {
    QUEUE_HEADERS.iter().find_map(|name| {
        let ms: f64 = h.get(*name)?.to_str().ok()?.trim().parse().ok()?;
        (ms.is_finite() && ms >= 0.0).then_some((ms * 1000.0) as u64)
    })
}

/// Writes the `end` event and builds the live result.
fn finish(
    call: &Call,
    clock: &Clock,
    trace: &TraceWriter,
    dispatch_us: u64,
    first_delta_us: Option<u64>,
    status: Option<u16>,
    e: Ending,
) -> CallResult {
    let t = clock.now_us();
    let (outcome, tokens) = (e.outcome, e.tokens);
    trace.emit(Event::End {
        t,
        id: call.id.clone(),
        outcome,
        detail: e.detail,
        tokens,
        done: e.done,
        finish: e.finish,
        status,
        counted: status.map(|_| e.counted),
        usage: e.usage,
        error: e.error,
        tool_calls: e.tool_calls,
        json_valid: e.json_valid,
    });
    CallResult {
        outcome,
        dispatch_us,
        first_delta_us,
        ttft_us: first_delta_us.map(|f| f.saturating_sub(dispatch_us)),
        e2e_us: t.saturating_sub(dispatch_us),
        tokens,
    }
}

fn failed(outcome: Outcome, detail: String) -> Ending {
    StreamState::new(false).conclude(Cut::Failed(outcome, detail))
}

/// Sends `call` and reads its stream to the end, stamping every read on arrival
/// (before parsing) and writing each event to the trace as it comes.
pub async fn execute(
    http: &Http,
    call: &Call,
    timeouts: Timeouts,
    clock: &Clock,
    trace: &TraceWriter,
) -> CallResult {
    let dispatch_us = clock.now_us();
    let first_deadline = Instant::now() + timeouts.first_token;
    let done = |status, first, e| finish(call, clock, trace, dispatch_us, first, status, e);

    let mut resp = match tokio::time::timeout_at(first_deadline, http.send(call)).await {
        Err(_) => {
            let d = format!("no response headers within {:?}", timeouts.first_token);
            return done(None, None, failed(Outcome::FirstTokenTimeout, d));
        }
        Ok(Err(e)) => return done(None, None, failed(e.outcome(), e.text())),
        Ok(Ok(r)) => r,
    };
    let status = resp.status();
    let h = resp.headers();
    let (headers, headers_omitted) = record_headers(h);
    let sse = h
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_none_or(|ct| ct.contains("text/event-stream"));
    trace.emit(Event::Response {
        t: clock.now_us(),
        id: call.id.clone(),
        status,
        worker: header(
            h,
            call.attribution
                .as_ref()
                .map_or(WORKER_HEADER, |a| &a.worker),
        ),
        attempt: header(
            h,
            call.attribution
                .as_ref()
                .map_or(ATTEMPT_HEADER, |a| &a.attempt),
        ),
        retry_after: header(h, "retry-after"),
        queue_us: queue_us(h),
        headers,
        headers_omitted,
        conn: resp.conn(),
    });
    if let Some(o) = &call.observe {
        (o.0)(Seen::Head {
            status,
            worker: h.get(WORKER_HEADER).and_then(|v| v.to_str().ok()),
        });
    }
    if status != 200 {
        let body = resp
            .read_to(512, Instant::now() + timeouts.idle)
            .await
            .unwrap_or_default();
        let outcome = if matches!(status, 429 | 503) {
            Outcome::Rejected
        } else {
            Outcome::HttpError
        };
        let d = format!("HTTP {status}: {}", String::from_utf8_lossy(&body));
        return done(Some(status), None, failed(outcome, d));
    }

    let mut st = StreamState::new(call.expect_json);
    let mut emit = |c: ChunkRef<'_>| trace.emit_chunk(&c);
    if !sse {
        // A whole (non-streaming) answer: its arrival is the first token.
        let deadline = first_deadline.max(Instant::now() + timeouts.idle);
        let cut = match resp.read_to(usize::MAX, deadline).await {
            Ok(b) => {
                st.on_whole(
                    clock.now_us(),
                    &call.id,
                    &String::from_utf8_lossy(&b),
                    &mut emit,
                );
                Cut::Eof
            }
            Err(Some(e)) => classify_body_error(&*e),
            Err(None) => Cut::Failed(
                Outcome::IdleTimeout,
                "the answer did not arrive in time".into(),
            ),
        };
        let first = st.first_delta_us();
        return done(Some(status), first, st.conclude(cut));
    }
    // One timer per stream, moved lazily: reading an event costs no timer work; when
    // the timer fires, it is pushed to the real deadline if events came meanwhile.
    let timer = tokio::time::sleep_until(first_deadline);
    tokio::pin!(timer);
    let mut was_settled = false;
    let cut = loop {
        let read = tokio::select! {
            biased;
            r = resp.fill() => Some(r),
            _ = &mut timer => None,
        };
        match read {
            Some(Ok(true)) => {
                let t = clock.now_us();
                let deltas = st.deltas();
                if let Err(e) = resp.drain(|bytes| st.on_bytes(t, &call.id, bytes, &mut emit)) {
                    break classify_body_error(&*e);
                }
                if let Some(o) = &call.observe
                    && st.deltas() != deltas
                {
                    (o.0)(Seen::Deltas(st.deltas()));
                }
                if !was_settled && st.settled() {
                    was_settled = true;
                    timer
                        .as_mut()
                        .reset(Instant::from_std(clock.instant_at(t)) + timeouts.idle);
                }
            }
            Some(Ok(false)) => break Cut::Eof,
            Some(Err(e)) => break classify_body_error(&*e),
            None => {
                if !was_settled {
                    break Cut::Failed(
                        Outcome::FirstTokenTimeout,
                        format!("no output within {:?} of dispatch", timeouts.first_token),
                    );
                }
                let last = st.last_event_us().unwrap_or(0);
                let deadline = Instant::from_std(clock.instant_at(last)) + timeouts.idle;
                if Instant::now() >= deadline {
                    break Cut::Failed(
                        Outcome::IdleTimeout,
                        format!("no event for {:?}", timeouts.idle),
                    );
                }
                timer.as_mut().reset(deadline);
            }
        }
    };
    st.on_eof(clock.now_us(), &call.id, &mut emit);
    let first = st.first_delta_us();
    done(Some(status), first, st.conclude(cut))
}

/// Runs `call` to its end, or until `stopped` completes: then it is recorded as
/// cancelled (stopped by haq: an interrupt or the drain timeout) and `None` is
/// returned. `stopped` is polled on every wake-up of the read loop: it must be cheap
/// ([`stop::Stop::wait`]).
pub async fn execute_until(
    client: &Http,
    call: &Call,
    timeouts: Timeouts,
    clock: &Clock,
    trace: &TraceWriter,
    stopped: impl std::future::Future<Output = ()>,
) -> Option<CallResult> {
    tokio::select! {
        // The request first: a read that completes it wins over a stop that came after.
        biased;
        r = execute(client, call, timeouts, clock, trace) => Some(r),
        _ = stopped => {
            trace.emit(Event::End {
                t: clock.now_us(),
                id: call.id.clone(),
                outcome: Outcome::Cancelled,
                detail: Some("stopped by haq (interrupt or drain timeout)".into()),
                tokens: 0,
                done: false,
                finish: None,
                status: None,
                counted: None,
                usage: None,
                error: None,
                tool_calls: Vec::new(),
                json_valid: None,
            });
            None
        }
    }
}

#[cfg(test)]
mod wire_tests;
