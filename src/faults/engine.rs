//! Engine backend (issue 18): failures of a sim worker's engine behind a live process,
//! through the worker's admin API — `gpu_lost` (the engine dies, the process stays up),
//! `gpu_hang` (the engine stops stepping, sockets still accepted, health passing or
//! timing out), `slow` (every step `factor` × as long). Each is verified from the
//! outside as a client or a gateway would see it (the process alive, `/health` failing
//! while `/metrics` is served; `/health` answering or not; the worker's step factor)
//! and healed by the admin call that undoes it, verified the same way.
//!
//! Hand-written: the heal runs synchronously — also while a panic unwinds, when no
//! runtime may be entered — so it speaks HTTP/1.1 itself over a `std` socket to the
//! worker's loopback admin port ([`call`]), a few lines instead of a blocking client.

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;

use super::backend::{Context, Injected, Injector, VERIFY_TIMEOUT};
use super::{Healed, Replica, Undo};
use crate::plan::FaultPlan;
use crate::scenario::{FaultAction, HangHealth};
use crate::target::procs::gone;
use crate::target::registry::ProcRef;

pub struct EngineInjector;

/// One HTTP/1.1 exchange with `base` (`http://host:port`): (status, body).
pub fn call(
    base: &str,
    method: &str,
    path: &str,
    body: Option<&str>,
    timeout: Duration,
) -> Result<(u16, String), String> {
    let hostport = base
        .trim_start_matches("http://")
        .split('/')
        .next()
        .unwrap_or_default();
    let addr: std::net::SocketAddr = std::net::ToSocketAddrs::to_socket_addrs(hostport)
        .map_err(|e| format!("{hostport}: {e}"))?
        .next()
        .ok_or_else(|| format!("{hostport}: no address"))?;
    let mut s = std::net::TcpStream::connect_timeout(&addr, timeout)
        .map_err(|e| format!("{method} {path}: {e}"))?;
    let _ = s.set_read_timeout(Some(timeout));
    let _ = s.set_write_timeout(Some(timeout));
    let body = body.unwrap_or("");
    let req = format!(
        "{method} {path} HTTP/1.1\r\nhost: {hostport}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes())
        .map_err(|e| format!("{method} {path}: {e}"))?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf)
        .map_err(|e| format!("{method} {path}: {e}"))?;
    let text = String::from_utf8_lossy(&buf);
    let status = text
        .split_ascii_whitespace()
        .nth(1)
        .and_then(|c| c.parse::<u16>().ok())
        .ok_or_else(|| format!("{method} {path}: no HTTP status in the answer"))?;
    let body = text
        .split_once("\r\n\r\n")
        .map(|x| x.1.to_string())
        .unwrap_or_default();
    Ok((status, body))
}

/// The same exchange off the async threads.
async fn call_async(
    base: String,
    method: &'static str,
    path: &'static str,
    body: Option<String>,
    timeout: Duration,
) -> Result<(u16, String), String> {
    tokio::task::spawn_blocking(move || call(&base, method, path, body.as_deref(), timeout))
        .await
        .map_err(|e| format!("{method} {path}: {e}"))?
}

/// `GET /admin/state` of the worker at `base`.
async fn state(base: &str) -> Result<serde_json::Value, String> {
    let (st, body) = call_async(
        base.to_string(),
        "GET",
        "/admin/state",
        None,
        Duration::from_secs(2),
    )
    .await?;
    if st != 200 {
        return Err(format!("GET /admin/state: HTTP {st}"));
    }
    serde_json::from_str(&body).map_err(|e| format!("GET /admin/state: {e}"))
}

/// The pid of a sim worker and whether it is alive.
async fn alive(r: &Replica) -> (Option<u32>, bool) {
    match r.process() {
        Some(ProcRef::Sim(sp)) => {
            let mut w = sp.lock().await;
            (Some(w.pid), w.exited().is_none())
        }
        Some(ProcRef::Pid { pid, .. }) => (Some(pid), !gone(pid)),
        _ => (None, true),
    }
}

impl Injector for EngineInjector {
    fn inject<'a>(
        &'a self,
        f: &'a FaultPlan,
        r: &'a Replica,
        _cx: &'a Context,
    ) -> BoxFuture<'a, (Injected, Option<Box<dyn Undo>>)> {
        Box::pin(async move {
            let at = Instant::now();
            let (pid, _) = alive(r).await;
            let Some(base) = r.direct_url() else {
                return (
                    Injected::failed(at, pid, "the replica's address is unknown"),
                    None,
                );
            };
            let (method, path, body) = apply_call(f);
            let undo: Box<dyn Undo> = Box::new(Restore {
                base: base.clone(),
                action: f.action,
            });
            match call_async(base.clone(), method, path, body, VERIFY_TIMEOUT).await {
                Ok((200, _)) => {}
                Ok((st, b)) => {
                    let why = format!("{method} {path}: HTTP {st} {}", b.trim());
                    return (Injected::failed(at, pid, why), None);
                }
                Err(e) => return (Injected::failed(at, pid, e), None),
            }
            let inj = match verify(f, r, &base).await {
                Ok(detail) => Injected {
                    at,
                    pid,
                    verified: true,
                    detail,
                },
                Err(why) => Injected::failed(at, pid, why),
            };
            (inj, Some(undo))
        })
    }
}

