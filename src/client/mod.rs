//! The streaming client: sends one OpenAI-compatible request, stamps every SSE event
//! on arrival (before parsing), writes each to the trace and classifies how the stream
//! ended.
//!
//! This file owns the read of one request ([`execute`]); [`call`] holds what a request
//! is and gives back, [`transport`] the two HTTP clients behind one response type,
//! [`record`] what the trace records of a response, [`stream`] the fold of its events,
//! [`bounds`] how much of a response it may hold (`client.limits`).
//!
//! Whatever a server sends, one request holds a bounded amount: an SSE line, an event,
//! a non-streamed answer and the whole stream each have a limit past which haq stops
//! reading and closes the connection (`oversized`); a body that goes on after `[DONE]`
//! is closed after a short grace (`after_done` when data came after it), one that never
//! ends at `client.limits.duration` after its dispatch (`endless`); a
//! `content-encoding` haq did not ask for is named (`encoded`), not decoded. haq's own
//! host running out of descriptors, memory or ports is `local`, never the target's.

pub mod bounds;
mod call;
pub mod conns;
pub mod h1;
mod record;
pub mod stop;
pub mod stream;
mod transport;
pub mod warm;

use tokio::time::Instant;

use crate::scenario::Leave;

pub use self::call::{Attribution, Call, CallResult, Learned, Observe, Seen, Timeouts};
pub use self::record::{MAX_HEADER_BYTES, MAX_HEADERS, record_headers};
use self::record::{failed, finish, response_event};
use self::transport::Resp;
pub use self::transport::{Http, classify_send_error, http_client};
use crate::trace::{ChunkRef, Clock, Event, Outcome, TraceWriter};
pub use crate::wire::headers::{ATTEMPT_HEADER, PRIORITY_HEADER, QUEUE_HEADERS, WORKER_HEADER};
pub use crate::wire::io::{chain_text, io_kind};
use stream::{Cut, StreamState};

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
    let sent_at = Instant::now();
    let first_deadline = sent_at + timeouts.first_token;
    let done = |status, first, e| finish(call, clock, trace, dispatch_us, first, status, e);
    // A client that leaves T after sending leaves whatever it is waiting for.
    let leave_at = match call.leave {
        Some(Leave::After(d)) => Some(Instant::now() + d),
        _ => None,
    };

    let send = tokio::time::timeout_at(first_deadline, http.send(call));
    let mut resp = match until_left(leave_at, send).await {
        None => return done(None, None, left(call, "before the response head")),
        Some(Err(_)) => {
            let d = format!("no response headers within {:?}", timeouts.first_token);
            return done(None, None, failed(Outcome::FirstTokenTimeout, d));
        }
        Some(Ok(Err(e))) => return done(None, None, failed(e.outcome(), e.text())),
        Some(Ok(Ok(r))) => r,
    };
    let status = resp.status();
    let limits = http.limits;
    let h = resp.headers();
    let sse = h
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_none_or(|ct| ct.contains("text/event-stream"));
    response_event(&resp, call, clock, trace);
    if let Some(o) = &call.observe {
        (o.0)(Seen::Head {
            status,
            worker: record::worker_of(h, call),
        });
    }
    if status != 200 {
        let e = http_error(&mut resp, status, timeouts).await;
        return done(Some(status), None, e);
    }
    if let Some(enc) = foreign_encoding(resp.headers()) {
        // haq asked for `identity`: it does not guess at what an encoded body says.
        drop(resp);
        let d = format!(
            "content-encoding: {enc}, which haq did not ask for (it sends accept-encoding: identity): the body was not read"
        );
        return done(Some(status), None, failed(Outcome::Encoded, d));
    }

    let mut st = StreamState::bounded(call.expect_json, &limits);
    let mut emit = |c: ChunkRef<'_>| trace.emit_chunk(&c);
    if !sse {
        // A whole (non-streaming) answer: its arrival is the first token.
        let deadline = first_deadline.max(Instant::now() + timeouts.idle);
        let cut = read_whole(&mut resp, &mut st, call, limits, deadline, clock, &mut emit).await;
        let first = st.first_delta_us();
        return done(Some(status), first, st.conclude(cut));
    }
    if call.leave == Some(Leave::BeforeFirstToken) {
        // The head is in: the client goes before reading any output.
        drop(resp);
        return done(
            Some(status),
            None,
            left(call, "once the response head arrived"),
        );
    }
    let deadlines = Deadlines {
        first: first_deadline,
        leave: leave_at,
        after_done: limits.after_done,
        end: sent_at + limits.duration,
        end_us: dispatch_us.saturating_add(limits.duration.as_micros() as u64),
        duration: limits.duration,
    };
    let cut = read_stream(
        &mut resp, &mut st, call, timeouts, deadlines, clock, &mut emit,
    )
    .await;
    if matches!(
        cut,
        Cut::Failed(
            Outcome::Abandoned | Outcome::Oversized | Outcome::Endless | Outcome::AfterDone,
            _
        )
    ) {
        // The client closes its connection now (it left, or haq stopped reading for
        // what the server sent); a half-read event stays unread.
        drop(resp);
    } else {
        st.on_eof(clock.now_us(), &call.id, &mut emit);
    }
    let first = st.first_delta_us();
    done(Some(status), first, st.conclude(cut))
}

