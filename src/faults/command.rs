//! Command backend: the user's shell commands inject, verify and heal a fault (cloud
//! APIs, DCGM, iptables, kubectl — anything), with haq's context in environment
//! variables. Each command runs with `sh -c`, in its own process group, bounded by a
//! timeout (the group is killed when it expires).

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;

use super::backend::{Context, Injected, Injector};
use super::{Healed, Replica, Undo};
use crate::plan::FaultPlan;

/// How a command ended.
#[derive(Debug, Clone)]
pub struct Ran {
    pub ok: bool,
    /// `exit 0`, `exit 3`, `timed out after 2s`, …
    pub status: String,
    /// stdout then stderr, trimmed and bounded.
    pub output: String,
}

impl Ran {
    pub fn describe(&self, what: &str) -> String {
        if self.output.is_empty() {
            format!("{what} {}", self.status)
        } else {
            format!("{what} {}: {}", self.status, self.output)
        }
    }
}

fn tail(s: &[u8]) -> String {
    let t = String::from_utf8_lossy(s);
    let t = t.trim();
    let n = t.chars().count();
    if n > 400 {
        format!("…{}", t.chars().skip(n - 400).collect::<String>())
    } else {
        t.to_string()
    }
}

/// Runs `sh -c cmd` with `env`, blocking, for at most `timeout`.
pub fn run_sh(cmd: &str, env: &[(String, String)], timeout: Duration) -> Ran {
    let mut c = Command::new("sh");
    c.arg("-c")
        .arg(cmd)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    // SAFETY: restore_in_child is async-signal-safe.
    unsafe {
        c.pre_exec(crate::priority::restore_in_child);
    }
    for (k, v) in env {
        c.env(k, v);
    }
    let mut child = match c.spawn() {
        Ok(ch) => ch,
        Err(e) => {
            return Ran {
                ok: false,
                status: format!("could not start: {e}"),
                output: String::new(),
            };
        }
    };
    // Read the pipes on their own threads so a chatty command never blocks.
    let mut out = child.stdout.take();
    let mut err = child.stderr.take();
    let ro = std::thread::spawn(move || {
        let mut b = Vec::new();
        if let Some(o) = out.as_mut() {
            let _ = o.read_to_end(&mut b);
        }
        b
    });
    let re = std::thread::spawn(move || {
        let mut b = Vec::new();
        if let Some(e) = err.as_mut() {
            let _ = e.read_to_end(&mut b);
        }
        b
    });
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(st)) => break Ok(st),
            Ok(None) if Instant::now() >= deadline => {
                // SAFETY: killpg on the group this child leads (process_group(0)).
                unsafe { libc::killpg(child.id() as i32, libc::SIGKILL) };
                let _ = child.wait();
                break Err(format!(
                    "timed out after {timeout:?} (process group killed)"
                ));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(5)),
            Err(e) => break Err(format!("wait failed: {e}")),
        }
    };
    let mut output = tail(&ro.join().unwrap_or_default());
    let e = tail(&re.join().unwrap_or_default());
    if !e.is_empty() {
        if !output.is_empty() {
            output.push_str(" | ");
        }
        output.push_str(&e);
    }
    match status {
        Ok(st) => Ran {
            ok: st.success(),
            status: match st.code() {
                Some(c) => format!("exit {c}"),
                None => format!("killed by {st}"),
            },
            output,
        },
        Err(s) => Ran {
            ok: false,
            status: s,
            output,
        },
    }
}

/// The environment every command of a fault sees.
pub fn env(f: &FaultPlan, r: &Replica, cx: &Context) -> Vec<(String, String)> {
    let pid = match r.process() {
        Some(crate::target::registry::ProcRef::Pid { pid, .. }) => Some(pid),
        Some(p @ crate::target::registry::ProcRef::PidFile(_)) => {
            crate::target::procs::resolve(&p).ok()
        }
        Some(crate::target::registry::ProcRef::Sim(sp)) => sp.try_lock().ok().map(|w| w.pid),
        None => None,
    };
    let v = vec![
        ("HAQ_FAULT", f.name.clone()),
        ("HAQ_DOMAIN", format!("{:?}", f.domain).to_lowercase()),
        ("HAQ_REPLICA", r.name.clone()),
        ("HAQ_NODE", r.node.clone().unwrap_or_default()),
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
    v.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
}

async fn run_async(cmd: String, env: Vec<(String, String)>, timeout: Duration) -> Ran {
    tokio::task::spawn_blocking(move || run_sh(&cmd, &env, timeout))
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
            let inject = run_async(spec.inject.clone(), env.clone(), timeout).await;
            // Whatever the inject did, even half, is undone by the heal command.
            let undo: Option<Box<dyn Undo>> = spec.heal.clone().map(|heal| {
                Box::new(RunHeal {
                    heal,
                    verify: spec.verify.clone(),
                    env: env.clone(),
                    timeout,
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
                    let ran = run_async(v.clone(), env, timeout).await;
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
/// the fault no longer verifying.
struct RunHeal {
    heal: String,
    verify: Option<String>,
    env: Vec<(String, String)>,
    timeout: Duration,
}

impl Undo for RunHeal {
    fn undo(&mut self) -> Healed {
        let h = run_sh(&self.heal, &self.env, self.timeout);
        if !h.ok {
            return Healed {
                verified: false,
                detail: h.describe("heal"),
            };
        }
        match &self.verify {
            Some(v) => {
                let still = run_sh(v, &self.env, self.timeout);
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
