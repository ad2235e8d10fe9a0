//! What the client records of a response: its headers as the trace keeps them
//! (bounded), the attribution and queue-time headers, and the `end` event with the
//! live result it gives the engine.

use reqwest::header::HeaderMap;

use super::call::{Call, CallResult};
use super::stream::{Cut, Ending, StreamState};
use super::transport::Resp;
use crate::trace::{Clock, Event, Outcome, TraceWriter};
use crate::wire::headers::{ATTEMPT_HEADER, QUEUE_HEADERS, WORKER_HEADER};

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

fn header(h: &HeaderMap, name: &str) -> Option<String> {
    h.get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

/// The replica the response names: the worker header's value, mapped to a replica's
/// name when it names one by address or URL (`evidence.worker_header`).
pub(super) fn worker_of<'a>(h: &'a HeaderMap, call: &'a Call) -> Option<&'a str> {
    let a = call.attribution.as_deref();
    let v = h
        .get(a.map_or(WORKER_HEADER, |a| a.worker.as_str()))?
        .to_str()
        .ok()?;
    Some(a.map_or(v, |a| a.replica(v)))
}

fn queue_us(h: &HeaderMap) -> Option<u64> {
    QUEUE_HEADERS.iter().find_map(|name| {
        let ms: f64 = h.get(*name)?.to_str().ok()?.trim().parse().ok()?;
        (ms.is_finite() && ms >= 0.0).then_some((ms * 1000.0) as u64)
    })
}

/// Writes the `response` event of a response head: status, attribution, queue time,
/// the headers (bounded) and the connection it came on.
pub(super) fn response_event(resp: &Resp, call: &Call, clock: &Clock, trace: &TraceWriter) {
    let h = resp.headers();
    let (headers, headers_omitted) = record_headers(h);
    trace.emit(Event::Response {
        t: clock.now_us(),
        id: call.id.clone(),
        status: resp.status(),
        worker: worker_of(h, call).map(str::to_string),
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
}

/// Writes the `end` event and builds the live result.
pub(super) fn finish(
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

pub(super) fn failed(outcome: Outcome, detail: String) -> Ending {
    StreamState::new(false).conclude(Cut::Failed(outcome, detail))
}
