//! Watchers of the replicas' own readiness (Q11): with `evidence.readiness_watch`, each
//! declared replica's readiness path is polled directly (not through the gateway or
//! haq's proxy) during the load, and every change is recorded as an `observation`
//! (`not_ready` / `ready`, source [`crate::trace::READINESS`]). For a target without a gateway
//! journal this dates detection and readiness in the timeline; where the system's own
//! observers (the gateway journal, other watchers) saw the failure, the timeline prefers
//! them — haq's poll says when the replica could be seen down, not when the system saw it.

use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::target::registry::{Registry, Replica};
use crate::trace::{Clock, Event, TraceWriter};

use crate::trace::READINESS;

/// Polls every replica every `every` until `stop`; records each change of state (and
/// the first state when it is not ready).
pub async fn readiness(
    registry: Arc<Registry>,
    every: Duration,
    http: reqwest::Client,
    clock: Clock,
    trace: TraceWriter,
    stop: CancellationToken,
) {
    let mut set = JoinSet::new();
    for r in registry.replicas.iter().cloned() {
        set.spawn(watch(
            r,
            every,
            http.clone(),
            clock,
            trace.clone(),
            stop.clone(),
        ));
    }
    while set.join_next().await.is_some() {}
}

/// One poll: ready (2xx) or why not.
async fn poll(r: &Replica, http: &reqwest::Client, timeout: Duration) -> Result<(), String> {
    let Some(u) = r.direct_url() else {
        return Err("no address known".into());
    };
    let url = format!("{u}{}", r.ready_path);
    match http.get(&url).timeout(timeout).send().await {
        Ok(resp) if resp.status().is_success() => Ok(()),
        Ok(resp) => Err(format!("GET {url}: {}", resp.status())),
        Err(e) if e.is_timeout() => Err(format!("GET {url}: no answer within {timeout:?}")),
        Err(e) if e.is_connect() => Err(format!("GET {url}: connection failed")),
        Err(e) => Err(format!("GET {url}: {e}")),
    }
}

async fn watch(
    r: Arc<Replica>,
    every: Duration,
    http: reqwest::Client,
    clock: Clock,
    trace: TraceWriter,
    stop: CancellationToken,
) {
    // A frozen replica accepts and never answers: give up on a poll well before the
    // next one is due, but not so soon that a busy replica reads as down.
    let timeout = every.max(Duration::from_millis(200));
    let mut last: Option<bool> = None;
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        let got = tokio::select! {
            _ = stop.cancelled() => return,
            got = poll(&r, &http, timeout) => got,
        };
        // Dated when the watch knew: a refused connection at once, an unanswered poll
        // when it timed out (as a health checker concludes).
        let t = clock.now_us();
        let ready = got.is_ok();
        if last == Some(ready) || (last.is_none() && ready) {
            last = Some(ready);
            continue;
        }
        last = Some(ready);
        trace.emit(Event::Observation {
            t,
            source: READINESS.into(),
            replica: Some(r.name.clone()),
            what: if ready { "ready" } else { "not_ready" }.into(),
            detail: Some(match got {
                Ok(()) => format!("{}{} answered 2xx", r.name, r.ready_path),
                Err(why) => why,
            }),
        });
    }
}
