//! `client.marker: auto`: where in a request body this gateway lets haq's marker
//! through, learned before the load (issue 21 item 1).
//!
//! Gateways differ in what they forward (measured with an echoing upstream, 2026-12-01;
//! tests/it/routers.rs checks the first two against the real routers): the OpenAI
//! `user` field passes vllm-router and nginx but not sglang-router or LiteLLM;
//! `metadata` passes vllm-router, sglang-router and nginx but LiteLLM consumes it; an
//! unknown top-level field passes vllm-router, LiteLLM and nginx, not sglang-router;
//! the prompt passes all of them but changes it by a few tokens. So haq asks: one
//! small request per place, in that order, each with the marker in that place only
//! (and an `x-request-id` that is not the marker's id, so a forwarded header cannot
//! pass for a forwarded marker). The first place whose marker haq's proxy reads from
//! an upstream request, and whose answer is a success (the replica accepted the field),
//! is the run's. The requests go to the trace only as the proxies' upstream lines
//! (ids [`CALIBRATE_PREFIX`]…), which the judgement counts apart from the load.

use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use crate::client::{self, Call};
use crate::plan::Plan;
use crate::proxy::{ProxyPoint, ProxySeen};
use crate::scenario::{MarkerField, TargetKind};
use crate::target::Running;
use crate::trace::{Clock, MarkerTry, MarkerUse, Outcome, TraceWriter};
use crate::workload::BodyMarker;

pub use crate::wire::marker::CALIBRATE_PREFIX;

/// The places tried, in order: the ones that leave the prompt alone first.
const ORDER: [MarkerField; 4] = [
    MarkerField::User,
    MarkerField::Metadata,
    MarkerField::TopLevel,
    MarkerField::Prompt,
];

/// All of the calibration: a gateway that answers none of it in this long gets `user`.
const BUDGET: Duration = Duration::from_secs(60);

/// How long after its answer an upstream request may still be reported (the proxy
/// writes the line once the body's marker is read, which comes before any answer;
/// this is slack for scheduling).
const LATE: Duration = Duration::from_millis(500);

/// What a place's request showed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tried {
    pub field: MarkerField,
    /// The marker was read upstream.
    pub forwarded: bool,
    /// How the request ended; `None`: not answered in time.
    pub outcome: Option<Outcome>,
}

/// The run's marker place from what each tried place showed (in order, stopping at
/// the first that works): a place that was forwarded and answered in full; else, when
/// something was answered but no marker reached a proxy, `none` (the gateway forwards
/// none of them, or does not send through haq's proxies: attribution falls back to
/// `x-request-id`); else `user` (nothing was answered: the run will tell why).
pub fn choose(tried: &[Tried]) -> MarkerField {
    if let Some(t) = tried
        .iter()
        .find(|t| t.forwarded && t.outcome == Some(Outcome::Completed))
    {
        return t.field;
    }
    if tried.iter().any(|t| t.outcome == Some(Outcome::Completed)) {
        MarkerField::None
    } else {
        MarkerField::User
    }
}

/// One line for people: what was learned.
pub fn describe(field: MarkerField, tried: &[Tried]) -> String {
    let parts: Vec<String> = tried
        .iter()
        .map(|t| {
            let what = match (t.forwarded, t.outcome) {
                (true, Some(Outcome::Completed)) => "forwarded".to_string(),
                (true, Some(o)) => format!("forwarded, refused ({})", o.as_str()),
                (true, None) => "forwarded, not answered".to_string(),
                (false, Some(Outcome::Completed)) => "dropped by the gateway".to_string(),
                (false, Some(o)) => format!("not seen upstream ({})", o.as_str()),
                (false, None) => "not answered".to_string(),
            };
            format!("{}: {what}", t.field.as_str())
        })
        .collect();
    let verdict = match field {
        MarkerField::None => {
            "no marker reaches haq's proxies: upstream requests are tied by x-request-id only"
                .to_string()
        }
        MarkerField::User if !tried.iter().any(|t| t.outcome == Some(Outcome::Completed)) => {
            "no calibration request was answered: markers in `user`".to_string()
        }
        f => format!("markers in `{}`", f.as_str()),
    };
    format!("request marker: {verdict} ({})", parts.join("; "))
}

