//! One client request through the gateway: admission, attempts, fencing, retries and
//! how the stream ends, per policy. The reference (SPEC M1–M8):
//!
//! - retry only while no delta reached the client, only after the failed attempt is
//!   fenced (confirmed dead, cancel confirmed, or lease expired), within the per-request
//!   budget, the global retry budget and the re-prefill cost limit (M2, M8);
//! - after the first delta: the explicit `upstream_decode_interrupted` error (M3);
//! - client gone: cancel upstream, no spare attempt (M4).
//!
//! Each flawed policy deviates at one point, marked `FLAW` below.

use std::ops::ControlFlow;
use std::sync::Arc;

use axum::body::Bytes;
use serde_json::json;
use tokio::sync::oneshot;

use super::fence::{self, Failure};
use super::peek;
use super::relay::{self, Client, End, Forward, Head};
use super::state::Gateway;
use crate::sim::config::GatewayPolicy;
use crate::wire::journal::{GatewayEntry, Priority};

pub struct Incoming {
    pub f: Forward,
    /// Worker the first attempt should go to (`x-haq-route`), when routable.
    pub route: Option<usize>,
    pub priority: Priority,
    pub stream: bool,
    pub prompt_tokens: u32,
}

fn error_body(kind: &str, code: &str, message: &str, status: u16) -> Bytes {
    Bytes::from(
        json!({"error": {"message": message, "type": kind, "param": null, "code": code,
                         "status": status}})
        .to_string(),
    )
}

/// An HTTP error before anything was committed (`Retry-After` in seconds).
fn reject(client: &Client, status: u16, retry_after_s: u32, kind: &str, code: &str, message: &str) {
    client.send_head(Head::Whole {
        status,
        headers: vec![
            ("content-type".into(), "application/json".into()),
            ("retry-after".into(), retry_after_s.to_string()),
        ],
        body: error_body(kind, code, message, status),
    });
}

/// Ends a committed stream with the seed's explicit error event (M3).
async fn explicit_error(gw: &Gateway, client: &Client, rid: &str, why: &str) {
    let delivered = client.delivered();
    let ev = json!({"error": {
        "code": "upstream_decode_interrupted",
        "message": "generation was interrupted after part of the answer was sent",
        "request_id": rid,
        "partial_output": true,
        "delivered_output_tokens": delivered,
        "retryable": false,
    }});
    gw.journal.write(GatewayEntry::ExplicitError {
        req: rid.to_string(),
        delivered,
        why: why.to_string(),
    });
    let _ = client.body.send(peek::sse(&ev.to_string())).await;
}

impl Gateway {
    /// `Retry-After` of the gateway's refusals, in whole seconds (at least 1).
    fn retry_after_s(&self) -> u32 {
        self.cfg.retry_after.0.as_secs().max(1) as u32
    }

    /// Takes one token from the global retry budget.
    fn take_retry_token(&self) -> bool {
        let mut t = self.retry_tokens.lock().unwrap_or_else(|p| p.into_inner());
        if *t >= 1.0 {
            *t -= 1.0;
            true
        } else {
            false
        }
    }

    fn add_retry_tokens(&self) {
        let mut t = self.retry_tokens.lock().unwrap_or_else(|p| p.into_inner());
        *t = (*t + self.cfg.retry_ratio).min(f64::from(self.cfg.retry_burst));
    }

    /// Whether another attempt may start (M8); the reason if not.
    fn retry_refused(&self, attempts: u32, prompt_tokens: u32) -> Option<(&'static str, String)> {
        if attempts > self.cfg.retry_budget {
            return Some((
                "retry_budget_exhausted",
                format!("per-request retry budget of {} used", self.cfg.retry_budget),
            ));
        }
        if prompt_tokens > self.cfg.retry_max_prompt_tokens {
            return Some((
                "retry_cost_exceeded",
                format!(
                    "re-prefill of {prompt_tokens} prompt tokens exceeds retry_max_prompt_tokens ({})",
                    self.cfg.retry_max_prompt_tokens
                ),
            ));
        }
        if !self.take_retry_token() {
            return Some((
                "retry_budget_exhausted",
                "global retry budget exhausted (retry storm guard)".into(),
            ));
        }
        None
    }
}

