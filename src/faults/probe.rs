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
    if let Some(body) = v.as_object_mut() {
        env.probes.marker.put(body, &probe_id(&f.name));
    }
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

/// The probe request on its way: the task that sends it and what its read loop tells.
struct Probe {
    request: tokio::task::JoinHandle<Option<client::CallResult>>,
    done: bool,
    /// (deltas delivered, the serving worker when the head arrived).
    deltas: mpsc::UnboundedReceiver<(u32, Option<String>)>,
}

/// The point a probe is sent to reach, how it is held there, and for how long.
#[derive(Clone, Copy)]
struct Aim {
    point: ProbePoint,
    via: Via,
    within: std::time::Duration,
}

/// What the proxy and the client said of where the probe went.
#[derive(Default)]
struct Serving {
    /// The replica haq's proxy saw the probe routed to.
    proxy: Option<String>,
    /// The replica the response head named (`x-haq-worker`).
    head: Option<String>,
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
    let mut probe = send(f, env, &id, prompt_tokens, max_tokens, point);
    let mut serving = Serving::default();
    let aim = Aim { point, via, within };
    let outcome = follow(&mut probe, &mut seen, &mut serving, env, &id, aim).await;
    board.unwatch(&id);
    fire_on(f, env, outcome, serving.proxy, id, aim).await;
    if !probe.done {
        let _ = probe.request.await;
    }
}

/// Records the probe request and sends it in its own task.
fn send(
    f: &FaultPlan,
    env: &Env,
    id: &str,
    prompt_tokens: u32,
    max_tokens: u32,
    point: ProbePoint,
) -> Probe {
    let (ctx, deltas) = mpsc::unbounded_channel::<(u32, Option<String>)>();
    let observe = Observe(Arc::new(move |s: Seen<'_>| {
        let _ = match s {
            Seen::Head { worker, .. } => ctx.send((0, worker.map(str::to_string))),
            Seen::Deltas(n) => ctx.send((n, None)),
        };
    }));
    let mut call = Call::new(
        id.to_string(),
        env.probes.url.clone(),
        body(env, f, point, prompt_tokens, max_tokens),
    );
    call.observe = Some(observe);
    call.attribution.clone_from(&env.probes.attribution);
    env.trace.emit(Event::Request {
        t: env.clock.now_us(),
        id: id.to_string(),
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
    let request = tokio::spawn(async move {
        client::execute_until(&http, &call, probes.timeouts, &clock, &trace, async move {
            stop.cancelled().await;
            crate::trace::Outcome::Cancelled
        })
        .await
    });
    Probe {
        request,
        done: false,
        deltas,
    }
}

/// Follows the probe until it reaches its point (at haq's proxy, or in the client for
/// the client-side points), ends, runs out of time, or the load ends.
async fn follow(
    probe: &mut Probe,
    seen: &mut mpsc::UnboundedReceiver<ProxySeen>,
    serving: &mut Serving,
    env: &Env,
    id: &str,
    aim: Aim,
) -> Result<Reached, String> {
    let Aim { point, via, within } = aim;
    let deadline = Instant::now() + within;
    loop {
        tokio::select! {
            Some(s) = seen.recv() => match s {
                ProxySeen::Routed { replica, .. } => serving.proxy = Some(replica),
                ProxySeen::Reached { replica, attempt, t, release } => {
                    let at = if via == Via::Hook { "routed to".to_string() } else { format!("reached {} on", point.describe()) };
                    return Ok(Reached {
                        fired: Fired {
                            trigger: format!(
                                "probe {id} {at} {replica}{} (held at haq's proxy)",
                                attempt.map(|a| format!(" attempt {a}")).unwrap_or_default()
                            ),
                            t,
                            probe: Some(id.to_string()),
                        },
                        replica,
                        release: Some(release),
                    });
                }
            },
            Some((n, worker)) = probe.deltas.recv() => {
                if worker.is_some() {
                    serving.head = worker;
                }
                if let Some(k) = client_k(point)
                    && n >= k
                {
                    return delivered(seen, serving, env, id, n);
                }
            }
            r = &mut probe.request, if !probe.done => {
                probe.done = true;
                let how = match r {
                    Ok(Some(c)) => c.outcome.as_str(),
                    Ok(None) => "cancelled",
                    Err(_) => "lost",
                };
                return Err(format!("the probe ended ({how}) before reaching {}", point.describe()));
            }
            _ = tokio::time::sleep_until(deadline.into()) => {
                return Err(format!("the probe did not reach {} within {within:?}", point.describe()));
            }
            _ = env.load_done.cancelled() => {
                return Err(format!("the load ended before the probe reached {}", point.describe()));
            }
        }
    }
}

/// A client-side point reached: `n` deltas delivered; the serving replica is the one
/// the proxy saw (its pending news read first), else the response head's.
fn delivered(
    seen: &mut mpsc::UnboundedReceiver<ProxySeen>,
    serving: &mut Serving,
    env: &Env,
    id: &str,
    n: u32,
) -> Result<Reached, String> {
    while let Ok(s) = seen.try_recv() {
        if let ProxySeen::Routed { replica, .. } = s {
            serving.proxy = Some(replica);
        }
    }
    let Some(r) = serving.proxy.clone().or(serving.head.clone()) else {
        return Err(format!(
            "{n} deltas delivered but no replica is known to serve the probe"
        ));
    };
    Ok(Reached {
        fired: Fired {
            trigger: format!("probe {id}: {n} deltas delivered to the client, served by {r}"),
            t: env.clock.now_us(),
            probe: Some(id.to_string()),
        },
        replica: r,
        release: None,
    })
}

/// Fires the fault where the probe got to (the sim's own hook, or the injector while
/// the proxy holds the probe), or records why it was not applied.
async fn fire_on(
    f: &FaultPlan,
    env: &Env,
    outcome: Result<Reached, String>,
    serving: Option<String>,
    id: String,
    aim: Aim,
) {
    let Aim { point, via, within } = aim;
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
}