/// `f`, unless the client leaves (at `leave_at`) first: `None` then.
async fn until_left<T>(
    leave_at: Option<Instant>,
    f: impl std::future::Future<Output = T>,
) -> Option<T> {
    match leave_at {
        None => Some(f.await),
        Some(at) => tokio::select! {
            biased;
            r = f => Some(r),
            _ = tokio::time::sleep_until(at) => None,
        },
    }
}

/// How a request whose client left on purpose ends (the workload's `abandon`).
fn left(call: &Call, when: &str) -> stream::Ending {
    let how = call.leave.map(|l| l.describe()).unwrap_or_default();
    failed(
        Outcome::Abandoned,
        format!("the client left {how} ({when}): workload abandonment"),
    )
}

/// When a stream's reading stops short: the first-token deadline, when the client
/// leaves `after` a time, how long the body may go on after `[DONE]`, and when the
/// whole stream must have ended (`client.limits.duration` after its dispatch, as an
/// instant and on the trace's clock).
#[derive(Clone, Copy)]
struct Deadlines {
    first: Instant,
    leave: Option<Instant>,
    after_done: std::time::Duration,
    end: Instant,
    end_us: u64,
    duration: std::time::Duration,
}

impl Deadlines {
    /// How a stream still going at `end` stops.
    fn endless(&self, st: &StreamState) -> Cut {
        Cut::Failed(
            Outcome::Endless,
            format!(
                "still sending {} after it was sent ({} events, {} output deltas, no end): haq closed the connection (client.limits.duration)",
                crate::wire::units::format_duration(self.duration),
                st.events(),
                st.deltas()
            ),
        )
    }
}

/// A `content-encoding` other than `identity`, as the response names it.
fn foreign_encoding(h: &reqwest::header::HeaderMap) -> Option<String> {
    let codings: Vec<String> = h
        .get_all(reqwest::header::CONTENT_ENCODING)
        .iter()
        .flat_map(|v| {
            String::from_utf8_lossy(v.as_bytes())
                .split(',')
                .map(|c| c.trim().to_ascii_lowercase())
                .collect::<Vec<_>>()
        })
        .filter(|c| !c.is_empty() && c != "identity")
        .collect();
    (!codings.is_empty()).then(|| codings.join(", "))
}

/// A status other than 200 fails the request; the start of its body (read within
/// the idle timeout) says why.
async fn http_error(resp: &mut Resp, status: u16, timeouts: Timeouts) -> stream::Ending {
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
    failed(outcome, d)
}