/// The place the run's markers go, and what was learned when it was asked (`auto`
/// with haq's proxies in the path).
pub async fn marker_field(
    plan: &Plan,
    target: &Running,
    marker: BodyMarker,
    headers: &http::HeaderMap,
    cancel: &tokio_util::sync::CancellationToken,
    say: &(dyn Fn(&str) + Sync),
) -> anyhow::Result<(MarkerField, Option<MarkerUse>)> {
    let asked = plan.scenario.client.marker;
    if asked != MarkerField::Auto {
        return Ok((asked, None));
    }
    // The sim's gateway forwards `user` (and haq wrote it): nothing to learn.
    if plan.scenario.target.kind == TargetKind::Sim {
        return Ok((MarkerField::User, None));
    }
    let Some(proxies) = &target.proxies else {
        // Nothing reads a marker: bodies carry none.
        return Ok((MarkerField::None, None));
    };
    let board = proxies.board();
    let c = &plan.scenario.client;
    let http = client::Http::new(c.connect_timeout.0, headers, c.transport)?;
    let url = format!("{}/chat/completions", target.api_url);
    let timeouts = client::Timeouts {
        first_token: c.first_token_timeout.0,
        idle: c.idle_timeout.0,
    };
    let clock = Clock::start();
    let sink = TraceWriter::sink();
    let until = Instant::now() + BUDGET;
    let mut tried = Vec::new();
    for field in ORDER {
        let id = format!("{CALIBRATE_PREFIX}{}", field.as_str());
        let mut seen = board.watch(&id, ProxyPoint::Route);
        let body = body(
            &plan.scenario.target.model,
            BodyMarker { field, ..marker },
            &id,
        );
        // Its own x-request-id: a forwarded header is not a forwarded marker.
        let call = Call::new(format!("{id}-h"), url.clone(), body);
        let left = until.saturating_duration_since(Instant::now());
        let result = tokio::select! {
            r = tokio::time::timeout(left, client::execute(&http, &call, timeouts, &clock, &sink)) => r.ok(),
            _ = cancel.cancelled() => {
                board.unwatch(&id);
                anyhow::bail!("interrupted while learning where the gateway forwards the request marker");
            }
        };
        let forwarded = routed(&mut seen, result.is_some()).await;
        board.unwatch(&id);
        let t = Tried {
            field,
            forwarded,
            outcome: result.map(|r| r.outcome),
        };
        tried.push(t);
        if forwarded && t.outcome == Some(Outcome::Completed) || Instant::now() >= until {
            break;
        }
    }
    let field = choose(&tried);
    say(&describe(field, &tried));
    let used = MarkerUse {
        field: field.as_str().into(),
        tried: tried
            .iter()
            .map(|t| MarkerTry {
                field: t.field.as_str().into(),
                forwarded: t.forwarded,
                outcome: t.outcome.map_or("unanswered", Outcome::as_str).into(),
            })
            .collect(),
    };
    Ok((field, Some(used)))
}

/// Whether an upstream request with the watched marker was seen: at once if it was
/// already reported, else within [`LATE`] of an answer (none is waited for when the
/// request was not answered at all).
async fn routed(seen: &mut mpsc::UnboundedReceiver<ProxySeen>, answered: bool) -> bool {
    if let Ok(ProxySeen::Routed { .. }) = seen.try_recv() {
        return true;
    }
    if !answered {
        return false;
    }
    matches!(
        tokio::time::timeout(LATE, seen.recv()).await,
        Ok(Some(ProxySeen::Routed { .. }))
    )
}

/// A request as small as a real one can be: one output token, streamed like the load.
fn body(model: &str, marker: BodyMarker, id: &str) -> bytes::Bytes {
    let mut v = serde_json::json!({
        "model": model,
        "messages": [{"role": "user", "content": "Reply with one word."}],
        "max_tokens": 1,
        "temperature": 0,
        "stream": true,
    });
    if let Some(b) = v.as_object_mut() {
        marker.put(b, id);
    }
    bytes::Bytes::from(v.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(field: MarkerField, forwarded: bool, outcome: Option<Outcome>) -> Tried {
        Tried {
            field,
            forwarded,
            outcome,
        }
    }

    /// The first place forwarded and answered in full wins; a forwarded place the
    /// replica refused does not; answered but never seen upstream is `none`; nothing
    /// answered is `user`.
    #[test]
    fn the_first_place_forwarded_and_answered_is_the_runs() {
        use MarkerField::*;
        let ok = Some(Outcome::Completed);
        assert_eq!(choose(&[t(User, true, ok)]), User);
        assert_eq!(
            choose(&[
                t(User, false, ok),
                t(Metadata, false, ok),
                t(TopLevel, true, ok)
            ]),
            TopLevel
        );
        assert_eq!(
            choose(&[
                t(User, false, ok),
                t(Metadata, true, Some(Outcome::HttpError)),
                t(TopLevel, false, ok),
                t(Prompt, true, ok)
            ]),
            Prompt
        );
        let none_seen: Vec<Tried> = ORDER.iter().map(|&f| t(f, false, ok)).collect();
        assert_eq!(choose(&none_seen), None);
        let unanswered: Vec<Tried> = ORDER.iter().map(|&f| t(f, false, Option::None)).collect();
        assert_eq!(choose(&unanswered), User);
        let line = describe(Metadata, &[t(User, false, ok), t(Metadata, true, ok)]);
        assert!(
            line.contains("markers in `metadata`") && line.contains("user: dropped by the gateway"),
            "{line}"
        );
        assert!(describe(None, &none_seen).contains("x-request-id only"));
    }
}