/// Fencing input for a failed attempt.
fn failure_of(end: &End) -> Failure {
    match end {
        End::Refused(_) => Failure::Refused,
        End::NotStarted(_) => Failure::NotStarted,
        _ => Failure::Unknown,
    }
}

pub async fn run(gw: Arc<Gateway>, r: Incoming, client: Arc<Client>) {
    let rid = r.f.rid.clone();
    gw.journal.write(GatewayEntry::RequestStart {
        req: rid.clone(),
        priority: r.priority,
        prompt_tokens: r.prompt_tokens,
        stream: r.stream,
        retry_budget: gw.cfg.retry_budget,
    });
    let retry_after = gw.retry_after_s();
    let journal = gw.journal.clone();
    let queued_rid = rid.clone();
    let admitted = gw
        .admission
        .admit(r.priority, |queue_len| {
            journal.write(GatewayEntry::Queued {
                req: queued_rid,
                priority: r.priority,
                queue_len,
            })
        })
        .await;
    let _permit = match admitted {
        Ok(p) => p,
        Err(shed) => {
            gw.journal.write(GatewayEntry::Shed {
                req: rid.clone(),
                priority: r.priority,
                status: shed.status,
                retry_after_s: retry_after,
                queue_len: shed.queue_len,
                why: shed.why.clone(),
            });
            let (kind, code) = if shed.status == 429 {
                ("rate_limit_exceeded", "overloaded")
            } else {
                ("service_unavailable", "queue_timeout")
            };
            reject(&client, shed.status, retry_after, kind, code, &shed.why);
            end(&gw, &rid, "rejected", 0, 0);
            return;
        }
    };
    gw.add_retry_tokens();
    let (outcome, attempts) = attempts(&gw, &r, &client).await;
    end(&gw, &rid, outcome, attempts, client.delivered());
}

fn end(gw: &Gateway, rid: &str, outcome: &str, attempts: u32, delivered: u32) {
    gw.journal.write(GatewayEntry::RequestEnd {
        req: rid.to_string(),
        outcome: outcome.into(),
        attempts,
        delivered,
    });
}

/// Runs attempts until one settles the request; returns (outcome, attempts).
async fn attempts(gw: &Arc<Gateway>, r: &Incoming, client: &Arc<Client>) -> (&'static str, u32) {
    let req = Attempts { gw, r, client };
    let rid = &r.f.rid;
    let mut n: u32 = 0;
    let mut tried: Vec<usize> = Vec::new();
    let mut spares = Vec::new();
    // A migrated stream's continuation (policy `migrate`): the next attempt's request.
    let mut cont: Option<Cont> = None;
    let outcome = loop {
        n += 1;
        let pinned = r.route.filter(|&i| {
            n == 1 && (gw.ups[i].routable() || gw.cfg.policy == GatewayPolicy::NoHealthCheck)
        });
        let Some(i) = pinned.or_else(|| gw.pick(&tried)) else {
            break req.no_upstream(n).await;
        };
        tried.push(i);
        let attempt = format!("{rid}/a{n}");
        let worker = gw.ups[i].name.clone();
        if let Some(c) = &cont {
            gw.journal.write(GatewayEntry::Migrate {
                req: rid.clone(),
                after: c.after.clone(),
                worker: worker.clone(),
                delivered: client.delivered(),
                resent: c.resent,
                prompt_tokens: c.prompt_tokens,
            });
        }
        gw.journal.write(GatewayEntry::AttemptStart {
            req: rid.clone(),
            attempt: attempt.clone(),
            worker: worker.clone(),
            delivered: client.delivered(),
        });
        // FLAW soft-timeout: on `soft_timeout` of silence, a spare attempt on another
        // worker starts while this one keeps running, unfenced; both publish.
        let spare = (gw.cfg.policy == GatewayPolicy::SoftTimeout)
            .then(|| req.spare(tried.clone(), &mut spares));
        let f = cont.as_ref().map_or(&r.f, |c| &c.f);
        let end = relay::run(gw, i, &attempt, f, client, spare).await;
        attempt_end(gw, rid, &attempt, &worker, &end, client.delivered());
        if let Some(outcome) = req.settled(i, &attempt, &end).await {
            break outcome;
        }
        let why = end.result().1.unwrap_or_default();
        fence::fence(gw, i, rid, &attempt, failure_of(&end)).await;
        let next = if client.committed() {
            req.after_commit(n, &attempt, &why).await
        } else {
            req.retry(n, &attempt, why)
        };
        match next {
            ControlFlow::Break(outcome) => break outcome,
            ControlFlow::Continue(Some(c)) => cont = Some(c),
            ControlFlow::Continue(None) => {}
        }
    };
    for rx in spares {
        let _ = rx.await;
    }
    (outcome, n)
}

