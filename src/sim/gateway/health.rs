//! Active health checks of the workers behind the gateway: `/ready` polled every
//! `health_interval`, respecting readiness and drain (Q6, Q7); `health_failures`
//! failed checks in a row take a worker out of rotation.

use std::sync::Arc;

use super::net::error_text;
use super::state::Gateway;
use super::upstream::Health;
use crate::wire::journal::RemovalCause;

/// One failed check of worker `i`: down after `health_failures` of them.
fn check_failed(gw: &Gateway, i: usize, why: &str) {
    let fails = gw.ups[i].count_failure();
    if fails >= gw.cfg.health_failures {
        gw.set_health(i, Health::Down, RemovalCause::HealthCheckFailed, why);
    }
}

/// Polls worker `i`'s `/ready` every `health_interval` for as long as the gateway runs.
pub async fn health_loop(gw: Arc<Gateway>, i: usize) {
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
                    _ => check_failed(&gw, i, "ready check: HTTP 503"),
                }
            }
            Ok(resp) => check_failed(&gw, i, &format!("ready check: HTTP {}", resp.status())),
            Err(e) => check_failed(&gw, i, &format!("ready check: {}", error_text(&e))),
        }
    }
}