/// Reads a whole (non-streaming) answer until `deadline` and folds it as one; an
/// answer past `client.limits.body` is not read on (nor folded).
async fn read_whole(
    resp: &mut Resp,
    st: &mut StreamState,
    call: &Call,
    limits: bounds::Limits,
    deadline: Instant,
    clock: &Clock,
    emit: &mut impl FnMut(ChunkRef<'_>),
) -> Cut {
    match resp.read_to(limits.body.saturating_add(1), deadline).await {
        Ok(b) if b.len() > limits.body => {
            Cut::Failed(Outcome::Oversized, bounds::body_detail(limits.body, &b))
        }
        Ok(b) => {
            st.on_whole(clock.now_us(), &call.id, &String::from_utf8_lossy(&b), emit);
            Cut::Eof
        }
        Err(Some(e)) => classify_body_error(&*e),
        Err(None) => Cut::Failed(
            Outcome::IdleTimeout,
            "the answer did not arrive in time".into(),
        ),
    }
}

/// Reads an SSE stream until it ends, fails or times out, stamping each read on
/// arrival and folding its bytes into `st`; returns how the bytes stopped coming.
async fn read_stream(
    resp: &mut Resp,
    st: &mut StreamState,
    call: &Call,
    timeouts: Timeouts,
    deadlines: Deadlines,
    clock: &Clock,
    emit: &mut impl FnMut(ChunkRef<'_>),
) -> Cut {
    // One timer per stream, moved lazily: reading an event costs no timer work; when
    // the timer fires, it is pushed to the real deadline if events came meanwhile.
    let timer = tokio::time::sleep_until(deadlines.first);
    tokio::pin!(timer);
    let leave = async {
        match deadlines.leave {
            Some(at) => tokio::time::sleep_until(at).await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(leave);
    let after_deltas = match call.leave {
        Some(Leave::AfterDeltas(n)) => n,
        _ => u32::MAX,
    };
    let mut was_settled = false;
    // Armed when `[DONE]` arrives: the body may go on `after_done` longer.
    let tail = tokio::time::sleep_until(deadlines.first);
    tokio::pin!(tail);
    let mut tail_at: Option<Instant> = None;
    let end = tokio::time::sleep_until(deadlines.end);
    tokio::pin!(end);
    loop {
        let read = tokio::select! {
            biased;
            r = resp.fill() => Some(r),
            _ = &mut timer => None,
            _ = &mut end, if tail_at.is_none() => break deadlines.endless(st),
            _ = &mut tail, if tail_at.is_some() => break st.after_done_cut(deadlines.after_done),
            _ = &mut leave => break left_cut(call, "mid-stream"),
        };
        match read {
            Some(Ok(true)) => {
                let t = clock.now_us();
                let deltas = st.deltas();
                if let Err(e) = resp.drain(|bytes| st.on_bytes(t, &call.id, bytes, &mut *emit)) {
                    break classify_body_error(&*e);
                }
                if let Some(cut) = st.over_limit() {
                    break cut;
                }
                // A stream that never pauses never lets the timers run: checked here.
                if t >= deadlines.end_us && tail_at.is_none() {
                    break deadlines.endless(st);
                }
                match tail_at {
                    // A body that never pauses never lets the timer run: checked here.
                    Some(at) if Instant::now() >= at => {
                        break st.after_done_cut(deadlines.after_done);
                    }
                    None if st.done() => {
                        let at = Instant::from_std(clock.instant_at(t)) + deadlines.after_done;
                        tail_at = Some(at);
                        tail.as_mut().reset(at);
                    }
                    _ => {}
                }
                if let Some(o) = &call.observe
                    && st.deltas() != deltas
                {
                    (o.0)(Seen::Deltas(st.deltas()));
                }
                if st.deltas() >= after_deltas && !st.ended() {
                    break left_cut(call, &format!("having read {} deltas", st.deltas()));
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
    }
}

/// The read loop's end when the client leaves on purpose.
fn left_cut(call: &Call, when: &str) -> Cut {
    let e = left(call, when);
    Cut::Failed(e.outcome, e.detail.unwrap_or_default())
}

/// Classifies an error while reading the body: a router or proxy that cuts a chunked
/// body mid-stream surfaces as a decode error whose source chain ends in
/// `UnexpectedEof` or `ConnectionReset` (`is_body()` is false for both).
pub fn classify_body_error(e: &(dyn std::error::Error + 'static)) -> Cut {
    use std::io::ErrorKind::*;
    let text = chain_text(e);
    if let Some(l) = crate::wire::io::local_errno(e) {
        let d = crate::trace::local_detail(l, crate::wire::fds::fd_limit(), &text);
        return Cut::Failed(Outcome::Local, d);
    }
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

/// Runs `call` to its end, or until `stopped` completes with the outcome to record
/// (`cancelled` at the drain timeout, `interrupted` at an interrupt) and `None` is
/// returned. `stopped` is polled on every wake-up of the read loop: it must be cheap
/// ([`stop::Stop::wait`]).
pub async fn execute_until(
    client: &Http,
    call: &Call,
    timeouts: Timeouts,
    clock: &Clock,
    trace: &TraceWriter,
    stopped: impl std::future::Future<Output = Outcome>,
) -> Option<CallResult> {
    tokio::select! {
        // The request first: a read that completes it wins over a stop that came after.
        biased;
        r = execute(client, call, timeouts, clock, trace) => Some(r),
        outcome = stopped => {
            let detail = match outcome {
                Outcome::Interrupted => "stopped by haq: interrupted (SIGINT/SIGTERM)",
                _ => "stopped by haq: the drain timeout",
            };
            trace.emit(Event::End {
                t: clock.now_us(),
                id: call.id.clone(),
                outcome,
                detail: Some(detail.into()),
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
mod hostile_tests;
#[cfg(test)]
mod wire_tests;
