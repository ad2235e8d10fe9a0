//! Process backend: SIGKILL (crash), SIGTERM (planned drain), SIGSTOP/SIGCONT (freeze)
//! to a sim worker or a declared pid / pid file, each verified from the kernel's view
//! (`waitpid` for haq's children, `/proc/<pid>/stat` for the others).

use std::os::unix::process::ExitStatusExt;
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;
use nix::sys::signal::Signal;
use nix::unistd::Pid;

use super::backend::{Context, Injected, Injector, VERIFY_TIMEOUT};
use super::ledger::{Ledger, Remedy};
use super::{Healed, Replica, Undo};
use crate::plan::FaultPlan;
use crate::proxy::ReplicaProxy;
use crate::scenario::FaultAction;
use crate::target::procs::{gone, proc_stat, resolve, stopped};
use crate::target::registry::ProcRef;
use crate::trace::{Event, TraceWriter};

fn signal(pid: u32, sig: Signal) -> Result<(), String> {
    nix::sys::signal::kill(Pid::from_raw(pid as i32), sig).map_err(|e| format!("{sig}: {e}"))
}

async fn poll(timeout: Duration, mut done: impl FnMut() -> bool) -> Option<Duration> {
    let start = Instant::now();
    loop {
        if done() {
            return Some(start.elapsed());
        }
        if start.elapsed() >= timeout {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

pub struct ProcessInjector;

impl Injector for ProcessInjector {
    fn inject<'a>(
        &'a self,
        f: &'a FaultPlan,
        r: &'a Replica,
        cx: &'a Context,
    ) -> BoxFuture<'a, (Injected, Option<Box<dyn Undo>>)> {
        Box::pin(async move {
            let Some(p) = r.process() else {
                return (
                    Injected::failed(
                        Instant::now(),
                        None,
                        format!("replica {} has no process", r.name),
                    ),
                    None,
                );
            };
            match f.action {
                FaultAction::Kill => {
                    let inj = kill(&p, r.proxy.as_deref()).await;
                    // The gateway must find the path as dead as the replica.
                    if let Some(px) = &r.proxy {
                        if inj.verified {
                            px.check_dead().await;
                        }
                        px.kill_settled();
                    }
                    (inj, None)
                }
                FaultAction::Freeze => freeze(&p, f, r, cx).await,
                FaultAction::Drain => (drain(&p, r, f, cx).await, None),
                other => (
                    Injected::failed(
                        Instant::now(),
                        None,
                        format!("the process backend cannot {}", other.as_str()),
                    ),
                    None,
                ),
            }
        })
    }
}

/// SIGKILL, verified by the process's disappearance. The replica's proxy `path`
/// closes its listener the moment the signal is sent: the gateway's next connect is
/// refused, as it soon would be by the dying replica itself, and no connection is
/// accepted for a replica that is going away.
pub async fn kill(p: &ProcRef, path: Option<&ReplicaProxy>) -> Injected {
    let signalled = || {
        if let Some(px) = path {
            px.killing();
        }
    };
    if let ProcRef::Sim(sp) = p {
        let mut w = sp.lock().await;
        let pid = Some(w.pid);
        let at = Instant::now();
        if let Some(st) = w.exited() {
            return Injected::failed(
                at,
                pid,
                format!("process had already exited ({st}) before the kill"),
            );
        }
        if let Err(e) = w.signal(Signal::SIGKILL) {
            return Injected::failed(at, pid, format!("SIGKILL failed: {e}"));
        }
        signalled();
        return match w.wait_exit(VERIFY_TIMEOUT).await {
            Some(st) if st.signal() == Some(libc::SIGKILL) => Injected {
                at,
                pid,
                verified: true,
                detail: format!(
                    "SIGKILL sent; process exited by signal 9 after {:.1}ms",
                    at.elapsed().as_secs_f64() * 1e3
                ),
            },
            Some(st) => Injected::failed(
                at,
                pid,
                format!("SIGKILL sent; process exited otherwise ({st})"),
            ),
            None => Injected::failed(
                at,
                pid,
                format!("SIGKILL sent; process still alive after {VERIFY_TIMEOUT:?}"),
            ),
        };
    }
    let at = Instant::now();
    let pid = match resolve(p) {
        Ok(pid) => pid,
        Err(e) => return Injected::failed(at, None, e),
    };
    if gone(pid) {
        return Injected::failed(
            at,
            Some(pid),
            format!("pid {pid} was not running before the kill"),
        );
    }
    if let Err(e) = signal(pid, Signal::SIGKILL) {
        return Injected::failed(at, Some(pid), e);
    }
    signalled();
    match poll(VERIFY_TIMEOUT, || gone(pid)).await {
        Some(d) => Injected {
            at,
            pid: Some(pid),
            verified: true,
            detail: format!(
                "SIGKILL sent; pid {pid} gone after {:.1}ms",
                d.as_secs_f64() * 1e3
            ),
        },
        None => Injected::failed(
            at,
            Some(pid),
            format!("SIGKILL sent; pid {pid} still alive after {VERIFY_TIMEOUT:?}"),
        ),
    }
}

async fn sim_pid(p: &ProcRef) -> Result<u32, String> {
    match p {
        ProcRef::Sim(sp) => {
            let mut w = sp.lock().await;
            match w.exited() {
                Some(st) => Err(format!("process {} has exited ({st})", w.pid)),
                None => Ok(w.pid),
            }
        }
        other => resolve(other),
    }
}

/// SIGSTOP, verified by the kernel's stopped state; undone with SIGCONT.
async fn freeze(
    p: &ProcRef,
    f: &FaultPlan,
    r: &Replica,
    cx: &Context,
) -> (Injected, Option<Box<dyn Undo>>) {
    let at = Instant::now();
    let pid = match sim_pid(p).await {
        Ok(pid) => pid,
        Err(e) => return (Injected::failed(at, None, e), None),
    };
    let start = proc_stat(pid).map(|s| s.1);
    // In the ledger before the signal: if haq is killed now, `haq heal` resumes it.
    let entry = cx
        .ledger
        .intend(&f.name, &r.name, Remedy::Resume { pid, start });
    if let Err(e) = signal(pid, Signal::SIGSTOP) {
        cx.ledger.healed(entry, &format!("never stopped: {e}"));
        return (Injected::failed(at, Some(pid), e), None);
    }
    // Registered even if verification fails: a stop that lands late is still resumed.
    let undo: Box<dyn Undo> = Box::new(Resume {
        pid,
        start,
        ledger: Some((cx.ledger.clone(), entry)),
    });
    let inj = match poll(VERIFY_TIMEOUT, || stopped(pid)).await {
        Some(d) => Injected {
            at,
            pid: Some(pid),
            verified: true,
            detail: format!(
                "SIGSTOP sent; pid {pid} stopped (state T) after {:.1}ms",
                d.as_secs_f64() * 1e3
            ),
        },
        None => Injected::failed(
            at,
            Some(pid),
            format!("SIGSTOP sent; pid {pid} not stopped after {VERIFY_TIMEOUT:?}"),
        ),
    };
    (inj, Some(undo))
}

/// Resumes a frozen process (SIGCONT), verified by the kernel's state; a verified
/// resume closes its ledger entry.
pub struct Resume {
    pub pid: u32,
    pub start: Option<u64>,
    pub ledger: Option<(std::sync::Arc<Ledger>, u64)>,
}

impl Undo for Resume {
    fn undo(&mut self) -> Healed {
        let (verified, detail) = super::ledger::resume(self.pid, self.start);
        let h = Healed { verified, detail };
        if let (true, Some((l, id))) = (h.verified, &self.ledger) {
            l.healed(*id, &h.detail);
        }
        h
    }
}

/// SIGTERM: a planned drain. Verified when the replica stops being ready (or exits);
/// its exit is then watched and recorded (`exited`).
async fn drain(p: &ProcRef, r: &Replica, f: &FaultPlan, cx: &Context) -> Injected {
    let at = Instant::now();
    let pid = match sim_pid(p).await {
        Ok(pid) => pid,
        Err(e) => return Injected::failed(at, None, e),
    };
    if let Err(e) = signal(pid, Signal::SIGTERM) {
        return Injected::failed(at, Some(pid), e);
    }
    let ready_url = r.direct_url().map(|u| format!("{u}{}", r.ready_path));
    let deadline = at + VERIFY_TIMEOUT;
    let detail = loop {
        if gone_or_exited(p, pid).await {
            break Some(format!(
                "SIGTERM sent; pid {pid} exited after {:.0}ms",
                at.elapsed().as_secs_f64() * 1e3
            ));
        }
        if let Some(u) = &ready_url {
            let ok = cx
                .http
                .get(u)
                .timeout(Duration::from_millis(500))
                .send()
                .await
                .is_ok_and(|r| r.status().is_success());
            if !ok {
                break Some(format!(
                    "SIGTERM sent; pid {pid} alive and no longer ready ({u}) after {:.0}ms: draining",
                    at.elapsed().as_secs_f64() * 1e3
                ));
            }
        }
        if Instant::now() >= deadline {
            break None;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    tokio::spawn(watch_exit(
        p.clone(),
        pid,
        r.name.clone(),
        f.name.clone(),
        cx.trace.clone(),
        cx.clock,
        r.proxy.clone(),
    ));
    match detail {
        Some(d) => Injected {
            at,
            pid: Some(pid),
            verified: true,
            detail: d,
        },
        None => Injected::failed(
            at,
            Some(pid),
            format!("SIGTERM sent; pid {pid} still ready and running after {VERIFY_TIMEOUT:?}"),
        ),
    }
}

async fn gone_or_exited(p: &ProcRef, pid: u32) -> bool {
    match p {
        ProcRef::Sim(sp) => sp.lock().await.exited().is_some(),
        _ => gone(pid),
    }
}

/// Longest a drained process is watched for its exit.
const DRAIN_WATCH: Duration = Duration::from_secs(600);

#[allow(clippy::too_many_arguments)]
async fn watch_exit(
    p: ProcRef,
    pid: u32,
    replica: String,
    fault: String,
    trace: TraceWriter,
    clock: crate::trace::Clock,
    proxy: Option<std::sync::Arc<crate::proxy::ReplicaProxy>>,
) {
    let start = Instant::now();
    while start.elapsed() < DRAIN_WATCH {
        let status = match &p {
            ProcRef::Sim(sp) => {
                let mut w = sp.lock().await;
                if w.pid != pid {
                    return; // replaced meanwhile
                }
                w.exited().map(|st| (st.code(), st.signal()))
            }
            _ => gone(pid).then_some((None, None)),
        };
        if let Some((code, signal)) = status {
            if let Some(px) = &proxy {
                px.check_dead().await;
            }
            trace.emit(Event::Exited {
                t: clock.now_us(),
                replica,
                pid,
                code,
                signal,
                fault: Some(fault),
            });
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
