//! Probe requests: a tagged request (`probe-<fault>`, `probe` set on its `request`
//! trace event) sent when its fault's time comes, whose token loop fires the fault.
//! The proxy tells which replica serves each attempt and holds the probe at the
//! points only the path can see (queued, prefill, delta k computed but not sent, the
//! first tool-call delta); the client's read loop reports the deltas it delivered
//! (first delta, after k deltas); with `via: hook` the sim worker's own fault hook
//! crashes it at the exact engine point. The probe is a real request: the client
//! records it like any other, and the request-fate checks judge what happened to it.

use std::sync::Arc;
use std::time::Instant;

use tokio::sync::{mpsc, oneshot};

use super::env::{Env, Fired};
use super::fire;
use crate::client::{self, Call, Observe, Seen};
use crate::plan::{FaultPlan, Trigger};
use crate::proxy::{ProxyPoint, ProxySeen, Release};
use crate::scenario::{ProbePoint, Via};
use crate::trace::Event;

/// The id of a fault's probe request.
pub fn probe_id(fault: &str) -> String {
    format!("probe-{fault}")
}

fn body(env: &Env, f: &FaultPlan, point: ProbePoint, prompt: u32, max_tokens: u32) -> bytes::Bytes {
    // Its own prompt (distinct from every scheduled request), deterministic by seed.
    let idx = crate::wire::hash::fnv1a(f.name.as_bytes()) | (1 << 63);
    let prompt = crate::workload::prompt_text(env.seed, idx, prompt);
    let mut v = serde_json::json!({
        "model": env.probes.model,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "seed": env.seed,
        "stream": true,
        "stream_options": {"include_usage": true},
    });
    if point == ProbePoint::ToolCall {
        v["tools"] = serde_json::json!([{"type": "function", "function": {
            "name": "haq_probe_action",
            "description": "an action with a side effect, to be executed once",
            "parameters": {"type": "object", "properties": {}}}}]);
    }
    bytes::Bytes::from(v.to_string())
}

fn proxy_point(p: ProbePoint, via: Via) -> ProxyPoint {
    match (p, via) {
        // A hook is armed on the serving worker while its request waits at the proxy.
        (_, Via::Hook) | (ProbePoint::Queued, _) => ProxyPoint::Queued,
        (ProbePoint::Prefill, _) => ProxyPoint::Prefill,
        (ProbePoint::ComputedNotSent(k), _) => ProxyPoint::Event(k),
        (ProbePoint::ToolCall, _) => ProxyPoint::ToolCall,
        (ProbePoint::FirstDelta | ProbePoint::AfterDeltas(_), _) => ProxyPoint::Route,
    }
}

/// Deltas the client must have delivered for a client-side point.
fn client_k(p: ProbePoint) -> Option<u32> {
    match p {
        ProbePoint::FirstDelta => Some(1),
        ProbePoint::AfterDeltas(k) => Some(k),
        _ => None,
    }
}

/// Where the probe got to.
struct Reached {
    replica: String,
    fired: Fired,
    release: Option<oneshot::Sender<Release>>,
}

