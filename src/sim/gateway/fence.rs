//! Lease renewal and fencing (M2, M5). A loop per worker renews the leases of its live
//! attempts every third of `lease_ttl` while the worker answers. A renewal that fails
//! stops renewing those attempts: their leases run out at the last deadline *sent* (the
//! worker may have applied a renewal whose answer was lost), after which the worker
//! publishes nothing more — that is how a cut-off attempt is fenced — unless the
//! attempt publishes again before then (a stall shorter than the lease: the relay's
//! watch resumes its renewals, slow is not dead). A failed attempt is
//! fenced (confirmed dead, cancel confirmed, or lease expired) before any retry.

use std::sync::Arc;
use std::time::Duration;

use super::net::{error_text, refused};
use super::state::Gateway;
use crate::wire::journal::{FenceHow, GatewayEntry};
use crate::wire::mono_ns;

/// Renews the leases of worker `i`'s attempts for as long as the gateway runs.
pub async fn renew_loop(gw: Arc<Gateway>, i: usize) {
    let ttl = gw.cfg.lease_ttl.0;
    let every = (ttl / 3).max(Duration::from_millis(10));
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let up = &gw.ups[i];
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            // An attempt renewed again after a failure: its renewal goes out now.
            _ = up.leases.1.notified() => {}
        }
        let until = mono_ns() + ttl.as_nanos() as u64;
        let attempts = up.leases.begin_renewal(until);
        if attempts.is_empty() {
            continue;
        }
        let body = serde_json::json!({"deadline_ns": until, "attempts": attempts});
        let r = gw
            .control
            .post(format!("{}/haq/leases/renew", up.url))
            .json(&body)
            .timeout(every)
            .send()
            .await;
        let refused: Result<Vec<String>, String> = match r {
            Ok(resp) if resp.status().is_success() => {
                match resp.json::<serde_json::Value>().await {
                    Ok(v) => Ok(v["refused"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(|a| a.as_str().map(str::to_string))
                        .collect()),
                    Err(e) => Err(format!("renewal answer: {e}")),
                }
            }
            Ok(resp) => Err(format!("renewal: HTTP {}", resp.status())),
            Err(e) => Err(format!("renewal: {}", error_text(&e))),
        };
        match refused {
            Ok(refused) => up.leases.stop_renewing(&refused),
            Err(why) => {
                up.leases.stop_renewing(&attempts);
                gw.journal.write(GatewayEntry::LeaseRenewFailed {
                    worker: up.name.clone(),
                    attempts,
                    why,
                });
            }
        }
    }
}

/// How an attempt failed, as far as fencing is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// The worker's address refused the connection.
    Refused,
    /// The worker answered an error before starting the attempt.
    NotStarted,
    /// Anything else: it may still be generating.
    Unknown,
}

/// Fences `attempt` on worker `i` so that it can never publish again, and journals how
/// (M2: only then may a retry start).
pub async fn fence(gw: &Gateway, i: usize, req: &str, attempt: &str, failure: Failure) -> FenceHow {
    let up = &gw.ups[i];
    let started = std::time::Instant::now();
    let lease = up.leases.get(attempt);
    let how = match failure {
        Failure::Refused => FenceHow::ConfirmedDead,
        Failure::NotStarted => FenceHow::NotStarted,
        Failure::Unknown => match cancel(gw, i, req, attempt, "attempt failed").await {
            Cancel::Confirmed => FenceHow::CancelConfirmed,
            Cancel::Refused => FenceHow::ConfirmedDead,
            Cancel::Unconfirmed => {
                // Stop renewing and wait the lease out.
                up.leases.stop_renewing(&[attempt.to_string()]);
                let until = up
                    .leases
                    .get(attempt)
                    .or(lease)
                    .map(|l| l.sent_until)
                    .unwrap_or(0);
                let now = mono_ns();
                if until > now {
                    tokio::time::sleep(Duration::from_nanos(until - now + 1_000_000)).await;
                }
                gw.journal.write(GatewayEntry::LeaseExpired {
                    req: req.into(),
                    attempt: attempt.into(),
                    worker: up.name.clone(),
                    deadline_ns: until,
                });
                FenceHow::LeaseExpired
            }
        },
    };
    up.leases.remove(attempt);
    gw.journal.write(GatewayEntry::Fence {
        req: req.into(),
        attempt: attempt.into(),
        worker: up.name.clone(),
        how,
        waited_ms: started.elapsed().as_millis() as u64,
    });
    how
}

/// What a revocation achieved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cancel {
    Confirmed,
    /// Connection refused: nothing listens, the worker is gone.
    Refused,
    Unconfirmed,
}

/// Sends a revocation (upstream cancel) for `attempt` and journals whether the worker
/// confirmed it. A cancel sent is not a cancel confirmed (M5).
pub async fn cancel(gw: &Gateway, i: usize, req: &str, attempt: &str, why: &str) -> Cancel {
    let up = &gw.ups[i];
    gw.journal.write(GatewayEntry::CancelSent {
        req: req.into(),
        attempt: attempt.into(),
        worker: up.name.clone(),
        why: why.into(),
    });
    let timeout = (gw.cfg.lease_ttl.0 / 2).clamp(Duration::from_millis(50), Duration::from_secs(1));
    // A reset on a fresh connection says the process is going away (its listener still
    // queued our SYN); asking again shortly after turns that into a refusal or an answer.
    let mut tries = 0;
    let (result, why) = loop {
        tries += 1;
        let r = gw
            .control
            .post(format!("{}/haq/leases/revoke", up.url))
            .json(&serde_json::json!({"attempt": attempt, "why": why}))
            .timeout(timeout)
            .send()
            .await;
        match r {
            Ok(resp) if resp.status().is_success() => break (Cancel::Confirmed, String::new()),
            Ok(resp) => break (Cancel::Unconfirmed, format!("HTTP {}", resp.status())),
            Err(e) if refused(&e) => {
                break (Cancel::Refused, "connection refused".into());
            }
            Err(e) if tries < 3 && !e.is_timeout() => {
                tokio::time::sleep(Duration::from_millis(25)).await;
            }
            Err(e) => break (Cancel::Unconfirmed, error_text(&e)),
        }
    };
    let (req, attempt, worker) = (req.to_string(), attempt.to_string(), up.name.clone());
    gw.journal.write(match result {
        Cancel::Confirmed => GatewayEntry::CancelConfirmed {
            req,
            attempt,
            worker,
        },
        _ => GatewayEntry::CancelUnconfirmed {
            req,
            attempt,
            worker,
            why,
        },
    });
    result
}