/// The admin call that applies `f`.
fn apply_call(f: &FaultPlan) -> (&'static str, &'static str, Option<String>) {
    match f.action {
        FaultAction::GpuLost => (
            "POST",
            "/admin/gpu_lost",
            Some(serde_json::json!({"gpu": f.gpu.unwrap_or(0)}).to_string()),
        ),
        FaultAction::GpuHang => (
            "POST",
            "/admin/hang",
            Some(
                serde_json::json!({"on": true, "health": f.health.unwrap_or_default().as_str()})
                    .to_string(),
            ),
        ),
        _ => (
            "POST",
            "/admin/slow",
            Some(serde_json::json!({"factor": f.factor.unwrap_or(1.0)}).to_string()),
        ),
    }
}

/// How long `GET path` takes to answer, and its status (`None`: no answer in `limit`).
async fn probe(base: &str, path: &'static str, limit: Duration) -> Option<u16> {
    call_async(base.to_string(), "GET", path, None, limit)
        .await
        .ok()
        .map(|x| x.0)
}

/// Checks, from outside, that the fault took effect; its description, or why not.
async fn verify(f: &FaultPlan, r: &Replica, base: &str) -> Result<String, String> {
    let st = state(base).await?;
    let (pid, live) = alive(r).await;
    let pid = pid.map(|p| p.to_string()).unwrap_or_else(|| "?".into());
    if !live {
        return Err(format!("the worker's process {pid} is gone"));
    }
    match f.action {
        FaultAction::GpuLost => {
            let tp = st["tensor_parallel_size"].as_u64().unwrap_or(1);
            let gpu = st["dead_gpu"].as_u64().unwrap_or(0);
            let health = probe(base, "/health", Duration::from_secs(2)).await;
            let metrics = probe(base, "/metrics", Duration::from_secs(2)).await;
            let dead = st["engine"] == "dead";
            if !dead || health == Some(200) || metrics != Some(200) {
                return Err(format!(
                    "engine {}, /health {health:?}, /metrics {metrics:?}: not a dead engine behind a live process",
                    st["engine"]
                ));
            }
            let group = if tp > 1 {
                format!(" of a tensor-parallel group of {tp}: the whole replica is lost")
            } else {
                String::new()
            };
            Ok(format!(
                "GPU {gpu}{group}; engine dead, process {pid} alive, /health {}, /metrics 200",
                health.map_or("no answer".into(), |h| h.to_string())
            ))
        }
        FaultAction::GpuHang => {
            let want = f.health.unwrap_or_default();
            // The deep check (one token, or two engine steps) gets no answer from a
            // hung engine.
            let stepping = probe(base, "/health_generate", Duration::from_millis(500)).await;
            let health = probe(base, "/health", Duration::from_millis(500)).await;
            let health_ok = match want {
                HangHealth::Pass => health == Some(200),
                HangHealth::Timeout => health.is_none(),
            };
            if st["hang"] != true || stepping.is_some() || !health_ok {
                return Err(format!(
                    "hang {}, /health_generate {stepping:?}, /health {health:?} (declared health: {}): not a hung engine",
                    st["hang"],
                    want.as_str()
                ));
            }
            Ok(format!(
                "engine hung (no step within 500 ms), sockets accepted, process {pid} alive, /health {}",
                match want {
                    HangHealth::Pass => "passes (200)",
                    HangHealth::Timeout => "times out",
                }
            ))
        }
        _ => {
            let want = f.factor.unwrap_or(1.0);
            let got = st["slow_factor"].as_f64().unwrap_or(1.0);
            if (got - want).abs() > 1e-9 {
                return Err(format!("step factor {got}, declared {want}"));
            }
            Ok(format!(
                "every engine step takes {want}× as long; process {pid} alive"
            ))
        }
    }
}

/// Undoes an engine fault with the admin call, verified from `/admin/state`.
pub struct Restore {
    pub base: String,
    pub action: FaultAction,
}

impl Undo for Restore {
    fn undo(&mut self) -> Healed {
        let t = Duration::from_secs(3);
        let (method, path, body) = match self.action {
            FaultAction::GpuLost => ("DELETE", "/admin/gpu_lost", None),
            FaultAction::GpuHang => ("POST", "/admin/hang", Some(r#"{"on":false}"#)),
            _ => ("POST", "/admin/slow", Some(r#"{"factor":1.0}"#)),
        };
        let failed = |detail: String| Healed {
            verified: false,
            detail,
        };
        match call(&self.base, method, path, body, t) {
            Ok((200, _)) => {}
            Ok((st, b)) => return failed(format!("{method} {path}: HTTP {st} {}", b.trim())),
            Err(e) => return failed(e),
        }
        let st = match call(&self.base, "GET", "/admin/state", None, t) {
            Ok((200, b)) => serde_json::from_str::<serde_json::Value>(&b).unwrap_or_default(),
            Ok((s, _)) => return failed(format!("GET /admin/state: HTTP {s}")),
            Err(e) => return failed(e),
        };
        let (ok, what) = match self.action {
            FaultAction::GpuLost => (st["engine"] == "ok", "engine restarted (cold prefix cache)"),
            FaultAction::GpuHang => (st["hang"] == false, "engine steps again"),
            _ => (
                st["slow_factor"].as_f64() == Some(1.0),
                "step factor back to 1",
            ),
        };
        Healed {
            verified: ok,
            detail: if ok {
                what.to_string()
            } else {
                format!("{method} {path} answered, but the worker's state is {st}")
            },
        }
    }
}
