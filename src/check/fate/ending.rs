//! How a stream ended (M3): after output was delivered, only the explicit,
//! machine-readable error is acceptable — never a clean `[DONE]` or end of body after
//! an interruption, never a broken connection with no error.

use super::{Ctx, FindingKind, Out, View, excerpt};
use crate::check::history::FaultRec;
use crate::scenario::{CustomErrorShape, ErrorShape};
use crate::trace::{ChunkKind, Outcome};

/// Silent truncation (a clean end that is not one) and silent interruption (a broken
/// stream with no explicit error) after output was delivered.
pub fn silent_end(_: &Ctx, v: &View, _: &[FaultRec], out: &mut Out) {
    let id = &v.r.id;
    let n = v.delivered();
    let last = v.r.chunks.last().map(|c| c.n);
    match v.end.outcome {
        Outcome::Completed => {
            let finished = v.end.finish.is_some() || v.r.chunks.iter().any(|c| c.finish.is_some());
            if !finished && (n > 0 || v.r.max_tokens > 0) {
                out.find(
                    FindingKind::SilentTruncation,
                    id,
                    if n > 0 {
                        format!("[DONE] after {n} deltas with no finish_reason and no error: the answer was cut and made to look complete")
                    } else {
                        "[DONE] with no output, no finish_reason and no error".into()
                    },
                )
                .chunks(last)
                .excerpt(v.excerpt(n.saturating_sub(3) as usize, n as usize));
                return;
            }
            // The journal (or proxy) knows the serving attempt failed, yet the client
            // saw a clean end.
            let explicit = v.r.notes.iter().any(|x| x.ev == "explicit_error");
            if let Some(a) = v.r.attempts.last()
                && a.result.as_deref() == Some("failed")
                && !explicit
                && n > 0
            {
                out.find(
                    FindingKind::SilentTruncation,
                    id,
                    format!(
                        "the gateway journal shows the last attempt `{}` on {} failed ({}) after {n} deltas, yet the client got a clean end with finish_reason",
                        a.id,
                        a.worker,
                        a.why.as_deref().unwrap_or("no reason given")
                    ),
                )
                .chunks(last)
                .attempts([a.id.clone()]);
            }
        }
        Outcome::Truncated if n > 0 => {
            out.find(
                FindingKind::SilentTruncation,
                id,
                format!("the body ended after {n} deltas with no [DONE], finish_reason or error"),
            )
            .chunks(last)
            .excerpt(v.excerpt(n.saturating_sub(3) as usize, n as usize));
        }
        Outcome::Reset | Outcome::IdleTimeout | Outcome::Malformed if n > 0 => {
            out.find(
                FindingKind::SilentInterruption,
                id,
                format!(
                    "{n} deltas delivered, then the stream ended as {} with no explicit error ({})",
                    v.end.outcome.as_str(),
                    v.end.detail.as_deref().map(excerpt).unwrap_or_default()
                ),
            )
            .chunks(last);
        }
        _ => {}
    }
}

/// The explicit error after delivered output must have the declared shape (M3): the
/// seed's by default, or the gateway's own documented one.
pub fn error_shape(ctx: &Ctx, v: &View, _: &[FaultRec], out: &mut Out) {
    let delivered = v.delivered();
    if v.end.outcome != Outcome::ExplicitError || delivered == 0 {
        return;
    }
    let Some(c) = v.r.chunks.iter().rev().find(|c| c.kind == ChunkKind::Error) else {
        return;
    };
    let raw = c.raw.as_deref().unwrap_or("");
    let problems = match serde_json::from_str::<serde_json::Value>(raw) {
        Err(e) => vec![format!("the error event is not JSON ({e})")],
        Ok(val) => match &ctx.policy.error_shape {
            ErrorShape::Seed => seed_problems(&val, delivered),
            ErrorShape::Custom(s) => custom_problems(s, &val, delivered),
        },
    };
    if !problems.is_empty() {
        out.find(
            FindingKind::MalformedExplicitError,
            &v.r.id,
            format!("{} in {}", problems.join(", "), excerpt(raw)),
        )
        .chunks([c.n]);
    }
}

/// The seed's shape: code `upstream_decode_interrupted`, request_id, partial_output
/// true, delivered_output_tokens equal to what the client received, retryable false.
fn seed_problems(v: &serde_json::Value, delivered: u32) -> Vec<String> {
    let e = &v["error"];
    let mut p = Vec::new();
    if e["code"] != "upstream_decode_interrupted" {
        p.push(format!(
            "code is {} not \"upstream_decode_interrupted\"",
            e["code"]
        ));
    }
    if e["partial_output"] != true {
        p.push("partial_output is not true".into());
    }
    if e["retryable"] != false {
        p.push("retryable is not false".into());
    }
    if e["request_id"].as_str().is_none_or(str::is_empty) {
        p.push("no request_id".into());
    }
    p.extend(count_problem(
        &e["delivered_output_tokens"],
        "delivered_output_tokens",
        delivered,
    ));
    p
}

fn count_problem(v: &serde_json::Value, name: &str, delivered: u32) -> Option<String> {
    match v.as_u64() {
        None => Some(format!("no {name}")),
        Some(n) if n != u64::from(delivered) => Some(format!(
            "{name} is {n} but the client received {delivered} deltas"
        )),
        _ => None,
    }
}

fn custom_problems(s: &CustomErrorShape, v: &serde_json::Value, delivered: u32) -> Vec<String> {
    let mut p = Vec::new();
    for path in &s.required {
        if at_path(v, path).is_none_or(serde_json::Value::is_null) {
            p.push(format!("no {path}"));
        }
    }
    for (path, want) in &s.equals {
        match at_path(v, path) {
            Some(got) if got == want => {}
            got => p.push(format!(
                "{path} is {} not {want}",
                got.map(ToString::to_string)
                    .unwrap_or_else(|| "absent".into())
            )),
        }
    }
    if let Some(path) = &s.delivered_tokens {
        let got = at_path(v, path).cloned().unwrap_or_default();
        p.extend(count_problem(&got, path, delivered));
    }
    p
}

/// `error.detail.0.msg` → the value there.
pub fn at_path<'v>(v: &'v serde_json::Value, path: &str) -> Option<&'v serde_json::Value> {
    path.split('.').try_fold(v, |cur, seg| match cur {
        serde_json::Value::Object(m) => m.get(seg),
        serde_json::Value::Array(a) => seg.parse::<usize>().ok().and_then(|i| a.get(i)),
        _ => None,
    })
}