/// The next attempt of a migrated stream: its request, and what the journal says of it.
struct Cont {
    f: Forward,
    after: String,
    resent: u32,
    prompt_tokens: u32,
}

/// What the policy does after a failed attempt: end the request, or go on (with a
/// continuation's request for a migration).
type Next = ControlFlow<&'static str, Option<Cont>>;

/// One request's attempts: what settles it, what the policy does after a failure.
struct Attempts<'a> {
    gw: &'a Arc<Gateway>,
    r: &'a Incoming,
    client: &'a Arc<Client>,
}

impl Attempts<'_> {
    /// No worker left to try after `n - 1` attempts: the explicit error on a committed
    /// stream, a 503 otherwise.
    async fn no_upstream(&self, n: u32) -> &'static str {
        let (gw, client, rid) = (self.gw, self.client, &self.r.f.rid);
        gw.journal.write(GatewayEntry::NoUpstream {
            req: rid.clone(),
            attempts: n - 1,
        });
        if client.committed() {
            explicit_error(gw, client, rid, "no ready upstream left").await;
            return "explicit_error";
        }
        reject(
            client,
            503,
            gw.retry_after_s(),
            "service_unavailable",
            "no_upstream",
            "no ready upstream",
        );
        "rejected"
    }

    /// The spare attempt of the flawed `soft-timeout` policy: started on a worker not
    /// in `tried`, it reports its end on a channel kept in `spares`.
    fn spare(&self, tried: Vec<usize>, spares: &mut Vec<oneshot::Receiver<()>>) -> relay::Spare {
        let (gw2, c2, tried2) = (self.gw.clone(), self.client.clone(), tried);
        let f = &self.r.f;
        let f2 = Forward {
            rid: f.rid.clone(),
            path: f.path.clone(),
            body: f.body.clone(),
            resumed: None,
        };
        let (tx, rx) = oneshot::channel();
        spares.push(rx);
        Box::new(move |_silent_ms| {
            tokio::spawn(async move {
                if let Some(j) = gw2.pick(&tried2) {
                    let a = format!("{}/a{}s", f2.rid, tried2.len() + 1);
                    gw2.journal.write(GatewayEntry::AttemptStart {
                        req: f2.rid.clone(),
                        attempt: a.clone(),
                        worker: gw2.ups[j].name.clone(),
                        delivered: c2.delivered(),
                    });
                    let end = relay::run(&gw2, j, &a, &f2, &c2, None).await;
                    attempt_end(&gw2, &f2.rid, &a, &gw2.ups[j].name, &end, c2.delivered());
                    gw2.ups[j].leases.remove(&a);
                }
                let _ = tx.send(());
            });
        })
    }

    /// The outcome when attempt `attempt` on worker `i` settled the request (answered,
    /// or the client left: M4, cancel upstream and free its slot, no spare attempt).
    async fn settled(&self, i: usize, attempt: &str, end: &End) -> Option<&'static str> {
        let (gw, client, rid) = (self.gw, self.client, &self.r.f.rid);
        match end {
            End::Finished | End::Relayed => {
                gw.ups[i].leases.remove(attempt);
                Some("completed")
            }
            End::ClientGone => {
                gw.journal.write(GatewayEntry::ClientGone {
                    req: rid.clone(),
                    attempt: attempt.to_string(),
                    worker: gw.ups[i].name.clone(),
                    delivered: client.delivered(),
                });
                // M4: cancel upstream and free its slot; no spare attempt.
                fence::cancel(gw, i, rid, attempt, "client disconnected").await;
                gw.ups[i].leases.remove(attempt);
                Some("client_gone")
            }
            _ => None,
        }
    }

    /// Attempt `n` failed after the first delta reached the client (`why`).
    async fn after_commit(&self, n: u32, attempt: &str, why: &str) -> Next {
        let (gw, client, rid) = (self.gw, self.client, &self.r.f.rid);
        if gw.cfg.policy.migrates() {
            return match self.migration(n, attempt) {
                Ok(c) => ControlFlow::Continue(Some(c)),
                Err(no) => {
                    explicit_error(gw, client, rid, &format!("{why}; not migrated: {no}")).await;
                    ControlFlow::Break("explicit_error")
                }
            };
        }
        match gw.cfg.policy {
            // FLAW naive-retry: retries after the first delta and stitches the new
            // attempt's text onto what the client already has.
            GatewayPolicy::NaiveRetry if n <= gw.cfg.retry_budget => {
                gw.journal.write(GatewayEntry::RetryAfterDelta {
                    req: rid.clone(),
                    delivered: client.delivered(),
                });
                ControlFlow::Continue(None)
            }
            // FLAW silent-truncate: a clean end for an interrupted stream.
            GatewayPolicy::SilentTruncate => {
                let _ = client
                    .body
                    .send(Bytes::from_static(b"data: [DONE]\n\n"))
                    .await;
                ControlFlow::Break("truncated")
            }
            _ => {
                explicit_error(gw, client, rid, why).await;
                ControlFlow::Break("explicit_error")
            }
        }
    }

    /// The continuation of the stream after attempt `n` (`attempt`) failed: within the
    /// retry budget and the re-prefill cost limit (M8: the prompt plus the delivered
    /// output), the delivered output re-sent after the prompt.
    fn migration(&self, n: u32, attempt: &str) -> Result<Cont, String> {
        let (gw, client, r) = (self.gw, self.client, self.r);
        let said = client
            .said
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let lossy = gw.cfg.policy == GatewayPolicy::MigrateLossy;
        let c = super::migrate::continuation(
            &r.f.body,
            r.prompt_tokens,
            &said,
            client.delivered(),
            lossy,
        )?;
        if let Some((_, why)) = gw.retry_refused(n, c.prompt_tokens) {
            gw.journal.write(GatewayEntry::RetryDenied {
                req: r.f.rid.clone(),
                why: why.clone(),
            });
            return Err(why);
        }
        Ok(Cont {
            f: Forward {
                rid: r.f.rid.clone(),
                path: r.f.path.clone(),
                body: c.body,
                resumed: Some((r.prompt_tokens, c.resent)),
            },
            after: attempt.to_string(),
            resent: c.resent,
            prompt_tokens: c.prompt_tokens,
        })
    }

    /// Attempt `n` (`attempt`) failed and nothing reached the client: a retry costs
    /// only latency (M2), within budget (M8).
    fn retry(&self, n: u32, attempt: &str, why: String) -> Next {
        let (gw, client, rid) = (self.gw, self.client, &self.r.f.rid);
        match gw.retry_refused(n, self.r.prompt_tokens) {
            None => {
                gw.journal.write(GatewayEntry::Retry {
                    req: rid.clone(),
                    after: attempt.to_string(),
                    delivered: client.delivered(),
                    why,
                });
                ControlFlow::Continue(None)
            }
            Some((code, msg)) => {
                gw.journal.write(GatewayEntry::RetryDenied {
                    req: rid.clone(),
                    why: msg.clone(),
                });
                reject(
                    client,
                    503,
                    gw.retry_after_s(),
                    "upstream_unavailable",
                    code,
                    &format!("attempt {attempt} failed ({why}); {msg}"),
                );
                ControlFlow::Break("failed")
            }
        }
    }
}

fn attempt_end(gw: &Gateway, rid: &str, attempt: &str, worker: &str, end: &End, delivered: u32) {
    let (result, why) = end.result();
    gw.journal.write(GatewayEntry::AttemptEnd {
        req: rid.to_string(),
        attempt: attempt.to_string(),
        worker: worker.to_string(),
        result: result.into(),
        why,
        delivered,
    });
}