/// Sends the probe, waits for its point, fires the fault, lets the probe finish.
pub async fn run(f: &FaultPlan, env: &Env) {
    let Trigger::Probe {
        point,
        within,
        prompt_tokens,
        max_tokens,
        via,
    } = f.trigger
    else {
        return;
    };
    let id = probe_id(&f.name);
    let Some(board) = env.board.clone() else {
        return fire::missed(
            f,
            env,
            String::new(),
            Some(id),
            "no proxy to follow the probe".into(),
        );
    };
    let mut seen = board.watch(&id, proxy_point(point, via));
    let (ctx, mut crx) = mpsc::unbounded_channel::<(u32, Option<String>)>();
    let observe = Observe(Arc::new(move |s: Seen<'_>| {
        let _ = match s {
            Seen::Head { worker, .. } => ctx.send((0, worker.map(str::to_string))),
            Seen::Deltas(n) => ctx.send((n, None)),
        };
    }));
    let mut call = Call::new(
        id.clone(),
        env.probes.url.clone(),
        body(env, f, point, prompt_tokens, max_tokens),
    );
    call.observe = Some(observe);
    env.trace.emit(Event::Request {
        t: env.clock.now_us(),
        id: id.clone(),
        class: "probe".into(),
        phase: f.phase.clone(),
        intended: env.clock.now_us(),
        prompt_tokens,
        max_tokens,
        protected: false,
        stream: true,
        admitted: None,
        session: None,
        turn: None,
        probe: Some(f.name.clone()),
    });
    let (http, probes, clock, trace, stop) = (
        env.probes.http.clone(),
        env.probes.clone(),
        env.clock,
        env.trace.clone(),
        env.stop.clone(),
    );
    let mut request = tokio::spawn(async move {
        client::execute_until(
            &http,
            &call,
            probes.timeouts,
            &clock,
            &trace,
            stop.cancelled(),
        )
        .await
    });
    let deadline = Instant::now() + within;
    let mut serving: Option<String> = None;
    let mut head_worker: Option<String> = None;
    let mut request_done = false;
    let outcome: Result<Reached, String> = loop {
        tokio::select! {
            Some(s) = seen.recv() => match s {
                ProxySeen::Routed { replica, .. } => serving = Some(replica),
                ProxySeen::Reached { replica, attempt, t, release } => {
                    let at = if via == Via::Hook { "routed to".to_string() } else { format!("reached {} on", point.describe()) };
                    break Ok(Reached {
                        fired: Fired {
                            trigger: format!(
                                "probe {id} {at} {replica}{} (held at haq's proxy)",
                                attempt.map(|a| format!(" attempt {a}")).unwrap_or_default()
                            ),
                            t,
                            probe: Some(id.clone()),
                        },
                        replica,
                        release: Some(release),
                    });
                }
            },
            Some((n, worker)) = crx.recv() => {
                if worker.is_some() {
                    head_worker = worker;
                }
                if let Some(k) = client_k(point)
                    && n >= k
                {
                    while let Ok(s) = seen.try_recv() {
                        if let ProxySeen::Routed { replica, .. } = s {
                            serving = Some(replica);
                        }
                    }
                    let Some(r) = serving.clone().or(head_worker.clone()) else {
                        break Err(format!("{n} deltas delivered but no replica is known to serve the probe"));
                    };
                    break Ok(Reached {
                        fired: Fired {
                            trigger: format!("probe {id}: {n} deltas delivered to the client, served by {r}"),
                            t: env.clock.now_us(),
                            probe: Some(id.clone()),
                        },
                        replica: r,
                        release: None,
                    });
                }
            }
            r = &mut request, if !request_done => {
                request_done = true;
                let how = match r {
                    Ok(Some(c)) => c.outcome.as_str(),
                    Ok(None) => "cancelled",
                    Err(_) => "lost",
                };
                break Err(format!("the probe ended ({how}) before reaching {}", point.describe()));
            }
            _ = tokio::time::sleep_until(deadline.into()) => {
                break Err(format!("the probe did not reach {} within {within:?}", point.describe()));
            }
            _ = env.load_done.cancelled() => {
                break Err(format!("the load ended before the probe reached {}", point.describe()));
            }
        }
    };
    board.unwatch(&id);
    match outcome {
        Err(why) => fire::missed(f, env, serving.unwrap_or_default(), Some(id), why),
        Ok(reached) if via == Via::Hook => {
            super::hook::fire(
                f,
                env,
                point,
                reached.replica,
                reached.fired,
                reached.release,
                within,
            )
            .await;
        }
        Ok(Reached {
            replica,
            fired,
            release,
        }) => match fire::probe_targets(f, env, &replica) {
            Err(why) => {
                if let Some(r) = release {
                    let _ = r.send(Release::Forward);
                }
                fire::missed(f, env, replica, Some(id), why);
            }
            Ok(targets) => {
                let ids = fire::apply(f, env, &targets, &fired).await;
                if let Some(r) = release {
                    let _ = r.send(fire::release_for(f));
                }
                fire::after(f, env, &targets, ids).await;
            }
        },
    }
    if !request_done {
        let _ = request.await;
    }
}
