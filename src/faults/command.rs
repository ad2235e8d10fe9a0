//! Command backend: the user's shell commands inject, verify and heal a fault (cloud
//! APIs, DCGM, iptables, kubectl — anything), with haq's context in environment
//! variables. Each command runs with `sh -c`, in its own process group, bounded by a
//! timeout (the group is killed when it expires).

use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;
use tokio_util::sync::CancellationToken;

use super::backend::{Context, Injected, Injector};
use super::{Healed, Replica, Undo};
use crate::plan::FaultPlan;

pub use super::shell::{Ran, run_sh};

/// The environment every command of a fault sees.
pub fn env(f: &FaultPlan, r: &Replica, cx: &Context) -> Vec<(String, String)> {
    let pid = match r.process() {
        Some(crate::target::registry::ProcRef::Pid { pid, .. }) => Some(pid),
        Some(p @ crate::target::registry::ProcRef::PidFile(_)) => {
            crate::target::procs::resolve(&p).ok()
        }
        Some(crate::target::registry::ProcRef::Sim(sp)) => sp.try_lock().ok().map(|w| w.pid),
        Some(crate::target::registry::ProcRef::Pod(_)) => None,
        None => None,
    };
    // A kubernetes replica: its pod, namespace, container and current node.
    let pod = r.pod();
    let of_pod =
        |f: fn(&crate::target::kube::PodRef) -> String| pod.as_deref().map(f).unwrap_or_default();
    let mut v = vec![
        ("HAQ_FAULT", f.name.clone()),
        ("HAQ_DOMAIN", format!("{:?}", f.domain).to_lowercase()),
        ("HAQ_REPLICA", r.name.clone()),
        (
            "HAQ_NODE",
            pod.as_ref()
                .map(|p| p.pod.node.clone())
                .or_else(|| r.node.clone())
                .unwrap_or_default(),
        ),
        ("HAQ_PID", pid.map(|p| p.to_string()).unwrap_or_default()),
        ("HAQ_UPSTREAM", r.upstream().unwrap_or_default()),
        (
            "HAQ_LISTEN",
            r.proxy
                .as_ref()
                .map(|p| p.listen.to_string())
                .unwrap_or_default(),
        ),
        ("HAQ_PROBE_ID", cx.probe.clone().unwrap_or_default()),
        ("HAQ_RUN_DIR", cx.run_dir.display().to_string()),
        ("HAQ_SEED", cx.seed.to_string()),
        ("HAQ_T_US", cx.clock.now_us().to_string()),
    ];
    if pod.is_some() {
        v.push(("HAQ_POD", of_pod(|p| p.pod.name.clone())));
        v.push(("HAQ_NAMESPACE", of_pod(|p| p.cluster.namespace.clone())));
        v.push(("HAQ_CONTAINER", of_pod(|p| p.pod.container.clone())));
        v.push(("HAQ_KUBE_CONTEXT", of_pod(|p| p.cluster.context.clone())));
        v.push(("HAQ_GPU_IDS", of_pod(|p| p.pod.gpu_ids.join(","))));
    }
    v.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
}

async fn run_async(
    cmd: String,
    env: Vec<(String, String)>,
    timeout: Duration,
    stop: CancellationToken,
) -> Ran {
    tokio::task::spawn_blocking(move || run_sh(&cmd, &env, timeout, Some(&stop)))
        .await
        .unwrap_or_else(|e| Ran {
            ok: false,
            status: format!("command task failed: {e}"),
            output: String::new(),
        })
}

pub struct CommandInjector;

impl Injector for CommandInjector {
    fn inject<'a>(
        &'a self,
        f: &'a FaultPlan,
        r: &'a Replica,
        cx: &'a Context,
    ) -> BoxFuture<'a, (Injected, Option<Box<dyn Undo>>)> {
        Box::pin(async move {
            let at = Instant::now();
            let Some(spec) = f.command.clone() else {
                return (Injected::failed(at, None, "no command given"), None);
            };
            let env = env(f, r, cx);
            let timeout = spec.timeout.0;
            // In the ledger before the command runs: if haq is killed while the fault
            // holds, `haq heal` runs the heal command.
            let entry = spec.heal.as_ref().map(|heal| {
                let remedy = super::ledger::Remedy::Command {
                    heal: heal.clone(),
                    env: env.clone(),
                    timeout_ms: timeout.as_millis() as u64,
                };
                (
                    cx.ledger.clone(),
                    cx.ledger.intend(&f.name, &r.name, remedy),
                )
            });
            let inject =
                run_async(spec.inject.clone(), env.clone(), timeout, cx.stop.clone()).await;
            // Whatever the inject did, even half, is undone by the heal command.
            let undo: Option<Box<dyn Undo>> = spec.heal.clone().map(|heal| {
                Box::new(RunHeal {
                    heal,
                    verify: spec.verify.clone(),
                    env: env.clone(),
                    timeout,
                    ledger: entry.clone(),
                }) as Box<dyn Undo>
            });
            if !inject.ok {
                return (Injected::failed(at, None, inject.describe("inject")), undo);
            }
            // The command may have killed the replica: if its address refuses
            // connections now, the proxy refuses the gateway too, from now on.
            if let Some(px) = &r.proxy {
                px.check_dead().await;
            }
            let inj = match (&spec.verify, f.verify) {
                (Some(v), true) => {
                    let ran = run_async(v.clone(), env, timeout, cx.stop.clone()).await;
                    Injected {
                        at,
                        pid: None,
                        verified: ran.ok,
                        detail: format!(
                            "{}; {}",
                            inject.describe("inject"),
                            ran.describe("verify")
                        ),
                    }
                }
                _ => Injected::failed(
                    at,
                    None,
                    format!(
                        "{}; not verified (no verify command, or verify: false)",
                        inject.describe("inject")
                    ),
                ),
            };
            (inj, undo)
        })
    }
}

/// Runs the heal command; when there is a verify command, the heal is verified by
/// the fault no longer verifying. A verified heal closes its ledger entry.
struct RunHeal {
    heal: String,
    verify: Option<String>,
    env: Vec<(String, String)>,
    timeout: Duration,
    ledger: Option<(std::sync::Arc<super::ledger::Ledger>, u64)>,
}

impl Undo for RunHeal {
    fn undo(&mut self) -> Healed {
        let h = self.heal_once();
        // Healed and verified: nothing is left for `haq heal`.
        if let (true, Some((l, id))) = (h.verified, &self.ledger) {
            l.healed(*id, &h.detail);
        }
        h
    }
}

impl RunHeal {
    fn heal_once(&self) -> Healed {
        let h = run_sh(&self.heal, &self.env, self.timeout, None);
        if !h.ok {
            return Healed {
                verified: false,
                detail: h.describe("heal"),
            };
        }
        match &self.verify {
            Some(v) => {
                let still = run_sh(v, &self.env, self.timeout, None);
                Healed {
                    verified: !still.ok,
                    detail: format!(
                        "{}; verify now {} ({})",
                        h.describe("heal"),
                        still.status,
                        if still.ok {
                            "fault still in effect"
                        } else {
                            "fault gone"
                        }
                    ),
                }
            }
            None => Healed {
                verified: true,
                detail: h.describe("heal"),
            },
        }
    }
}
