//! Active health checks of the workers behind the gateway: `/ready` polled every
//! `health_interval`, respecting readiness and drain (Q6, Q7); `health_failures`
//! failed checks in a row take a worker out of rotation. And the deep check (issue
//! 18): `/health_generate` every `health_interval` with `stall_timeout` to answer — a
//! dead or hung engine behind a live process, whose `/ready` may still pass, fails it
//! and leaves rotation at once; a slow one (steps shorter than `stall_timeout`) passes.

use std::sync::Arc;

use super::net::{error_text, refused};
use super::state::Gateway;
use super::upstream::Health;
use crate::sim::config::GatewayPolicy;
use crate::wire::journal::RemovalCause;

/// One failed check of worker `i`: down after `health_failures` of them.
fn check_failed(gw: &Gateway, i: usize, why: &str) {
    let fails = gw.ups[i].count_failure();
    if fails >= gw.cfg.health_failures {
        gw.set_health(i, Health::Down, RemovalCause::HealthCheckFailed, why);
    }
}

/// The flawed `tcp-health-check`: a check passes when the worker's port accepts a TCP
/// connection, whatever its engine does.
async fn tcp_check(gw: &Gateway, i: usize) -> Result<(), String> {
    let hostport = gw.ups[i]
        .url
        .trim_start_matches("http://")
        .split('/')
        .next()
        .unwrap_or_default()
        .to_string();
    let timeout = gw.cfg.health_timeout();
    match tokio::time::timeout(timeout, tokio::net::TcpStream::connect(&hostport)).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(format!("tcp check: {e}")),
        Err(_) => Err("tcp check: connect timed out".into()),
    }
}

/// FLAW tcp-health-check: the port is checked, not the worker.
async fn tcp_loop(gw: Arc<Gateway>, i: usize) {
    let mut tick = tokio::time::interval(gw.cfg.health_interval.0);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        match tcp_check(&gw, i).await {
            Ok(()) => gw.set_health(i, Health::Ready, RemovalCause::Other, "tcp check passed"),
            Err(why) => check_failed(&gw, i, &why),
        }
    }
}

/// Runs worker `i`'s health checks for as long as the gateway runs: readiness, and
/// the deep check of its engine (both TCP-only under the flawed `tcp-health-check`).
pub async fn run(gw: Arc<Gateway>, i: usize) {
    if gw.cfg.policy == GatewayPolicy::TcpHealthCheck {
        return tcp_loop(gw, i).await;
    }
    tokio::join!(health_loop(gw.clone(), i), deep_loop(gw.clone(), i));
}

/// Checks worker `i`'s engine every `health_interval` while it is in rotation by
/// its readiness: `/health_generate` must answer 200 within `stall_timeout`. A refused
/// connection is left to the readiness check (the process is gone, not its engine).
async fn deep_loop(gw: Arc<Gateway>, i: usize) {
    let url = format!("{}/health_generate", gw.ups[i].url);
    let limit = gw.cfg.stall_timeout.0;
    let mut tick = tokio::time::interval(gw.cfg.health_interval.0);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if gw.ups[i].health() != Health::Ready {
            continue;
        }
        let r = gw.control.get(&url).timeout(limit).send().await;
        let failed = match r {
            Ok(resp) if resp.status().is_success() => None,
            Ok(resp) => {
                let v: serde_json::Value = resp.json().await.unwrap_or_default();
                match v["status"].as_str() {
                    // The readiness check owns these.
                    Some("starting" | "draining") => continue,
                    Some(s) => Some(format!("deep health check: {s}")),
                    None => Some("deep health check: error status".into()),
                }
            }
            Err(e) if e.is_timeout() => Some(format!(
                "deep health check: no engine step within {} ms (stalled)",
                limit.as_millis()
            )),
            Err(e) if refused(&e) => continue,
            Err(e) => Some(format!("deep health check: {}", error_text(&e))),
        };
        gw.set_stalled(i, failed);
    }
}

/// Polls worker `i`'s `/ready` every `health_interval` for as long as the gateway runs.
async fn health_loop(gw: Arc<Gateway>, i: usize) {
    let every = gw.cfg.health_interval.0;
    let timeout = gw.cfg.health_timeout();
    let url = format!("{}/ready", gw.ups[i].url);
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let r = gw.control.get(&url).timeout(timeout).send().await;
        match r {
            Ok(resp) if resp.status().is_success() => {
                gw.set_health(i, Health::Ready, RemovalCause::Other, "ready check passed")
            }
            Ok(resp) if resp.status().as_u16() == 503 => {
                let v: serde_json::Value = resp.json().await.unwrap_or_default();
                match v["status"].as_str() {
                    Some("draining") => gw.set_health(
                        i,
                        Health::Draining,
                        RemovalCause::Draining,
                        "ready check: draining",
                    ),
                    Some("starting") => gw.set_health(
                        i,
                        Health::Starting,
                        RemovalCause::NotReady,
                        "ready check: starting",
                    ),
                    other => check_failed(
                        &gw,
                        i,
                        &format!("ready check: HTTP 503 ({})", other.unwrap_or("no status")),
                    ),
                }
            }
            Ok(resp) => check_failed(&gw, i, &format!("ready check: HTTP {}", resp.status())),
            Err(e) => check_failed(&gw, i, &format!("ready check: {}", error_text(&e))),
        }
    }
}
