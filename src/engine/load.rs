//! The load loop: one timeline of phase edges and requests, each fired at its
//! absolute deadline from the start of load (open loop: a slow server never delays
//! the next send), then the drain. Faults fire on the same clock in their own task
//! (`faults::schedule`), so this loop only dispatches.

use std::time::{Duration, Instant};

use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::Target;
use super::progress::Progress;
use crate::client::{self, Call, Timeouts};
use crate::scenario::Plan;
use crate::trace::{Clock, Edge, Event, Outcome, TraceWriter};
use crate::workload::{self, Schedule};

/// Offers the schedule and fires phase edges on time from `load_start`, then drains.
pub(super) async fn drive(
    plan: &Plan,
    target: &Target,
    load_start: Instant,
    clock: &Clock,
    tw: &TraceWriter,
    cancel: &CancellationToken,
    progress: &Progress,
) -> anyhow::Result<()> {
    let c = &plan.scenario.client;
    let http = client::http_client(c.connect_timeout.0, &super::request_headers(plan)?)?;
    let timeouts = Timeouts {
        first_token: c.first_token_timeout.0,
        idle: c.idle_timeout.0,
    };
    // Attribution headers other than the sim's, as the scenario names them.
    let ev = &plan.scenario.evidence;
    let attribution = (ev.worker_header != client::WORKER_HEADER
        || ev.attempt_header != client::ATTEMPT_HEADER)
        .then(|| {
            std::sync::Arc::new(client::Attribution {
                worker: ev.worker_header.to_ascii_lowercase(),
                attempt: ev.attempt_header.to_ascii_lowercase(),
            })
        });
    // Stops in-flight requests (drain timeout or interrupt); they record `cancelled`.
    let stop = cancel.child_token();
    let mut tasks: JoinSet<()> = JoinSet::new();
    let mut schedule = Schedule::new(plan).map_err(anyhow::Error::msg)?.peekable();
    let mut edges: Vec<(Duration, usize, Edge)> = Vec::new();
    for (i, p) in plan.phases.iter().enumerate() {
        edges.push((p.start, i, Edge::Start));
        edges.push((p.end(), i, Edge::End));
    }
    let mut edges = edges.into_iter().peekable();
    let stats = progress.stats();

    loop {
        // The next thing due: phase edge first, then requests at a tie.
        let next_edge = edges.peek().map(|e| e.0);
        let next_req = schedule.peek().map(|p| p.at);
        let Some(due) = [next_edge, next_req].into_iter().flatten().min() else {
            break;
        };
        tokio::select! {
            _ = tokio::time::sleep_until((load_start + due).into()) => {}
            _ = cancel.cancelled() => break,
            Some(_) = tasks.join_next(), if !tasks.is_empty() => continue,
        }
        if next_edge == Some(due) {
            let Some((_, i, edge)) = edges.next() else {
                continue;
            };
            let p = &plan.phases[i];
            tw.emit(Event::Phase {
                t: clock.now_us(),
                name: p.name.clone(),
                edge,
            });
            if edge == Edge::Start {
                progress.phase(p);
            }
        } else if let Some(p) = schedule.next() {
            let class = &plan.mix.classes[p.class];
            let mut call = Call::new(
                p.id.clone(),
                format!("{}{}", target.api_url, workload::api_path(class.api)),
                workload::request_body(plan, &p),
            );
            call.expect_json = class.response_format.is_some();
            call.attribution.clone_from(&attribution);
            call.headers.push((
                reqwest::header::HeaderName::from_static(client::PRIORITY_HEADER),
                reqwest::header::HeaderValue::from_static(workload::priority_value(plan, &p)),
            ));
            let ev = Event::Request {
                t: 0,
                id: p.id.clone(),
                class: class.name.clone(),
                phase: plan.phases[p.phase].name.clone(),
                intended: clock.us_of(load_start + p.at),
                prompt_tokens: p.total_prompt_tokens(),
                max_tokens: p.max_tokens,
                protected: workload::is_protected(plan, &p),
                stream: p.stream,
                admitted: None,
                session: p.session.as_ref().map(|s| s.session.clone()),
                turn: p.session.as_ref().map(|s| s.turn),
                probe: None,
            };
            let (http, tw, clock, stop, stats) = (
                http.clone(),
                tw.clone(),
                *clock,
                stop.clone(),
                stats.clone(),
            );
            tasks.spawn(async move {
                let mut ev = ev;
                if let Event::Request { t, .. } = &mut ev {
                    *t = clock.now_us();
                }
                tw.emit(ev);
                stats.sent();
                let r = client::execute_until(&http, &call, timeouts, &clock, &tw, &stop).await;
                stats.done(r.map_or(Outcome::Cancelled, |r| r.outcome));
            });
        }
    }

    // Drain: let in-flight requests finish, within the drain timeout.
    if !cancel.is_cancelled() && !tasks.is_empty() {
        progress.line(&format!(
            "load done; waiting for {} in-flight requests",
            tasks.len()
        ));
        let drain = c.drain_timeout.0;
        let drained = tokio::select! {
            _ = async { while tasks.join_next().await.is_some() {} } => true,
            _ = tokio::time::sleep(drain) => false,
            _ = cancel.cancelled() => false,
        };
        if !drained && !cancel.is_cancelled() {
            progress.line(&format!(
                "drain timeout ({drain:?}): cancelling {} requests",
                tasks.len()
            ));
        }
    }
    stop.cancel();
    while tasks.join_next().await.is_some() {}
    progress.finish();
    Ok(())
}
